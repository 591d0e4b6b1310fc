// The autotuner's search space (built from KernelConfig's Hana fields, pruned with reasons) and
// the tilenorm-tune command line. No GPU needed.
#include "tilenorm/autotune/search_space.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <boost/hana.hpp>
#include <initializer_list>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "four_reductions.hpp"
#include "tilenorm/autotune/cli.hpp"
#include "tilenorm/autotune/cli_options.hpp"
#include "tilenorm/autotune/tuner.hpp"
#include "tilenorm/dsl/autodiff.hpp"
#include "tilenorm/kernels/programs.hpp"
#include "tilenorm/runtime/heuristics.hpp"
#include "tilenorm/runtime/nvrtc.hpp"
#include "tilenorm/runtime/tuning_db.hpp"

namespace {

using tilenorm::DType;
using tilenorm::KernelConfig;
using tilenorm::PruneRule;
using tilenorm::RowStorage;

// Each shape's candidates compile in well under a second each; this keeps a full tune of one
// (kernel, dtype, N) within the budget in docs/autotuning.md. (Clusters add a knob: long rows
// search cluster sizes beside the one-CTA shapes, and forwards' slices of eight vectors per
// thread beside four, and global storage at 1024 threads: 35 at bf16 N = 32768. Rows of one
// CTA in registers add the column fetch the rule does not choose: 45 at fp32 RMSNorm N = 512.)
constexpr std::size_t kMaxCandidatesPerShape = 48;
// A backward reads two row tensors, so fewer configurations are dominated, and a persistent one
// also searches prefetched rows beside rows in registers, and, reading saved statistics,
// prefetched cluster slices of two or four rows per CTA beside one (48 at fp32 N = 4096), and on
// clusters of 16 from rows of 2048 vectors, the load pins the rule does not choose (64 at fp32
// N = 16384; tuning 16 backward shapes of up to 55 candidates, two M each, took 76 s on an
// H100, fifty-seventh session), and, in LayerNorm's recompute, co-moments on kernels that fetch
// ahead, and their cluster slices stacked two rows per CTA (73 at fp32 N = 16384 without bias;
// 14 shapes of up to 52, two M each, took 38 s on an H100, seventy-ninth session: about 3 s
// per (kernel, dtype, N), and 73 candidates about 5 s, within the 10 s a shape may take cold).
constexpr std::size_t kMaxCandidatesPerBackwardShape = 80;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

tilenorm::LoweredProgram lowered(const char* kernel) {
  return tilenorm::lower(tilenorm::kernels::builtin_program(kernel));
}

KernelConfig config(int threads_per_row, int rows_per_cta, int vec, RowStorage storage) {
  return {threads_per_row, rows_per_cta, vec, static_cast<int>(storage), 1, 0, 0};
}

// Whether `wanted` is among the candidates that survived pruning.
bool survives(const std::vector<tilenorm::Candidate>& candidates, const KernelConfig& wanted) {
  return std::any_of(candidates.begin(), candidates.end(),
                     [&](const tilenorm::Candidate& c) { return c.config == wanted; });
}

// The pruned entry for `wanted`; fails the test when `wanted` survived or was never enumerated.
tilenorm::PrunedCandidate pruned_entry(const tilenorm::SearchSpace& space,
                                       const KernelConfig& wanted) {
  const auto it =
      std::find_if(space.pruned.begin(), space.pruned.end(),
                   [&](const tilenorm::PrunedCandidate& p) { return p.config == wanted; });
  REQUIRE_MESSAGE(it != space.pruned.end(), "not pruned: " << wanted.describe());
  return *it;
}

template <class Command>
Command parse_as(const std::vector<std::string>& args) {
  const tilenorm::CliCommand command = tilenorm::parse_command_line(args);
  REQUIRE(std::holds_alternative<Command>(command));
  return std::get<Command>(command);
}

std::string usage_error(const std::vector<std::string>& args) {
  try {
    tilenorm::parse_command_line(args);
  } catch (const tilenorm::UsageError& e) {
    return e.what();
  }
  FAIL("no UsageError");
  return {};
}

}  // namespace

TEST_CASE("search space: one domain per KernelConfig field, in declaration order") {
  const auto domains = tilenorm::search_domains(DType::bf16, DType::bf16);
  std::vector<std::string> fields;
  boost::hana::for_each(boost::hana::accessors<KernelConfig>(), [&](auto accessor) {
    fields.push_back(boost::hana::to<const char*>(boost::hana::first(accessor)));
  });
  REQUIRE(domains.size() == fields.size());
  for (std::size_t i = 0; i < fields.size(); ++i) CHECK(domains[i].field == fields[i]);

  auto values_of = [&](const std::vector<tilenorm::FieldDomain>& list, const std::string& field) {
    for (const auto& d : list) {
      if (d.field == field) return d.values;
    }
    FAIL("no domain for " << field);
    return std::vector<int>{};
  };
  CHECK(values_of(domains, "threads_per_row") ==
        std::vector<int>{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024});
  CHECK(values_of(domains, "rows_per_cta") == std::vector<int>{1, 2, 4, 8, 16, 32, 64});
  CHECK(values_of(domains, "vec") == std::vector<int>{1, 2, 4, 8});
  CHECK(values_of(domains, "row_storage") == std::vector<int>{0, 1, 2, 3, 4, 5});
  CHECK(values_of(domains, "load_pin") == std::vector<int>{0, 1, 2, 3});
  CHECK(values_of(domains, "moments") == std::vector<int>{0, 1, 2});
  CHECK(values_of(tilenorm::search_domains(DType::f32, DType::f32), "vec") ==
        std::vector<int>{1, 2, 4});
  CHECK(values_of(tilenorm::search_domains(DType::bf16, DType::f32), "vec") ==
        std::vector<int>{1, 2, 4});
}

TEST_CASE("search space: the whole product is enumerated, split into survivors and pruned") {
  const auto space = tilenorm::explore_search_space(lowered("rms_norm"), DType::bf16, DType::bf16,
                                                    4096, tilenorm::DeviceLimits::hopper());
  std::size_t product = 1;
  for (const auto& domain : tilenorm::search_domains(DType::bf16, DType::bf16)) {
    product *= domain.values.size();
  }
  CHECK(space.total() == product);
  CHECK(space.total() == 11 * 7 * 4 * 6 * 16 * 4 * 3 * 3);
  CHECK_FALSE(space.candidates.empty());
  for (const auto& p : space.pruned) CHECK_FALSE(p.reason.empty());
}

TEST_CASE("search space: every built-in kernel gets a small, valid space for every --all shape") {
  const auto limits = tilenorm::DeviceLimits::hopper();
  for (const auto& kernel : tilenorm::kernels::builtin_kernels()) {
    const tilenorm::LoweredProgram program = tilenorm::lower(kernel.program);
    for (DType dtype : {DType::bf16, DType::f32, DType::f16}) {
      for (std::int64_t n : tilenorm::all_hidden_sizes()) {
        CAPTURE(kernel.name);
        CAPTURE(tilenorm::dtype_name(dtype));
        CAPTURE(n);
        const auto candidates = tilenorm::build_search_space(program, dtype, dtype, n, limits);
        CHECK_FALSE(candidates.empty());
        const bool backward = kernel.name.find("_backward") != std::string::npos;
        CHECK(candidates.size() <=
              (backward ? kMaxCandidatesPerBackwardShape : kMaxCandidatesPerShape));
        const KernelConfig heuristic = tilenorm::heuristic_config(program, dtype, dtype, n, limits);
        CHECK(survives(candidates, heuristic));
        for (const auto& candidate : candidates) {
          const tilenorm::KernelSpec spec =
              tilenorm::fit_shared_memory(program, {dtype, dtype, n, candidate.config}, limits);
          CHECK_FALSE(tilenorm::config_problem(program, spec).has_value());
          CHECK(tilenorm::dynamic_shared_memory_bytes(program, spec) ==
                candidate.dynamic_shared_bytes);
          CHECK(candidate.dynamic_shared_bytes <= limits.shared_memory_per_block);
          CHECK(candidate.config.vec == tilenorm::widest_vec(dtype, dtype));
          const int threads = candidate.config.threads_per_row * candidate.config.rows_per_cta;
          CHECK(threads >= 64);
          CHECK(threads <= 1024);
        }
      }
    }
  }
}

TEST_CASE("search space: tiny and unaligned rows still get candidates") {
  const auto limits = tilenorm::DeviceLimits::hopper();
  for (std::int64_t n : {1, 3, 100, 1001}) {
    CAPTURE(n);
    const auto candidates =
        tilenorm::build_search_space(lowered("layer_norm"), DType::bf16, DType::bf16, n, limits);
    CHECK_FALSE(candidates.empty());
    // A forward peels misaligned rows, so it keeps the widest vector; a backward that sums
    // across rows narrows it to what N aligns to on rows this short (peels_rows).
    for (const auto& c : candidates) CHECK(c.config.vec == 8);
    for (const auto& c : tilenorm::build_search_space(lowered("layer_norm_backward"), DType::bf16,
                                                      DType::bf16, n, limits))
      CHECK(n % c.config.vec == 0);
  }
  // Longer rows of such a backward peel, one row per CTA.
  for (std::int64_t n : {2049, 4097, 12345}) {
    CAPTURE(n);
    const auto backward = tilenorm::build_search_space(lowered("layer_norm_backward"), DType::bf16,
                                                       DType::bf16, n, limits);
    CHECK_FALSE(backward.empty());
    for (const auto& c : backward) {
      CHECK(c.config.vec == 8);
      CHECK(c.config.rows_per_cta == 1);
    }
  }
  CHECK(tilenorm::widest_row_aligned_vec(DType::bf16, DType::bf16, 1001) == 1);
  CHECK(tilenorm::widest_row_aligned_vec(DType::bf16, DType::bf16, 100) == 4);
  CHECK(tilenorm::widest_row_aligned_vec(DType::f32, DType::f32, 4096) == 4);
  CHECK(tilenorm::widest_row_aligned_vec(DType::bf16, DType::f32, 4096) == 4);
}

TEST_CASE("search space: each pruning rule reports its reason") {
  const auto limits = tilenorm::DeviceLimits::hopper();
  const auto program = lowered("layer_norm");
  const auto n4096 =
      tilenorm::explore_search_space(program, DType::bf16, DType::bf16, 4096, limits);

  auto expect = [](const tilenorm::PrunedCandidate& p, PruneRule rule, const std::string& text) {
    CAPTURE(p.reason);
    CHECK(p.rule == rule);
    CHECK(contains(p.reason, text));
  };
  expect(pruned_entry(n4096, config(1024, 2, 8, RowStorage::registers)), PruneRule::invalid_config,
         "threads per CTA (threads_per_row * rows_per_cta) must be in 32..1024, got 2048");
  expect(pruned_entry(n4096, config(128, 1, 4, RowStorage::registers)), PruneRule::narrower_vec,
         "vec 4 is narrower than the widest usable vec 8");
  expect(pruned_entry(n4096, config(32, 1, 8, RowStorage::registers)), PruneRule::small_block,
         "32 threads per CTA: below 64");
  expect(pruned_entry(n4096, config(4, 16, 8, RowStorage::global)), PruneRule::uncoalesced,
         "a row's 4 threads read 64 contiguous bytes per step, less than a 128-byte line");
  expect(pruned_entry(n4096, config(32, 2, 8, RowStorage::registers)), PruneRule::serial_row,
         "each thread walks 128 elements of its row serially");
  expect(pruned_entry(n4096, config(128, 4, 8, RowStorage::registers)), PruneRule::stacked_rows,
         "stacks 4 rows into a 512-thread CTA");
  expect(pruned_entry(n4096, config(512, 1, 8, RowStorage::shared)), PruneRule::dominated_storage,
         "the row fits registers with 8 values per thread, which beats shared storage");
  expect(pruned_entry(n4096, config(1024, 1, 8, RowStorage::global)), PruneRule::dominated_storage,
         "which beats global storage");
  // Not at 32 values per thread: in registers, 1024 threads hold one CTA per SM; re-reading
  // the row from global memory, two.
  CHECK(survives(tilenorm::build_search_space(program, DType::bf16, DType::bf16, 32768, limits),
                 config(1024, 1, 8, RowStorage::global)));
  // Not where an SM holds one such CTA either way (sm_89: 1536 threads).
  expect(pruned_entry(tilenorm::explore_search_space(program, DType::bf16, DType::bf16, 32768,
                                                     tilenorm::known_device("L40S")),
                      config(1024, 1, 8, RowStorage::global)),
         PruneRule::dominated_storage, "which beats global storage");

  const auto n128 = tilenorm::explore_search_space(program, DType::bf16, DType::bf16, 128, limits);
  expect(pruned_entry(n128, config(64, 1, 8, RowStorage::registers)), PruneRule::idle_threads,
         "48 of 64 threads per row idle (the row has 16 vectors)");

  const auto n131072 =
      tilenorm::explore_search_space(program, DType::bf16, DType::bf16, 131072, limits);
  expect(pruned_entry(n131072, config(1024, 1, 8, RowStorage::shared)), PruneRule::shared_memory,
         "needs 262144 bytes of dynamic shared memory; the device allows 232448");

  // A backward on one CTA of 1024 threads at N = 262144 keeps 32 x 8 column partial sums per
  // thread in registers: over the budget (64 - 40), so it is not compiled only to spill.
  const auto backward_262144 = tilenorm::explore_search_space(
      lowered("rms_norm_backward"), DType::bf16, DType::bf16, 262144, limits);
  expect(pruned_entry(backward_262144, config(1024, 1, 8, RowStorage::global)),
         PruneRule::spilled_partials,
         "its column partial sums take 256 registers per thread, over the budget of 24");
  // Rows too long for four vectors per thread on 16 x 512 threads may take eight on a
  // cluster; shorter ones may not.
  tilenorm::KernelConfig eight_per_thread = config(512, 1, 4, RowStorage::prefetched);
  eight_per_thread.ctas_per_row = 16;
  const auto f32_262144 =
      tilenorm::build_search_space(lowered("rms_norm"), DType::f32, DType::f32, 262144, limits);
  CHECK(survives(f32_262144, eight_per_thread));
  // A 16-bit forward's prefetched slices of eight vectors per thread that tile the row exactly
  // may (the heuristic's choice); a backward's may not, nor pipelined ones.
  tilenorm::KernelConfig short_eight = config(128, 1, 8, RowStorage::prefetched);
  short_eight.ctas_per_row = 16;
  const auto forward_131072 =
      tilenorm::explore_search_space(lowered("rms_norm"), DType::bf16, DType::bf16, 131072, limits);
  CHECK(survives(forward_131072.candidates, short_eight));
  const auto backward_131072 = tilenorm::explore_search_space(
      lowered("rms_norm_backward"), DType::bf16, DType::bf16, 131072, limits);
  expect(pruned_entry(backward_131072, short_eight), PruneRule::needless_cluster,
         "8 vectors per thread in a cluster: a cluster is for short slices (at most 4 per thread)");
  tilenorm::KernelConfig pipelined_eight = short_eight;
  pipelined_eight.row_storage = static_cast<int>(RowStorage::pipelined);
  expect(pruned_entry(forward_131072, pipelined_eight), PruneRule::needless_cluster,
         "8 vectors per thread in a cluster: a cluster is for short slices (at most 4 per thread)");

  // Clusters of other sizes than powers of two are searched for forwards whose rows their sweeps
  // tile exactly (5376 vectors: 7 x 128 x 6, 7 x 256 x 3, 14 x 64 x 6), with up to eight vectors
  // per thread; not where the sweeps are ragged, nor for backwards.
  tilenorm::KernelConfig seven = config(128, 1, 8, RowStorage::prefetched);
  seven.ctas_per_row = 7;
  const auto forward_43008 = tilenorm::explore_search_space(lowered("layer_norm"), DType::bf16,
                                                            DType::bf16, 43008, limits);
  CHECK(survives(forward_43008.candidates, seven));
  tilenorm::KernelConfig five = seven;
  five.ctas_per_row = 5;
  expect(pruned_entry(forward_43008, five), PruneRule::ragged_odd_cluster,
         "a cluster of 5 CTAs (not a power of two) is searched for forwards whose rows its sweeps "
         "tile exactly; its sweeps of 640 vectors do not tile a row of 5376");
  const auto backward_43008 = tilenorm::explore_search_space(
      lowered("layer_norm_backward"), DType::bf16, DType::bf16, 43008, limits);
  expect(pruned_entry(backward_43008, seven), PruneRule::ragged_odd_cluster,
         "a cluster of 7 CTAs (not a power of two) is searched for forwards whose rows its sweeps "
         "tile exactly; the program sums across rows (searched there for prefetched stacked "
         "rows)");
  // A backward's stacked prefetched slices may take one: 6 x 64 threads x 4 rows at N = 12288.
  tilenorm::KernelConfig six_stacked = config(64, 4, 8, RowStorage::prefetched);
  six_stacked.ctas_per_row = 6;
  CHECK(survives(tilenorm::build_search_space(lowered("layer_norm_backward"), DType::bf16,
                                              DType::bf16, 12288, limits),
                 six_stacked));

  // A backward that sums across rows peels only rows of 256 vectors and more (peels_rows):
  // contiguous rows of N = 1001 allow vec 1 only.
  const auto n1001 = tilenorm::explore_search_space(lowered("layer_norm_backward"), DType::bf16,
                                                    DType::bf16, 1001, limits);
  expect(pruned_entry(n1001, config(64, 1, 2, RowStorage::registers)), PruneRule::misaligned_vec,
         "contiguous rows of N=1001 elements allow vec <= 1, not 2");
}

TEST_CASE("search space: N below 1 is an error, not an empty space") {
  CHECK_THROWS_WITH_AS(tilenorm::explore_search_space(lowered("rms_norm"), DType::bf16, DType::bf16,
                                                      0, tilenorm::DeviceLimits::hopper()),
                       "search space: N must be at least 1, got 0", tilenorm::Error);
}

TEST_CASE("search space: short_config names every field") {
  CHECK(tilenorm::short_config(config(128, 2, 8, RowStorage::registers)) ==
        "tpr=128 rpc=2 vec=8 registers");
  CHECK(tilenorm::short_config(config(1024, 1, 4, RowStorage::global)) ==
        "tpr=1024 rpc=1 vec=4 global");
  tilenorm::KernelConfig clustered = config(512, 1, 8, RowStorage::registers);
  clustered.ctas_per_row = 8;
  CHECK(tilenorm::short_config(clustered) == "tpr=512 rpc=1 vec=8 registers cluster=8");
  clustered.row_storage = static_cast<int>(RowStorage::prefetched);
  clustered.load_pin = static_cast<int>(tilenorm::LoadPin::off);
  CHECK(tilenorm::short_config(clustered) == "tpr=512 rpc=1 vec=8 prefetched cluster=8 pin=off");
  clustered.moments = static_cast<int>(tilenorm::MomentFusion::on);
  CHECK(tilenorm::short_config(clustered) ==
        "tpr=512 rpc=1 vec=8 prefetched cluster=8 pin=off moments=on");
  KernelConfig early = config(64, 1, 8, RowStorage::registers);
  early.column_fetch = static_cast<int>(tilenorm::ColumnFetch::early);
  CHECK(tilenorm::short_config(early) == "tpr=64 rpc=1 vec=8 registers fetch=early");
  CHECK(early.describe() ==
        "threads_per_row=64 rows_per_cta=1 vec=8 row_storage=registers ctas_per_row=1 "
        "column_fetch=early");
}

TEST_CASE(
    "search space: the column fetch the rule does not choose, on rows of one CTA in "
    "registers") {
  const auto limits = tilenorm::DeviceLimits::hopper();
  auto fetching = [](KernelConfig c, tilenorm::ColumnFetch fetch) {
    c.column_fetch = static_cast<int>(fetch);
    return c;
  };
  using tilenorm::ColumnFetch;
  const auto space =
      tilenorm::explore_search_space(lowered("layer_norm"), DType::bf16, DType::bf16, 4096, limits);
  // 64 threads per row hold sixteen vectors of weight and bias (eight of each), which the rule
  // fetches late at many rows: early is searched. 256 threads hold four, fetched early: late is
  // searched.
  const KernelConfig eight = config(64, 1, 8, RowStorage::registers);
  CHECK(survives(space.candidates, fetching(eight, ColumnFetch::early)));
  const auto late_eight = pruned_entry(space, fetching(eight, ColumnFetch::late));
  CHECK(late_eight.rule == PruneRule::column_fetch_scope);
  CHECK(late_eight.reason ==
        "column_fetch late is what the rule does with 16 parameter vectors per thread "
        "(column_fetch rule)");
  const KernelConfig four = config(256, 1, 8, RowStorage::registers);
  CHECK(survives(space.candidates, fetching(four, ColumnFetch::late)));
  CHECK(pruned_entry(space, fetching(four, ColumnFetch::early)).reason ==
        "column_fetch early is what the rule does with 4 parameter vectors per thread "
        "(column_fetch rule)");
  // Rows not in registers have no early fetch.
  const auto prefetched =
      pruned_entry(space, fetching(config(64, 1, 8, RowStorage::prefetched), ColumnFetch::early));
  CHECK(prefetched.rule == PruneRule::column_fetch_scope);
  CHECK(prefetched.reason ==
        "column_fetch early or late is searched where a kernel can fetch its column parameters "
        "early: rows of one CTA in registers, not peeled, not persistent");
  // Nor has a backward (its kernels are persistent).
  const auto backward = tilenorm::explore_search_space(lowered("layer_norm_backward"), DType::bf16,
                                                       DType::bf16, 4096, limits);
  for (const auto& c : backward.candidates)
    CHECK(c.config.column_fetch == tilenorm::kColumnFetchByRule);
}

TEST_CASE("fetches_columns_early: as the configuration's column fetch says, else by the rule") {
  using tilenorm::ColumnFetch;
  const tilenorm::LoweredProgram& program = lowered("layer_norm");
  tilenorm::driver::DeviceInfo h100;
  h100.multiprocessors = 132;
  h100.registers_per_multiprocessor = 65536;
  auto fetches = [&](KernelConfig c, ColumnFetch fetch, bool peeled = false) {
    c.column_fetch = static_cast<int>(fetch);
    tilenorm::KernelSpec spec{DType::bf16, DType::bf16, 4096, c};
    spec.peel_rows = peeled;
    return tilenorm::fetches_columns_early(program, spec, 16384, h100);
  };
  const KernelConfig eight = config(64, 1, 8, RowStorage::registers);
  const KernelConfig four = config(256, 1, 8, RowStorage::registers);
  CHECK_FALSE(fetches(eight, ColumnFetch::rule));
  CHECK(fetches(eight, ColumnFetch::early));
  CHECK(fetches(four, ColumnFetch::rule));
  CHECK_FALSE(fetches(four, ColumnFetch::late));
  // A kernel that cannot fetch early does not, whatever the knob says: peeled rows.
  CHECK_FALSE(fetches(eight, ColumnFetch::early, true));
}

TEST_CASE("search space: co-moments are searched in backwards that lower another way with them") {
  const auto limits = tilenorm::DeviceLimits::hopper();
  using tilenorm::MomentFusion;
  auto with = [](tilenorm::KernelConfig c, MomentFusion fusion) {
    c.moments = static_cast<int>(fusion);
    return c;
  };
  auto on_cluster = [](tilenorm::KernelConfig c, int ctas) {
    c.ctas_per_row = ctas;
    return c;
  };
  auto recompute_space = [&](std::int64_t n) {
    return tilenorm::explore_search_space(lowered("layer_norm_backward_recompute"), DType::bf16,
                                          DType::bf16, n, limits);
  };
  // LayerNorm's recompute: each survivor that fetches ahead (prefetched rows of one CTA, or a
  // cluster's prefetched, staged or pipelined slices) has its twin with co-moments; rows in
  // registers or staged on one CTA do not, and off is the rule's kernel.
  const auto recompute = recompute_space(8192);
  std::size_t ahead = 0, fused = 0;
  for (const auto& c : recompute.candidates) {
    CHECK(c.config.moments != static_cast<int>(MomentFusion::off));
    const bool on = c.config.moments == static_cast<int>(MomentFusion::on);
    const auto storage = static_cast<RowStorage>(c.config.row_storage);
    const bool in_scope = c.config.ctas_per_row == 1 ? storage == RowStorage::prefetched
                                                     : tilenorm::fetches_ahead(storage);
    CHECK((!on || in_scope));
    if (on) ++fused;
    if (!on && in_scope) {
      ++ahead;
      CHECK(survives(recompute.candidates, with(c.config, MomentFusion::on)));
    }
  }
  CHECK(ahead > 0);
  CHECK(fused == ahead);
  const tilenorm::KernelConfig slices = on_cluster(config(64, 2, 8, RowStorage::prefetched), 4);
  CHECK(survives(recompute.candidates, with(slices, MomentFusion::on)));
  const char* const out_of_scope =
      "moments on is searched on kernels that fetch the next row "
      "block ahead (prefetched rows of one CTA, or any such cluster)";
  const tilenorm::KernelConfig one_cta = config(512, 1, 8, RowStorage::registers);
  CHECK(pruned_entry(recompute, with(one_cta, MomentFusion::on)).reason == out_of_scope);
  // On one CTA, prefetched rows take co-moments (N = 4096's best configuration of the rule, the
  // seventy-ninth session's H100 tuning), rows staged in shared memory do not.
  const auto medium_rows = recompute_space(4096);
  const tilenorm::KernelConfig prefetched_cta = config(64, 4, 8, RowStorage::prefetched);
  CHECK(survives(medium_rows.candidates, prefetched_cta));
  CHECK(survives(medium_rows.candidates, with(prefetched_cta, MomentFusion::on)));
  const tilenorm::KernelConfig staged_cta = config(128, 2, 8, RowStorage::staged);
  CHECK(survives(medium_rows.candidates, staged_cta));
  CHECK(pruned_entry(medium_rows, with(staged_cta, MomentFusion::on)).reason == out_of_scope);
  const auto off = pruned_entry(recompute, with(one_cta, MomentFusion::off));
  CHECK(off.rule == PruneRule::moments_scope);
  CHECK(off.reason == "moments off lowers the program as the rule does (moments rule)");
  // One exchange per row block also lets the recompute's cluster slices stack two rows, as the
  // saved backward's do; without co-moments they stack only on rows of up to 1024 vectors.
  const auto stacked = recompute_space(16384);
  const tilenorm::KernelConfig two_rows = on_cluster(config(128, 2, 8, RowStorage::prefetched), 8);
  CHECK(survives(stacked.candidates, with(two_rows, MomentFusion::on)));
  CHECK(pruned_entry(stacked, two_rows).rule == PruneRule::needless_cluster);
  const tilenorm::KernelConfig four_rows = on_cluster(config(128, 4, 8, RowStorage::prefetched), 8);
  CHECK(pruned_entry(stacked, with(four_rows, MomentFusion::on)).rule ==
        PruneRule::needless_cluster);
  // One phase makes pipelined slices valid: searched with co-moments only.
  const auto long_rows = recompute_space(65536);
  const tilenorm::KernelConfig pipelined = on_cluster(config(256, 1, 8, RowStorage::pipelined), 16);
  CHECK(survives(long_rows.candidates, with(pipelined, MomentFusion::on)));
  CHECK(pruned_entry(long_rows, pipelined).rule == PruneRule::invalid_config);
  // RMSNorm's has nothing to fuse; LayerNorm's forward has, off, but forwards keep the rule.
  const auto rms_norm = tilenorm::explore_search_space(lowered("rms_norm_backward_recompute"),
                                                       DType::bf16, DType::bf16, 8192, limits);
  CHECK(pruned_entry(rms_norm, with(one_cta, MomentFusion::on)).reason ==
        "moments on lowers the program as the rule does (moments rule)");
  const auto forward =
      tilenorm::explore_search_space(lowered("layer_norm"), DType::bf16, DType::bf16, 8192, limits);
  CHECK(pruned_entry(forward, with(one_cta, MomentFusion::off)).reason ==
        "moments off is searched in programs that sum across rows, not in forwards");
  for (const auto* space : {&rms_norm, &forward}) {
    for (const auto& c : space->candidates)
      CHECK(c.config.moments == static_cast<int>(MomentFusion::rule));
  }
}

TEST_CASE("search space: the load pin the rule does not choose, on long rows' clusters of 16") {
  const auto limits = tilenorm::DeviceLimits::hopper();
  auto with = [](tilenorm::KernelConfig c, int ctas, tilenorm::LoadPin pin) {
    c.ctas_per_row = ctas;
    c.load_pin = static_cast<int>(pin);
    return c;
  };
  const tilenorm::KernelConfig slices = config(128, 1, 8, RowStorage::prefetched);
  using tilenorm::LoadPin;
  // LayerNorm's saved backward reads its mean in the first pass: the rule pins early from rows
  // of 8192 vectors, so "on" and "off" are searched and "early" is the rule's kernel again; on
  // shorter rows the rule does not pin, and "off" is the rule's kernel. RMSNorm's is pinned
  // ("on") by the rule.
  const auto layer_norm = tilenorm::explore_search_space(lowered("layer_norm_backward"),
                                                         DType::bf16, DType::bf16, 65536, limits);
  CHECK(survives(layer_norm.candidates, with(slices, 16, LoadPin::rule)));
  CHECK(survives(layer_norm.candidates, with(slices, 16, LoadPin::on)));
  CHECK(survives(layer_norm.candidates, with(slices, 16, LoadPin::off)));
  const auto same = pruned_entry(layer_norm, with(slices, 16, LoadPin::early));
  CHECK(same.rule == PruneRule::load_pin_scope);
  CHECK(same.reason == "load_pin early builds what the rule builds here (load_pin rule)");
  const auto shorter = tilenorm::explore_search_space(lowered("layer_norm_backward"), DType::bf16,
                                                      DType::bf16, 32768, limits);
  const tilenorm::KernelConfig halves = config(64, 1, 8, RowStorage::prefetched);
  CHECK(survives(shorter.candidates, with(halves, 16, LoadPin::early)));
  CHECK(pruned_entry(shorter, with(halves, 16, LoadPin::off)).reason ==
        "load_pin off builds what the rule builds here (load_pin rule)");
  const auto rms_norm = tilenorm::explore_search_space(lowered("rms_norm_backward"), DType::bf16,
                                                       DType::bf16, 65536, limits);
  CHECK(survives(rms_norm.candidates, with(slices, 16, LoadPin::off)));
  CHECK(survives(rms_norm.candidates, with(slices, 16, LoadPin::early)));
  CHECK(pruned_entry(rms_norm, with(slices, 16, LoadPin::on)).rule == PruneRule::load_pin_scope);
  // Not on smaller clusters, nor on shorter rows.
  const auto eight =
      pruned_entry(layer_norm, with(config(256, 1, 8, RowStorage::prefetched), 8, LoadPin::on));
  CHECK(eight.rule == PruneRule::load_pin_scope);
  CHECK(eight.reason ==
        "load_pin on is searched on clusters of 16 and rows of 2048 vectors and more, not 8 CTAs "
        "and 8192 vectors");
  const auto short_rows = tilenorm::explore_search_space(lowered("layer_norm_backward"),
                                                         DType::bf16, DType::bf16, 8192, limits);
  for (const auto& c : short_rows.candidates)
    CHECK(c.config.load_pin == static_cast<int>(LoadPin::rule));
  // Where there is no pin to choose (one CTA per row), config_problem refuses the knob.
  CHECK(pruned_entry(layer_norm, with(config(1024, 1, 8, RowStorage::prefetched), 1, LoadPin::on))
            .rule == PruneRule::invalid_config);
}

TEST_CASE("search space: clusters only where the device has them and the row is long") {
  const auto program = lowered("rms_norm");
  auto has_cluster = [](const std::vector<tilenorm::Candidate>& candidates) {
    return std::any_of(candidates.begin(), candidates.end(),
                       [](const auto& c) { return c.config.ctas_per_row > 1; });
  };
  const auto hopper = tilenorm::DeviceLimits::hopper();
  CHECK(
      has_cluster(tilenorm::build_search_space(program, DType::bf16, DType::bf16, 65536, hopper)));
  CHECK_FALSE(
      has_cluster(tilenorm::build_search_space(program, DType::bf16, DType::bf16, 4096, hopper)));
  const auto a100 = tilenorm::known_device("A100");
  const auto space = tilenorm::explore_search_space(program, DType::bf16, DType::bf16, 65536, a100);
  CHECK_FALSE(has_cluster(space.candidates));
  CHECK(std::any_of(space.pruned.begin(), space.pruned.end(), [](const auto& p) {
    return p.rule == tilenorm::PruneRule::no_clusters &&
           p.reason.find("no thread-block clusters") != std::string::npos;
  }));
}

TEST_CASE("search space: clusters no larger than the device runs") {
  const auto& rtx5090 = tilenorm::known_device("RTX5090");
  const auto space = tilenorm::explore_search_space(lowered("rms_norm"), DType::bf16, DType::bf16,
                                                    262144, rtx5090);
  CHECK(std::any_of(space.candidates.begin(), space.candidates.end(),
                    [](const auto& c) { return c.config.ctas_per_row == 8; }));
  CHECK(std::none_of(space.candidates.begin(), space.candidates.end(),
                     [](const auto& c) { return c.config.ctas_per_row > 8; }));
  CHECK(std::any_of(space.pruned.begin(), space.pruned.end(), [](const auto& p) {
    return p.rule == tilenorm::PruneRule::no_clusters &&
           p.reason == "ctas_per_row 16: the device runs clusters of at most 8 CTAs";
  }));
}

TEST_CASE("device limits: what the driver reports, with the cluster size of the generation") {
  tilenorm::driver::DeviceInfo info;
  info.cc_major = 9;
  info.cc_minor = 0;
  info.multiprocessors = 132;
  info.max_threads_per_multiprocessor = 2048;
  info.shared_memory_per_block_optin = 227 * 1024;
  info.cluster_launch = true;
  info.cooperative_launch = true;
  info.l2_bytes = 60 << 20;
  const tilenorm::DeviceLimits hopper = tilenorm::device_limits(info);
  CHECK(hopper.cooperative_launch);
  CHECK(hopper.l2_bytes == std::size_t{60} << 20);
  CHECK(hopper.compute_capability == 90);
  CHECK(hopper.arch() == "sm_90");
  CHECK(hopper.cluster_ctas == 16);
  CHECK(hopper.multiprocessors == 132);
  CHECK(hopper.threads_per_multiprocessor == 2048);
  CHECK(hopper.shared_memory_per_block == 227 * 1024);
  info.cc_major = 12;
  CHECK(tilenorm::device_limits(info).cluster_ctas == 8);
  CHECK(tilenorm::device_limits(info).arch() == "sm_120");
  info.cc_major = 10;
  CHECK(tilenorm::device_limits(info).cluster_ctas == 16);
  info.cluster_launch = false;
  CHECK(tilenorm::device_limits(info).cluster_ctas == 1);
  CHECK_FALSE(tilenorm::device_limits(info).clusters());
  info.cooperative_launch = false;
  CHECK_FALSE(tilenorm::device_limits(info).cooperative_launch);
  // The table agrees with what the driver would report for its devices' generations.
  for (const tilenorm::DeviceLimits& device : tilenorm::known_devices()) {
    CAPTURE(device.name);
    const int expected = device.compute_capability >= 90
                             ? tilenorm::most_cluster_ctas(device.compute_capability / 10)
                             : 1;
    CHECK(device.cluster_ctas == expected);
    CHECK(device.l2_bytes >= std::size_t{6} << 20);
  }
}

TEST_CASE("heuristic: rows are re-read from L2 only where the resident CTAs' rows fit in it") {
  // bf16 RMSNorm N = 32768 on the H200: one CTA of 1024 threads per row reads it twice; its 264
  // resident CTAs hold 16.5 MiB of rows between the two reads.
  const tilenorm::LoweredProgram program = lowered("rms_norm");
  auto limits = tilenorm::DeviceLimits::hopper();
  auto storage = [&] {
    const KernelConfig config =
        tilenorm::heuristic_config(program, DType::bf16, DType::bf16, 32768, limits);
    return static_cast<RowStorage>(config.row_storage);
  };
  CHECK(storage() == RowStorage::global);
  limits.l2_bytes = std::size_t{33} << 20;  // twice the rows in flight: enough
  CHECK(storage() == RowStorage::global);
  limits.l2_bytes = std::size_t{32} << 20;  // less than twice
  CHECK(storage() != RowStorage::global);
  limits.l2_bytes = 0;  // unknown
  CHECK(storage() != RowStorage::global);
}

TEST_CASE("heuristic: a 16-bit LayerNorm forward, read three times, re-reads within 30% of L2") {
  // Four vectors per thread on 2048 threads per SM keep 16.5 MiB of rows: 27.5% of the H200's
  // L2, 33% of the H100's. Rows read twice (RMSNorm) keep the wider margin at the same bytes.
  const auto& h100 = tilenorm::known_device("H100");
  const auto h200 = tilenorm::DeviceLimits::hopper();
  auto config = [](const char* kernel, DType dtype, std::int64_t n, const auto& limits) {
    return tilenorm::heuristic_config(lowered(kernel), dtype, dtype, n, limits);
  };
  for (const char* kernel : {"layer_norm", "layer_norm_no_bias", "layer_norm_no_affine"}) {
    for (DType dtype : {DType::bf16, DType::f16}) {
      for (const std::int64_t n : {2048, 4096, 8192}) {
        CAPTURE(kernel);
        CAPTURE(tilenorm::dtype_name(dtype));
        CAPTURE(n);
        const KernelConfig on_h200 = config(kernel, dtype, n, h200);
        const KernelConfig on_h100 = config(kernel, dtype, n, h100);
        CHECK(static_cast<RowStorage>(on_h200.row_storage) == RowStorage::global);
        CHECK(static_cast<RowStorage>(on_h100.row_storage) == RowStorage::registers);
        // The same threads, four vectors each, held instead of read again.
        CHECK(on_h100.threads_per_row == on_h200.threads_per_row);
        CHECK(on_h100.threads_per_row * on_h100.vec * 4 == n);
      }
    }
  }
  auto limits = h200;
  limits.l2_bytes = std::size_t{56} << 20;  // 16.5 MiB is 29.5% of it: still re-read
  CHECK(static_cast<RowStorage>(config("layer_norm", DType::bf16, 4096, limits).row_storage) ==
        RowStorage::global);
  limits.l2_bytes = std::size_t{54} << 20;  // 30.6%: in registers
  CHECK(static_cast<RowStorage>(config("layer_norm", DType::bf16, 4096, limits).row_storage) ==
        RowStorage::registers);
  CHECK(static_cast<RowStorage>(config("rms_norm", DType::bf16, 32768, h100).row_storage) ==
        RowStorage::global);
  CHECK(static_cast<RowStorage>(config("layer_norm", DType::f32, 16384, h100).row_storage) ==
        RowStorage::global);
}

TEST_CASE("heuristic: a valid configuration on every known device, within its limits") {
  for (const tilenorm::DeviceLimits& device : tilenorm::known_devices()) {
    for (const auto& kernel : tilenorm::kernels::builtin_kernels()) {
      const tilenorm::LoweredProgram program = tilenorm::lower(kernel.program);
      for (DType dtype : {DType::bf16, DType::f32}) {
        for (std::int64_t n : tilenorm::all_hidden_sizes()) {
          CAPTURE(device.name);
          CAPTURE(kernel.name);
          CAPTURE(tilenorm::dtype_name(dtype));
          CAPTURE(n);
          const KernelConfig config = tilenorm::heuristic_config(program, dtype, dtype, n, device);
          const tilenorm::KernelSpec spec =
              tilenorm::fit_shared_memory(program, {dtype, dtype, n, config}, device);
          CHECK_FALSE(tilenorm::config_problem(program, spec).has_value());
          // Wider than the device's clusters only as a software cluster.
          CHECK((config.ctas_per_row <= device.cluster_ctas || spec.global_exchange));
          CHECK(tilenorm::dynamic_shared_memory_bytes(program, spec) <=
                device.shared_memory_per_block);
        }
      }
    }
  }
}

TEST_CASE("heuristic: a cap on shared memory per CTA (RuntimeOptions) is kept") {
  // What the GPU test of the cap runs on the H200: its limits with 99 KiB per CTA, fp16 rows
  // (bf16 LayerNorm at N = 16384 takes a cluster whose partial sums fit the cap anyway).
  auto capped = tilenorm::DeviceLimits::hopper();
  capped.shared_memory_per_block = 99 * 1024;
  for (auto mode : {tilenorm::StatisticsMode::saved, tilenorm::StatisticsMode::recompute}) {
    const tilenorm::LoweredProgram program = tilenorm::lower(
        tilenorm::backward(tilenorm::kernels::builtin_program("layer_norm"), {mode}));
    CAPTURE(program.program.name);
    const KernelConfig config =
        tilenorm::heuristic_config(program, DType::f16, DType::f16, 16384, capped);
    const tilenorm::KernelSpec spec =
        tilenorm::fit_shared_memory(program, {DType::f16, DType::f16, 16384, config}, capped);
    CHECK(spec.partials_in_registers);
    CHECK(tilenorm::dynamic_shared_memory_bytes(program, spec) <= capped.shared_memory_per_block);
    // Uncapped, the same row keeps them in shared memory.
    const KernelConfig uncapped = tilenorm::heuristic_config(program, DType::f16, DType::f16, 16384,
                                                             tilenorm::DeviceLimits::hopper());
    CHECK(tilenorm::dynamic_shared_memory_bytes(
              program, {DType::f16, DType::f16, 16384, uncapped}) > capped.shared_memory_per_block);
  }
}

TEST_CASE("heuristic: another GPU's limits within this one's (RuntimeOptions::heuristic_device)") {
  const auto h200 = tilenorm::DeviceLimits::hopper();
  const auto a100 = tilenorm::emulated_limits(tilenorm::known_device("A100"), h200);
  CHECK(a100.name == "A100");
  CHECK(a100.compute_capability == 80);
  CHECK(a100.shared_memory_per_block == 163 * 1024);
  CHECK_FALSE(a100.clusters());
  CHECK(a100.multiprocessors == 132);  // the launch's GPU
  const auto rtx = tilenorm::emulated_limits(tilenorm::known_device("RTX5090"), h200);
  CHECK(rtx.cluster_ctas == 8);
  CHECK(rtx.threads_per_multiprocessor == 1536);
  CHECK(rtx.shared_memory_per_block == 99 * 1024);
  // Capped by the GPU that runs the kernels: a B200 emulated on an RTX 5090.
  const auto b200 =
      tilenorm::emulated_limits(tilenorm::known_device("B200"), tilenorm::known_device("RTX5090"));
  CHECK(b200.cluster_ctas == 8);
  CHECK(b200.shared_memory_per_block == 99 * 1024);
  CHECK(b200.compute_capability == 100);
  // The configurations differ where the limits do: a long backward row without clusters.
  const tilenorm::LoweredProgram program =
      tilenorm::lower(tilenorm::backward(tilenorm::kernels::builtin_program("layer_norm"), {}));
  CHECK(tilenorm::heuristic_config(program, DType::bf16, DType::bf16, 65536, h200).ctas_per_row >
        1);
  CHECK(tilenorm::fit_shared_memory(
            program,
            {DType::bf16, DType::bf16, 65536,
             tilenorm::heuristic_config(program, DType::bf16, DType::bf16, 65536, a100)},
            a100)
            .global_exchange);
}

TEST_CASE("software clusters: only where the device launches cooperatively") {
  const tilenorm::LoweredProgram program =
      tilenorm::lower(tilenorm::backward(tilenorm::kernels::builtin_program("layer_norm"), {}));
  tilenorm::DeviceLimits a100 = tilenorm::known_device("A100");
  const KernelConfig software =
      tilenorm::heuristic_config(program, DType::bf16, DType::bf16, 65536, a100);
  REQUIRE(software.ctas_per_row == 16);
  a100.cooperative_launch = false;
  // The heuristic keeps the row on one CTA; a split configuration (from a tuning database) is no
  // software cluster there, and the search space prunes it with the reason.
  CHECK(tilenorm::heuristic_config(program, DType::bf16, DType::bf16, 65536, a100).ctas_per_row ==
        1);
  CHECK_FALSE(
      tilenorm::fit_shared_memory(program, {DType::bf16, DType::bf16, 65536, software}, a100)
          .global_exchange);
  const auto space = tilenorm::explore_search_space(program, DType::bf16, DType::bf16, 65536, a100);
  const tilenorm::PrunedCandidate split = pruned_entry(space, software);
  CAPTURE(split.reason);
  CHECK(split.rule == PruneRule::no_clusters);
  CHECK(contains(split.reason, "nor cooperative launches, which software clusters need"));
  for (const auto& candidate : space.candidates) CHECK(candidate.config.ctas_per_row == 1);
  // Emulating a GPU keeps the runner's cooperative launches off.
  CHECK_FALSE(tilenorm::emulated_limits(tilenorm::known_device("A100"), a100).cooperative_launch);
}

TEST_CASE("tuner: default row counts are the bandwidth regime's M bucket and a small batch") {
  CHECK(tilenorm::default_row_counts(4096) == std::vector<std::int64_t>{16384, 256});
  // 2^26 / N rounded up to a power of two: the bucket the benchmark's M = 2^26 / N falls in.
  CHECK(tilenorm::default_row_counts(2880) == std::vector<std::int64_t>{32768, 256});  // 23301
  CHECK(tilenorm::default_row_counts(7168) == std::vector<std::int64_t>{16384, 256});  // 9362
  CHECK(tilenorm::default_row_counts(12288) == std::vector<std::int64_t>{8192, 256});  // 5461
  CHECK(tilenorm::default_row_counts(262144) == std::vector<std::int64_t>{256});
  CHECK(tilenorm::default_row_counts(std::int64_t{1} << 28) == std::vector<std::int64_t>{1, 256});
  for (std::int64_t n : tilenorm::all_hidden_sizes()) {
    CHECK(tilenorm::default_row_counts(n).front() ==
          tilenorm::m_bucket((std::int64_t{1} << 26) / n));
  }
  CHECK_THROWS_AS(tilenorm::default_row_counts(0), tilenorm::Error);
}

TEST_CASE("cli: tune options, lists and defaults") {
  const auto tune = parse_as<tilenorm::TuneCommand>({"--kernel", "rms_norm", "--kernel=layer_norm",
                                                     "--dtype", "bf16,fp32", "--dtype", "bf16/fp32",
                                                     "--n", "1024,4096", "--n=1024", "--m",
                                                     "256,300", "--db", "/tmp/x.json", "--quiet"});
  CHECK(tune.kernels == std::vector<std::string>{"rms_norm", "layer_norm"});
  CHECK(tune.dtypes == std::vector<tilenorm::DTypeChoice>{{DType::bf16, DType::bf16},
                                                          {DType::f32, DType::f32},
                                                          {DType::bf16, DType::f32}});
  CHECK(tune.ns == std::vector<std::int64_t>{1024, 4096});
  CHECK(tune.ms == std::vector<std::int64_t>{256, 300});
  CHECK(tune.db == "/tmp/x.json");
  CHECK(tune.quiet);
  CHECK_FALSE(tune.dry_run);

  const auto defaults = parse_as<tilenorm::TuneCommand>({"--n", "4096"});
  // The forward built-ins; --pass picks their backward.
  CHECK(defaults.kernels == std::vector<std::string>{"layer_norm", "layer_norm_no_bias",
                                                     "layer_norm_no_affine", "rms_norm",
                                                     "rms_norm_no_weight"});
  const auto backward = parse_as<tilenorm::TuneCommand>(
      {"--n", "4096", "--kernel", "rms_norm", "--pass", "forward,recompute"});
  CHECK(backward.kernels == std::vector<std::string>{"rms_norm", "rms_norm_backward_recompute"});
  CHECK(defaults.dtypes ==
        std::vector<tilenorm::DTypeChoice>{{DType::bf16, DType::bf16}, {DType::f32, DType::f32}});
  CHECK(defaults.ms.empty());
  CHECK(defaults.db.empty());  // resolved only when the command needs it
  CHECK(tilenorm::database_path(defaults.db) == tilenorm::default_tuning_db_path());
  CHECK(tilenorm::database_path("x.json") == "x.json");

  const auto all = parse_as<tilenorm::TuneCommand>({"--all", "--dry-run", "--list-pruned"});
  CHECK(all.kernels.size() == 5);
  CHECK(all.dtypes.size() == 2);
  CHECK(all.ns == tilenorm::all_hidden_sizes());
  CHECK(all.ns.size() == 16);
  CHECK(all.dry_run);
  CHECK(all.list_pruned);

  const auto narrowed =
      parse_as<tilenorm::TuneCommand>({"--all", "--dtype", "bf16", "--kernel", "rms_norm"});
  CHECK(narrowed.kernels == std::vector<std::string>{"rms_norm"});
  CHECK(narrowed.dtypes.size() == 1);
  CHECK(narrowed.ns.size() == 16);
}

TEST_CASE("cli: subcommands and help") {
  CHECK(std::holds_alternative<tilenorm::HelpCommand>(tilenorm::parse_command_line({"--help"})));
  CHECK(std::holds_alternative<tilenorm::HelpCommand>(
      tilenorm::parse_command_line({"--n", "1", "-h"})));
  CHECK(std::holds_alternative<tilenorm::HelpCommand>(
      tilenorm::parse_command_line({"merge", "--help"})));
  CHECK(parse_as<tilenorm::ShowCommand>({"show", "--db", "a.json"}).db == "a.json");
  CHECK(parse_as<tilenorm::ShowCommand>({"show"}).db.empty());
  CHECK(parse_as<tilenorm::ShowCommand>({"show", "--db=b.json"}).db == "b.json");
  const auto help = std::get<tilenorm::HelpCommand>(tilenorm::parse_command_line({"merge", "-h"}));
  CHECK(contains(help.text, "tilenorm-tune merge [OPTIONS] OUT IN..."));
  const auto version = std::get<tilenorm::HelpCommand>(tilenorm::parse_command_line({"--version"}));
  CHECK(version.text.starts_with("tilenorm-tune 0."));
  CHECK(contains(version.text, "codegen version " + std::to_string(tilenorm::kCodegenVersion)));
  CHECK(contains(version.text, "NVRTC 1"));
  CHECK(contains(version.text, "CUDA driver"));
  const auto merge = parse_as<tilenorm::MergeCommand>({"merge", "out.json", "a.json", "b.json"});
  CHECK(merge.output == "out.json");
  CHECK(merge.inputs == std::vector<std::filesystem::path>{"a.json", "b.json"});
  CHECK(contains(std::string(tilenorm::usage_text()), "tilenorm-tune merge OUT IN..."));
}

TEST_CASE("cli: usage errors say what is wrong and what to write") {
  CHECK(contains(usage_error({}), "say which row lengths to tune with --n N,... or use --all"));
  CHECK(contains(usage_error({"--bogus"}), "argument was not expected: --bogus"));
  CHECK(contains(usage_error({"--n", "0"}),
                 "--n must be a whole number from 1 to 1073741824, got '0'"));
  CHECK(contains(usage_error({"--n", "12x"}), "got '12x'"));
  CHECK(contains(usage_error({"--n=99999999999"}), "got '99999999999'"));
  CHECK(contains(usage_error({"--n", "-5"}), "got '-5'"));
  CHECK(contains(usage_error({"--n", "1024,"}), "--n got an empty item in '1024,'"));
  CHECK(contains(usage_error({"--n"}), "--n: 1 required N[,...] missing"));
  CHECK(contains(usage_error({"--m", "-5", "--n", "8"}), "--m must be a whole number"));
  CHECK(contains(usage_error({"--kernel", "softmax", "--n", "8"}), "unknown kernel 'softmax'"));
  CHECK(contains(usage_error({"--kernel", "softmax", "--n", "8"}), "rms_norm_no_weight"));
  CHECK(contains(usage_error({"--dtype", "fp64", "--n", "8"}),
                 "--dtype 'fp64': unknown dtype 'fp64'"));
  CHECK(contains(usage_error({"--dtype", "bf16/", "--n", "8"}),
                 "write bf16, fp16, fp32, or IO/PARAM"));
  CHECK(contains(usage_error({"--all=maybe"}), "--all = maybe"));
  CHECK(contains(usage_error({"--n", "8", "--list-pruned"}),
                 "--list-pruned only works with --dry-run"));
  CHECK(contains(usage_error({"--db", "", "--n", "8"}), "--db needs a non-empty path"));
  CHECK(contains(usage_error({"show", "--n", "8"}), "not expected"));
  CHECK(contains(usage_error({"--n", "8", "show"}), "--n does not apply to 'show'"));
  CHECK(contains(usage_error({"--quiet", "merge", "a", "b"}), "--quiet does not apply to 'merge'"));
  CHECK(contains(usage_error({"merge", "out.json"}), "IN is required"));
  CHECK(contains(usage_error({"merge", "out.json", "--force", "a.json"}),
                 "argument was not expected: --force"));
}

TEST_CASE("search space: the tuner compares each M against the runtime's choice for that M") {
  // What the runtime launches without a database depends on the launch's rows: few rows stack
  // fewer per CTA (LayerNorm's bf16 backward at N = 128: 8 x 32 for many rows, 8 x 8 for 256),
  // and some rules apply to many rows only (its recompute: 16 x 16 in registers, not at 256).
  const auto limits = tilenorm::DeviceLimits::hopper();
  for (const char* kernel : {"layer_norm_backward", "layer_norm_backward_recompute"}) {
    CAPTURE(kernel);
    const tilenorm::LoweredProgram program = lowered(kernel);
    auto heuristic = [&](std::int64_t rows) {
      return tilenorm::contiguous_rows_heuristic(program, DType::bf16, DType::bf16, 128, limits,
                                                 rows);
    };
    CHECK(heuristic(0) == heuristic(std::int64_t{1} << 19));
    CHECK(heuristic(256) == tilenorm::heuristic_config(program, DType::bf16, DType::bf16, 128,
                                                       limits, 0, false, 256));
    CHECK(heuristic(256).rows_per_cta == 8);
    CHECK(heuristic(0).rows_per_cta > 8);
    // Both are candidates, so the tuner times them in its first round.
    const tilenorm::SearchSpace space =
        tilenorm::explore_search_space(program, DType::bf16, DType::bf16, 128, limits);
    for (std::int64_t rows : {std::int64_t{0}, std::int64_t{256}}) {
      CHECK(space.contains(heuristic(rows)));
    }
  }
}

// A named choice's parser reads back every value by its name, and refuses anything else with
// a message that lists the names.
template <class Choice, class Parse, class Name>
void check_named_choice(Parse parse, Name name, std::initializer_list<Choice> values,
                        const char* flag, const char* wrong, const std::string& refusal) {
  for (Choice value : values) CHECK(parse(flag, name(value)) == value);
  CHECK_THROWS_WITH_AS(parse(flag, wrong), refusal.c_str(), tilenorm::UsageError);
}

TEST_CASE("cli: named choices by name, and what to write otherwise") {
  namespace cli = tilenorm::cli;
  using tilenorm::EarlyColumns;
  using tilenorm::LoadPin;
  using tilenorm::MomentFusion;
  using tilenorm::PeeledRowShifts;
  check_named_choice(
      cli::parse_peeled_row_shifts, tilenorm::peeled_row_shifts_name,
      {PeeledRowShifts::automatic, PeeledRowShifts::per_thread, PeeledRowShifts::per_row},
      "--row-shifts", "each", "--row-shifts must be auto, per-thread or per-row, got 'each'");
  check_named_choice(cli::parse_load_pin, tilenorm::load_pin_name,
                     {LoadPin::rule, LoadPin::on, LoadPin::off, LoadPin::early}, "--load-pin",
                     "yes", "--load-pin must be rule, on, off or early, got 'yes'");
  check_named_choice(cli::parse_moment_fusion, tilenorm::moment_fusion_name,
                     {MomentFusion::rule, MomentFusion::on, MomentFusion::off}, "--moments",
                     "fused", "--moments must be rule, on or off, got 'fused'");
  check_named_choice(cli::parse_early_columns, tilenorm::early_columns_name,
                     {EarlyColumns::automatic, EarlyColumns::never, EarlyColumns::always},
                     "--early-columns", "yes",
                     "--early-columns must be auto, never or always, got 'yes'");
}

TEST_CASE("early_columns_pay: few parameter vectors, or every row block resident at once") {
  using tilenorm::early_columns_pay;
  constexpr int kSms = 132, kRegisters = 65536;
  // Up to five vectors per thread, whatever the rows.
  CHECK(early_columns_pay(5, 1 << 20, 128, kSms, kRegisters));
  CHECK(early_columns_pay(4, 1 << 20, 1024, kSms, kRegisters));
  // More: only where the row blocks fit at 255 registers per thread. CTAs of 128 threads then
  // fit twice per SM (264 on 132 SMs); CTAs of 1024 threads once, though no such CTA can take
  // 255 registers.
  CHECK(early_columns_pay(8, 264, 128, kSms, kRegisters));
  CHECK_FALSE(early_columns_pay(8, 265, 128, kSms, kRegisters));
  CHECK(early_columns_pay(8, 132, 1024, kSms, kRegisters));
  CHECK_FALSE(early_columns_pay(8, 133, 1024, kSms, kRegisters));
  CHECK(early_columns_pay(6, 1056, 32, kSms, kRegisters));
  CHECK_FALSE(early_columns_pay(6, 1057, 32, kSms, kRegisters));
}

TEST_CASE("device limits: a table of known GPUs drives the search space without a GPU") {
  const auto& l40s = tilenorm::known_device("l40s");
  CHECK(l40s.name == "L40S");
  CHECK(l40s.arch() == "sm_89");
  CHECK(l40s.shared_memory_per_block == 99 * 1024);
  CHECK_FALSE(l40s.clusters());
  CHECK(tilenorm::known_device("sm_100").name == "B200");
  CHECK(tilenorm::known_device("sm_90").clusters());
  CHECK(tilenorm::DeviceLimits::hopper().name == "H200");
  std::string message;
  try {
    tilenorm::known_device("sm_75");
  } catch (const tilenorm::Error& e) {
    message = e.what();
  }
  CHECK(message ==
        "unknown device 'sm_75' (known: A100 (sm_80), A10 (sm_86), L40S (sm_89), H100 (sm_90), "
        "H200 (sm_90), B200 (sm_100), RTX5090 (sm_120))");
  // An architecture with no device in the table takes the newest older one's limits, so that
  // clusters come only from sm_90 (tilenorm-dump --arch).
  CHECK(tilenorm::limits_for_arch("sm_86").name == "A10");
  CHECK(tilenorm::limits_for_arch("sm_87").name == "A10");
  CHECK_FALSE(tilenorm::limits_for_arch("sm_86").clusters());
  CHECK(tilenorm::limits_for_arch("sm_89").name == "L40S");
  CHECK(tilenorm::limits_for_arch("sm_90").clusters());
  CHECK(tilenorm::limits_for_arch("sm_90a").arch() == "sm_90");
  CHECK(tilenorm::limits_for_arch("sm_103").name == "B200");
  CHECK(tilenorm::limits_for_arch("sm_120").name == "RTX5090");
  // Clusters of 16 CTAs (non-portable) where they are known to run, the portable 8 elsewhere.
  CHECK(tilenorm::known_device("H200").cluster_ctas == 16);
  CHECK(tilenorm::known_device("B200").cluster_ctas == 16);
  CHECK(tilenorm::known_device("rtx5090").cluster_ctas == 8);
  CHECK(tilenorm::known_device("A100").cluster_ctas == 1);
  auto arch_error = [](std::string_view arch) {
    try {
      tilenorm::limits_for_arch(arch);
    } catch (const tilenorm::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(arch_error("sm_75") ==
        "no known device of sm_75 or an older architecture (the oldest known: sm_80)");
  CHECK(arch_error("gfx90a") == "not an architecture: 'gfx90a' (expected sm_XX)");
  CHECK(arch_error("sm_") == "not an architecture: 'sm_' (expected sm_XX)");
  // Less shared memory per block: the L40S prunes what the H200 keeps.
  const auto program = lowered("rms_norm");
  const auto on_l40s = tilenorm::build_search_space(program, DType::f32, DType::f32, 32768, l40s);
  const auto on_h200 = tilenorm::build_search_space(program, DType::f32, DType::f32, 32768,
                                                    tilenorm::DeviceLimits::hopper());
  for (const auto& candidate : on_l40s) CHECK(candidate.dynamic_shared_bytes <= 99 * 1024);
  CHECK(std::any_of(on_h200.begin(), on_h200.end(), [](const tilenorm::Candidate& c) {
    return c.dynamic_shared_bytes > 99 * 1024;
  }));

  const auto dry = parse_as<tilenorm::TuneCommand>({"--dry-run", "--arch", "a100", "--n", "4096"});
  CHECK(dry.arch == "a100");
  CHECK(usage_error({"--arch", "h100", "--n", "4096"}) ==
        "--arch only works with --dry-run (tuning times this GPU)");
  CHECK(usage_error({"--dry-run", "--arch", "sm_75", "--n", "4096"})
            .starts_with("--arch: unknown device 'sm_75'"));
}

TEST_CASE("tuner: each way a candidate is dropped has its own name") {
  using tilenorm::DropKind;
  std::vector<std::string_view> names;
  for (DropKind kind : {DropKind::does_not_compile, DropKind::spills, DropKind::wrong_results,
                        DropKind::check_failed, DropKind::launch_failed}) {
    names.push_back(tilenorm::drop_kind_name(kind));
  }
  CHECK(names == std::vector<std::string_view>{"does not compile", "spills", "wrong results",
                                               "check failed", "launch failed"});
  CHECK_THROWS_WITH(tilenorm::drop_kind_name(static_cast<DropKind>(99)),
                    "drop_kind_name: unknown kind 99");
}

namespace {

KernelConfig prefetched(int threads_per_row, int rows_per_cta) {
  KernelConfig config{};
  config.threads_per_row = threads_per_row;
  config.rows_per_cta = rows_per_cta;
  config.vec = 8;
  config.row_storage = static_cast<int>(RowStorage::prefetched);
  config.ctas_per_row = 1;
  return config;
}

}  // namespace

TEST_CASE("heuristic: a configuration that spills heavily gets more threads, then re-read rows") {
  using tilenorm::without_heavy_spills;
  const int prefetch = static_cast<int>(RowStorage::prefetched);
  const int global = static_cast<int>(RowStorage::global);
  std::vector<std::string> asked;
  // Spills by storage and threads per row; a missing entry cannot run.
  auto spills_from = [&](std::vector<std::tuple<int, int, int>> table) {
    return [&asked, table](const KernelConfig& c) -> std::optional<int> {
      asked.push_back(c.describe());
      for (const auto& [storage, threads, bytes] : table)
        if (c.row_storage == storage && c.threads_per_row == threads) return bytes;
      return std::nullopt;
    };
  };
  SUBCASE("within the tolerance: the heuristic's, compiled once") {
    const KernelConfig heuristic = prefetched(64, 2);
    CHECK(without_heavy_spills(heuristic,
                               spills_from({{prefetch, 64, tilenorm::kToleratedSpillBytes}})) ==
          heuristic);
    CHECK(asked.size() == 1);
  }
  SUBCASE("twice the threads, at the same CTA size") {
    const KernelConfig chosen = without_heavy_spills(
        prefetched(64, 2), spills_from({{prefetch, 64, 2704}, {prefetch, 128, 0}}));
    CHECK(chosen == prefetched(128, 1));
  }
  SUBCASE("more threads not enough: rows re-read on the heuristic's threads") {
    KernelConfig rereading = prefetched(256, 1);
    rereading.row_storage = global;
    const KernelConfig chosen = without_heavy_spills(
        prefetched(256, 1),
        spills_from({{prefetch, 256, 2980}, {prefetch, 512, 1292}, {global, 256, 0}}));
    CHECK(chosen == rereading);
  }
  SUBCASE("nothing within the tolerance: the one that spills least") {
    const KernelConfig chosen = without_heavy_spills(
        prefetched(256, 1),
        spills_from({{prefetch, 256, 2980}, {prefetch, 512, 1292}, {global, 256, 2000}}));
    CHECK(chosen == prefetched(512, 1));
  }
  SUBCASE("a heuristic configuration that cannot compile is left to fail where it runs") {
    const KernelConfig heuristic = prefetched(64, 2);
    CHECK(without_heavy_spills(heuristic, spills_from({})) == heuristic);
    CHECK(asked.size() == 1);
  }
}

TEST_CASE("heuristic: the four_reductions backward compiles within the spill tolerance") {
  // NVRTC's own spill counts, no GPU: the heuristic's configurations for this backward spill
  // kilobytes at bf16 N = 4096 and 16384 (NVRTC 13.0: 2704 and 2980 bytes).
  const tilenorm::LoweredProgram lowered = tilenorm::lower(tilenorm::backward(four_reductions()));
  const tilenorm::DeviceLimits limits = tilenorm::DeviceLimits::hopper();
  for (const auto& [rows, n] :
       {std::pair<std::int64_t, std::int64_t>{16384, 4096}, {4096, 16384}}) {
    CAPTURE(n);
    auto spills = [&](const KernelConfig& config) -> std::optional<int> {
      const tilenorm::KernelSpec spec =
          tilenorm::fit_shared_memory(lowered, {DType::bf16, DType::bf16, n, config}, limits);
      if (tilenorm::config_problem(lowered, spec)) return std::nullopt;
      return tilenorm::build_kernel(lowered, spec, "sm_90").spill_bytes;
    };
    const KernelConfig heuristic =
        tilenorm::heuristic_config(lowered, DType::bf16, DType::bf16, n, limits, 8, false, rows);
    const int heuristic_spill = spills(heuristic).value();
    if (heuristic_spill <= tilenorm::kToleratedSpillBytes) {
      MESSAGE("this NVRTC spills " << heuristic_spill << " bytes of " << heuristic.describe()
                                   << ": the rule has nothing to do at N = " << n);
      continue;
    }
    const KernelConfig chosen = tilenorm::without_heavy_spills(heuristic, spills);
    CAPTURE(chosen.describe());
    CHECK(spills(chosen).value() <= tilenorm::kToleratedSpillBytes);
    MESSAGE("N = " << n << ": " << heuristic.describe() << " spills " << heuristic_spill
                   << " bytes; " << chosen.describe() << " spills " << spills(chosen).value());
  }
}

TEST_CASE("heuristic: which main kernels launch programmatically") {
  using tilenorm::launches_programmatically;
  // One row block per CTA, however many waves: yes.
  CHECK(launches_programmatically(false, false, 65536, 0));
  // A persistent grid on fewer row blocks than fit at once (decode sizes): yes.
  CHECK(launches_programmatically(true, false, 8, 58));
  // One that fills the device: launched plainly, so that all of it is placed at once.
  CHECK_FALSE(launches_programmatically(true, false, 58, 58));
  CHECK_FALSE(launches_programmatically(true, false, 1024, 58));
  // A software cluster (cooperative): never.
  CHECK_FALSE(launches_programmatically(true, true, 4, 58));
}
