#include "tilenorm/dsl/codegen.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/reflect.hpp"

namespace tilenorm {

namespace codegen {
extern const char* const kDevicePrelude;  // generated from dsl/prelude at build time
}

std::string_view device_prelude() {
  return codegen::kDevicePrelude;
}

std::string_view row_storage_name(RowStorage storage) {
  switch (storage) {
    case RowStorage::registers:
      return "registers";
    case RowStorage::shared:
      return "shared";
    case RowStorage::global:
      return "global";
  }
  return "?";
}

bool KernelConfig::operator==(const KernelConfig& other) const {
  return reflect::equal(*this, other);
}
std::string KernelConfig::describe() const {
  return reflect::describe(*this);
}

std::string GeneratedKernel::full_source() const {
  return std::string(device_prelude()) + "\n" + source;
}

namespace {

using ir::Node;
using ir::NodeId;
using ir::Op;
using ir::Shape;

bool is_power_of_two(std::int64_t v) {
  return v > 0 && (v & (v - 1)) == 0;
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

const char* reduce_op_constant(Op op) {
  switch (op) {
    case Op::reduce_max:
      return "tn::kMax";
    case Op::reduce_min:
      return "tn::kMin";
    default:
      return "tn::kSum";
  }
}

struct Geometry {
  std::int64_t chunks;  // vectors per row
  std::int64_t iters;   // vectors per thread
  int warps_per_row;
};

Geometry geometry(const KernelSpec& spec) {
  const auto& c = spec.config;
  Geometry g{};
  g.chunks = (spec.n + c.vec - 1) / c.vec;
  g.iters = (g.chunks + c.threads_per_row - 1) / c.threads_per_row;
  g.warps_per_row = c.threads_per_row > 32 ? c.threads_per_row / 32 : 1;
  return g;
}

std::size_t max_reductions_per_phase(const LoweredProgram& lp) {
  std::size_t most = 0;
  for (const auto& phase : lp.reduction_phases) most = std::max(most, phase.size());
  return most;
}

}  // namespace

std::size_t dynamic_shared_memory_bytes(const LoweredProgram& lp, const KernelSpec& spec) {
  if (static_cast<RowStorage>(spec.config.row_storage) != RowStorage::shared) return 0;
  const Geometry g = geometry(spec);
  return static_cast<std::size_t>(g.chunks * spec.config.vec) * dtype_size(spec.io_dtype) *
         static_cast<std::size_t>(spec.config.rows_per_cta) * lp.program.row_inputs.size();
}

namespace {

class Emitter {
 public:
  Emitter(const LoweredProgram& lp, const KernelSpec& spec)
      : lp_(lp),
        p_(lp.program),
        g_(*lp.program.graph),
        spec_(spec),
        geo_(geometry(spec)),
        storage_(static_cast<RowStorage>(spec.config.row_storage)) {
    stashed_.assign(p_.row_inputs.size(), false);
  }

  GeneratedKernel run() {
    GeneratedKernel k;
    k.name = "tilenorm_" + p_.name;
    k.threads_per_block = spec_.config.threads_per_row * spec_.config.rows_per_cta;
    k.rows_per_cta = spec_.config.rows_per_cta;
    k.dynamic_shared_bytes = dynamic_shared_memory_bytes(lp_, spec_);
    emit_header(k);
    emit_prologue();
    if (storage_ == RowStorage::registers) emit_preload();
    for (std::size_t phase = 0; phase < lp_.reduction_phases.size(); ++phase) {
      emit_pass(static_cast<int>(phase));
      emit_row_scalars(static_cast<int>(phase));
    }
    emit_pass(-1);
    emit_stats();
    out_ << "}\n";
    k.source = out_.str();
    return k;
  }

 private:
  // ---- Names.
  std::string ref(NodeId id) const {
    const Node& n = g_.node(id);
    switch (n.op) {
      case Op::load_row:
        return "in" + std::to_string(n.index) + "[v]";
      case Op::load_column:
        return "col" + std::to_string(n.index) + "[v]";
      default:
        break;
    }
    switch (n.shape) {
      case Shape::scalar:
        return "s" + std::to_string(id);
      case Shape::row_scalar:
        return "r" + std::to_string(id);
      default:
        return "e" + std::to_string(id);
    }
  }

  std::string expression(NodeId id) const {
    const Node& n = g_.node(id);
    auto a = [&](int i) { return ref(n.args[i]); };
    switch (n.op) {
      case Op::scalar_param:
        return "sc_" + p_.scalars[n.index];
      case Op::constant:
        return float_literal(n.value);
      case Op::row_length:
        return "static_cast<float>(N)";
      case Op::neg:
        return "-" + a(0);
      case Op::abs:
        return "fabsf(" + a(0) + ")";
      case Op::sqrt:
        return "sqrtf(" + a(0) + ")";
      case Op::rsqrt:
        return "rsqrtf(" + a(0) + ")";
      case Op::exp:
        return "expf(" + a(0) + ")";
      case Op::log:
        return "logf(" + a(0) + ")";
      case Op::tanh:
        return "tanhf(" + a(0) + ")";
      case Op::sigmoid:
        return "tn::sigmoid(" + a(0) + ")";
      case Op::round_to:
        return std::string("tn::round_to<") + cuda_type(n.dtype) + ">(" + a(0) + ")";
      case Op::add:
        return a(0) + " + " + a(1);
      case Op::sub:
        return a(0) + " - " + a(1);
      case Op::mul:
        return a(0) + " * " + a(1);
      case Op::div:
        return a(0) + " / " + a(1);
      case Op::min:
        return "fminf(" + a(0) + ", " + a(1) + ")";
      case Op::max:
        return "fmaxf(" + a(0) + ", " + a(1) + ")";
      case Op::less:
        return "(" + a(0) + " < " + a(1) + " ? 1.0f : 0.0f)";
      case Op::less_equal:
        return "(" + a(0) + " <= " + a(1) + " ? 1.0f : 0.0f)";
      case Op::greater:
        return "(" + a(0) + " > " + a(1) + " ? 1.0f : 0.0f)";
      case Op::greater_equal:
        return "(" + a(0) + " >= " + a(1) + " ? 1.0f : 0.0f)";
      case Op::select:
        return "(" + a(0) + " != 0.0f ? " + a(1) + " : " + a(2) + ")";
      default:
        throw ProgramError("codegen: no expression for " + std::string(ir::op_name(n.op)));
    }
  }

  // ---- Sections.
  void emit_header(GeneratedKernel& k) {
    const auto& c = spec_.config;
    out_ << "// Generated by tilenorm (codegen version " << kCodegenVersion << ") from program '"
         << p_.name << "'.\n// io " << dtype_name(spec_.io_dtype) << ", params "
         << dtype_name(spec_.param_dtype) << ", N " << spec_.n << ", " << c.describe() << " ("
         << row_storage_name(storage_) << ")\n";
    out_ << "extern \"C\" __global__ void __launch_bounds__(" << k.threads_per_block << ")\n"
         << k.name << "(";
    std::vector<std::string> params;
    auto add = [&](ParamKind kind, int slot, std::string decl) {
      k.params.push_back({kind, slot});
      params.push_back(std::move(decl));
    };
    for (std::size_t i = 0; i < p_.row_inputs.size(); ++i) {
      const auto& name = p_.row_inputs[i];
      add(ParamKind::row_input, static_cast<int>(i),
          std::string("const ") + cuda_type(spec_.io_dtype) + "* __restrict__ in_" + name);
      add(ParamKind::row_input_stride, static_cast<int>(i), "long long stride_" + name);
    }
    for (std::size_t i = 0; i < p_.row_outputs.size(); ++i) {
      const auto& name = p_.row_outputs[i].name;
      add(ParamKind::row_output, static_cast<int>(i),
          std::string(cuda_type(spec_.io_dtype)) + "* __restrict__ out_" + name);
      add(ParamKind::row_output_stride, static_cast<int>(i), "long long stride_" + name);
    }
    for (std::size_t i = 0; i < p_.columns.size(); ++i) {
      add(ParamKind::column, static_cast<int>(i),
          std::string("const ") + cuda_type(spec_.param_dtype) + "* __restrict__ col_" +
              p_.columns[i]);
    }
    for (std::size_t i = 0; i < p_.row_stats.size(); ++i) {
      add(ParamKind::row_stat, static_cast<int>(i),
          "float* __restrict__ stat_" + p_.row_stats[i].name);
    }
    for (std::size_t i = 0; i < p_.scalars.size(); ++i) {
      add(ParamKind::scalar, static_cast<int>(i), "float sc_" + p_.scalars[i]);
    }
    add(ParamKind::rows, 0, "long long rows");
    for (std::size_t i = 0; i < params.size(); ++i) out_ << (i ? ",\n    " : "\n    ") << params[i];
    out_ << ") {\n";
  }

  void emit_prologue() {
    const auto& c = spec_.config;
    out_
        << "  typedef " << cuda_type(spec_.io_dtype) << " T;\n"
        << "  typedef " << cuda_type(spec_.param_dtype) << " P;\n"
        << "  constexpr int N = " << spec_.n << ";\n"
        << "  constexpr int VEC = " << c.vec << ";\n"
        << "  constexpr int TPR = " << c.threads_per_row << ";  // threads per row\n"
        << "  constexpr int RPC = " << c.rows_per_cta << ";  // rows per CTA\n"
        << "  constexpr int ITERS = " << geo_.iters << ";  // vectors per thread\n"
        << "  const int lane = threadIdx.x % TPR;\n"
        << "  const int row_in_cta = threadIdx.x / TPR;\n"
        << "  const long long row = static_cast<long long>(blockIdx.x) * RPC + row_in_cta;\n"
        << "  const bool row_valid = row < rows;\n"
        << "  const long long safe_row = row_valid ? row : 0;  // rows past the end load nothing\n";
    for (std::size_t i = 0; i < p_.row_inputs.size(); ++i) {
      const auto& name = p_.row_inputs[i];
      out_ << "  const T* row_in" << i << " = in_" << name << " + safe_row * stride_" << name
           << ";\n";
    }
    for (std::size_t i = 0; i < p_.row_outputs.size(); ++i) {
      const auto& name = p_.row_outputs[i].name;
      out_ << "  T* row_out" << i << " = out_" << name << " + safe_row * stride_" << name << ";\n";
    }
    if (storage_ == RowStorage::shared) {
      out_ << "  extern __shared__ __align__(16) unsigned char tn_dynamic_smem[];\n";
      for (std::size_t i = 0; i < p_.row_inputs.size(); ++i) {
        out_ << "  T* stash" << i << " = reinterpret_cast<T*>(tn_dynamic_smem) + (" << i
             << " * RPC + row_in_cta) * " << geo_.chunks * c.vec << ";\n";
      }
    }
    if (geo_.warps_per_row > 1 && !lp_.reduction_phases.empty()) {
      out_ << "  constexpr int WARPS_PER_ROW = TPR / 32;\n"
           << "  __shared__ float tn_partials[2][RPC * WARPS_PER_ROW * "
           << max_reductions_per_phase(lp_) << "];\n"
           << "  const int warp_in_row = lane / 32;\n";
    }
    // Launch-uniform values.
    for (NodeId id : p_.reachable_nodes()) {
      const Node& n = g_.node(id);
      if (n.shape == Shape::scalar)
        out_ << "  const float " << ref(id) << " = " << expression(id) << ";\n";
    }
  }

  void emit_preload() {
    for (std::size_t i = 0; i < p_.row_inputs.size(); ++i) {
      out_ << "  float in" << i << "_regs[ITERS][VEC];\n";
    }
    out_ << "#pragma unroll\n  for (int it = 0; it < ITERS; ++it) {\n"
         << "    const int c0 = (it * TPR + lane) * VEC;\n";
    for (std::size_t i = 0; i < p_.row_inputs.size(); ++i) {
      out_ << "    if (row_valid && c0 < N) tn::load_chunk<T, VEC, N>(row_in" << i << ", c0, in"
           << i << "_regs[it]);\n    else tn::zero(in" << i << "_regs[it]);\n";
    }
    out_ << "  }\n";
  }

  // The row-varying nodes needed to compute `roots`, in topological order.
  std::vector<NodeId> element_nodes(const std::vector<NodeId>& roots) const {
    std::set<NodeId> needed;
    std::vector<NodeId> stack(roots.begin(), roots.end());
    while (!stack.empty()) {
      const NodeId id = stack.back();
      stack.pop_back();
      if (!ir::varies_along_row(g_.node(id).shape) || !needed.insert(id).second) continue;
      const Node& n = g_.node(id);
      for (int i = 0; i < n.arity; ++i) stack.push_back(n.args[i]);
    }
    return {needed.begin(), needed.end()};
  }

  // One pass over the row: phase >= 0 accumulates that reduction phase, -1 writes the outputs.
  void emit_pass(int phase) {
    const bool final_pass = phase < 0;
    std::vector<NodeId> roots;
    const std::vector<NodeId> reductions =
        final_pass ? std::vector<NodeId>{} : lp_.reduction_phases[phase];
    if (final_pass) {
      for (const auto& o : p_.row_outputs) roots.push_back(o.value);
    } else {
      for (NodeId r : reductions) roots.push_back(g_.node(r).args[0]);
    }
    const std::vector<NodeId> nodes = element_nodes(roots);
    out_ << "  // "
         << (final_pass ? std::string("Final pass: compute and store the outputs.")
                        : "Pass for reduction phase " + std::to_string(phase) + ".")
         << "\n";
    for (NodeId r : reductions) {
      out_ << "  float acc" << r << " = tn::identity<" << reduce_op_constant(g_.node(r).op)
           << ">();\n";
    }
    const bool unroll_fully = storage_ == RowStorage::registers || geo_.iters <= 4;
    out_ << (unroll_fully ? "#pragma unroll\n" : "#pragma unroll 4\n");
    out_ << "  for (int it = 0; it < ITERS; ++it) {\n"
         << "    const int c0 = (it * TPR + lane) * VEC;\n"
         << "    if (c0 < N) {\n";
    for (NodeId id : nodes) {
      const Node& n = g_.node(id);
      if (n.op == Op::load_row) emit_row_load(n.index);
      if (n.op == Op::load_column) {
        out_ << "      float col" << n.index << "[VEC];\n"
             << "      tn::load_chunk<P, VEC, N>(col_" << p_.columns[n.index] << ", c0, col"
             << n.index << ");\n";
      }
    }
    if (final_pass) {
      for (std::size_t i = 0; i < p_.row_outputs.size(); ++i)
        out_ << "      float out" << i << "[VEC];\n";
    }
    out_ << "#pragma unroll\n      for (int v = 0; v < VEC; ++v) {\n";
    for (NodeId id : nodes) {
      const Node& n = g_.node(id);
      if (n.op == Op::load_row || n.op == Op::load_column) continue;
      out_ << "        const float " << ref(id) << " = " << expression(id) << ";\n";
    }
    const bool ragged = spec_.n % spec_.config.vec != 0;
    for (NodeId r : reductions) {
      const Node& n = g_.node(r);
      out_ << "        " << (ragged ? "if (c0 + v < N) " : "") << "acc" << r << " = tn::combine<"
           << reduce_op_constant(n.op) << ">(acc" << r << ", " << ref(n.args[0]) << ");\n";
    }
    const std::size_t outputs = final_pass ? p_.row_outputs.size() : 0;
    for (std::size_t i = 0; i < outputs; ++i) {
      out_ << "        out" << i << "[v] = " << ref(p_.row_outputs[i].value) << ";\n";
    }
    out_ << "      }\n";
    for (std::size_t i = 0; i < outputs; ++i) {
      out_ << "      if (row_valid) tn::store_chunk<T, VEC, N>(row_out" << i << ", c0, out" << i
           << ");\n";
    }
    out_ << "    }\n  }\n";
    if (!final_pass) emit_row_reduction(phase, reductions);
  }

  void emit_row_load(int input) {
    const std::string i = std::to_string(input);
    if (storage_ == RowStorage::registers) {
      out_ << "      const float (&in" << i << ")[VEC] = in" << i << "_regs[it];\n";
      return;
    }
    out_ << "      float in" << i << "[VEC];\n";
    if (storage_ == RowStorage::shared && !stashed_[input]) {
      out_ << "      if (row_valid) tn::load_chunk_and_stash<T, VEC, N>(row_in" << i << ", stash"
           << i << ", c0, in" << i << ");\n      else tn::zero(in" << i << ");\n";
      stashed_[input] = true;
    } else if (storage_ == RowStorage::shared) {
      // Each thread reads back only the chunks it stashed itself, so no barrier is needed.
      out_ << "      if (row_valid) tn::load_chunk<T, VEC, N>(stash" << i << ", c0, in" << i
           << ");\n"
           << "      else tn::zero(in" << i << ");\n";
    } else {
      out_ << "      if (row_valid) tn::load_chunk<T, VEC, N>(row_in" << i << ", c0, in" << i
           << ");\n"
           << "      else tn::zero(in" << i << ");\n";
    }
  }

  void emit_row_reduction(int phase, const std::vector<NodeId>& reductions) {
    const int width = std::min(spec_.config.threads_per_row, 32);
    for (NodeId r : reductions) {
      out_ << "  acc" << r << " = tn::group_allreduce<" << reduce_op_constant(g_.node(r).op) << ", "
           << width << ">(acc" << r << ");\n";
    }
    if (geo_.warps_per_row > 1) {
      const std::size_t k = max_reductions_per_phase(lp_);
      // Two alternating buffers: one barrier per phase is enough, because the next write to
      // a buffer comes after the next phase's barrier, which every reader has passed.
      out_ << "  {\n    float* partials = tn_partials[" << phase % 2
           << "] + row_in_cta * WARPS_PER_ROW * " << k << ";\n    if (lane % 32 == 0) {\n";
      for (std::size_t j = 0; j < reductions.size(); ++j) {
        out_ << "      partials[warp_in_row * " << k << " + " << j << "] = acc" << reductions[j]
             << ";\n";
      }
      out_ << "    }\n    __syncthreads();\n";
      for (std::size_t j = 0; j < reductions.size(); ++j) {
        out_ << "    acc" << reductions[j] << " = tn::combine_partials<"
             << reduce_op_constant(g_.node(reductions[j]).op) << ", WARPS_PER_ROW>(partials + " << j
             << ", " << k << ");\n";
      }
      out_ << "  }\n";
    }
    for (NodeId r : reductions) {
      out_ << "  const float " << ref(r) << " = acc" << r
           << (g_.node(r).op == Op::reduce_mean ? " * (1.0f / static_cast<float>(N))" : "")
           << ";\n";
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
    if (p_.row_stats.empty()) return;
    out_ << "  if (row_valid && lane == 0) {  // a null statistic pointer means: not wanted\n";
    for (std::size_t i = 0; i < p_.row_stats.size(); ++i) {
      const std::string& name = p_.row_stats[i].name;
      out_ << "    if (stat_" << name << ") stat_" << name
           << "[row] = " << ref(p_.row_stats[i].value) << ";\n";
    }
    out_ << "  }\n";
  }

  const LoweredProgram& lp_;
  const ir::Program& p_;
  const ir::Graph& g_;
  KernelSpec spec_;
  Geometry geo_;
  RowStorage storage_;
  std::vector<bool> stashed_;
  std::ostringstream out_;
};

}  // namespace

std::optional<std::string> config_problem(const LoweredProgram& lp, const KernelSpec& spec) {
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
  if (c.row_storage < 0 || c.row_storage > 2) {
    return "row_storage must be 0 (registers), 1 (shared) or 2 (global), got " +
           std::to_string(c.row_storage);
  }
  const Geometry g = geometry(spec);
  if (static_cast<RowStorage>(c.row_storage) == RowStorage::registers) {
    // Each row input keeps ITERS * VEC floats per thread; leave room for the rest.
    const std::int64_t held =
        g.iters * c.vec * static_cast<std::int64_t>(lp.program.row_inputs.size());
    const std::int64_t budget = std::min<std::int64_t>(255, 65536 / threads) - 40;
    if (held > budget) {
      return "the row does not fit in registers (" + std::to_string(held) +
             " values per thread, budget " + std::to_string(std::max<std::int64_t>(budget, 0)) +
             ")";
    }
  }
  return std::nullopt;
}

GeneratedKernel generate_cuda(const LoweredProgram& program, const KernelSpec& spec) {
  if (auto problem = config_problem(program, spec)) {
    throw ProgramError("cannot generate '" + program.program.name + "' with " +
                       spec.config.describe() + ": " + *problem);
  }
  return Emitter(program, spec).run();
}

}  // namespace tilenorm
