#include "tilenorm/dsl/codegen.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>

#include "codegen_exchange.hpp"
#include "codegen_sm90.hpp"
#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/ops.hpp"
#include "tilenorm/dsl/reflect.hpp"

namespace tilenorm {

namespace codegen {
extern const char* const kDevicePrelude;          // generated from dsl/prelude at build time
extern const char* const kDevicePreludeSm90;      // likewise
extern const char* const kDevicePreludeExchange;  // likewise
}  // namespace codegen

std::string_view device_prelude() {
  return codegen::kDevicePrelude;
}
std::string_view device_prelude_sm90() {
  return codegen::kDevicePreludeSm90;
}
std::string_view device_prelude_exchange() {
  return codegen::kDevicePreludeExchange;
}

std::string_view row_storage_name(RowStorage storage) {
  switch (storage) {
    case RowStorage::registers:
      return "registers";
    case RowStorage::shared:
      return "shared";
    case RowStorage::global:
      return "global";
    case RowStorage::prefetched:
      return "prefetched";
    case RowStorage::staged:
      return "staged";
    case RowStorage::pipelined:
      return "pipelined";
  }
  return "?";
}

std::string_view load_pin_name(LoadPin pin) {
  switch (pin) {
    case LoadPin::rule:
      return "rule";
    case LoadPin::on:
      return "on";
    case LoadPin::off:
      return "off";
    case LoadPin::early:
      return "early";
  }
  return "?";
}

std::string_view column_fetch_name(ColumnFetch fetch) {
  switch (fetch) {
    case ColumnFetch::rule:
      return "rule";
    case ColumnFetch::early:
      return "early";
    case ColumnFetch::late:
      return "late";
  }
  return "?";
}

bool KernelConfig::operator==(const KernelConfig& other) const {
  return reflect::equal(*this, other);
}
std::string KernelConfig::describe() const {
  // Row storage, the load pin, the moments and the column fetch by name: a bare number says
  // nothing to a reader. A knob left to its rule is not said (most kernels have no such choice).
  return reflect::describe(
      *this, [](std::string_view field, int value) -> std::optional<std::string> {
        if (field == "row_storage" && value >= 0 && value < kRowStorageCount)
          return std::string(row_storage_name(static_cast<RowStorage>(value)));
        if (field == "load_pin" && value == static_cast<int>(LoadPin::rule)) return std::nullopt;
        if (field == "load_pin" && value > 0 && value < kLoadPinCount)
          return std::string(load_pin_name(static_cast<LoadPin>(value)));
        if (field == "moments" && value == static_cast<int>(MomentFusion::rule))
          return std::nullopt;
        if (field == "moments" && value > 0 && value < kMomentFusionCount)
          return std::string(moment_fusion_name(static_cast<MomentFusion>(value)));
        if (field == "column_fetch" && value == kColumnFetchByRule) return std::nullopt;
        if (field == "column_fetch" && value > 0 && value < kColumnFetchCount)
          return std::string(column_fetch_name(static_cast<ColumnFetch>(value)));
        return std::to_string(value);
      });
}

std::size_t KernelPlan::workspace_floats(std::int64_t partial_rows, std::int64_t n) const {
  return static_cast<std::size_t>(partial_rows) *
         (static_cast<std::size_t>(column_partials) * static_cast<std::size_t>(n) +
          static_cast<std::size_t>(scalar_partials));
}

KernelPlan plan_kernels(const LoweredProgram& lp) {
  KernelPlan plan;
  for (ir::NodeId r : lp.cross_row_reductions) {
    if (ir::varies_along_row(lp.program.graph->node(r).shape))
      ++plan.column_partials;
    else
      ++plan.scalar_partials;
  }
  // Column and scalar outputs are written once, by the finishing kernel, also when they are
  // not sums (a gradient that is identically zero).
  for (const ir::Slot& slot : lp.program.slots) {
    plan.finish =
        plan.finish || (slot.role == ir::Role::written &&
                        (slot.shape == ir::Shape::column || slot.shape == ir::Shape::scalar));
  }
  plan.finish = plan.finish || plan.column_partials + plan.scalar_partials > 0;
  plan.persistent = plan.finish;
  return plan;
}

namespace {

using ir::Node;
using ir::NodeId;
using ir::Op;
using ir::Shape;

// The program lowered as the configuration's moments knob asks (with_moments). Every function
// here that takes a program and a spec starts from it, so all of them size the kernel that
// generate_cuda() writes.
const LoweredProgram& configured(const LoweredProgram& program, const KernelSpec& spec) {
  return with_moments(program, static_cast<MomentFusion>(spec.config.moments));
}

const char* cuda_type(DType t) {
  switch (t) {
    case DType::f32:
      return "float";
    case DType::f16:
      return "tn::fp16";
    case DType::bf16:
      return "tn::bf16";
  }
  return "?";
}

std::string float_literal(double value) {
  const float v = static_cast<float>(value);
  if (std::isnan(v)) return "tn::quiet_nan()";
  if (std::isinf(v)) return v > 0 ? "tn::positive_infinity()" : "(-tn::positive_infinity())";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  std::string text = buf;
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return "(" + text + "f)";
}

std::string reduce_op_constant(Op op) {
  return std::string(ir::op_info(op).cuda);
}

struct Geometry {
  std::int64_t chunks;  // vectors per row (chunk slots, for peeled rows)
  std::int64_t iters;   // vectors per thread (of a CTA's slice of the row, with clusters)
  int warps_per_row;
};

Geometry geometry(const KernelSpec& spec) {
  const auto& c = spec.config;
  Geometry g{};
  const std::int64_t threads = std::int64_t{c.threads_per_row} * std::max(1, c.ctas_per_row);
  // A peeled row's body is at most N / vec whole vectors (when it starts aligned); its
  // remainder goes one element per thread, outside the chunk slots (remainder_iters).
  g.chunks =
      spec.peel_rows ? std::max<std::int64_t>(spec.n / c.vec, 1) : (spec.n + c.vec - 1) / c.vec;
  g.iters = (g.chunks + threads - 1) / threads;
  g.warps_per_row = c.threads_per_row > 32 ? c.threads_per_row / 32 : 1;
  return g;
}

// The columns of a CTA's slice of the row: the whole row, or one CTA's part of it in a cluster
// (rounded up to whole chunks of every thread).
std::int64_t slice_columns(const KernelSpec& spec) {
  return geometry(spec).iters * spec.config.threads_per_row * spec.config.vec;
}

// A persistent kernel loops over row blocks on a grid that fits the device: programs that sum
// across rows, and any kernel that prefetches the next row block.
bool persistent_kernel(const LoweredProgram& lp, const KernelSpec& spec) {
  return plan_kernels(lp).persistent ||
         fetches_ahead(static_cast<RowStorage>(spec.config.row_storage));
}

// Whether a reduction of the first phase depends on a row-scalar input (LayerNorm's saved
// mean). There, copying the statistics ahead and pinning the loads (emit_load_pin) lost on the
// H100: bf16 LayerNorm backward on clusters -8.9 points at N = 8192, -8.7 at 262144, pinned
// alone -1.8 to -6.5 at every N; where the first pass reads none (RMSNorm's saved backward,
// the recomputes, the forwards) they gained or held (fifty-third session).
bool first_pass_reads_row_scalar_input(const LoweredProgram& lp) {
  if (lp.reduction_phases.empty()) return false;
  const ir::Graph& graph = *lp.program.graph;
  std::vector<NodeId> stack(lp.reduction_phases.front().begin(), lp.reduction_phases.front().end());
  std::set<NodeId> seen;
  while (!stack.empty()) {
    const Node& n = graph.node(stack.back());
    stack.pop_back();
    if (n.op == Op::load && n.shape == Shape::row_scalar) return true;
    for (int i = 0; i < n.arity; ++i)
      if (seen.insert(n.args[i]).second) stack.push_back(n.args[i]);
  }
  return false;
}

// A cluster kernel of one row per CTA, one reduction phase and no saved statistics (RMSNorm's
// recomputing backward), with 16-bit rows prefetched four vectors per thread on 64-128
// threads: at the default allocation (121-128 registers, NVRTC 13.0, sm_90) ptxas issued the
// next row block's loads after the exchange's wait, a pass later than written; asking for the
// CTAs per SM that 160 registers allow kept them before it (137-147 registers; at 64 threads
// a cap of 146 did not: docs/performance.md, forty-first and forty-eighth sessions). Only
// rows of exactly four vectors per thread: with three, a ragged fourth or peeled rows the
// loads were early already, and the request only took registers (bf16 N = 49152: 128 -> 155,
// 24577: 96 -> 127, peeled 118 -> 146).
bool sinks_prefetches(const LoweredProgram& lp, const KernelSpec& spec) {
  const auto& c = spec.config;
  if (c.ctas_per_row == 1 || spec.global_exchange ||
      static_cast<RowStorage>(c.row_storage) != RowStorage::prefetched || c.rows_per_cta != 1 ||
      c.threads_per_row > 128 || lp.reduction_phases.size() != 1 ||
      dtype_size(spec.io_dtype) != 2 || spec.peel_rows ||
      spec.n != std::int64_t{4} * c.vec * c.threads_per_row * c.ctas_per_row)
    return false;
  return std::none_of(lp.program.slots.begin(), lp.program.slots.end(), [](const ir::Slot& s) {
    return s.role == ir::Role::read && s.shape == Shape::row_scalar;
  });
}

// Whether a kernel of one CTA per row block adds its column partial sums (dW, dB) after its warps
// have left their row totals in shared memory and before the barrier that combines them,
// instead of in its final pass: where none of them needs those totals (each column sum's term
// waits on no reduction of the last phase: the saved-statistics backwards, and the recomputes'
// terms of the first phase's statistics), rows held in registers (a pass over them reads no
// memory), several warps per row (one warp has no barrier to wait at) and no peeled remainder.
// The warps then do the partial sums' shared-memory read-add-writes while the slowest warp
// catches up. Measured on the H100 (fifty-ninth session, bf16, against the final pass): the
// LayerNorm backward at N = 16384 (staged, 256 threads) 85.2 -> 90.2%, RMSNorm's at 4096 +1.1,
// its recompute at 16384 +1.5. Not on clusters: there, between the push of the row totals and
// the wait for the peers', it lost 0.6-1.2 points at N = 32768-262144. 16-bit rows only: fp16
// gained too (sixty-first session, call 1, H100, against the final pass in the same call:
// LayerNorm backward N = 4096 +0.9, without bias +1.9, RMSNorm +0.9, nothing slower by more than
// 0.6); with it, fp32 LayerNorm's backward at N = 8192 read 92.0-92.4% (sixtieth session) where
// the fifty-ninth had read 94.2% without it.
bool adds_partials_before_row_barrier(const LoweredProgram& lp, const KernelSpec& spec) {
  const auto storage = static_cast<RowStorage>(spec.config.row_storage);
  if (spec.io_dtype == DType::f32 || spec.config.ctas_per_row != 1 ||
      spec.config.threads_per_row <= 32 || spec.peel_rows ||
      (storage != RowStorage::prefetched && storage != RowStorage::registers &&
       storage != RowStorage::staged) ||
      plan_kernels(lp).column_partials == 0 || lp.reduction_phases.empty())
    return false;
  const int last_phase = static_cast<int>(lp.reduction_phases.size()) - 1;
  const ir::Graph& graph = *lp.program.graph;
  return std::all_of(lp.cross_row_reductions.begin(), lp.cross_row_reductions.end(), [&](NodeId r) {
    const Node& n = graph.node(r);
    return !ir::varies_along_row(n.shape) || lp.phase_after[n.args[0]] < last_phase;
  });
}

}  // namespace

bool can_pin_next_row_loads(const LoweredProgram& program, const KernelSpec& spec) {
  const LoweredProgram& lp = configured(program, spec);
  return spec.config.ctas_per_row > 1 &&
         static_cast<RowStorage>(spec.config.row_storage) == RowStorage::prefetched &&
         plan_kernels(lp).persistent;
}

// The rule: pinned before the first exchange (on), except where sinks_prefetches keeps the
// loads early (RMSNorm's recompute lost 1.7 and 3.1 points with the pin there, H200, bf16 N =
// 32768 and 65536, fifty-fourth session) and where the first pass reads a saved statistic.
// There the pin after the warps' combine lost (H100, fifty-third session); the pin before it
// (early) gained 5-7 points for fp16 LayerNorm and LayerNorm without bias at 65536-262144 on
// clusters of 16 and held bf16 LayerNorm within 2, but lost up to 5.6 at 32768 (H100,
// fifty-eighth session): early from rows of kEarlyPinMinRowVectors on clusters of 16, else off.
LoadPin next_row_loads_pin(const LoweredProgram& program, const KernelSpec& spec) {
  const LoweredProgram& lp = configured(program, spec);
  if (!can_pin_next_row_loads(lp, spec)) return LoadPin::off;
  const auto pin = static_cast<LoadPin>(spec.config.load_pin);
  if (pin != LoadPin::rule) return pin;
  if (sinks_prefetches(lp, spec)) return LoadPin::off;
  if (!first_pass_reads_row_scalar_input(lp)) return LoadPin::on;
  constexpr std::int64_t kEarlyPinMinRowVectors = 8192;
  const bool long_rows = spec.n / spec.config.vec >= kEarlyPinMinRowVectors;
  return long_rows && spec.config.ctas_per_row == kMaxCtasPerRow ? LoadPin::early : LoadPin::off;
}

// With shift_per_row the copy of the column parameters is laid out at no shift, one chunk
// longer per sweep and word-major, and each chunk is read as its words at the row's shift
// (store_stash_chunk_words, load_stashed_chunk_shifted).
bool can_shift_per_row(const LoweredProgram& program, const KernelSpec& spec) {
  const LoweredProgram& lp = configured(program, spec);
  if (!spec.peel_rows || !persistent_kernel(lp, spec) || spec.config.rows_per_cta != 1)
    return false;
  const auto storage = static_cast<RowStorage>(spec.config.row_storage);
  if (!plan_kernels(lp).persistent) return storage == RowStorage::prefetched;
  return (storage == RowStorage::prefetched || storage == RowStorage::registers) &&
         !spec.global_exchange;
}

namespace {

bool reads_column(const ir::Slot& slot) {
  return slot.role == ir::Role::read && slot.shape == Shape::column;
}

}  // namespace

bool can_fetch_columns_early(const LoweredProgram& program, const KernelSpec& spec) {
  const LoweredProgram& lp = configured(program, spec);
  return !spec.peel_rows && spec.config.ctas_per_row == 1 && !persistent_kernel(lp, spec) &&
         static_cast<RowStorage>(spec.config.row_storage) == RowStorage::registers &&
         std::any_of(lp.program.slots.begin(), lp.program.slots.end(), reads_column);
}

std::int64_t early_column_vectors(const LoweredProgram& program, const KernelSpec& spec) {
  const LoweredProgram& lp = configured(program, spec);
  const auto columns =
      std::count_if(lp.program.slots.begin(), lp.program.slots.end(), reads_column);
  return geometry(spec).iters * static_cast<std::int64_t>(columns);
}

namespace {

// Whether the copy of the column parameters is laid out at no shift, word by word, for rows at
// every shift (a forward with shift_per_row). A program that sums across rows copies them anew
// at each class's shift instead (Emitter::class_major_): read word by word at each row's
// shift, they took ptxas 13 more registers (RMSNorm backward, bf16 N = 65537 on 8 x 256
// threads, NVCC 13.0).
bool stashes_column_words(const LoweredProgram& lp, const KernelSpec& spec) {
  return spec.shift_per_row && !plan_kernels(lp).needs_finish();
}

// The columns of a CTA's copy of each column parameter: its slice, and laid out word by word
// one chunk more per sweep (the chunk after the sweep's last, which the last thread's shifted
// chunk reaches into).
std::int64_t column_stash_columns(const LoweredProgram& lp, const KernelSpec& spec) {
  const std::int64_t extra =
      stashes_column_words(lp, spec) ? geometry(spec).iters * spec.config.vec : 0;
  return slice_columns(spec) + extra;
}

// One row input's shared-memory stash for a CTA, rounded to 16 bytes so the next one stays
// aligned for vector access.
std::size_t stash_bytes(const Geometry& g, const KernelSpec& spec, DType dtype) {
  const std::size_t bytes = static_cast<std::size_t>(g.chunks * spec.config.vec) *
                            dtype_size(dtype) * static_cast<std::size_t>(spec.config.rows_per_cta);
  return (bytes + 15) / 16 * 16;
}

// The floats of state a row reduction combines across warps and CTAs: one, or a co-moment's
// fields (count, two means, centered sum).
std::size_t state_floats(const ir::Node& reduction) {
  return reduction.op == Op::comoment ? std::size(codegen_sm90::kComomentFields) : 1;
}

// A co-moment's state holds the means of its operands, so a mean (or sum) of one of them in
// the same phase is read from it: the co-moment's id and the field, or nothing.
std::optional<std::pair<NodeId, std::string>> mean_in_comoment(const ir::Graph& g, NodeId r,
                                                               const std::vector<NodeId>& phase) {
  const Node& n = g.node(r);
  if (n.op != Op::reduce_mean && n.op != Op::reduce_sum) return std::nullopt;
  for (NodeId other : phase) {
    const Node& m = g.node(other);
    if (m.op != Op::comoment) continue;
    if (m.args[0] == n.args[0]) return std::make_pair(other, std::string("avg_a"));
    if (m.args[1] == n.args[0]) return std::make_pair(other, std::string("avg_b"));
  }
  return std::nullopt;
}

// The reductions of a phase that keep their own accumulator.
std::vector<NodeId> accumulated(const ir::Graph& g, const std::vector<NodeId>& phase) {
  std::vector<NodeId> kept;
  for (NodeId r : phase) {
    if (!mean_in_comoment(g, r, phase)) kept.push_back(r);
  }
  return kept;
}

std::size_t max_state_floats_per_phase(const LoweredProgram& lp) {
  std::size_t most = 0;
  for (const auto& phase : lp.reduction_phases) {
    std::size_t floats = 0;
    for (NodeId r : accumulated(*lp.program.graph, phase))
      floats += state_floats(lp.program.graph->node(r));
    most = std::max(most, floats);
  }
  return most;
}

}  // namespace

namespace {

// Column partial sums move from registers to shared memory when they hold at least this many
// values per thread (below it registers are cheap) and fit in kSharedPartialsMaxBytes.
constexpr std::int64_t kSharedPartialsMinValues = 32;
constexpr std::int64_t kSharedPartialsMaxBytes = 128 * 1024;
// A copy of the column parameters on one CTA per row (a peeled row's, below) takes at most this
// much: without it, LayerNorm bf16 N = 12345 (49380 bytes of weight and bias) on 256 threads,
// prefetched, held 214 registers and ran at 38.5% of the copy ceiling, where RMSNorm's copy
// (24690 bytes) ran at 84.8% (twenty-second session, run 1, tilenorm-tune --show-candidates).
constexpr std::int64_t kPeeledColumnCopyMaxBytes = 64 * 1024;
// A cluster kernel's copy takes at most kClusterColumnCopyMaxBytes; up to
// kLongClusterColumnCopyMaxBytes, while all of its shared memory stays within
// kClusterSharedMaxBytes (sm_90 and later allow 227 KiB per CTA), where its CTAs have at least
// kLongSliceCopyThreads threads (one such CTA per SM at the registers they take) and it peels its
// rows or is a forward, and at any CTA size where it is a forward that peels its rows. Measured on
// the H200 (twenty-sixth session, run 3, the benchmark, against 48 KiB for all):
// - forwards on 512 threads gained: fp32 LayerNorm N = 131072 (8 x 512, 128 KiB) 86.2 -> 90.7%,
//   262144 (16 x 512) 81.6 -> 88.4%; bf16 LayerNorm 262144 (8 x 512) 78.5 -> 87.5%;
// - peeled rows, which otherwise extract every chunk of the parameters from two aligned vectors,
//   gained: fp32 LayerNorm N = 131071 31.1 -> 79.8%, RMSNorm 262143 53.9 -> 80.3%; backwards
//   at 262143 LayerNorm 36.6 -> 43.6%, RMSNorm 36.1 -> 46.7%;
// - fp32 LayerNorm N = 65536 on 8 x 256 threads lost (92.3 -> 89.1%; two CTAs per SM, whose
//   parameters stay in L1 from row to row without it), and the aligned backwards at N = 262144
//   gained nothing (LayerNorm 61.7 -> 61.2%, recomputing 57.1 -> 55.6%);
// - a peeled forward on 256 threads gained: fp32 LayerNorm N = 65537 (8 x 256 threads, 64 KiB)
//   62.3 -> 87.7% (twenty-seventh session, runs 1-2).
constexpr std::int64_t kClusterColumnCopyMaxBytes = 48 * 1024;
constexpr std::int64_t kLongClusterColumnCopyMaxBytes = 128 * 1024;
constexpr std::int64_t kClusterSharedMaxBytes = 200 * 1024;
constexpr int kLongSliceCopyThreads = 512;

// The row stashes of RowStorage::shared.
std::size_t row_stash_bytes(const LoweredProgram& lp, const KernelSpec& spec) {
  if (static_cast<RowStorage>(spec.config.row_storage) != RowStorage::shared) return 0;
  const Geometry g = geometry(spec);
  std::size_t bytes = 0;
  for (const ir::Slot& slot : lp.program.slots) {
    if (slot.role == ir::Role::read && slot.shape == ir::Shape::tile)
      bytes += stash_bytes(g, spec, ir::storage_dtype(slot, spec.io_dtype, spec.param_dtype));
  }
  return bytes;
}

// The registers per thread that rows in registers hold across a row block's passes: the raw
// row chunks, the column partial sums kept in registers, and what peeling needs.
std::int64_t held_registers(const LoweredProgram& lp, const KernelSpec& spec) {
  const auto& c = spec.config;
  const auto storage = static_cast<RowStorage>(c.row_storage);
  const Geometry g = geometry(spec);
  // Row inputs are held raw (two 16-bit values per register): twice when prefetching, three
  // times when pipelined (the block in flight, the one being pushed, the one being finished).
  const std::int64_t copies =
      storage == RowStorage::pipelined ? 3 : (storage == RowStorage::prefetched ? 2 : 1);
  const std::int64_t raw_registers =
      g.iters * c.vec * row_input_bytes(lp, spec.io_dtype, spec.param_dtype) / 4 * copies;
  const std::int64_t partial_registers = column_partial_registers(lp, spec);
  // Peeled rows hold more: the head, the remainder's columns and elements, and two aligned
  // vectors per column parameter for the extraction (calibrated with NVRTC 13.0 for sm_90,
  // where long rows at 1024 threads spilled without this, when the remainder took chunk slots).
  std::int64_t peel_registers = 0;
  if (spec.peel_rows) {
    peel_registers = 8;
    for (const ir::Slot& slot : lp.program.slots) {
      if (reads_column(slot))
        peel_registers += 2 * c.vec *
                          static_cast<std::int64_t>(dtype_size(
                              ir::storage_dtype(slot, spec.io_dtype, spec.param_dtype))) /
                          4;
    }
  }
  return partial_registers + raw_registers + peel_registers;
}

// Column partial sums in shared memory are read, added to and written back in runs of this many
// consecutive slots per thread (XW in the kernel), measured on the H200 (twelfth session):
// - four (one float4 access per four columns) in clusters: 1.7-3.3 points faster;
// - one on a CTA per row, faster there at 9 of 15 shapes (LayerNorm backward N = 4096: 90.0%
//   against 84.4%), slower at 6 (N = 2048: 83.3% against 88.7%);
// - one where ptxas spilled with four (NVRTC 13.0, sm_90): threads that hold 128 registers of
//   row values (RMSNorm's backward at bf16 N = 4096 on 64 threads x 8 prefetched vectors: 28
//   bytes), and peeled rows (LayerNorm's recompute at N = 40001 on 16 x 128 threads: 4 bytes).
int partial_run_width(const LoweredProgram& lp, const KernelSpec& spec) {
  if (spec.config.ctas_per_row == 1 || spec.peel_rows || held_registers(lp, spec) >= 128) return 1;
  return std::min(spec.config.vec, 4);
}

// One row input's staging slots for RowStorage::staged: every thread's own chunks, laid out
// chunk-major so that a warp's copies are contiguous; rounded to 16 bytes so that the next
// input's slots stay aligned.
std::size_t stage_bytes(const KernelSpec& spec, DType dtype) {
  const std::size_t bytes = static_cast<std::size_t>(geometry(spec).iters) *
                            static_cast<std::size_t>(spec.config.threads_per_row) *
                            static_cast<std::size_t>(spec.config.rows_per_cta) *
                            static_cast<std::size_t>(spec.config.vec) * dtype_size(dtype);
  return (bytes + 15) / 16 * 16;
}

// A row tensor the kernel reads (x, dy).
bool is_row_input(const ir::Slot& s) {
  return s.role == ir::Role::read && s.shape == ir::Shape::tile;
}

// Whether row input `slot` of RowStorage::staged is copied ahead into shared memory: all but the
// first KernelSpec::unstaged_row_inputs row inputs.
bool stages_row_input(const LoweredProgram& lp, const KernelSpec& spec, std::size_t slot) {
  const auto& slots = lp.program.slots;
  if (static_cast<RowStorage>(spec.config.row_storage) != RowStorage::staged ||
      !is_row_input(slots[slot]))
    return false;
  const auto before =
      std::count_if(slots.begin(), slots.begin() + static_cast<long>(slot), is_row_input);
  return before >= spec.unstaged_row_inputs;
}

// Shared memory for the next row block's chunks of RowStorage::staged.
std::size_t staging_bytes(const LoweredProgram& lp, const KernelSpec& spec) {
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < lp.program.slots.size(); ++i) {
    if (stages_row_input(lp, spec, i))
      bytes += stage_bytes(spec,
                           ir::storage_dtype(lp.program.slots[i], spec.io_dtype, spec.param_dtype));
  }
  return bytes;
}

}  // namespace

int row_input_count(const LoweredProgram& program) {
  return static_cast<int>(
      std::count_if(program.program.slots.begin(), program.program.slots.end(), is_row_input));
}

std::int64_t row_input_bytes(const LoweredProgram& program, DType io_dtype, DType param_dtype) {
  std::int64_t bytes = 0;
  for (const ir::Slot& slot : program.program.slots) {
    if (slot.role == ir::Role::read && slot.shape == ir::Shape::tile)
      bytes +=
          static_cast<std::int64_t>(dtype_size(ir::storage_dtype(slot, io_dtype, param_dtype)));
  }
  return bytes;
}

// Shared memory for the copies of the column parameters that a persistent cluster kernel
// reads, or 0. Such a kernel reads its slice of them for every row it handles, each time
// after waiting on the cluster's exchange; the copy is made once per CTA while it fits in
// kClusterColumnCopyMaxBytes or kLongClusterColumnCopyMaxBytes (kPeeledColumnCopyMaxBytes for a
// peeled row's copy on one CTA, below).
// Measured on the H200 (bf16, 2026-11-30): cluster kernels gained 1-7 points of the copy ceiling
// (RMSNorm forward N = 262144 72.7 -> 79.7%, backward 32768 57.7 -> 62.3%), while persistent
// kernels of one CTA per row lost up to 9 (LayerNorm backward N = 5120 73.9 -> 64.6%): there the
// parameters stay in L1 from row to row.
std::size_t column_stash_bytes(const LoweredProgram& program, const KernelSpec& spec) {
  const LoweredProgram& lp = configured(program, spec);
  // A persistent kernel that peels one row per CTA (at one shift for all of its rows: see
  // peeled_grid in the runtime) keeps a copy at that shift, which spares every row the
  // extraction of its misaligned column chunks from two aligned vectors: in LayerNorm's
  // backward (bf16 N = 12345, 512 threads) those extractions spilled 408-2916 bytes (NVRTC
  // 13.0, sm_90) where the copy spills nothing.
  // (Row groups of a CTA start at different shifts: they read their own.)
  const bool peeled_copy = spec.peel_rows && spec.config.rows_per_cta == 1;
  if (!persistent_kernel(lp, spec) || (spec.config.ctas_per_row == 1 && !peeled_copy)) return 0;
  // The limits below hold the slice's bytes; a copy at no shift (shift_per_row) takes one chunk
  // per sweep more.
  const std::int64_t columns = slice_columns(spec);
  const std::int64_t extra_columns = column_stash_columns(lp, spec) - columns;
  std::int64_t bytes = 0, extra = 0;
  for (const ir::Slot& slot : lp.program.slots) {
    if (!reads_column(slot)) continue;
    const auto size = static_cast<std::int64_t>(
        dtype_size(ir::storage_dtype(slot, spec.io_dtype, spec.param_dtype)));
    bytes += columns * size;
    extra += extra_columns * size;
  }
  if (spec.config.ctas_per_row > 1) {
    const std::int64_t others = static_cast<std::int64_t>(
        row_stash_bytes(lp, spec) + shared_partials_bytes(lp, spec) + staging_bytes(lp, spec));
    const bool forward = !plan_kernels(lp).persistent;
    const bool long_copy =
        (spec.peel_rows && forward) ||
        (spec.config.threads_per_row * spec.config.rows_per_cta >= kLongSliceCopyThreads &&
         (spec.peel_rows || forward));
    const std::int64_t most =
        long_copy ? kLongClusterColumnCopyMaxBytes : kClusterColumnCopyMaxBytes;
    return bytes <= most && others + bytes <= kClusterSharedMaxBytes
               ? static_cast<std::size_t>(bytes + extra)
               : 0;
  }
  return bytes <= kPeeledColumnCopyMaxBytes ? static_cast<std::size_t>(bytes + extra) : 0;
}

// Shared memory for the column partial sums of a persistent kernel, or 0 when they stay in
// registers (declared in codegen.hpp). Each thread owns ITERS * VEC slots per sum, strided by the
// CTA's thread count so that a warp's accesses fall in 32 different banks; they cost shared-memory
// traffic instead of registers, which buys CTAs per SM where the sums are long.
std::size_t shared_partials_bytes(const LoweredProgram& program, const KernelSpec& spec) {
  const LoweredProgram& lp = configured(program, spec);
  const std::int64_t sums = plan_kernels(lp).column_partials;
  if (sums == 0 || spec.partials_in_registers) return 0;
  const Geometry g = geometry(spec);
  const std::int64_t values = g.iters * spec.config.vec * sums;
  const std::int64_t bytes = values * spec.config.threads_per_row * spec.config.rows_per_cta * 4;
  return values >= kSharedPartialsMinValues && bytes <= kSharedPartialsMaxBytes
             ? static_cast<std::size_t>(bytes)
             : 0;
}

std::size_t dynamic_shared_memory_bytes(const LoweredProgram& program, const KernelSpec& spec) {
  const LoweredProgram& lp = configured(program, spec);
  return row_stash_bytes(lp, spec) + shared_partials_bytes(lp, spec) +
         column_stash_bytes(lp, spec) + staging_bytes(lp, spec);
}

namespace {

// The finishing kernel: CTAs of kFinishThreads threads, each thread summing VEC adjacent
// columns over every GROUPS-th partial row. GROUPS grows for short rows until the grid has about
// kFinishLoaders threads (each with a few loads in flight), enough to read the workspace at the
// memory's speed. (Until the seventeenth session it had one column per thread and 32 groups
// in CTAs of 1024, a grid of N / 32 CTAs whose threads mostly waited on one load each: H200, bf16
// LayerNorm backward N = 262144, 250 us in all against 157 us for the main kernel alone in
// Nsight Compute; with this shape 58.9% of the copy ceiling against 38.3%.)
constexpr int kFinishThreads = 256;
constexpr int kFinishMaxGroups = kFinishThreads;
constexpr std::int64_t kFinishLoaders = 65536;

struct FinishShape {
  int vec = 1;     // columns per thread: 4 where the workspace rows stay 16-byte aligned
  int groups = 1;  // threads summing one column's partial rows, each every groups-th
  int columns() const { return kFinishThreads / groups * vec; }  // columns per CTA
};

FinishShape finish_shape(std::int64_t n) {
  FinishShape shape;
  shape.vec = n % 4 == 0 ? 4 : 1;
  const std::int64_t vectors = (n + shape.vec - 1) / shape.vec;
  while (shape.groups < kFinishMaxGroups && vectors * shape.groups * 2 <= kFinishLoaders)
    shape.groups *= 2;
  return shape;
}

constexpr std::int64_t kCombineFloats = 8192;  // shared floats for combining a CTA's row groups

// Prints the plan of a lowered program as CUDA C++: the main kernel and, for programs with
// reductions across rows, the finishing kernel.
class Emitter {
 public:
  Emitter(const LoweredProgram& lp, const KernelSpec& spec)
      : lp_(lp),
        p_(lp.program),
        g_(*lp.program.graph),
        spec_(spec),
        geo_(geometry(spec)),
        storage_(static_cast<RowStorage>(spec.config.row_storage)),
        plan_(plan_kernels(lp)) {
    stashed_.assign(p_.slots.size(), false);
    shared_partials_ = shared_partials_bytes(lp, spec) > 0;
    runs_ = shared_partials_ ? partial_run_width(lp, spec) : 1;
    column_stash_ = column_stash_bytes(lp, spec) > 0;
    clustered_ = spec.config.ctas_per_row > 1;
    global_exchange_ = clustered_ && spec.global_exchange;
    persistent_ = persistent_kernel(lp, spec);
    first_pass_reads_statistic_ = first_pass_reads_row_scalar_input(lp);
    pin_place_ = next_row_loads_pin(lp, spec);
    partials_before_barrier_ = adds_partials_before_row_barrier(lp, spec);
    // With each row at its own shift, a kernel that sums across rows walks a range of the rows
    // in class-major order, one class at a time (emit_class_major_range): its row loop steps
    // through the rows of a class, tn_period apart.
    class_major_ = spec.shift_per_row && plan_.needs_finish();
    stash_words_ = stashes_column_words(lp, spec);
    block_index_ = class_major_ ? "tn_row_begin" : clustered_ ? "tn_cluster" : "blockIdx.x";
    block_count_ = class_major_ ? "tn_period" : clustered_ ? "tn_clusters" : "gridDim.x";
    partial_block_ = class_major_ ? "(tn_group * tn_slots + tn_slot)" : block_index_;
    // Row groups combine their partial sums in shared memory, one partial row per CTA, when
    // the column sums are in shared memory already or small enough to move there (not on a
    // cluster: the copy through tn_combine covers whole rows, and a CTA holds one slice).
    combine_ = plan_.needs_finish() && spec.config.rows_per_cta > 1 &&
               (shared_partials_ || plan_.column_partials == 0 ||
                (!clustered_ && spec.config.rows_per_cta * spec.n <= kCombineFloats));
    // Column partial sums in shared memory (there already, or moved there to combine the row
    // groups, or to fold a one-row CTA's) can be folded across a cluster; see
    // GeneratedKernel::folds_partials. Scalar partials are not folded, so programs with them
    // keep one partial row per CTA.
    // (Not with peeled rows: the CTAs of a fold hold consecutive rows, at different shifts,
    // and the fold adds their partial sums slot by slot.)
    folds_ = plan_.needs_finish() && !clustered_ && plan_.column_partials > 0 &&
             plan_.scalar_partials == 0 && !spec.peel_rows &&
             (shared_partials_ || spec.config.rows_per_cta * spec.n <= kCombineFloats);
    combine_ = combine_ || folds_;
  }

  GeneratedKernel run() {
    GeneratedKernel k;
    k.name = "tilenorm_" + p_.name;
    k.threads_per_block = spec_.config.threads_per_row * spec_.config.rows_per_cta;
    k.rows_per_cta = spec_.config.rows_per_cta;
    k.dynamic_shared_bytes = dynamic_shared_memory_bytes(lp_, spec_);
    k.plan = plan_;
    k.partials_per_cta = combine_ ? 1 : spec_.config.rows_per_cta;
    k.ctas_per_row = spec_.config.ctas_per_row;
    k.folds_partials = folds_;
    k.persistent = persistent_;
    k.shift_per_row = spec_.shift_per_row;
    k.early_columns = spec_.early_columns;
    k.global_exchange = global_exchange_;
    if (global_exchange_ && !lp_.reduction_phases.empty()) {
      k.exchange_floats_per_cluster = codegen_exchange::exchange_floats_per_cluster(
          spec_.config.ctas_per_row, spec_.config.rows_per_cta, max_state_floats_per_phase(lp_),
          exchange_buffers());
      k.exchange_counts = exchange_buffers();
    }
    k.min_ctas_per_sm = min_ctas_per_sm(k.threads_per_block);
    // Kernels that sum across rows on one CTA per row unpack 16-bit types element by element
    // (measured for bf16; fp16 follows it): with the word-wise unpacking ptxas gave them other
    // register counts and they measured slower (H200, twelfth session: RMSNorm's backward at
    // N = 12288 77% against 88%, N = 1024 at 3 CTAs per SM instead of 4), while forwards and
    // cluster backwards gained.
    if (plan_.needs_finish() && !clustered_) out_ << "#define TN_UNPACK_WORDS 0\n";
    // Cluster kernels convert an fp16 word's halves one at a time: with the one asm block of
    // one-CTA kernels ptxas gave them other register counts, and they measured slower (H200,
    // twenty-third session, run 2, the benchmark, fp16, M = 2^26 / N, % of the copy ceiling:
    // LayerNorm N = 32768 on 8 x 64 threads 82.7 against 88.7, N = 65536 83.8 against 88.9).
    if (clustered_) out_ << "#define TN_FP16_UNPACK_ASM 0\n";
    out_ << device_prelude() << "\n";
    if (global_exchange_) {
      out_ << device_prelude_exchange() << "\n";
    } else if (clustered_) {
      out_ << device_prelude_sm90() << "\n";
    }
    // Only the fold needs the sm_90 prelude here; older targets take the generic fold.
    if (folds_) {
      out_ << "#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900\n"
           << device_prelude_sm90() << "#endif\n\n";
    }
    emit_header(k);
    emit_prologue();
    emit_row_loop();
    // The last iteration started copies of a row block past the end (zeros): no copy may
    // still be writing this CTA's shared memory when it exits.
    if (staging() || fetches_any_row_scalar()) out_ << "  tn::wait_async_copies();\n";
    // A software cluster's CTAs hold nothing a peer reads after they exit.
    const bool exchanges = clustered_ && !global_exchange_ && !lp_.reduction_phases.empty();
    if (exchanges) codegen_sm90::emit_exit_arrive(out_);
    if (!class_major_) emit_partials();  // (a class-major kernel wrote them class by class)
    if (exchanges) codegen_sm90::emit_exit_wait(out_);
    out_ << "}\n";
    if (plan_.needs_finish()) {
      GeneratedFunction finish;
      finish.name = k.name + "_finish";
      finish.threads_per_block = kFinishThreads;
      const FinishShape shape = finish_shape(spec_.n);
      emit_finish(finish, shape);
      k.finish = std::move(finish);
      k.finish_columns_per_cta = shape.columns();
    }
    k.source = out_.str();
    return k;
  }

 private:
  // ---- Slots.
  DType slot_dtype(const ir::Slot& slot) const {
    return ir::storage_dtype(slot, spec_.io_dtype, spec_.param_dtype);
  }
  std::string slot_type(const ir::Slot& slot) const { return cuda_type(slot_dtype(slot)); }
  const ir::Slot& slot(int index) const { return p_.slots[index]; }
  bool is_cross_row(NodeId id) const {
    const Node& n = g_.node(id);
    return ir::is_reduction(n.op) && n.axis == ir::Axis::across_rows;
  }

  // ---- Chunks.
  // The first column of this thread's chunk `it` of the row: every chunk column of the
  // generated code is this expression. A cluster's CTAs take turns: sweep `it` covers CLUSTER *
  // TPR chunks, TPR for each CTA in rank order, so that a row that does not fill the last sweep
  // leaves every CTA some columns (contiguous slices, rounded up to whole sweeps of one CTA,
  // could leave the last CTAs none).
  // Peeled rows (alignment peeling): the chunk slots hold the row's whole aligned vectors, from
  // its first VEC-aligned column tn_head on; a body chunk is inside the row or past it. The
  // remainder, the head's and the tail's columns (at most 2 * (VEC - 1)), goes one element per
  // thread to the last threads of the row (emit_head, emit_remainder_start). (Until the
  // twenty-fourth session it took two more chunk slots, moved element by element: where the body
  // filled whole sweeps, one warp made an extra sweep of them in every pass, and the row's other
  // warps waited for it at the barrier: LayerNorm bf16 N = 8193, 25.8% of the stall samples there
  // against 10.5% at 8192.)
  // A cluster kernel cannot prove a chunk inside the row from its rank, so the chunk tests inside
  // its loads and stores stay in the code even where the chunks tile the row exactly (and the
  // generated code leaves its own out, see covers_row_exactly). The backwards wrap the column
  // in tn::column_inside, which says so: LayerNorm's (bf16, N = 65536 on 16 x 128 threads) runs
  // a tenth fewer instructions per row, 52 -> 60% of the copy ceiling on the H200 (sixteenth
  // session; 32768 60 -> 68%, 262144 34 -> 38%; RMSNorm's within -3 to +2). Not the forwards:
  // without the tests' branches ptxas 13.0 sank the next row's prefetch past the exchange wait
  // there (LayerNorm fp32 N = 131072 81 -> 67%, bf16 262144 62 -> 55%).
  std::string chunk_column() const {
    if (peel()) return "tn_head + " + chunk_slot() + " * VEC";
    const std::string column = chunk_slot() + " * VEC";
    const bool declared_inside = clustered_ && covers_row_exactly() && plan_.needs_finish();
    return declared_inside ? "tn::column_inside<N>(" + column + ")" : column;
  }
  // The index of this thread's chunk `it` among the row's chunk slots.
  std::string chunk_slot() const {
    return clustered_ ? "((it * CLUSTER + tn_rank) * TPR + lane)" : "(it * TPR + lane)";
  }
  bool peel() const { return spec_.peel_rows; }
  // Peeled rows: the remainder elements each thread holds (REM_ITERS), or 0.
  int remainder_iters() const {
    const int elements = 2 * (spec_.config.vec - 1);
    return peel() ? (elements + spec_.config.threads_per_row - 1) / spec_.config.threads_per_row
                  : 0;
  }
  // Whether the chunks of all threads (of every CTA of a cluster) tile N exactly, with no
  // peeling: every chunk lies inside the row, so the chunk tests are left out, and every thread
  // holds the same number of columns, so co-moment states combine with equal counts (no
  // division).
  bool covers_row_exactly() const {
    return !peel() && geo_.iters * sweep_chunks() * spec_.config.vec == spec_.n;
  }
  // The chunks one sweep (it) covers: every thread of the row, on every CTA of a cluster.
  std::int64_t sweep_chunks() const {
    return std::int64_t{spec_.config.threads_per_row} * std::max(1, spec_.config.ctas_per_row);
  }
  // Sweeps before FULL_ITERS lie wholly inside the row for every thread, so only the later
  // ones test their chunks: the test folds away in the unrolled loops. A peeled row has at
  // least (N - VEC + 1) / VEC whole vectors (when it starts one column past a boundary).
  std::int64_t full_iters() const {
    const std::int64_t vec = spec_.config.vec;
    const std::int64_t chunks =
        peel() ? std::max<std::int64_t>(spec_.n - vec + 1, 0) / vec : spec_.n / vec;
    return chunks / sweep_chunks();
  }
  std::string chunk_in_row() const {
    return covers_row_exactly() ? "true"
           : peel()             ? "(it < FULL_ITERS || c0 + VEC <= N)"
                                : "(it < FULL_ITERS || c0 < N)";
  }
  // The raw chunk c0 of row input `s` from `row_pointer`, or zeros where `valid` (a condition)
  // is false or the chunk lies past the row; an empty `valid` loads every row (a row past the
  // end then reads row 0).
  std::string raw_chunk_load(const ir::Slot& s, const std::string& row_pointer,
                             const std::string& valid) const {
    const std::string t = slot_type(s);
    const std::string fetch = "tn::fetch_chunk" +
                              (peel() ? "_peeled<" + t + ", VEC>(" : "<" + t + ", VEC, N>(") +
                              row_pointer + ", c0)";
    std::string guard = valid;
    if (!covers_row_exactly()) guard += (guard.empty() ? "" : " && ") + chunk_in_row();
    return guard.empty() ? fetch : guard + " ? " + fetch + " : tn::raw_zero<" + t + ", VEC>()";
  }
  // Where chunk c0 sits in a row's shared-memory stash: at its chunk slot times VEC, which
  // for peeled rows is not its column.
  std::string stash_offset() const { return peel() ? chunk_slot() + " * VEC" : "c0"; }

  // ---- Names.
  // The one thread that writes a row's scalar results (every CTA of a cluster has them).
  std::string first_of_row() const {
    if (global_exchange_) return "lane == 0 && tn_rank == 0";
    return clustered_ ? "lane == 0 && tn::cluster_rank() == 0" : "lane == 0";
  }
  std::string ref(NodeId id) const {
    const Node& n = g_.node(id);
    if (n.op == Op::load && n.shape == Shape::tile) return "in" + std::to_string(n.index) + "[v]";
    if (n.op == Op::load && n.shape == Shape::column)
      return "col" + std::to_string(n.index) + "[v]";
    switch (n.shape) {
      case Shape::scalar:
        return "s" + std::to_string(id);
      case Shape::row_scalar:
        return "r" + std::to_string(id);
      case Shape::column:
      case Shape::tile:
        return "e" + std::to_string(id);
    }
    return "?";
  }

  std::string expression(NodeId id) const {
    return expression(id, [this](NodeId arg) { return ref(arg); });
  }
  std::string expression(NodeId id, const std::function<std::string(NodeId)>& name) const {
    const Node& n = g_.node(id);
    if (n.op == Op::load) {
      const ir::Slot& s = slot(n.index);
      if (s.shape == Shape::scalar) return "sc_" + s.name;
      if (fetches_row_scalar(n.index)) return fetched_row_scalar(n.index, raw_suffix_);
      return "(row_valid ? p_" + s.name + "[row] : 0.0f)";
    }
    if (n.op == Op::constant) return float_literal(n.value);
    if (ir::is_reduction(n.op)) {
      throw ProgramError("codegen: a reduction has no elementwise expression");
    }
    std::string text(ir::op_info(n.op).cuda);
    std::string result;
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '$' && i + 1 < text.size() && text[i + 1] >= '0' && text[i + 1] <= '2') {
        result += name(n.args[text[i + 1] - '0']);
        ++i;
      } else if (text[i] == '$' && i + 1 < text.size() && text[i + 1] == 'T') {
        result += cuda_type(n.dtype);
        ++i;
      } else {
        result += text[i];
      }
    }
    return result;
  }

  // ---- The main kernel.
  void emit_header(GeneratedKernel& k) {
    const auto& c = spec_.config;
    out_ << "// Generated by tilenorm (codegen version " << kCodegenVersion << ") from program '"
         << p_.name << "'.\n// io " << dtype_name(spec_.io_dtype) << ", params "
         << dtype_name(spec_.param_dtype) << ", N " << spec_.n << ", " << c.describe()
         << (peel() ? ", rows peeled (they may start misaligned)" : "")
         << (spec_.partials_in_registers && plan_.column_partials > 0
                 ? ", column partial sums in registers (the device's shared memory)"
                 : "")
         << (global_exchange_ ? ", a software cluster (row totals exchanged in global memory)" : "")
         << (spec_.unstaged_row_inputs > 0
                 ? ", the first " + std::to_string(spec_.unstaged_row_inputs) +
                       " row input(s) loaded at each row's start, not staged"
                 : "")
         << "\n";
    if (global_exchange_) {
      out_ << "// Launch " << k.name << " cooperatively (every CTA resident), on a grid that is a\n"
           << "// multiple of " << c.ctas_per_row
           << " CTAs: consecutive CTAs split each row, exchanging totals in tn_exchange.\n";
    } else if (clustered_) {
      out_ << "// Launch " << k.name << " with clusters of " << c.ctas_per_row
           << " CTAs along x (sm_90 or later); its grid is a multiple of that.\n";
    }
    ParamList params{k.params};
    for (std::size_t i = 0; i < p_.slots.size(); ++i) {
      const ir::Slot& s = p_.slots[i];
      const int index = static_cast<int>(i);
      const bool read = s.role == ir::Role::read;
      switch (s.shape) {
        case Shape::tile:
          params.add(ParamKind::slot_pointer, index,
                     (read ? "const " : "") + slot_type(s) + "* __restrict__ p_" + s.name);
          params.add(ParamKind::slot_stride, index, "long long stride_" + s.name);
          break;
        case Shape::column:
          if (read)
            params.add(ParamKind::slot_pointer, index,
                       "const " + slot_type(s) + "* __restrict__ p_" + s.name);
          break;
        case Shape::row_scalar:
          params.add(ParamKind::slot_pointer, index,
                     std::string(read ? "const " : "") + "float* __restrict__ p_" + s.name);
          break;
        case Shape::scalar:
          if (read) params.add(ParamKind::slot_value, index, "float sc_" + s.name);
          break;
      }
    }
    params.add(ParamKind::rows, -1, "long long rows");
    if (plan_.needs_finish()) {
      params.add(ParamKind::workspace, -1, "float* __restrict__ tn_workspace");
      params.add(ParamKind::partial_rows, -1, "long long tn_partial_rows");
    }
    if (global_exchange_ && !lp_.reduction_phases.empty())
      params.add(ParamKind::exchange, -1, "float* tn_exchange");
    // The runtime defines TILENORM_MIN_CTAS_PER_SM where a few registers keep another CTA off
    // each SM (compile_for_occupancy). Otherwise the generator's own request, if any: ptxas
    // allocates differently with an explicit minimum of 1 than with none.
    const int own = k.min_ctas_per_sm;
    out_ << "#ifdef " << kMinCtasMacro << "\n"
         << launch_bounds(k.threads_per_block, std::string(kMinCtasMacro)) << "#else\n"
         << launch_bounds(k.threads_per_block, own > 0 ? std::to_string(own) : "") << "#endif\n";
    emit_signature(k.name, params);
  }

  // Staged kernels keep the copies' addresses live across the passes, which took ptxas past
  // 128 registers (LayerNorm backward bf16 N = 8192 at 256 threads: 162 against 128 for the
  // same rows in registers, halving the CTAs per SM). Where the rows leave room, ask for the
  // CTAs per SM that 128 registers per thread allow; NVCC 13.0 then fit that kernel in 128
  // with no spills.
  int min_ctas_per_sm(int threads) const {
    constexpr std::int64_t kRegisters = 128, kRegistersPerSm = 65536, kWorking = 40;
    constexpr std::int64_t kEarlyPrefetchRegisters = 160;  // see sinks_prefetches
    // A class-major kernel's loop over the classes took ptxas to 173-204 registers where the
    // same kernel at one shift per CTA takes 118-128 (peeled backwards, bf16 N = 65537 and
    // 131071 on 8 x 256 threads, NVRTC 13.0), halving the resident clusters; asked for 128, it
    // fit with no spills (H100: +8 to +20 points at 131071 and 262143 over whole periods).
    if (class_major_)
      return static_cast<int>(std::max<std::int64_t>(1, kRegistersPerSm / (threads * kRegisters)));
    if (sinks_prefetches(lp_, spec_))
      return static_cast<int>(kRegistersPerSm / (threads * kEarlyPrefetchRegisters));
    if (!staging() || held_registers(lp_, spec_) + kWorking > kRegisters) return 0;
    return static_cast<int>(std::max<std::int64_t>(1, kRegistersPerSm / (threads * kRegisters)));
  }

  // A kernel's parameters: what the runtime binds, beside the declarations printed.
  struct ParamList {
    std::vector<KernelParam>& bound;
    std::vector<std::string> declarations{};
    void add(ParamKind kind, int slot, std::string declaration) {
      bound.push_back({kind, slot});
      declarations.push_back(std::move(declaration));
    }
  };

  static std::string launch_bounds(int threads, const std::string& min_ctas_per_sm) {
    return "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(threads) +
           (min_ctas_per_sm.empty() ? "" : ", " + min_ctas_per_sm) + ")\n";
  }

  // The name and parameters, after the launch_bounds() line; then, for programmatic dependent
  // launch, the wait for the previous grid before any memory access, and the release of the
  // next one (scheduled once every CTA of this grid has started, so its CTAs take the SMs this
  // grid's leave; the runtime decides which launches may overlap).
  void emit_signature(const std::string& name, const ParamList& params) {
    out_ << name << "(";
    for (std::size_t i = 0; i < params.declarations.size(); ++i)
      out_ << (i ? ",\n    " : "\n    ") << params.declarations[i];
    out_ << ") {\n  tn::wait_for_previous_grid();\n  tn::release_next_grid();\n";
  }

  void emit_prologue() {
    const auto& c = spec_.config;
    out_ << "  typedef " << cuda_type(spec_.io_dtype) << " T;\n"
         << "  typedef " << cuda_type(spec_.param_dtype) << " P;\n"
         << "  constexpr int N = " << spec_.n << ";\n"
         << "  constexpr int VEC = " << c.vec << ";\n"
         << "  constexpr int TPR = " << c.threads_per_row << ";  // threads per row\n"
         << "  constexpr int RPC = " << c.rows_per_cta << ";  // rows per CTA\n"
         << "  constexpr int ITERS = " << geo_.iters << ";  // vectors per thread\n"
         << (covers_row_exactly() ? ""
                                  : "  constexpr int FULL_ITERS = " + std::to_string(full_iters()) +
                                        ";  // sweeps wholly inside the row\n")
         << (peel() ? "  constexpr int REM_ITERS = " + std::to_string(remainder_iters()) +
                          ";  // a peeled row's remainder elements per thread\n"
                    : "")
         << "  const int lane = threadIdx.x % TPR;\n"
         << "  const int row_in_cta = threadIdx.x / TPR;\n";
    if (clustered_) {
      const std::size_t floats = lp_.reduction_phases.empty() ? 0 : max_state_floats_per_phase(lp_);
      if (global_exchange_) {
        codegen_exchange::emit_prologue(out_, c.ctas_per_row, floats, exchange_buffers());
      } else {
        codegen_sm90::emit_prologue(out_, c.ctas_per_row, floats, exchange_buffers());
      }
    }
    if (storage_ == RowStorage::shared || storage_ == RowStorage::staged || shared_partials_ ||
        column_stash_)
      out_ << "  extern __shared__ __align__(16) unsigned char tn_dynamic_smem[];\n";
    if (shared_partials_) {
      out_ << "  constexpr int THREADS = TPR * RPC;\n";
      if (runs_ > 1)
        out_ << "  constexpr int XW = " << runs_
             << ";  // column partial sums a shared-memory access moves\n";
      out_ << "  float* tn_xs = reinterpret_cast<float*>(tn_dynamic_smem + "
           << row_stash_bytes(lp_, spec_) << ");  // column partial sums, this thread's slots\n";
      emit_zero_shared_partials();
    }
    if (class_major_) {
      emit_class_major_range();
    } else if (peel() && persistent_) {
      emit_shift_of_first_row();
    }
    if (column_stash_ && !class_major_) emit_column_stash();
    if (staging()) emit_staging_pointers();
    if (storage_ == RowStorage::shared) {
      out_ << "  unsigned char* tn_stash_next = tn_dynamic_smem;\n";
      for (std::size_t i = 0; i < p_.slots.size(); ++i) {
        const ir::Slot& s = p_.slots[i];
        if (s.role != ir::Role::read || s.shape != Shape::tile) continue;
        const std::string t = slot_type(s);
        out_ << "  " << t << "* stash" << i << " = reinterpret_cast<" << t
             << "*>(tn_stash_next) + row_in_cta * " << geo_.chunks * c.vec << ";\n"
             << "  tn_stash_next += " << stash_bytes(geo_, spec_, slot_dtype(s)) << ";\n";
      }
    }
    if (geo_.warps_per_row > 1 && !lp_.reduction_phases.empty()) {
      out_ << "  constexpr int WARPS_PER_ROW = TPR / 32;\n"
           << "  __shared__ float tn_partials[2][RPC * WARPS_PER_ROW * "
           << max_state_floats_per_phase(lp_) << "];\n"
           << "  const int warp_in_row = lane / 32;\n"
           << "  int tn_parity = 0;  // alternates per phase, also across row blocks\n";
    }
    // Launch-uniform values.
    for (NodeId id : p_.reachable_nodes()) {
      const Node& n = g_.node(id);
      if (n.shape == Shape::scalar && !lp_.after_cross_row[id] && !is_cross_row(id))
        out_ << "  const float " << ref(id) << " = " << expression(id) << ";\n";
    }
    // Cross-row accumulators, one per thread for its share of the columns.
    for (NodeId r : lp_.cross_row_reductions) {
      if (!ir::varies_along_row(g_.node(r).shape))
        out_ << "  float xacc" << r << " = 0.0f;\n";
      else if (!shared_partials_)
        out_ << "  float xacc" << r << "[ITERS][VEC];\n  tn::zero2(xacc" << r << ");\n";
      if (ir::varies_along_row(g_.node(r).shape) && remainder_iters() > 0)
        out_ << "  float xacc" << r << "_rem[REM_ITERS] = {};  // the remainder's columns\n";
    }
  }

  // Copies this CTA's slice of each column parameter to shared memory, laid out by chunk
  // like the slice, where the passes read it (see column_stash_bytes).
  void emit_column_stash() {
    std::size_t offset = row_stash_bytes(lp_, spec_) + shared_partials_bytes(lp_, spec_);
    std::ostringstream copies;
    out_ << "  // Column parameters, read for every row: copied to shared memory once"
         << (class_major_ ? " per class.\n" : ".\n");
    for (std::size_t i = 0; i < p_.slots.size(); ++i) {
      const ir::Slot& s = p_.slots[i];
      if (!reads_column(s)) continue;
      const std::string t = slot_type(s);
      out_ << "  " << t << "* tn_col" << i << " = reinterpret_cast<" << t << "*>(tn_dynamic_smem + "
           << offset << ");\n";
      offset +=
          static_cast<std::size_t>(column_stash_columns(lp_, spec_)) * dtype_size(slot_dtype(s));
      const std::string fetched = std::string("tn::") +
                                  (peel() ? "gather_chunk<" : "fetch_chunk<") + t + ", VEC, N>(p_" +
                                  s.name + ", c0)";
      if (stash_words_) {
        copies << "      tn::store_stash_chunk_words<" << t << ", VEC, TPR>(tn_col" << i
               << ", it, k, " << fetched << ");\n";
      } else {
        copies << "      *reinterpret_cast<typename tn::RawVector<sizeof(" << t
               << ") * VEC>::type*>(" << column_stash_chunk(i) << ") = " << fetched << ";\n";
      }
    }
    if (stash_words_) {
      // At no shift, word-major: thread `lane` copies its chunk slot's aligned columns, and
      // thread 0 also the chunk after the sweep's last.
      const std::string slot =
          clustered_ ? "((it * CLUSTER + tn_rank) * TPR + k)" : "(it * TPR + k)";
      out_ << "  if (row_in_cta == 0) {\n    for (int it = 0; it < ITERS; ++it) {\n"
           << "      for (int k = lane; k <= TPR; k += TPR) {\n"
           << "      const int c0 = " << slot << " * VEC;\n"
           << copies.str() << "      }\n    }\n  }\n  __syncthreads();\n";
      return;
    }
    out_ << "  if (row_in_cta == 0) {\n    for (int it = 0; it < ITERS; ++it) {\n"
         << "      const int c0 = " << chunk_column() << ";\n"
         << (covers_row_exactly() ? ""
             : peel()             ? "      if (!" + chunk_in_row() + ") continue;\n"
                                  : "      if (!" + chunk_in_row() + ") break;\n")
         << copies.str() << "    }\n  }\n  __syncthreads();\n";
  }
  // Where this thread's chunk `it` of column parameter `slot` sits in its shared copy (at one
  // shift per thread; shift_per_row lays it out word-major, store_stash_chunk_words).
  static std::string column_stash_chunk(std::size_t slot) {
    return "tn_col" + std::to_string(slot) + " + (it * TPR + lane) * VEC";
  }

  // A persistent kernel with the rows in registers fetches the next row block's raw chunks
  // while it works on the current one, so its loads overlap the reductions and barriers:
  // into a second set of registers (prefetched), or into shared memory (staged).
  bool prefetching() const {
    return storage_ == RowStorage::prefetched || storage_ == RowStorage::pipelined;
  }
  bool staging() const { return storage_ == RowStorage::staged; }
  // Row input `slot` is copied ahead into shared memory (see stages_row_input).
  bool stages_slot(std::size_t slot) const { return stages_row_input(lp_, spec_, slot); }
  // Row input `slot` is fetched a row block ahead, into registers or shared memory; the others
  // (a staged kernel's KernelSpec::unstaged_row_inputs) are loaded at each row's start.
  bool fetches_slot_ahead(std::size_t slot) const {
    const ir::Slot& s = p_.slots[slot];
    return fetches_ahead(storage_) && is_row_input(s) && (!staging() || stages_slot(slot));
  }
  bool pipelined() const { return storage_ == RowStorage::pipelined; }

  // A cluster kernel that fetches row blocks ahead copies their row-scalar inputs (a backward's
  // saved statistics) with them, by cp.async into shared memory. Loaded at the row's start, they
  // are waited for at their first use (SASS, fifty-second session). Fetched into registers
  // instead, they pushed some kernels past their register budget; a copy into shared memory
  // holds none. Each thread copies its own values (it waits only for its own copies), into two
  // sets of slots that alternate by row block. Pipelined rows load them at the row's start, and
  // so do kernels of one CTA per row (fetched ahead into registers there, they cost LayerNorm's
  // bf16 backward at N = 128 six points on the H100, fifty-third session).
  // Where the first pass reads one (LayerNorm's mean; waiting for it at the row's start was 7-12%
  // of the H100's stall samples, fifty-ninth session), only bf16 rows, two or more per CTA, on
  // clusters of 16 copy them (sixtieth session, H100, the benchmark against loading them at the
  // row's start, points of the copy ceiling: bf16 LayerNorm N = 65536 +1.7 to +2.0, 131072 +1.5
  // to +2.2, without bias 32768 +2.7; with one row per CTA 262144 -5.8, on clusters of 8 LayerNorm
  // 8192 -5.4 and without bias 16384 -4.5 to -5.8; fp32 LayerNorm 65536 -3.2, without bias -5.0).
  bool fetches_row_scalar(std::size_t slot) const {
    const ir::Slot& s = p_.slots[slot];
    return clustered_ && fetches_ahead(storage_) && !pipelined() && s.role == ir::Role::read &&
           s.shape == Shape::row_scalar &&
           (!first_pass_reads_statistic_ ||
            (spec_.io_dtype == DType::bf16 && spec_.config.rows_per_cta >= 2 &&
             spec_.config.ctas_per_row == kMaxCtasPerRow));
  }
  bool fetches_any_row_scalar() const {
    for (std::size_t i = 0; i < p_.slots.size(); ++i)
      if (fetches_row_scalar(i)) return true;
    return false;
  }
  static std::string row_scalar_stage(std::size_t slot) {
    return "tn_row_scalar" + std::to_string(slot);
  }
  static std::string fetched_row_scalar(std::size_t slot, const std::string& suffix) {
    return "rs" + std::to_string(slot) + suffix;
  }
  // Declares the shared slots of the row-scalar inputs fetched ahead (two row blocks, one
  // value per thread) and which of the two the current row block reads.
  void declare_row_scalar_stages() {
    if (!fetches_any_row_scalar()) return;
    for (std::size_t i = 0; i < p_.slots.size(); ++i)
      if (fetches_row_scalar(i))
        out_ << "  __shared__ float " << row_scalar_stage(i) << "[2][TPR * RPC];\n";
    // The slots of the current row block; the first row block's fetch, before the row loop,
    // fills the other ones, slots 0.
    out_ << "  int tn_row_scalar_block = 1;\n";
  }
  // At a row block's start: its fetched row-scalar inputs, from shared memory (a staged kernel
  // has just waited for its copies, emit_preload).
  void emit_row_scalar_reads() {
    if (!fetches_any_row_scalar()) return;
    if (!staging()) out_ << "  tn::wait_async_copies();\n";
    for (std::size_t i = 0; i < p_.slots.size(); ++i)
      if (fetches_row_scalar(i))
        out_ << "  const float " << fetched_row_scalar(i, "_raw") << " = " << row_scalar_stage(i)
             << "[tn_row_scalar_block][threadIdx.x];\n";
  }

  // Where staged chunks land: this thread's chunk `it` of row input i is tn_stage<i>[it *
  // THREADS] (see stage_bytes), so a warp's copies fill contiguous 16-byte slots.
  void emit_staging_pointers() {
    std::size_t offset = row_stash_bytes(lp_, spec_) + shared_partials_bytes(lp_, spec_) +
                         column_stash_bytes(lp_, spec_);
    for (std::size_t i = 0; i < p_.slots.size(); ++i) {
      const ir::Slot& s = p_.slots[i];
      if (!stages_slot(i)) continue;
      out_ << "  " << raw_type(s) << "* tn_stage" << i << " = reinterpret_cast<" << raw_type(s)
           << "*>(tn_dynamic_smem + " << offset << ") + threadIdx.x;\n";
      offset += stage_bytes(spec_, slot_dtype(s));
    }
  }

  // The staged copies of the next row block start once this thread has used every chunk
  // it read back from its staging slots: a cp.async is not ordered after an earlier
  // ld.shared of the same address, but it is after an instruction that consumed the loaded
  // value. So the fetch follows the first pass that has read every row input (at the latest
  // the final pass), before that pass's reduction barrier.
  void note_pass_inputs(const std::vector<NodeId>& nodes, bool final_pass) {
    if (!staging() || fetched_this_row_) return;
    for (NodeId id : nodes) {
      const Node& n = g_.node(id);
      if (n.op == Op::load && n.shape == Shape::tile) inputs_read_.insert(n.index);
    }
    for (NodeId id : p_.reachable_nodes()) {
      const Node& n = g_.node(id);
      if (!final_pass && n.op == Op::load && n.shape == Shape::tile &&
          stages_slot(static_cast<std::size_t>(n.index)) && !inputs_read_.count(n.index))
        return;
    }
    emit_fetch("block + " + block_count_);
    fetched_this_row_ = true;
  }

  // Emits raw-chunk loads of row block `block_expr` into in<i>_next, or, staged, starts
  // their copies into shared memory.
  void emit_fetch(const std::string& block_expr) {
    if (class_major_) {
      out_ << "  {\n    const long long fetch_block = " << block_expr << ";\n"
           << "    const bool fetch_valid = fetch_block < tn_row_end;  // this class's rows only\n"
           << "    const long long fetch_row = fetch_valid ? fetch_block : 0;\n"
           << "    const long long fetch_safe = fetch_row;\n";
    } else {
      out_ << "  {\n    const long long fetch_row = (" << block_expr << ") * RPC + row_in_cta;\n"
           << "    const bool fetch_valid = fetch_row < rows;\n"
           << "    const long long fetch_safe = fetch_valid ? fetch_row : 0;\n";
    }
    // The fetched row's own shift, for the chunk columns and remainder below (in this block, it
    // hides the current row's). A class-major kernel fetches only rows of the current class.
    if (spec_.shift_per_row && !class_major_) emit_shift_of_row("fetch_row");
    for (std::size_t i = 0; i < p_.slots.size(); ++i) {
      const ir::Slot& s = p_.slots[i];
      if (!fetches_slot_ahead(i)) continue;
      const std::string t = slot_type(s);
      out_ << "    const " << t << "* fetch" << i << " = p_" << s.name << " + fetch_safe * stride_"
           << s.name << ";\n";
    }
    out_ << "#pragma unroll\n    for (int it = 0; it < ITERS; ++it) {\n"
         << "      const int c0 = " << chunk_column() << ";\n";
    for (std::size_t i = 0; i < p_.slots.size(); ++i) {
      const ir::Slot& s = p_.slots[i];
      if (!fetches_slot_ahead(i)) continue;
      const std::string t = slot_type(s);
      if (staging()) {
        out_ << "      tn::copy_chunk_async<" << t << ", VEC, N>(tn_stage" << i
             << " + it * TPR * RPC, fetch" << i << ", c0, fetch_valid);\n";
      } else {
        out_ << "      in" << i
             << "_next[it] = " << raw_chunk_load(s, "fetch" + std::to_string(i), "fetch_valid")
             << ";\n";
      }
    }
    out_ << "    }\n";
    emit_remainder_loads("_next", "fetch", "fetch_valid");
    // The fetched row block's slots are the ones the current row block does not read.
    for (std::size_t i = 0; i < p_.slots.size(); ++i)
      if (fetches_row_scalar(i))
        out_ << "    tn::copy_scalar_async(&" << row_scalar_stage(i)
             << "[tn_row_scalar_block ^ 1][threadIdx.x], p_" << p_.slots[i].name
             << ", fetch_row, fetch_valid);\n";
    out_ << "  }\n";
  }

  // A peeled row's remainder elements of every row input: in<i>_rem<to>[rk] from the row at
  // `row_prefix`<i>, zeros where `valid` is false.
  void emit_remainder_loads(const std::string& to, const std::string& row_prefix,
                            const std::string& valid) {
    if (remainder_iters() == 0) return;
    out_ << "#pragma unroll\n    for (int rk = 0; rk < REM_ITERS; ++rk) {\n";
    for (std::size_t i = 0; i < p_.slots.size(); ++i) {
      const ir::Slot& s = p_.slots[i];
      if (s.role != ir::Role::read || s.shape != Shape::tile) continue;
      const std::string t = slot_type(s);
      out_ << "      in" << i << "_rem" << to << "[rk] = " << valid << " ? tn::fetch_remainder<"
           << t << ", N>(" << row_prefix << i << ", tn_rem_col[rk]) : tn::from_float<" << t
           << ">(0.0f);\n";
    }
    out_ << "    }\n";
  }

  // Declares a raw chunk array `in<i><suffix>[ITERS]` per row input, and for peeled rows the
  // array of its remainder elements.
  void declare_raw_rows(const std::string& suffix) {
    for (std::size_t i = 0; i < p_.slots.size(); ++i) {
      const ir::Slot& s = p_.slots[i];
      if (s.role == ir::Role::read && s.shape == Shape::tile)
        out_ << "  " << raw_type(s) << " in" << i << suffix << "[ITERS];\n";
    }
    declare_remainder_rows(suffix);
  }
  // A peeled row's remainder elements of each row input, `in<i>_rem<suffix>[REM_ITERS]`, raw:
  // they stay in registers for the row's passes whatever the row storage.
  void declare_remainder_rows(const std::string& suffix) {
    if (remainder_iters() == 0) return;
    for (std::size_t i = 0; i < p_.slots.size(); ++i) {
      const ir::Slot& s = p_.slots[i];
      if (s.role == ir::Role::read && s.shape == Shape::tile)
        out_ << "  " << slot_type(s) << " in" << i << "_rem" << suffix << "[REM_ITERS];\n";
    }
  }

  // Every row block the row loops start is below `rows`, so a CTA of one row has no row past
  // the end. Declared constant, ptxas no longer predicates every load and unpacked element on
  // the test or keeps the row's address out of registers: H200, bf16, RMSNorm N = 32768 on
  // 1024 threads reading its row twice 3.46 -> 3.95 TB/s, LayerNorm 16384 +2 points, decode
  // LayerNorm 2.33 -> 2.19 us. Kernels that sum across rows (backwards), peeled kernels and
  // clusters keep the test: their schedules lost up to 9, 23 and 5 points without it.
  bool row_always_valid() const {
    return spec_.config.rows_per_cta == 1 && !peel() && !clustered_ && !plan_.needs_finish();
  }

  // The row this thread works on in row block `block_expr`, and the row pointers of the
  // tensors it does not fetch ahead (of the row outputs too, unless `outputs` is false).
  void emit_row_start(const std::string& block_expr, bool outputs = true) {
    if (class_major_) {
      out_ << "  const long long row = " << block_expr << ";  // (class-major: a row)\n"
           << "  constexpr bool row_valid = true;  // the class's rows end at the last row\n";
    } else if (row_always_valid()) {
      out_ << "  const long long row = " << block_expr << " * RPC + row_in_cta;\n"
           << "  constexpr bool row_valid = true;  // a CTA of one row runs only for rows < rows\n";
    } else {
      out_ << "  const long long row = " << block_expr << " * RPC + row_in_cta;\n"
           << "  const bool row_valid = row < rows;\n";
    }
    out_
        << "  const long long safe_row = row_valid ? row : 0;  // rows past the end load nothing\n";
    for (std::size_t i = 0; i < p_.slots.size(); ++i) {
      const ir::Slot& s = p_.slots[i];
      if (s.shape != Shape::tile || (s.role == ir::Role::read && fetches_slot_ahead(i)) ||
          (s.role == ir::Role::written && !outputs))
        continue;
      out_ << "  " << (s.role == ir::Role::read ? "const " : "") << slot_type(s) << "* row" << i
           << " = p_" << s.name << " + safe_row * stride_" << s.name << ";\n";
    }
    if (peel() && !persistent_) emit_shift();
    if (spec_.shift_per_row && !class_major_) emit_shift_of_row("row");
  }

  void emit_row_loop() {
    if (pipelined()) {
      emit_pipelined_row_loop();
      return;
    }
    if (prefetching()) declare_raw_rows("_next");
    declare_row_scalar_stages();
    if (class_major_) emit_class_segment_start();
    if (fetches_ahead(storage_)) emit_fetch(block_index_);
    if (fetches_any_row_scalar()) out_ << "  tn_row_scalar_block = 0;\n";
    if (spec_.early_columns) emit_early_columns();
    if (class_major_) {
      out_ << "  for (long long block = tn_row_begin; block < tn_row_end; block += tn_period) {\n";
    } else {
      out_ << "  for (long long block = " << block_index_
           << "; block * RPC < rows; block += " << block_count_ << ") {\n";
    }
    emit_row_start("block");
    fetched_this_row_ = false;
    pinned_this_row_ = false;
    inputs_read_.clear();
    if (rows_in_registers(storage_)) {
      emit_preload();
    } else {
      declare_remainder_rows("_raw");
      emit_remainder_loads("_raw", "row", "row_valid");
    }
    emit_row_scalars(-1);
    for (std::size_t phase = 0; phase < lp_.reduction_phases.size(); ++phase) {
      emit_pass(static_cast<int>(phase));
      emit_row_scalars(static_cast<int>(phase));
    }
    emit_pass(-1);
    emit_row_end();
    if (fetches_any_row_scalar()) out_ << "  tn_row_scalar_block ^= 1;\n";
    out_ << "  }\n";
    if (class_major_) emit_class_segment_end();
  }

  // KernelSpec::early_columns: each column parameter's chunks of this thread, fetched raw once
  // per CTA before the row loop, so that they are in flight with the first row's loads.
  void emit_early_columns() {
    for (std::size_t i = 0; i < p_.slots.size(); ++i) {
      const ir::Slot& s = p_.slots[i];
      if (!reads_column(s)) continue;
      const std::string t = slot_type(s);
      out_ << "  typename tn::RawVector<sizeof(" << t << ") * VEC>::type col" << i
           << "_early[ITERS];\n"
           << "#pragma unroll\n  for (int it = 0; it < ITERS; ++it)\n    col" << i
           << "_early[it] = tn::fetch_chunk<" << t << ", VEC, N>(p_" << s.name << ", "
           << chunk_column() << ");\n";
    }
  }

  // After a row's final pass: its share of the scalar sums across rows, and its statistics.
  void emit_row_end() {
    for (NodeId r : lp_.cross_row_reductions) {
      if (!ir::varies_along_row(g_.node(r).shape))
        out_ << "  if (row_valid) xacc" << r << " += " << ref(g_.node(r).args[0]) << ";\n";
    }
    emit_stats();
  }

  // Pipelined rows (a cluster, one reduction phase). Iteration b runs row block b's first
  // pass up to pushing its totals to the cluster, then finishes row block b - stride, whose
  // exchange has been in flight meanwhile, so the wait overlaps a pass. Row blocks move from
  // in_next (loads in flight) to in_fresh (being pushed) to in_held (being finished); one
  // iteration past the last row block finishes it. The third set of row registers costs
  // occupancy: it measured slower than prefetched in every forward and faster only in small-M
  // backwards (docs/performance.md, eighth session), so only the tuner picks it.
  void emit_pipelined_row_loop() {
    const std::vector<NodeId>& phase = lp_.reduction_phases.front();
    const std::vector<NodeId> reductions = accumulated(g_, phase);
    for (const char* suffix : {"_next", "_fresh", "_held"}) declare_raw_rows(suffix);
    emit_fetch(block_index_);
    out_ << "  for (long long block = " << block_index_ << "; (block - " << block_count_
         << ") * RPC < rows; block += " << block_count_ << ") {\n"
         << "  if (block * RPC < rows) {  // this row block, up to pushing its totals\n";
    emit_row_start("block", /*outputs=*/false);
    emit_raw_copy("_fresh", "_next");
    emit_fetch("block + " + block_count_);
    raw_suffix_ = "_fresh";
    emit_row_scalars(-1);
    defer_exchange_ = true;
    emit_pass(0);
    defer_exchange_ = false;
    out_ << "  }\n  if (block != " << block_index_
         << ") {  // the previous row block, once the cluster's totals are in\n";
    emit_row_start("(block - " + block_count_ + ")");
    raw_suffix_ = "_held";
    emit_row_scalars(-1);
    for (NodeId r : reductions)
      out_ << "  " << (is_comoment(r) ? "tn::Comoment" : "float") << " acc" << r << ";\n";
    emit_exchange_combine(cluster_reductions(reductions));
    emit_reduction_values(phase);
    emit_row_scalars(0);
    emit_pass(-1);
    emit_row_end();
    out_ << "  }\n";
    emit_raw_copy("_held", "_fresh");
    out_ << "  }\n";
    raw_suffix_ = "_raw";
  }

  // Copies every row input's raw chunks from in<i><from> to in<i><to>, and its remainder
  // elements.
  void emit_raw_copy(const std::string& to, const std::string& from) {
    for (const bool rem : {false, true}) {
      if (rem && remainder_iters() == 0) continue;
      const std::string k = rem ? "rk" : "it", suffix = rem ? "_rem" : "";
      out_ << "#pragma unroll\n  for (int " << k << " = 0; " << k << " < "
           << (rem ? "REM_ITERS" : "ITERS") << "; ++" << k << ") {\n";
      for (std::size_t i = 0; i < p_.slots.size(); ++i) {
        const ir::Slot& s = p_.slots[i];
        if (s.role == ir::Role::read && s.shape == Shape::tile)
          out_ << "    in" << i << suffix << to << "[" << k << "] = in" << i << suffix << from
               << "[" << k << "];\n";
      }
      out_ << "  }\n";
    }
  }

  // Peeled rows: how many elements this row starts past a VEC-aligned address. Every row
  // tensor has the same misalignment in a row (the runtime checks it), so the first one's
  // row pointer speaks for all of them.
  void emit_shift() {
    for (std::size_t i = 0; i < p_.slots.size(); ++i) {
      const ir::Slot& s = p_.slots[i];
      if (s.shape != Shape::tile) continue;
      out_ << "  const int tn_shift = static_cast<int>(reinterpret_cast<unsigned long long>(row"
           << i << ") / sizeof(" << slot_type(s) << ") % VEC);  // alignment peeling\n";
      emit_head();
      return;
    }
    throw ProgramError("codegen: program '" + p_.name + "' has no row tensor to peel");
  }

  // Peeled rows of a kernel that loops over row blocks: the runtime's grid advances each thread
  // by whole periods of the rows' misalignment (peeled_grid), so its first row's shift is that
  // of every row it handles, and its column partial sums and the rows it fetches ahead keep
  // the same columns. Computed from the address alone: that row may lie past the last.
  void emit_shift_of_first_row() {
    if (spec_.shift_per_row) return;  // each row's own: emit_row_start, emit_fetch
    emit_shift_of_row(block_index_ + " * RPC + row_in_cta", "the same in every row of this thread");
  }

  // Peeled rows at a shift of their own (shift_per_row): that of row `row_expr` (its address is
  // computed, not read, so it may lie past the last row). `why` ends the generated comment.
  void emit_shift_of_row(const std::string& row_expr, const std::string& why = "this row's") {
    for (std::size_t i = 0; i < p_.slots.size(); ++i) {
      const ir::Slot& s = p_.slots[i];
      if (s.shape != Shape::tile) continue;
      out_ << "  const int tn_shift = static_cast<int>((reinterpret_cast<unsigned long long>(p_"
           << s.name << ") / sizeof(" << slot_type(s) << ") + static_cast<unsigned long long>("
           << row_expr << ") * static_cast<unsigned long long>(stride_" << s.name
           << ")) % VEC);  // alignment peeling, " << why << "\n";
      emit_head();
      return;
    }
    throw ProgramError("codegen: program '" + p_.name + "' has no row tensor to peel");
  }

  // The columns before a peeled row's first VEC-aligned column, and the columns of this
  // thread's remainder elements (N where it has none): element k goes to the row's thread
  // TPR - 1 - k % TPR, on a cluster's last CTA, whose sweeps hold the fewest body chunks.
  void emit_head() {
    out_ << "  const int tn_head = (VEC - tn_shift) % VEC;\n";
    if (remainder_iters() == 0) return;
    out_ << "  int tn_rem_col[REM_ITERS];\n#pragma unroll\n"
         << "  for (int rk = 0; rk < REM_ITERS; ++rk)\n    tn_rem_col[rk] = "
         << (clustered_ ? "tn_rank != CLUSTER - 1 ? N : " : "")
         << "tn::remainder_column<VEC, N>(rk * TPR + TPR - 1 - lane, tn_head);\n";
  }

  // A kernel that sums across rows with each row at its own shift (class_major_): its row
  // block's range of the rows in class-major order, which it walks a class at a time
  // (emit_class_segment_start).
  void emit_class_major_range() {
    const std::string group = clustered_ ? "tn_cluster" : "static_cast<long long>(blockIdx.x)";
    const std::string groups = clustered_ ? "tn_clusters" : "static_cast<long long>(gridDim.x)";
    out_ << "  // Rows at every shift: this row block walks its own range of the rows in "
            "class-major\n"
         << "  // order (class c: the rows r with r % period == c, all at one shift), one class "
            "at a\n"
         << "  // time, and writes the column partial sums of each class to a partial row of "
            "their own.\n"
         << "  const int tn_period = tn::shift_period<VEC>(stride_" << first_row_slot().name
         << ");\n"
         << "  const long long tn_group = " << group << ";\n"
         << "  const long long tn_per_group = (rows + " << groups << " - 1) / " << groups << ";\n"
         << "  const long long tn_first = tn_group * tn_per_group;\n"
         << "  const long long tn_last = tn_first + tn_per_group < rows ? tn_first + tn_per_group "
            ": rows;\n"
         << "  const int tn_slots = static_cast<int>(tn_partial_rows / " << groups
         << ");  // partial rows per row block\n"
         << "  const int tn_class_low = tn_first < tn_last ? tn::row_class(tn_first, rows, "
            "tn_period) : 0;\n";
  }

  // Opens the loop over the classes of this row block's range (class_major_): the rows
  // [tn_row_begin, tn_row_end) of class tn_class in it, tn_period apart and all at its shift,
  // so the row loop inside keeps one shift, and a fetch ahead never crosses into the next
  // class. A row block with fewer classes than tn_slots writes zeros to the partial rows left
  // over (classes past its range, or past the period, hold none of its rows).
  void emit_class_segment_start() {
    out_ << "  for (int tn_slot = 0; tn_slot < tn_slots; ++tn_slot) {\n"
         << "  const int tn_class = tn_class_low + tn_slot;\n"
         << "  const long long tn_class_first = tn::class_first(tn_class, rows, tn_period);\n"
         << "  const long long tn_class_end = tn_class_first + tn::class_rows(tn_class, rows, "
            "tn_period);\n"
         << "  const long long tn_row_begin = tn_class + (tn_first > tn_class_first ? tn_first - "
            "tn_class_first : 0) * tn_period;\n"
         << "  const long long tn_row_end = tn_class + ((tn_last < tn_class_end ? tn_last : "
            "tn_class_end) - tn_class_first) * tn_period;\n";
    emit_shift_of_row("tn_class", "that of every row of this class");
    if (column_stash_) {
      out_ << "  __syncthreads();  // the last class's rows have read their column copies\n";
      emit_column_stash();
    }
    // The fetch before the row loop fills the row-scalar slots 0 again.
    if (fetches_any_row_scalar()) out_ << "  tn_row_scalar_block = 1;\n";
  }

  // Closes a class's segment: its column partial sums go to their partial row, and restart.
  void emit_class_segment_end() {
    // The segment's last fetch (of no row) may still be copying into the row-scalar slots.
    if (fetches_any_row_scalar()) out_ << "  tn::wait_async_copies();\n";
    emit_partials();
    emit_zero_partials();
    out_ << "  }\n";
  }

  // Zeros this thread's slots of the column partial sums in shared memory.
  void emit_zero_shared_partials() {
    out_ << "  for (int i = 0; i < " << plan_.column_partials << " * ITERS * VEC; ++i) "
         << (runs_ > 1 ? "tn_xs[(i / XW * THREADS + threadIdx.x) * XW + i % XW]"
                       : "tn_xs[i * THREADS + threadIdx.x]")
         << " = 0.0f;\n";
  }

  // Restarts the cross-row partial sums at zero.
  void emit_zero_partials() {
    if (shared_partials_) emit_zero_shared_partials();
    for (NodeId r : lp_.cross_row_reductions) {
      if (!ir::varies_along_row(g_.node(r).shape)) {
        out_ << "  xacc" << r << " = 0.0f;\n";
        continue;
      }
      if (!shared_partials_) out_ << "  tn::zero2(xacc" << r << ");\n";
      if (remainder_iters() > 0)
        out_ << "#pragma unroll\n  for (int rk = 0; rk < REM_ITERS; ++rk) xacc" << r
             << "_rem[rk] = 0.0f;\n";
    }
  }

  // The first row tensor, whose stride gives the period of the rows' shifts (the runtime
  // checks that every row tensor has the same misalignment in a row).
  const ir::Slot& first_row_slot() const {
    for (const ir::Slot& s : p_.slots)
      if (s.shape == Shape::tile) return s;
    throw ProgramError("codegen: program '" + p_.name + "' has no row tensor to peel");
  }

  // Rows in registers are held raw (16-bit types packed two to a register) and converted to
  // fp32 chunk by chunk in each pass: half the registers of fp32 copies, for one cheap
  // conversion per element and pass.
  std::string raw_type(const ir::Slot& s) const {
    return "typename tn::RawVector<sizeof(" + slot_type(s) + ") * VEC>::type";
  }

  void emit_preload() {
    declare_raw_rows("_raw");
    if (prefetching()) {
      emit_row_scalar_reads();
      emit_raw_copy("_raw", "_next");
      emit_fetch("block + " + block_count_);
      return;
    }
    // The row inputs not staged load from global memory; in a staged kernel (its
    // KernelSpec::unstaged_row_inputs) they are issued before the wait, in flight with the
    // staged copies, and load unconditionally: a row past the end reads row 0 (safe_row), whose
    // values reach nothing, since its outputs, column partial sums and statistics are all
    // guarded by row_valid; the conditional load left RMSNorm's fp32 slices 84-96 bytes of spills.
    const std::string load_guard = staging() ? "" : "row_valid";
    bool loads = false;
    for (std::size_t i = 0; i < p_.slots.size(); ++i) {
      const ir::Slot& s = p_.slots[i];
      if (!is_row_input(s) || stages_slot(i)) continue;
      if (!loads) {
        out_ << "#pragma unroll\n  for (int it = 0; it < ITERS; ++it) {\n"
             << "    const int c0 = " << chunk_column() << ";\n";
        loads = true;
      }
      out_ << "    in" << i
           << "_raw[it] = " << raw_chunk_load(s, "row" + std::to_string(i), load_guard) << ";\n";
    }
    if (loads) out_ << "  }\n";
    emit_remainder_loads("_raw", "row", "row_valid");
    if (!staging()) {
      emit_row_scalar_reads();
      return;
    }
    // The wait covers the row-scalar inputs copied with the staged chunks (a cluster backward's
    // saved statistics): read before it, they raced with their copies, which gave the saved
    // backwards on clusters wrong results that depended on timing (sixty-second session).
    out_ << "  tn::wait_async_copies();\n";
    emit_row_scalar_reads();
    out_ << "#pragma unroll\n  for (int it = 0; it < ITERS; ++it) {\n";
    for (std::size_t i = 0; i < p_.slots.size(); ++i) {
      if (stages_slot(i))
        out_ << "    in" << i << "_raw[it] = tn_stage" << i << "[it * TPR * RPC];\n";
    }
    out_ << "  }\n";
  }

  // The nodes `keep` accepts that computing `roots` needs, in topological order, not looking
  // below the nodes `stop` accepts.
  template <class Keep, class Stop>
  std::vector<NodeId> needed_nodes(const std::vector<NodeId>& roots, Keep keep, Stop stop) const {
    std::set<NodeId> needed;
    std::vector<NodeId> stack(roots.begin(), roots.end());
    while (!stack.empty()) {
      const NodeId id = stack.back();
      stack.pop_back();
      if (!keep(id) || !needed.insert(id).second || stop(id)) continue;
      const Node& n = g_.node(id);
      for (int i = 0; i < n.arity; ++i) stack.push_back(n.args[i]);
    }
    return {needed.begin(), needed.end()};
  }

  // The row-varying nodes needed to compute `roots`, in topological order.
  std::vector<NodeId> element_nodes(const std::vector<NodeId>& roots) const {
    return needed_nodes(
        roots, [this](NodeId id) { return ir::varies_along_row(g_.node(id).shape); },
        [](NodeId) { return false; });
  }

  // One pass over the row: phase >= 0 accumulates that reduction phase; -1 writes the row
  // outputs and accumulates the column partials of the cross-row reductions.
  void emit_pass(int phase) {
    const bool final_pass = phase < 0;
    std::vector<NodeId> roots;
    std::vector<NodeId> column_sums;
    const std::vector<NodeId> reductions =
        final_pass ? std::vector<NodeId>{} : accumulated(g_, lp_.reduction_phases[phase]);
    std::vector<std::size_t> outputs;
    if (final_pass) {
      for (std::size_t i = 0; i < p_.slots.size(); ++i) {
        const ir::Slot& s = p_.slots[i];
        if (s.role == ir::Role::written && s.shape == Shape::tile) {
          outputs.push_back(i);
          roots.push_back(s.value);
        }
      }
      if (!partials_before_barrier_) add_column_sums(column_sums, roots);
    } else {
      for (NodeId r : reductions) {
        for (int i = 0; i < g_.node(r).arity; ++i) roots.push_back(g_.node(r).args[i]);
      }
    }
    if (roots.empty()) return;
    const std::vector<NodeId> nodes = element_nodes(roots);
    out_ << "  // "
         << (final_pass ? std::string(partials_before_barrier_
                                          ? "Final pass: outputs."
                                          : "Final pass: outputs and column partials.")
                        : "Pass for reduction phase " + std::to_string(phase) + ".")
         << "\n";
    for (NodeId r : reductions) {
      const std::string id = std::to_string(r);
      if (is_comoment(r)) {
        out_ << "  tn::Comoment acc" << r << " = tn::comoment_identity();\n"
             << "  float " << lanes_declaration("cm" + id + "_sum_a")
             << (one_sum(r) ? "" : ", " + lanes_declaration("cm" + id + "_sum_b"))
             << (centers_on_warp_average() ? ", cm" + id + "_n = 0.0f" : "") << ";\n";
      } else if (accumulator_lanes() == 1) {
        out_ << "  float acc" << r << " = tn::identity<" << reduce_op_constant(g_.node(r).op)
             << ">();\n";
      } else {
        out_ << "  float acc" << r << "_lanes[" << accumulator_lanes() << "];\n  tn::fill_identity<"
             << reduce_op_constant(g_.node(r).op) << ">(acc" << r << "_lanes);\n";
      }
    }
    const bool unroll_fully =
        rows_in_registers(storage_) || geo_.iters <= 4 || !column_sums.empty();
    out_ << (unroll_fully ? "#pragma unroll\n" : "#pragma unroll 4\n");
    // A peeled row's final pass takes its first sweep last where it reads column parameters
    // from global memory: the middle sweeps' column chunks can neither start before the
    // parameter nor end past it, so they load with no branch, and ptxas issues all of their
    // loads together, ahead of the first sweep's (and the last one's) tested paths. (Not from a
    // shared copy: LayerNorm bf16 N = 12345, a persistent cluster kernel, measured 62.4 -> 56.2%
    // of the copy with the first sweep last, twenty-first session, run 1. Without it, the
    // twenty-fourth session's run 1 measured the one-CTA kernels of peeled rows in registers
    // 4-14 points slower: RMSNorm fp32 N = 8193 79.9% against 93.7%.)
    const bool first_last =
        peel() && final_pass && unroll_fully && geo_.iters > 1 && !column_stash_;
    // A forward's first pass over 16-bit rows that it loads itself takes the tested sweeps
    // (those that may run past the row) first: in the plain order, ptxas issues the tested
    // sweep's loads only after the untested sweeps' arithmetic, a second memory round trip per
    // row (SASS, NVRTC 13.0). Measured on the H200 (twenty-fifth session, runs 1 and 2),
    // LayerNorm bf16 N = 10000 79.2 -> 92.1% of the copy, 4097 74.5 -> 83.9%, RMSNorm bf16 2881
    // 79.1 -> 91.6%. Not for rows fetched ahead (their loads are already issued: RMSNorm bf16
    // 12345 lost 87.8 -> 83.0%), nor fp32 rows (no late load; LayerNorm fp32 8193 lost 90.3 ->
    // 86.8%), nor backwards (mixed: RMSNorm bf16 8193 76.7 -> 63.8%, recomputing 66.9 -> 77.0%).
    const bool tested_first =
        phase == 0 && !plan_.persistent && storage_ == RowStorage::registers &&
        dtype_size(spec_.io_dtype) == 2 && full_iters() < geo_.iters && geo_.iters > 1;
    const char* first_sweep = first_last ? "1" : tested_first ? "FULL_ITERS" : nullptr;
    if (first_sweep)
      out_ << "  for (int sweep = 0; sweep < ITERS; ++sweep) {\n    const int it = (sweep + "
           << first_sweep << ") % ITERS;\n";
    else
      out_ << "  for (int it = 0; it < ITERS; ++it) {\n";
    // Only column loads and row stores read c0, and where the chunks tile N, not the test.
    out_ << "    [[maybe_unused]] const int c0 = " << chunk_column() << ";\n"
         << "    if (" << chunk_in_row() << ") {\n";
    emit_chunk_loads(nodes, final_pass);
    for (std::size_t i : outputs) out_ << "      float out" << i << "[VEC];\n";
    if (runs_ > 1) {
      for (std::size_t k = 0; k < column_sums.size(); ++k)
        out_ << "      float xp" << k << "[XW];\n";
    }
    out_ << "#pragma unroll\n      for (int v = 0; v < VEC; ++v) {\n";
    emit_element_statements(nodes, reductions, column_sums, outputs, false);
    out_ << "      }\n";
    for (std::size_t i : outputs) {
      const std::string t = slot_type(slot(static_cast<int>(i)));
      out_ << "      if (row_valid) tn::store_chunk"
           << (peel() ? "_peeled<" + t + ", VEC>" : "<" + t + ", VEC, N>") << "(row" << i
           << ", c0, out" << i << ");\n";
    }
    out_ << "    }\n  }\n";
    if (remainder_iters() > 0) {
      emit_remainder_start(nodes);
      for (std::size_t i : outputs) out_ << "      float out" << i << "[1];\n";
      emit_element_statements(nodes, reductions, column_sums, outputs, true);
      for (std::size_t i : outputs) {
        out_ << "      if (row_valid) row" << i << "[c0] = tn::from_float<"
             << slot_type(slot(static_cast<int>(i))) << ">(out" << i << "[0]);\n";
      }
      out_ << "    }\n  }\n";
    }
    note_pass_inputs(nodes, final_pass);
    if (final_pass) return;
    emit_lane_folds(reductions);
    emit_centering_pass(reductions);
    emit_row_reduction(reductions, lp_.reduction_phases[phase],
                       phase + 1 == static_cast<int>(lp_.reduction_phases.size()));
  }

  // The cross-row reductions that sum columns (dW, dB; not a scalar's), into `column_sums`, and
  // the element values they add, into `roots`.
  void add_column_sums(std::vector<NodeId>& column_sums, std::vector<NodeId>& roots) const {
    for (NodeId r : lp_.cross_row_reductions) {
      if (!ir::varies_along_row(g_.node(r).shape)) continue;
      column_sums.push_back(r);
      roots.push_back(g_.node(r).args[0]);
    }
  }

  // The column partial sums of a row block, added while its warps wait to combine their last
  // totals (adds_partials_before_row_barrier): the final pass then only writes the outputs.
  void emit_column_partials_pass() {
    std::vector<NodeId> column_sums, roots;
    add_column_sums(column_sums, roots);
    const std::vector<NodeId> nodes = element_nodes(roots);
    out_ << "    // Column partials, while the other warps catch up.\n"
         << "#pragma unroll\n  for (int it = 0; it < ITERS; ++it) {\n"
         << "    [[maybe_unused]] const int c0 = " << chunk_column() << ";\n"
         << "    if (" << chunk_in_row() << ") {\n";
    emit_chunk_loads(nodes, false);
    if (runs_ > 1) {
      for (std::size_t k = 0; k < column_sums.size(); ++k)
        out_ << "      float xp" << k << "[XW];\n";
    }
    out_ << "#pragma unroll\n      for (int v = 0; v < VEC; ++v) {\n";
    emit_element_statements(nodes, {}, column_sums, {}, false);
    out_ << "      }\n    }\n  }\n";
  }

  // The statements of a pass for column c0 + v: the element values, the reductions' and the
  // column partial sums' accumulation, and the outputs. A remainder element (alignment
  // peeling) is one column (v is 0), inside the row, with column partial sums of its own.
  void emit_element_statements(const std::vector<NodeId>& nodes,
                               const std::vector<NodeId>& reductions,
                               const std::vector<NodeId>& column_sums,
                               const std::vector<std::size_t>& outputs, bool remainder) {
    if (remainder) out_ << "      {\n        constexpr int v = 0;\n";
    emit_element_values(nodes);
    const std::string mask = remainder ? "" : column_mask();
    for (NodeId r : reductions) {
      const Node& n = g_.node(r);
      if (is_comoment(r)) {
        // The first of a co-moment's two passes over this thread's columns: their sums.
        const std::string c = "cm" + std::to_string(r);
        out_ << "        " << mask << "{\n          " << lane(c + "_sum_a")
             << " += " << ref(n.args[0]) << ";\n"
             << (one_sum(r) ? ""
                            : "          " + lane(c + "_sum_b") + " += " + ref(n.args[1]) + ";\n")
             << (centers_on_warp_average() ? "          " + c + "_n += 1.0f;\n" : "")
             << "        }\n";
        continue;
      }
      const std::string acc = lane("acc" + std::to_string(r));
      out_ << "        " << mask << acc << " = tn::combine<" << reduce_op_constant(n.op) << ">("
           << acc << ", " << ref(n.args[0]) << ");\n";
    }
    for (std::size_t k = 0; k < column_sums.size(); ++k) {
      const NodeId r = column_sums[k];
      if (remainder) {
        out_ << "        if (row_valid) xacc" << r << "_rem[rk] += " << ref(g_.node(r).args[0])
             << ";\n";
      } else if (runs_ > 1) {
        // Added a run of XW columns at a time, so that only XW values wait for the add.
        out_ << "        xp" << k << "[v % XW] = " << ref(g_.node(r).args[0]) << ";\n"
             << "        if (row_valid && v % XW == XW - 1) tn::add_run<XW>(&"
             << shared_partial(std::to_string(k), "it", "v / XW * XW") << ", xp" << k << ");\n";
      } else if (shared_partials_) {
        out_ << "        if (row_valid) " << shared_partial(std::to_string(k), "it", "v")
             << " += " << ref(g_.node(r).args[0]) << ";\n";
      } else {
        out_ << "        if (row_valid) xacc" << r << "[it][v] += " << ref(g_.node(r).args[0])
             << ";\n";
      }
    }
    for (std::size_t i : outputs)
      out_ << "        out" << i << "[v] = " << ref(slot(static_cast<int>(i)).value) << ";\n";
    if (remainder) out_ << "      }\n";
  }

  // Opens the loop over this thread's remainder elements of a peeled row (see chunk_column)
  // and loads what `nodes` read at column c0: the row inputs from the registers that hold them
  // for the row, the column parameters from global memory (L1 keeps them across rows).
  void emit_remainder_start(const std::vector<NodeId>& nodes) {
    out_ << "#pragma unroll\n  for (int rk = 0; rk < REM_ITERS; ++rk) {  // the row's remainder\n"
         << "    const int c0 = tn_rem_col[rk];\n"
         << "    if (c0 < N) {\n";
    for (NodeId id : nodes) {
      const Node& n = g_.node(id);
      if (n.op != Op::load) continue;
      const std::string i = std::to_string(n.index);
      if (n.shape == Shape::tile) {
        out_ << "      const float in" << i << "[1] = {tn::to_float(in" << i << "_rem"
             << raw_suffix_ << "[rk])};\n";
      } else if (n.shape == Shape::column) {
        out_ << "      const float col" << i << "[1] = {tn::to_float(p_" << slot(n.index).name
             << "[c0])};\n";
      }
    }
  }

  // Reductions skip the columns of a chunk that lie outside the row, past N (a peeled row's
  // chunks are whole vectors where the chunk test holds).
  std::string column_mask() const {
    const bool ragged = spec_.n % spec_.config.vec != 0;
    return !peel() && ragged ? "if (it < FULL_ITERS || c0 + v < N) " : "";
  }

  // Whether column c0 + v of a chunk lies in the row, where column partial sums are written.
  std::string column_in_row() const {
    return peel() ? "(it < FULL_ITERS || c0 + VEC <= N)" : "c0 + v < N";
  }

  // The prelude's template flags for combining co-moment r's states: tn::Counts (equal when
  // every thread holds the same number of columns; positive when each holds some, which a
  // first sweep wholly inside the row gives every thread) and Same (a variance: one operand
  // twice).
  std::string comoment_counts() const {
    return covers_row_exactly() ? "tn::Counts::equal"
           : full_iters() > 0   ? "tn::Counts::positive"
                                : "tn::Counts::any";
  }
  std::string comoment_flags(NodeId r) const {
    return comoment_counts() + ", " + (is_variance(r) ? "true" : "false");
  }
  bool is_variance(NodeId r) const { return g_.node(r).args[0] == g_.node(r).args[1]; }
  // Where threads hold unequal numbers of columns (rows the sweeps do not tile, peeled rows)
  // and the row spans several warps, a co-moment is centered on each warp's own averages: the
  // warp's column count and sums add up with shuffles, so its lanes' states need no combining,
  // which took a division per shuffle step (LayerNorm bf16 N = 4097: 185 instructions per warp
  // and row for the combines, against 70 aligned, twenty-first session, run 3). The warps'
  // states (with their counts) combine once per row, and a variance sums its operand once.
  bool centers_on_warp_average() const { return !covers_row_exactly() && !row_in_one_warp(); }
  bool one_sum(NodeId r) const { return centers_on_warp_average() && is_variance(r); }
  // Whether one warp's shuffles reach every column of a row (no barrier, no cluster exchange).
  bool row_in_one_warp() const { return geo_.warps_per_row == 1 && !clustered_; }

  // The loads of a chunk that `nodes` need: row chunks and column-parameter chunks.
  // `last_read`: the pass is the row's last read of its inputs (the output pass).
  void emit_chunk_loads(const std::vector<NodeId>& nodes, bool last_read) {
    for (NodeId id : nodes) {
      const Node& n = g_.node(id);
      if (n.op == Op::load && n.shape == Shape::tile) emit_row_load(n.index, last_read);
      if (n.op == Op::load && n.shape == Shape::column) {
        const ir::Slot& s = slot(n.index);
        // Peeled rows shift the chunks per row, so a column parameter's chunk is generally not
        // aligned; load_column_chunk_peeled reads the aligned vectors around it.
        out_ << "      float col" << n.index << "[VEC];\n";
        if (column_stash_ && stash_words_) {
          out_ << "      tn::load_stashed_chunk_shifted<" << slot_type(s) << ", VEC, TPR>(tn_col"
               << n.index << ", it, lane, tn_head, col" << n.index << ");\n";
        } else if (column_stash_) {
          out_ << "      tn::load_stashed_chunk<" << slot_type(s) << ", VEC>("
               << column_stash_chunk(static_cast<std::size_t>(n.index)) << ", col" << n.index
               << ");\n";
        } else if (spec_.early_columns) {
          out_ << "      tn::unpack_chunk<" << slot_type(s) << ", VEC>(col" << n.index
               << "_early[it], col" << n.index << ");\n";
        } else {
          out_ << "      tn::" << (peel() ? "load_column_chunk_peeled<" : "load_chunk<")
               << slot_type(s) << ", VEC, N>(p_" << s.name << ", c0, col" << n.index
               << (peel() ? ", it > 0" : "") << ");\n";
        }
      }
    }
  }

  void emit_element_values(const std::vector<NodeId>& nodes) {
    for (NodeId id : nodes) {
      if (g_.node(id).op == Op::load) continue;
      out_ << "        const float " << ref(id) << " = " << expression(id) << ";\n";
    }
  }

  // A co-moment's second pass over this thread's columns: the centered products around the
  // thread's own averages (exact two-pass arithmetic, and no division per chunk). The row
  // then combines the threads' states (count, averages, centered sum).
  void emit_centering_pass(const std::vector<NodeId>& reductions) {
    std::vector<NodeId> comoments, roots;
    for (NodeId r : reductions) {
      if (!is_comoment(r)) continue;
      comoments.push_back(r);
      roots.push_back(g_.node(r).args[0]);
      roots.push_back(g_.node(r).args[1]);
    }
    if (comoments.empty()) return;
    const int width = std::min(spec_.config.threads_per_row, 32);
    for (NodeId r : comoments) {
      const std::string c = "cm" + std::to_string(r), acc = "acc" + std::to_string(r);
      // A variance's two averages are one: computed once where it has one sum, or in the
      // one-warp case.
      const bool one_average = one_sum(r) || (row_in_one_warp() && is_variance(r));
      const std::vector<std::string> sides =
          one_average ? std::vector<std::string>{"a"} : std::vector<std::string>{"a", "b"};
      if (row_in_one_warp()) {
        // Shuffles alone reach the whole row: center on the row's own averages (the two-pass
        // arithmetic, with no barrier between the passes), so no states need combining.
        out_ << "  " << acc << ".n = static_cast<float>(N);\n";
        for (const std::string& side : sides) {
          out_ << "  " << acc << ".avg_" << side << " = tn::group_allreduce<tn::kSum, " << width
               << ">(" << c << "_sum_" << side << ") * (1.0f / static_cast<float>(N));\n";
        }
      } else if (covers_row_exactly()) {
        out_ << "  " << acc << ".n = static_cast<float>(ITERS * VEC);\n";
        for (const std::string& side : sides) {
          out_ << "  " << acc << ".avg_" << side << " = " << c << "_sum_" << side
               << " * (1.0f / static_cast<float>(ITERS * VEC));\n";
        }
      } else {  // the warp's averages; a warp past the end of a short row holds no columns
        const bool empty_warps = full_iters() <= 0;
        out_ << "  " << acc << ".n = tn::group_allreduce<tn::kSum, " << width << ">(" << c
             << "_n);\n";
        for (const std::string& side : sides) {
          const std::string sum = "tn::group_allreduce<tn::kSum, " + std::to_string(width) + ">(" +
                                  c + "_sum_" + side + ")";
          out_ << "  " << acc << ".avg_" << side << " = "
               << (empty_warps ? acc + ".n > 0.0f ? __fdividef(" + sum + ", " + acc + ".n) : 0.0f"
                               : "__fdividef(" + sum + ", " + acc + ".n)")
               << ";\n";
        }
      }
      if (one_average) out_ << "  " << acc << ".avg_b = " << acc << ".avg_a;\n";
    }
    const std::vector<NodeId> nodes = element_nodes(roots);
    if (accumulator_lanes() > 1) {
      for (NodeId r : comoments)
        out_ << "  float " << lanes_declaration("acc" + std::to_string(r) + "_c") << ";\n";
    }
    const bool unroll_fully = rows_in_registers(storage_) || geo_.iters <= 4;
    out_ << (unroll_fully ? "#pragma unroll\n" : "#pragma unroll 4\n")
         << "  for (int it = 0; it < ITERS; ++it) {\n"
         << "    [[maybe_unused]] const int c0 = " << chunk_column() << ";\n"
         << "    if (" << chunk_in_row() << ") {\n";
    emit_chunk_loads(nodes, false);
    out_ << "#pragma unroll\n      for (int v = 0; v < VEC; ++v) {\n";
    emit_element_values(nodes);
    emit_centered_products(comoments, column_mask());
    out_ << "      }\n    }\n  }\n";
    if (remainder_iters() > 0) {
      emit_remainder_start(nodes);
      out_ << "      {\n        constexpr int v = 0;\n";
      emit_element_values(nodes);
      emit_centered_products(comoments, "");
      out_ << "      }\n    }\n  }\n";
    }
    if (accumulator_lanes() == 1) return;
    for (NodeId r : comoments) {
      const std::string acc = "acc" + std::to_string(r);
      out_ << "  " << acc << ".c = " << folded_lanes(acc + "_c", "tn::kSum") << ";\n";
    }
  }
  void emit_centered_products(const std::vector<NodeId>& comoments, const std::string& mask) {
    for (NodeId r : comoments) {
      const Node& n = g_.node(r);
      const std::string acc = "acc" + std::to_string(r);
      out_ << "        " << mask << (accumulator_lanes() == 1 ? acc + ".c" : lane(acc + "_c"))
           << " += (" << ref(n.args[0]) << " - " << acc << ".avg_a) * (" << ref(n.args[1]) << " - "
           << acc << ".avg_b);\n";
    }
  }

  void emit_row_load(int index, bool last_read) {
    const std::string i = std::to_string(index);
    const std::string t = slot_type(slot(index));
    if (rows_in_registers(storage_)) {
      out_ << "      float in" << i << "[VEC];\n      tn::unpack_chunk<" << t << ", VEC>(in" << i
           << raw_suffix_ << "[it], in" << i << ");\n";
      return;
    }
    out_ << "      float in" << i << "[VEC];\n";
    if (storage_ == RowStorage::shared && !stashed_[index] && peel()) {
      out_ << "      if (row_valid) tn::load_chunk_and_stash_peeled<" << t << ", VEC>(row" << i
           << ", stash" << i << " + " << stash_offset() << ", c0, in" << i
           << ");\n      else tn::zero(in" << i << ");\n";
      stashed_[index] = true;
    } else if (storage_ == RowStorage::shared && !stashed_[index]) {
      out_ << "      if (row_valid) tn::load_chunk_and_stash<" << t << ", VEC, N>(row" << i
           << ", stash" << i << ", c0, in" << i << ");\n      else tn::zero(in" << i << ");\n";
      stashed_[index] = true;
    } else if (storage_ == RowStorage::shared && peel()) {
      // The stash holds the body's chunks, at their slots.
      out_ << "      if (row_valid) tn::load_stashed_chunk<" << t << ", VEC>(stash" << i << " + "
           << stash_offset() << ", in" << i << ");\n      else tn::zero(in" << i << ");\n";
    } else if (storage_ == RowStorage::shared) {
      // Each thread reads back only the chunks it stashed itself, so no barrier is needed.
      out_ << "      if (row_valid) tn::load_chunk<" << t << ", VEC, N>(stash" << i << ", c0, in"
           << i << ");\n      else tn::zero(in" << i << ");\n";
    } else {
      // Global storage: rows re-read from global memory stay in L2 until their last read (see
      // the prelude).
      const std::string priority = last_read ? ", tn::kL2Release" : ", tn::kL2Keep";
      out_ << "      if (row_valid) tn::load_chunk"
           << (peel() ? "_peeled<" + t + ", VEC" : "<" + t + ", VEC, N") << priority << ">(row" << i
           << ", c0, in" << i << ");\n      else tn::zero(in" << i << ");\n";
    }
  }

  bool is_comoment(NodeId r) const { return g_.node(r).op == Op::comoment; }

  // A thread accumulates each reduction of a pass in this many lanes (column v into lane
  // v % lanes), so that its adds form short independent chains instead of one as long as its
  // columns. Only kernels that fetch their columns early (the latency-bound ones: few rows, or
  // few vectors per thread) and hold 32 columns or more per thread: there, LayerNorm bf16
  // N = 4096 at M = 1-256 measured 2.37 -> 2.30 us. Everywhere, the lanes moved other kernels
  // by -15 to +5 points of the copy (ptxas scheduled them differently; thirty-fifth session,
  // call 1), with no rule by storage or pass.
  int accumulator_lanes() const {
    const bool long_chain = geo_.iters * spec_.config.vec >= 32;
    return spec_.early_columns && long_chain ? std::min(spec_.config.vec, 4) : 1;
  }

  // Accumulator `base`'s lane for column v of a chunk (the accumulator itself with one lane).
  std::string lane(const std::string& base) const {
    return accumulator_lanes() == 1
               ? base
               : base + "_lanes[v % " + std::to_string(accumulator_lanes()) + "]";
  }

  // The declaration, zeroed, of sum `base` (its lanes).
  std::string lanes_declaration(const std::string& base) const {
    return accumulator_lanes() == 1
               ? base + " = 0.0f"
               : base + "_lanes[" + std::to_string(accumulator_lanes()) + "] = {}";
  }

  // Accumulator `base`'s lanes folded pairwise with `op` (a tn::ReduceOp constant).
  std::string folded_lanes(const std::string& base, const std::string& op) const {
    return "tn::fold_lanes<" + op + ", " + std::to_string(accumulator_lanes()) + ">(" + base +
           "_lanes)";
  }

  // Defines each accumulator of a pass from its lanes.
  void emit_lane_folds(const std::vector<NodeId>& reductions) {
    if (accumulator_lanes() == 1) return;
    for (NodeId r : reductions) {
      const std::string id = std::to_string(r);
      if (!is_comoment(r)) {
        out_ << "  float acc" << id << " = "
             << folded_lanes("acc" + id, reduce_op_constant(g_.node(r).op)) << ";\n";
        continue;
      }
      const std::string c = "cm" + id;
      out_ << "  const float " << c << "_sum_a = " << folded_lanes(c + "_sum_a", "tn::kSum")
           << ";\n";
      if (!one_sum(r))
        out_ << "  const float " << c << "_sum_b = " << folded_lanes(c + "_sum_b", "tn::kSum")
             << ";\n";
    }
  }

  // Combines the accumulators of a phase's `reductions` across the row, then defines every
  // reduction of the phase. A pipelined kernel's pass stops at pushing them to the cluster.
  void emit_row_reduction(const std::vector<NodeId>& reductions, const std::vector<NodeId>& phase,
                          bool last_phase) {
    const int width = std::min(spec_.config.threads_per_row, 32);
    if (clustered_) emit_load_pin(LoadPin::early);
    for (NodeId r : reductions) {
      if (is_comoment(r) && (row_in_one_warp() || centers_on_warp_average())) {
        out_ << "  acc" << r << ".c = tn::group_allreduce<tn::kSum, " << width << ">(acc" << r
             << ".c);\n";
      } else if (is_comoment(r)) {
        out_ << "  acc" << r << " = tn::comoment_allreduce<" << width << ", " << comoment_flags(r)
             << ">(acc" << r << ");\n";
      } else {
        out_ << "  acc" << r << " = tn::group_allreduce<" << reduce_op_constant(g_.node(r).op)
             << ", " << width << ">(acc" << r << ");\n";
      }
    }
    if (geo_.warps_per_row > 1) {
      const std::size_t k = max_state_floats_per_phase(lp_);
      // Two alternating buffers: one barrier per phase is enough, because the next write to
      // a buffer comes after the next phase's barrier, which every reader has passed.
      out_ << "  {\n    float* partials = tn_partials[tn_parity] + row_in_cta * WARPS_PER_ROW * "
           << k << ";\n    tn_parity ^= 1;\n    if (lane % 32 == 0) {\n";
      std::size_t offset = 0;
      for (NodeId r : reductions) {
        for (std::size_t f = 0; f < state_floats(g_.node(r)); ++f) {
          out_ << "      partials[warp_in_row * " << k << " + " << offset + f << "] = acc" << r
               << (is_comoment(r) ? std::string(".") + codegen_sm90::kComomentFields[f] : "")
               << ";\n";
        }
        offset += state_floats(g_.node(r));
      }
      out_ << "    }\n";
      if (partials_before_barrier_ && last_phase) emit_column_partials_pass();
      out_ << "    __syncthreads();\n";
      offset = 0;
      for (NodeId r : reductions) {
        out_ << "    acc" << r << " = "
             << (is_comoment(r)
                     ? "tn::combine_comoment_partials<WARPS_PER_ROW, " + comoment_flags(r) + ">"
                     : "tn::combine_partials<" + reduce_op_constant(g_.node(r).op) +
                           ", WARPS_PER_ROW>")
             << "(partials + " << offset << ", " << k << ");\n";
        offset += state_floats(g_.node(r));
      }
      out_ << "  }\n";
    }
    if (clustered_) {
      // A buffer is pushed into again once this CTA has read it (see emit_prologue); with
      // several one-warp row groups, nothing else orders the other groups' reads before it.
      if (geo_.warps_per_row == 1 && spec_.config.rows_per_cta > 1)
        out_ << "  __syncthreads();  // every row group has read its earlier exchanges\n";
      const auto exchanged = cluster_reductions(reductions);
      emit_load_pin(LoadPin::on);
      emit_exchange_push(exchanged);
      if (defer_exchange_) return;  // a pipelined kernel combines it one row block later
      emit_exchange_combine(exchanged);
    }
    emit_reduction_values(phase);
  }

  // Before a prefetched cluster kernel's first exchange of a row block: a branch never taken
  // (a row stride is never negative; the runtime checks) that stores the next row block's raw
  // chunks, so that ptxas issues their loads before the exchange. It moved them past the
  // exchange's wait otherwise, where the exchange hid no load: LayerNorm's recomputing backward
  // at bf16 N = 32768-262144, RMSNorm's at 131072-262144, some stacked saved-statistics
  // backwards on clusters of 16 (scripts/sass-order, fifty-second session). Backwards only:
  // the forwards issued their loads early already, and gained nothing from it (H100, within 0.3
  // points). Where: next_row_loads_pin (KernelConfig::load_pin, or the rule); `place` is where
  // the caller is: before the first exchange (on) or before the warps' sums are combined (early).
  void emit_load_pin(LoadPin place) {
    if (pinned_this_row_ || pin_place_ != place) return;
    pinned_this_row_ = true;
    std::string stride, output;
    for (const ir::Slot& s : p_.slots) {
      if (s.shape != Shape::tile) continue;
      if (s.role == ir::Role::read && stride.empty()) stride = "stride_" + s.name;
      if (s.role == ir::Role::written && output.empty()) output = "p_" + s.name;
    }
    if (stride.empty() || output.empty()) return;
    out_ << "  if (" << stride << " < 0) {  // never: keeps the next row block's loads here\n"
         << "    unsigned pin = 0;\n#pragma unroll\n    for (int it = 0; it < ITERS; ++it)\n"
         << "      pin ^= 0";
    for (std::size_t i = 0; i < p_.slots.size(); ++i) {
      const ir::Slot& s = p_.slots[i];
      if (s.role == ir::Role::read && s.shape == Shape::tile)
        out_ << " ^ tn::raw_bits(in" << i << "_next[it])";
    }
    out_ << ";\n    *reinterpret_cast<unsigned*>(" << output << ") = pin;\n  }\n";
  }

  // Exchange buffers: two, four where a pipelined kernel pushes one exchange ahead.
  int exchange_buffers() const { return pipelined() ? 4 : 2; }
  void emit_exchange_push(const std::vector<codegen_sm90::ClusterReduction>& exchanged) {
    if (global_exchange_) {
      codegen_exchange::emit_exchange_push(out_, exchanged, spec_.config.rows_per_cta);
    } else {
      codegen_sm90::emit_exchange_push(out_, exchanged, spec_.config.rows_per_cta);
    }
  }
  void emit_exchange_combine(const std::vector<codegen_sm90::ClusterReduction>& exchanged) {
    if (global_exchange_) {
      codegen_exchange::emit_exchange_combine(out_, exchanged, spec_.config.rows_per_cta);
    } else {
      codegen_sm90::emit_exchange_combine(out_, exchanged, spec_.config.rows_per_cta);
    }
  }

  std::vector<codegen_sm90::ClusterReduction> cluster_reductions(
      const std::vector<NodeId>& reductions) const {
    std::vector<codegen_sm90::ClusterReduction> combined;
    for (NodeId r : reductions) {
      combined.push_back({"acc" + std::to_string(r), reduce_op_constant(g_.node(r).op),
                          is_comoment(r), comoment_counts(), is_comoment(r) && is_variance(r)});
    }
    return combined;
  }

  // Defines every reduction of a phase from the row totals in the accumulators, including the
  // means its co-moments hold.
  void emit_reduction_values(const std::vector<NodeId>& phase) {
    for (NodeId r : phase) {
      if (auto source = mean_in_comoment(g_, r, phase)) {
        out_ << "  const float " << ref(r) << " = acc" << source->first << "." << source->second
             << (g_.node(r).op == Op::reduce_sum ? " * static_cast<float>(N)" : "") << ";\n";
        continue;
      }
      out_ << "  const float " << ref(r) << " = acc" << r
           << (g_.node(r).op == Op::reduce_mean ? " * (1.0f / static_cast<float>(N))" : "")
           << (is_comoment(r) ? ".c" : "") << ";\n";
    }
  }

  void emit_row_scalars(int phase) {
    for (NodeId id : p_.reachable_nodes()) {
      const Node& n = g_.node(id);
      if (n.shape == Shape::row_scalar && !ir::is_reduction(n.op) && lp_.phase_after[id] == phase) {
        out_ << "  const float " << ref(id) << " = " << expression(id) << ";\n";
      }
    }
  }

  void emit_stats() {
    bool any = false;
    for (const ir::Slot& s : p_.slots)
      any = any || (s.role == ir::Role::written && s.shape == Shape::row_scalar);
    if (!any) return;
    out_ << "  if (row_valid && " << first_of_row()
         << ") {  // a null statistic pointer means: not wanted\n";
    for (const ir::Slot& s : p_.slots) {
      if (s.role != ir::Role::written || s.shape != Shape::row_scalar) continue;
      out_ << "    if (p_" << s.name << ") p_" << s.name << "[row] = " << ref(s.value) << ";\n";
    }
    out_ << "  }\n";
  }

  // A thread's slot for column partial sum `k` of chunk `it`, column `v`. In runs of one, a
  // thread's slots are a CTA apart, so the lanes of a warp hit 32 banks. In runs of XW, each
  // thread owns runs of XW consecutive slots (one vector access each), and the threads' runs for
  // a column are adjacent, so a warp's vector accesses are conflict-free. `thread` picks another
  // thread's (or row group's) slot. (Runs of one are spelled without XW: ptxas allocated the
  // same kernel differently from the equivalent XW = 1 index arithmetic.)
  std::string shared_partial(const std::string& k, const std::string& it, const std::string& v,
                             const std::string& thread = "threadIdx.x") const {
    if (runs_ == 1)
      return "tn_xs[((" + k + " * ITERS + " + it + ") * VEC + " + v + ") * THREADS + " + thread +
             "]";
    return "tn_xs[(((" + k + " * ITERS + " + it + ") * (VEC / XW) + (" + v +
           ") / XW) * THREADS + " + thread + ") * XW + (" + v + ") % XW]";
  }

  // Each CTA leaves its partial sums in the workspace: combined over its row groups in shared
  // memory when that fits, else one partial row per row group; or folded across its cluster.
  void emit_partials() {
    if (plan_.column_partials + plan_.scalar_partials == 0) return;
    out_ << "  // Partial sums of the cross-row reductions.\n"
         << "  const long long tn_columns_floats = tn_partial_rows * N;\n";
    if (folds_) {
      emit_folded_partials();
      return;
    }
    if (combine_ && !shared_partials_ && plan_.column_partials > 0)
      out_ << "  __shared__ float tn_combine[RPC * N];\n";
    if (combine_ && plan_.scalar_partials > 0)
      out_ << "  __shared__ float tn_combine_scalar[RPC];\n";
    int column = 0, scalar = 0;
    for (NodeId r : lp_.cross_row_reductions) {
      const bool is_column = ir::varies_along_row(g_.node(r).shape);
      if (is_column) {
        out_ << "  {\n    float* dst = tn_workspace + " << column << " * tn_columns_floats;\n";
        if (shared_partials_) {
          // Row group 0 adds the other groups' slots for its columns, in order.
          const std::string group_slot =
              shared_partial(std::to_string(column), "it", "v", "g * TPR + lane");
          const std::string row_start = "static_cast<long long>(" + partial_block_ + ") * N";
          out_ << (spec_.config.rows_per_cta > 1 ? "    __syncthreads();\n" : "")
               << "    if (row_in_cta == 0) {\n"
               << "#pragma unroll\n      for (int it = 0; it < ITERS; ++it) {\n"
               << "        const int c0 = " << chunk_column() << ";\n";
          if (peel()) {
            out_ << "#pragma unroll\n        for (int v = 0; v < VEC; ++v) {\n"
                 << "          if (!(" << column_in_row() << ")) continue;\n"
                 << "          float total = 0.0f;\n"
                 << "          for (int g = 0; g < RPC; ++g) total += " << group_slot << ";\n"
                 << "          dst[" << row_start << " + c0 + v] = total;\n"
                 << "        }\n      }\n";
          } else {
            // The chunk's totals leave in vectors (store_totals): scalar stores of a thread's
            // adjacent columns touched eight times the sectors (Nsight Compute, LayerNorm bf16
            // N = 262144: 19% of the kernel's sectors).
            out_ << "        float totals[VEC];\n"
                 << "#pragma unroll\n        for (int v = 0; v < VEC; ++v) {\n"
                 << "          totals[v] = 0.0f;\n"
                 << "          for (int g = 0; g < RPC; ++g) totals[v] += " << group_slot << ";\n"
                 << "        }\n"
                 << "        "
                 << partial_row_store("dst + " + row_start, "totals",
                                      spec_.config.threads_per_row >= 32)
                 << "\n"
                 << "      }\n";
          }
          emit_remainder_partials(r, [&](const std::string& column) {
            return "dst[" + row_start + " + " + column + "]";
          });
          out_ << "    }\n";
        } else if (combine_) {
          out_ << "    __syncthreads();\n"
               << "#pragma unroll\n    for (int it = 0; it < ITERS; ++it) {\n"
               << "      const int c0 = " << chunk_column() << ";\n"
               << "#pragma unroll\n      for (int v = 0; v < VEC; ++v)\n"
               << "        if (" << column_in_row()
               << ") tn_combine[row_in_cta * N + c0 + v] = xacc" << r << "[it][v];\n    }\n";
          emit_remainder_partials(r, [](const std::string& column) {
            return "tn_combine[row_in_cta * N + " + column + "]";
          });
          out_ << "    __syncthreads();\n"
               << "    for (int c = threadIdx.x; c < N; c += TPR * RPC) {\n"
               << "      float total = 0.0f;\n"
               << "      for (int g = 0; g < RPC; ++g) total += tn_combine[g * N + c];\n"
               << "      dst[static_cast<long long>(" << partial_block_
               << ") * N + c] = total;\n    }\n";
        } else {
          out_ << "    float* mine = dst + (static_cast<long long>(" << partial_block_
               << ") * RPC + row_in_cta) * N;\n"
               << "#pragma unroll\n    for (int it = 0; it < ITERS; ++it) {\n"
               << "      const int c0 = " << chunk_column() << ";\n";
          if (peel()) {
            out_ << "#pragma unroll\n      for (int v = 0; v < VEC; ++v)\n"
                 << "        if (" << column_in_row() << ") mine[c0 + v] = xacc" << r
                 << "[it][v];\n    }\n";
          } else {
            out_ << "      " << partial_row_store("mine", "xacc" + std::to_string(r) + "[it]", true)
                 << "\n    }\n";
          }
          emit_remainder_partials(r,
                                  [](const std::string& column) { return "mine[" + column + "]"; });
        }
        out_ << "  }\n";
        ++column;
      } else {
        out_ << "  {\n    float* dst = tn_workspace + " << plan_.column_partials
             << " * tn_columns_floats + " << scalar << " * tn_partial_rows;\n";
        if (combine_) {
          out_ << "    __syncthreads();\n    if (lane == 0) tn_combine_scalar[row_in_cta] = xacc"
               << r << ";\n    __syncthreads();\n    if (threadIdx.x == 0"
               << (clustered_ ? " && tn_rank == 0" : "") << ") {\n      float total = 0.0f;\n"
               << "      for (int g = 0; g < RPC; ++g) total += tn_combine_scalar[g];\n"
               << "      dst[" << partial_block_ << "] = total;\n    }\n";
        } else {
          out_ << "    if (" << first_of_row() << ") dst[static_cast<long long>(" << partial_block_
               << ") * RPC + row_in_cta] = xacc" << r << ";\n";
        }
        out_ << "  }\n";
        ++scalar;
      }
    }
  }

  // The statement that writes a chunk's partial sums `totals` at column c0 of workspace row
  // `row`: in pairs of lanes that fill whole sectors (store_totals_paired) where every chunk lies
  // inside the row, chunks are 8 columns, lanes l and l ^ 1 hold neighbouring chunks of the same
  // row (two threads per row at least) and `whole_warps` (every lane of a warp runs it), else in
  // 16-byte stores where N allows (store_totals).
  std::string partial_row_store(const std::string& row, const std::string& totals,
                                bool whole_warps) const {
    if (covers_row_exactly() && spec_.config.vec == 8 && spec_.config.threads_per_row >= 2 &&
        whole_warps)
      return "tn::store_totals_paired<N>(" + row + ", c0, " + totals + ", lane & 1);";
    return "tn::store_totals<VEC, N>(" + row + ", c0, " + totals + ");";
  }

  // A peeled row's remainder columns of column partial sum r, into `target` (of a column).
  void emit_remainder_partials(NodeId r,
                               const std::function<std::string(const std::string&)>& target) {
    if (remainder_iters() == 0) return;
    out_ << "#pragma unroll\n    for (int rk = 0; rk < REM_ITERS; ++rk)\n"
         << "      if (tn_rem_col[rk] < N) " << target("tn_rem_col[rk]") << " = xacc" << r
         << "_rem[rk];\n";
  }

  // The fold (folds_partials): once every CTA of the cluster has its column partial sums in
  // shared memory, each CTA takes a share of the columns, adds them over the cluster's CTAs in
  // rank order and over the row groups (tn::fold_columns), and writes that share of the
  // cluster's partial row.
  void emit_folded_partials() {
    out_ << "  const unsigned tn_fold = tn::fold_ctas();\n"
         << "  const int tn_fold_rank = static_cast<int>(tn::fold_rank());\n"
         << "  const long long tn_partial_row = blockIdx.x / tn_fold;  // clusters are 1-D along "
            "x\n";
    if (shared_partials_) {
      // Item i is chunk (it, lane) = (i / TPR, i % TPR), columns i * VEC on: a warp reads 32
      // consecutive floats per column of the chunk, and each thread writes whole sectors.
      const int k = plan_.column_partials;
      out_ << "  tn::fold_sync();  // every CTA's partial sums are complete\n"
           << "  {\n    constexpr int CHUNKS = ITERS * TPR;  // per row group\n"
           << "    const int share = (CHUNKS + tn_fold - 1) / tn_fold;\n"
           << "    const int first = tn_fold_rank * share;\n"
           << "    tn::fold_columns<" << k << ", RPC, VEC>(\n"
           << "        first + threadIdx.x, min(CHUNKS, first + share), THREADS,\n"
           << "        [&](int i, int k, int g, int v) {\n"
           // Runs of one as a pointer sum: `&shared_partial(...)`, the same address, gave other
           // SASS for the folding backwards (LayerNorm's at N = 5120-16384, nvcc 13.0).
           << "          return "
           << (runs_ == 1 ? std::string("tn_xs + ((k * ITERS + i / TPR) * VEC + v) * THREADS + g * "
                                        "TPR + i % TPR")
                          : "&" + shared_partial("k", "i / TPR", "v", "g * TPR + i % TPR"))
           << ";\n"
           << "        },\n"
           << "        [&](int i, const float* totals) {\n";
      for (int column = 0; column < k; ++column) {
        out_ << "          tn::store_totals<VEC, N>(tn_workspace + " << column
             << " * tn_columns_floats + tn_partial_row * N, i * VEC, totals + " << column
             << " * VEC);\n";
      }
      out_ << "        });\n  }\n"
           << "  tn::fold_sync();  // no CTA exits while a peer reads its partial sums\n";
      return;
    }
    // Register sums go through shared memory one reduction at a time.
    out_ << "  __shared__ float tn_combine[RPC * N];\n"
         << "  const int tn_share = (N + tn_fold - 1) / tn_fold;\n";
    int column = 0;
    for (NodeId r : lp_.cross_row_reductions) {
      out_ << "  {\n#pragma unroll\n    for (int it = 0; it < ITERS; ++it) {\n"
           << "      const int c0 = " << chunk_column() << ";\n"
           << "#pragma unroll\n      for (int v = 0; v < VEC; ++v)\n"
           << "        if (" << column_in_row() << ") tn_combine[row_in_cta * N + c0 + v] = xacc"
           << r << "[it][v];\n    }\n"
           << "    tn::fold_sync();  // every CTA's partial sums are complete\n"
           << "    tn::fold_columns<1, RPC, 1>(\n"
           << "        tn_fold_rank * tn_share + threadIdx.x, min(N, (tn_fold_rank + 1) * "
              "tn_share), "
              "TPR * RPC,\n"
           << "        [&](int c, int, int g, int) { return tn_combine + g * N + c; },\n"
           << "        [&](int c, const float* totals) {\n"
           << "          tn_workspace[" << column
           << " * tn_columns_floats + tn_partial_row * N + c] = totals[0];\n        });\n"
           << "    tn::fold_sync();  // peers have read tn_combine before it changes or the CTA "
              "exits\n"
           << "  }\n";
      ++column;
    }
  }

  // ---- The finishing kernel: sums the partials in a fixed order, then computes and stores
  // the column and scalar outputs.
  void emit_finish(GeneratedFunction& f, const FinishShape& shape) {
    ParamList params{f.params};
    for (std::size_t i = 0; i < p_.slots.size(); ++i) {
      const ir::Slot& s = p_.slots[i];
      const int index = static_cast<int>(i);
      const bool read = s.role == ir::Role::read;
      if (s.shape == Shape::column)
        params.add(ParamKind::slot_pointer, index,
                   (read ? "const " : "") + slot_type(s) + "* __restrict__ p_" + s.name);
      if (s.shape == Shape::scalar && read)
        params.add(ParamKind::slot_value, index, "float sc_" + s.name);
      if (s.shape == Shape::scalar && !read)
        params.add(ParamKind::slot_pointer, index, "float* __restrict__ p_" + s.name);
    }
    params.add(ParamKind::workspace, -1, "const float* __restrict__ tn_workspace");
    params.add(ParamKind::partial_rows, -1, "long long tn_partial_rows");
    out_ << "\n";
    out_ << launch_bounds(f.threads_per_block, "");
    emit_signature(f.name, params);
    out_ << "  constexpr int N = " << spec_.n << ";\n"
         << "  constexpr int VEC = " << shape.vec << ", GROUPS = " << shape.groups
         << ", COLS = " << kFinishThreads / shape.groups << ";\n"
         << "  const int col_in_cta = threadIdx.x % COLS;\n"
         << "  const int group = threadIdx.x / COLS;\n"
         << "  const int c0 = (blockIdx.x * COLS + col_in_cta) * VEC;\n";
    // Every column sum in one loop, so that their loads are in flight together; then the
    // groups' sums meet in a fixed tree (a fixed order: the result is deterministic).
    std::vector<NodeId> columns, scalars;
    for (NodeId r : lp_.cross_row_reductions)
      (ir::varies_along_row(g_.node(r).shape) ? columns : scalars).push_back(r);
    // The workspace holds each column sum's partial rows, then the scalar sums' partials.
    if (columns.size() > 1 || !scalars.empty())
      out_ << "  const long long tn_columns_floats = tn_partial_rows * N;\n";
    auto sums = [](NodeId r) { return "s" + std::to_string(r); };
    if (!columns.empty()) {
      for (NodeId r : columns) out_ << "  float " << sums(r) << "[VEC] = {};\n";
      out_ << "  if (c0 < N) {\n#pragma unroll 4\n"
           << "    for (long long p = group; p < tn_partial_rows; p += GROUPS) {\n"
           << "      const float* row = tn_workspace + p * N + c0;\n";
      for (std::size_t i = 0; i < columns.size(); ++i) {
        out_ << "      tn::add_partials<VEC>(" << sums(columns[i]) << ", row"
             << (i > 0 ? " + " + std::to_string(i) + " * tn_columns_floats" : "") << ");\n";
      }
      out_ << "    }\n  }\n";
      if (shape.groups > 1) {
        // The groups of a warp meet by a butterfly of shuffles, then one barrier, and group 0
        // adds the warps' sums in order (both fixed orders: the result is deterministic). A
        // tree in shared memory took a barrier per level, eight for 256 groups.
        out_ << "  constexpr int WARP_GROUPS = COLS < 32 ? 32 / COLS : 1;  // groups in a warp\n"
             << "  constexpr int SHARED_GROUPS = GROUPS / WARP_GROUPS;\n"
             << "#pragma unroll\n  for (int offset = 16; offset >= COLS; offset /= 2) {\n";
        for (NodeId r : columns)
          out_ << "    tn::add_partials_of_lane<VEC>(" << sums(r) << ", offset);\n";
        out_ << "  }\n  if constexpr (SHARED_GROUPS > 1) {\n"
             << "    __shared__ __align__(16) float tn_sums[" << columns.size()
             << "][SHARED_GROUPS][COLS * VEC];\n"
             << "    if (group % WARP_GROUPS == 0) {\n";
        for (std::size_t i = 0; i < columns.size(); ++i) {
          out_ << "      tn::store_partials<VEC>(&tn_sums[" << i
               << "][group / WARP_GROUPS][col_in_cta * VEC], " << sums(columns[i]) << ");\n";
        }
        out_ << "    }\n    __syncthreads();\n"
             << "    if (group == 0) {\n#pragma unroll\n"
             << "      for (int g = 1; g < SHARED_GROUPS; ++g) {\n";
        for (std::size_t i = 0; i < columns.size(); ++i) {
          out_ << "        tn::add_partials<VEC>(" << sums(columns[i]) << ", &tn_sums[" << i
               << "][g][col_in_cta * VEC]);\n";
        }
        out_ << "      }\n    }\n  }\n";
      }
    }
    if (!scalars.empty()) out_ << "  __shared__ float tn_scalar[" << kFinishThreads << "];\n";
    for (std::size_t i = 0; i < scalars.size(); ++i) {
      const NodeId r = scalars[i];
      out_ << "  float f" << r << ";\n  {\n    const float* src = tn_workspace + "
           << plan_.column_partials << " * tn_columns_floats + " << i
           << " * tn_partial_rows;\n    float total = 0.0f;\n"
           << "    for (long long p = threadIdx.x; p < tn_partial_rows; p += " << kFinishThreads
           << ") total += src[p];\n"
           << "    tn_scalar[threadIdx.x] = total;\n    __syncthreads();\n"
           << "    for (int half = " << kFinishThreads / 2 << "; half > 0; half /= 2) {\n"
           << "      if (threadIdx.x < half) tn_scalar[threadIdx.x] += tn_scalar[threadIdx.x + "
              "half];\n"
           << "      __syncthreads();\n    }\n"
           << "    f" << r << " = tn_scalar[0];\n    __syncthreads();\n  }\n";
    }
    // The values the column and scalar outputs need, all constant across rows.
    std::vector<NodeId> roots;
    for (const ir::Slot& s : p_.slots) {
      if (s.role == ir::Role::written && (s.shape == Shape::column || s.shape == Shape::scalar))
        roots.push_back(s.value);
    }
    const std::vector<NodeId> needed = needed_nodes(
        roots, [](NodeId) { return true; }, [this](NodeId id) { return is_cross_row(id); });
    auto finish_ref = [&](NodeId id) { return "f" + std::to_string(id); };
    // Group 0 holds the column sums; each of its threads computes and stores VEC columns.
    out_ << "  if (group == 0 && c0 < N) {\n#pragma unroll\n"
         << "    for (int i = 0; i < VEC; ++i) {\n      const int c = c0 + i;\n";
    for (NodeId r : columns) out_ << "      const float f" << r << " = " << sums(r) << "[i];\n";
    for (NodeId id : needed) {
      if (is_cross_row(id)) continue;
      const Node& n = g_.node(id);
      if (n.op == Op::load && n.shape == Shape::column) {
        out_ << "      const float f" << id << " = tn::to_float(p_" << slot(n.index).name
             << "[c]);\n";
        continue;
      }
      if (n.op == Op::load) {
        out_ << "      const float f" << id << " = sc_" << slot(n.index).name << ";\n";
        continue;
      }
      if (ir::is_reduction(n.op))
        throw ProgramError("codegen: program '" + p_.name +
                           "' reduces along the row after a reduction across rows");
      const std::string text = expression(id, finish_ref);
      out_ << "      const float f" << id << " = " << text << ";\n";
    }
    for (const ir::Slot& s : p_.slots) {
      if (s.role != ir::Role::written) continue;
      if (s.shape == Shape::column)
        out_ << "      p_" << s.name << "[c] = tn::from_float<" << slot_type(s) << ">("
             << finish_ref(s.value) << ");\n";
      if (s.shape == Shape::scalar)
        out_ << "      if (blockIdx.x == 0 && threadIdx.x == 0 && i == 0) p_" << s.name
             << "[0] = " << finish_ref(s.value) << ";\n";
    }
    out_ << "    }\n  }\n}\n";
  }

  const LoweredProgram& lp_;
  const ir::Program& p_;
  const ir::Graph& g_;
  KernelSpec spec_;
  Geometry geo_;
  RowStorage storage_;
  KernelPlan plan_;
  bool combine_ = false;
  bool folds_ = false;       // column partial sums folded across a cluster (folds_partials)
  bool persistent_ = false;  // loops over row blocks (persistent_kernel)
  bool first_pass_reads_statistic_ = false;  // first_pass_reads_row_scalar_input
  bool shared_partials_ = false;             // column partial sums in shared memory, not registers
  int runs_ = 1;                  // their slots per shared-memory access (partial_run_width)
  bool column_stash_ = false;     // column parameters copied to shared memory once per CTA
  bool clustered_ = false;        // a cluster of CTAs splits each row
  bool global_exchange_ = false;  // a software cluster (KernelSpec::global_exchange)
  std::string block_index_;       // this CTA's (or cluster's) first row block
  std::string partial_block_;     // the row block whose partial row this CTA writes
  bool class_major_ = false;      // rows at every shift, in class-major order (shift_per_row)
  bool stash_words_ = false;      // the column copy at no shift, word-major (shift_per_row)
  std::string block_count_;       // the stride between its row blocks
  std::vector<bool> stashed_;
  // Staged rows: the row inputs the passes of this row block have read, and whether the next
  // block's copies have started.
  std::set<int> inputs_read_;
  bool fetched_this_row_ = false;
  LoadPin pin_place_ = LoadPin::off;  // next_row_loads_pin
  bool pinned_this_row_ = false;      // see emit_load_pin
  // The raw chunk arrays the passes unpack (in<i><suffix>): a pipelined kernel's two row
  // blocks use their own.
  std::string raw_suffix_ = "_raw";
  bool defer_exchange_ = false;           // a pass ends at pushing its totals to the cluster
  bool partials_before_barrier_ = false;  // adds_partials_before_row_barrier
  std::ostringstream out_;
};

}  // namespace

std::optional<std::string> config_problem(const LoweredProgram& program, const KernelSpec& spec) {
  const LoweredProgram& lp = configured(program, spec);
  const auto& c = spec.config;
  const std::size_t element_bytes =
      std::max(dtype_size(spec.io_dtype), dtype_size(spec.param_dtype));
  if (spec.n < 1) return "N must be at least 1, got " + std::to_string(spec.n);
  if (spec.n > (std::int64_t{1} << 30))
    return "N " + std::to_string(spec.n) + " is larger than 2^30";
  if (!is_power_of_two(c.threads_per_row) || c.threads_per_row > 1024) {
    return "threads_per_row must be a power of two in 1..1024, got " +
           std::to_string(c.threads_per_row);
  }
  if (!is_power_of_two(c.rows_per_cta))
    return "rows_per_cta must be a power of two, got " + std::to_string(c.rows_per_cta);
  const std::int64_t threads = std::int64_t{c.threads_per_row} * c.rows_per_cta;
  if (threads < 32 || threads > 1024) {
    return "threads per CTA (threads_per_row * rows_per_cta) must be in 32..1024, got " +
           std::to_string(threads);
  }
  if (!is_power_of_two(c.vec) || c.vec * element_bytes > 16) {
    return "vec must be a power of two with vec * element size <= 16 bytes, got " +
           std::to_string(c.vec);
  }
  if (c.row_storage < 0 || c.row_storage >= kRowStorageCount) {
    return "row_storage must be 0 (registers), 1 (shared), 2 (global), 3 (prefetched), 4 "
           "(staged) or 5 (pipelined), got " +
           std::to_string(c.row_storage);
  }
  const auto storage = static_cast<RowStorage>(c.row_storage);
  // Any size up to 16, the largest cluster sm_90 runs: slices of 3, 5, 7, ... CTAs tile rows
  // such as 43008 bf16 elements (7 x 256 threads x 3 vectors) that no power of two divides into
  // whole sweeps.
  if (c.ctas_per_row < 1 || c.ctas_per_row > kMaxCtasPerRow) {
    return "ctas_per_row must be in 1.." + std::to_string(kMaxCtasPerRow) + ", got " +
           std::to_string(c.ctas_per_row);
  }
  if (c.load_pin < 0 || c.load_pin >= kLoadPinCount) {
    return "load_pin must be 0 (rule), 1 (on), 2 (off) or 3 (early), got " +
           std::to_string(c.load_pin);
  }
  if (static_cast<LoadPin>(c.load_pin) != LoadPin::rule && !can_pin_next_row_loads(lp, spec)) {
    return "load_pin " + std::string(load_pin_name(static_cast<LoadPin>(c.load_pin))) +
           " chooses where a prefetched cluster kernel that sums across rows issues its next "
           "row block's loads: it needs row_storage prefetched, ctas_per_row > 1 and a program "
           "that sums across rows (got " +
           std::string(row_storage_name(storage)) + ", ctas_per_row " +
           std::to_string(c.ctas_per_row) +
           (plan_kernels(lp).persistent ? "" : ", a program that does not") + "); use 0 (rule)";
  }
  if (c.moments < 0 || c.moments >= kMomentFusionCount) {
    return "moments must be 0 (rule), 1 (on) or 2 (off), got " + std::to_string(c.moments);
  }
  if (c.column_fetch < 0 || c.column_fetch >= kColumnFetchCount) {
    return "column_fetch must be 0 (rule), 1 (early) or 2 (late), got " +
           std::to_string(c.column_fetch);
  }
  if (c.ctas_per_row > 1 && c.rows_per_cta != 1 && spec.peel_rows) {
    return "peel_rows (rows that start misaligned) on a cluster needs rows_per_cta 1 with "
           "ctas_per_row " +
           std::to_string(c.ctas_per_row) + ", got " + std::to_string(c.rows_per_cta) +
           ": a CTA's copy of the column parameters is laid out at one row's shift";
  }
  if (spec.peel_rows && storage == RowStorage::staged) {
    return "peel_rows (rows that start misaligned) cannot stage rows: cp.async copies aligned "
           "chunks, and a peeled row's head and tail are not";
  }
  if (spec.global_exchange && (c.ctas_per_row == 1 || !plan_kernels(lp).needs_finish())) {
    return "global_exchange (a software cluster) needs ctas_per_row > 1 and a program that sums "
           "across rows (its exchange lives in the workspace), got ctas_per_row " +
           std::to_string(c.ctas_per_row);
  }
  if (spec.unstaged_row_inputs != 0 &&
      (storage != RowStorage::staged || spec.unstaged_row_inputs < 0 ||
       spec.unstaged_row_inputs >= row_input_count(lp))) {
    return "unstaged_row_inputs (row inputs a staged kernel loads at each row's start) must be 0, "
           "or with row_storage staged in 1.." +
           std::to_string(row_input_count(lp) - 1) + " so that one row input is staged, got " +
           std::to_string(spec.unstaged_row_inputs) + " with row_storage " +
           std::string(row_storage_name(storage));
  }
  if (storage == RowStorage::pipelined &&
      (c.ctas_per_row == 1 || lp.reduction_phases.size() != 1)) {
    return "pipelined rows overlap a cluster's exchange with the next row block's first pass: "
           "they need ctas_per_row > 1 (got " +
           std::to_string(c.ctas_per_row) + ") and a program with one reduction phase (got " +
           std::to_string(lp.reduction_phases.size()) + ")";
  }
  if (storage == RowStorage::staged) {
    for (const ir::Slot& slot : lp.program.slots) {
      if (slot.role != ir::Role::read || slot.shape != ir::Shape::tile) continue;
      const std::size_t chunk_bytes =
          dtype_size(ir::storage_dtype(slot, spec.io_dtype, spec.param_dtype)) *
          static_cast<std::size_t>(c.vec);
      if (chunk_bytes < 4) {
        return "staged rows are copied by cp.async, which moves 4, 8 or 16 bytes: row input '" +
               slot.name + "' has chunks of " + std::to_string(chunk_bytes) + " bytes at vec " +
               std::to_string(c.vec);
      }
    }
  }
  if (spec.peel_rows && plan_kernels(lp).persistent && c.rows_per_cta != 1) {
    return "peel_rows (rows that start misaligned) in a program that sums across rows needs "
           "rows_per_cta 1, got " +
           std::to_string(c.rows_per_cta) +
           ": consecutive rows start at different misalignments, and a CTA's row groups add "
           "their column partial sums slot by slot";
  }
  if (spec.shift_per_row && !can_shift_per_row(lp, spec)) {
    return "shift_per_row (each peeled row at its own shift) needs peel_rows, rows_per_cta 1 "
           "and a persistent kernel: a forward in row_storage prefetched, or a program that sums "
           "across rows in row_storage prefetched or registers and no software cluster";
  }
  if (spec.early_columns && !can_fetch_columns_early(lp, spec)) {
    return "early_columns (column parameters fetched before the row loop) needs aligned rows "
           "(no peel_rows) of one CTA each (ctas_per_row 1) in row_storage registers, a kernel "
           "that is not persistent, and a program that reads a column parameter";
  }
  const Geometry g = geometry(spec);
  if ((c.ctas_per_row - 1) * std::int64_t{c.threads_per_row} >= g.chunks) {
    return "ctas_per_row " + std::to_string(c.ctas_per_row) + " is too many for " +
           std::to_string(g.chunks) + " vectors per row at threads_per_row " +
           std::to_string(c.threads_per_row) + ": the last CTA of a cluster would get no columns";
  }
  if (rows_in_registers(storage) && !rows_fit_registers(lp, spec)) {
    return "the row does not fit in registers (" + std::to_string(held_registers(lp, spec)) +
           " values per thread, budget " +
           std::to_string(std::max<std::int64_t>(register_budget(spec), 0)) + ")";
  }
  return std::nullopt;
}

// What 64K registers leave each thread of the CTA (at most 255), less 40 for the passes'
// working values.
std::int64_t register_budget(const KernelSpec& spec) {
  const std::int64_t threads = std::int64_t{spec.config.threads_per_row} * spec.config.rows_per_cta;
  return std::min<std::int64_t>(255, 65536 / threads) - 40;
}

// Each column partial sum kept in registers takes ITERS * VEC floats per thread.
std::int64_t column_partial_registers(const LoweredProgram& program, const KernelSpec& spec) {
  const LoweredProgram& lp = configured(program, spec);
  if (shared_partials_bytes(lp, spec) > 0) return 0;
  return geometry(spec).iters * spec.config.vec * plan_kernels(lp).column_partials;
}

bool rows_fit_registers(const LoweredProgram& program, const KernelSpec& spec) {
  const LoweredProgram& lp = configured(program, spec);
  return held_registers(lp, spec) <= register_budget(spec);
}

GeneratedKernel generate_cuda(const LoweredProgram& program, const KernelSpec& spec) {
  if (auto problem = config_problem(program, spec)) {
    throw ProgramError("cannot generate '" + program.program.name + "' with " +
                       spec.config.describe() + ": " + *problem);
  }
  return Emitter(configured(program, spec), spec).run();
}

}  // namespace tilenorm
