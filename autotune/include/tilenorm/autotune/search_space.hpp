#pragma once
// The autotuner's search space for one (program, dtype, N): the cartesian product of a candidate
// domain per KernelConfig field, found through the struct's Boost.Hana fields (so a new knob
// needs a domain here and nothing per kernel), pruned before anything is compiled. Every pruned
// configuration keeps the rule and the reason that removed it (docs/autotuning.md).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tilenorm/dsl/codegen.hpp"
#include "tilenorm/runtime/heuristics.hpp"

namespace tilenorm {

// The values tried for one KernelConfig field.
struct FieldDomain {
  std::string field;
  std::vector<int> values;
};

// One domain per KernelConfig field, in declaration order. Throws tilenorm::Error naming the
// field when KernelConfig has a field this file has no domain for.
std::vector<FieldDomain> search_domains(DType io_dtype, DType param_dtype);

// The rules that remove a configuration, checked in this order (the first one that applies is
// the one reported).
enum class PruneRule {
  moments_scope,       // moments other than the rule where they lower the program as the rule
                       // does, in a program that does not sum across rows (a forward), or
                       // outside kernels that fetch ahead (one CTA's prefetched rows, a cluster's
                       // prefetched, staged or pipelined slices)
  invalid_config,      // config_problem(): divisibility, register budget, vec width, block size
  column_fetch_scope,  // column_fetch early or late where the rule does the same, or on a
                       // kernel that cannot fetch its column parameters early
  shared_memory,       // dynamic shared memory over the device's per-block limit
  misaligned_vec,      // contiguous rows of N elements are not aligned for this vec
  narrower_vec,        // narrower than the widest usable vec (the runtime narrows by itself)
  no_clusters,         // ctas_per_row > 1 without thread-block clusters, or past their size
  needless_cluster,    // a cluster for a short row, slices under 256 vectors, or slices not
                       // held in registers, one row per CTA (a saved-statistics backward's
                       // prefetched slices: up to four)
  forward_prefetch,    // prefetched rows for a program without sums across rows, no cluster,
                       // rows under 320 vectors
  staged_scope,        // staged rows outside a backward, or its slices too short to need them
  small_block,         // fewer than 64 threads per CTA
  idle_threads,        // more than half of a row's threads would have no vector to work on
  uncoalesced,         // a row's threads read less than a 128-byte line per step
  serial_row,          // each thread walks more than 16 vectors (below 256 threads per row)
  stacked_rows,        // rows stacked past a 256-thread CTA
  dominated_storage,   // shared/global while the row fits registers with <= 32 values per thread
  spilled_partials,    // column partial sums in registers past the per-thread budget: they spill
  ragged_odd_cluster,  // a cluster size other than a power of two, outside forwards whose
                       // sweeps tile the row exactly
  load_pin_scope,      // load_pin on or off where the rule builds the same kernel, or outside
                       // clusters of 16 on rows of 2048 vectors and more
};
std::string_view prune_rule_name(PruneRule rule);

// The heuristic configuration the runtime picks for contiguous rows of N (peeled where N
// misaligns the rows and the kernel can peel) in a launch of `launch_rows` rows (0: many): what
// tuning compares its winner at that M against.
KernelConfig contiguous_rows_heuristic(const LoweredProgram& program, DType io_dtype,
                                       DType param_dtype, std::int64_t n,
                                       const DeviceLimits& limits, std::int64_t launch_rows = 0);

struct Candidate {
  KernelConfig config;
  std::size_t dynamic_shared_bytes = 0;
};

struct PrunedCandidate {
  KernelConfig config;
  PruneRule rule;
  std::string reason;  // the rule applied to this configuration, with its numbers
};

struct SearchSpace {
  std::vector<Candidate> candidates;  // survivors, in enumeration order
  std::vector<PrunedCandidate> pruned;
  std::size_t total() const { return candidates.size() + pruned.size(); }
  // Whether `config` survived pruning (the tuner compiles and times it).
  bool contains(const KernelConfig& config) const;
};

// The widest vec that contiguous rows of `n` elements allow (row starts stay aligned), capped at
// widest_vec(io_dtype, param_dtype).
int widest_row_aligned_vec(DType io_dtype, DType param_dtype, std::int64_t n);

// The whole space with every pruned configuration and its reason (for --dry-run).
SearchSpace explore_search_space(const LoweredProgram& program, DType io_dtype, DType param_dtype,
                                 std::int64_t n, const DeviceLimits& limits);

// Only the survivors: what the tuner compiles and times.
std::vector<Candidate> build_search_space(const LoweredProgram& program, DType io_dtype,
                                          DType param_dtype, std::int64_t n,
                                          const DeviceLimits& limits);

// A short form for tables, generic over the fields: "tpr=128 rpc=2 vec=8 registers" (a
// multi-word field by its initials, row_storage by its name).
std::string short_config(const KernelConfig& config);

}  // namespace tilenorm
