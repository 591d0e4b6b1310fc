#include "tilenorm/runtime/heuristics.hpp"

#include <algorithm>
#include <cctype>
#include <string>

#include "tilenorm/dsl/error.hpp"

namespace tilenorm {
namespace {

// Row values per thread (and array) up to which a persistent kernel prefetches.
constexpr std::int64_t kPrefetchValues = 16;
// Vectors of a row each CTA of a cluster keeps, and the largest cluster (non-portable above 8).
constexpr std::int64_t kClusterSliceVectors = 1024;
// Rows longer than this many vectors go to a cluster (H200, 2026-11-30: at 2048 vectors, bf16
// N = 16384, one CTA per row was faster: RMSNorm backward 68-74% of the copy ceiling against
// 49% split across 2 CTAs; at 4096 vectors and more the cluster won: LayerNorm 15 -> 44%).
constexpr std::int64_t kClusterRowVectors = 2048;
constexpr int kMaxClusterCtas = 16;
constexpr std::int64_t kLongRowVectors = 1024;

int next_power_of_two(std::int64_t v) {
  int p = 1;
  while (p < v && p < (1 << 30)) p *= 2;
  return p;
}

// Small rows get several rows per CTA so that a block still has a useful number of threads.
KernelConfig with_rows(int threads_per_row, int vec, RowStorage storage) {
  const int rows = std::max(1, 256 / threads_per_row);
  return {threads_per_row, rows, vec, static_cast<int>(storage), 1};
}

}  // namespace

DeviceLimits device_limits(const driver::DeviceInfo& info) {
  DeviceLimits limits;
  limits.shared_memory_per_block = info.shared_memory_per_block_optin;
  limits.multiprocessors = info.multiprocessors;
  limits.clusters = info.cluster_launch;
  return limits;
}

std::span<const DeviceLimits> known_devices() {
  // Opt-in shared memory per block and SM counts from the vendor's tuning guides; the
  // heuristic uses nothing else.
  static constexpr DeviceLimits kDevices[] = {
      {163 * 1024, 108, "A100", "sm_80", false}, {99 * 1024, 142, "L40S", "sm_89", false},
      {227 * 1024, 132, "H100", "sm_90", true},  {227 * 1024, 132, "H200", "sm_90", true},
      {227 * 1024, 148, "B200", "sm_100", true},
  };
  return kDevices;
}

DeviceLimits DeviceLimits::hopper() {
  return known_device("H200");
}

const DeviceLimits& known_device(std::string_view name_or_arch) {
  auto same = [](std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) ==
                    std::tolower(static_cast<unsigned char>(y));
           });
  };
  std::string known;
  for (const DeviceLimits& device : known_devices()) {
    if (same(device.name, name_or_arch) || same(device.arch, name_or_arch)) return device;
    known += (known.empty() ? "" : ", ") + std::string(device.name) + " (" +
             std::string(device.arch) + ")";
  }
  throw Error("unknown device '" + std::string(name_or_arch) + "' (known: " + known + ")");
}

int widest_vec(DType io_dtype, DType param_dtype) {
  return static_cast<int>(16 / std::max(dtype_size(io_dtype), dtype_size(param_dtype)));
}

KernelConfig heuristic_config(const LoweredProgram& program, DType io_dtype, DType param_dtype,
                              std::int64_t n, const DeviceLimits& limits, int max_vec,
                              bool peel_rows) {
  const int widest = widest_vec(io_dtype, param_dtype);
  const int vec = max_vec > 0 ? std::min(widest, max_vec) : widest;
  // Sized by the row's vectors; a peeled row may take one more (a head and a tail), which the
  // checks below count.
  const std::int64_t chunks = (n + vec - 1) / vec;
  auto fits = [&](const KernelConfig& config) {
    const KernelSpec spec{io_dtype, param_dtype, n, config, peel_rows};
    return !config_problem(program, spec) &&
           dynamic_shared_memory_bytes(program, spec) <= limits.shared_memory_per_block;
  };
  // Registers: about four vectors per thread, as few threads per row as that allows.
  const int narrowest = std::min(32, next_power_of_two(chunks));
  // A persistent kernel (a backward) prefetches the next row block when the registers allow:
  // measured on the H200, it pays where few values per thread leave the SM few loads in flight
  // (N = 128: 71 -> 87% of the copy for LayerNorm) and costs where registers are already
  // scarce (N = 1024, 32 values per thread: 86 -> 81%).
  const bool persistent = plan_kernels(program).persistent;
  // A long row of a persistent kernel (a backward, which would otherwise spill or re-read its
  // rows) is split across a cluster so that each CTA keeps a slice of at most
  // kClusterSliceVectors vectors, two per thread, and the kernel prefetches the next row's
  // slice while this one's exchanges are waited on. Forward kernels measured faster on one CTA
  // per row (H200, 2026-11-30, docs/performance.md); tuning still searches clusters for them.
  if (limits.clusters && persistent && chunks > kClusterRowVectors) {
    int ctas = 1;
    while (ctas < kMaxClusterCtas && (chunks + ctas - 1) / ctas > kClusterSliceVectors) ctas *= 2;
    const std::int64_t slice = (chunks + ctas - 1) / ctas;
    // Two vectors per thread where the registers allow, else four (fewer threads per CTA
    // leave each thread more registers).
    for (std::int64_t per_thread : {2, 4}) {
      const int threads =
          std::clamp(next_power_of_two((slice + per_thread - 1) / per_thread), 32, 1024);
      for (RowStorage storage : {RowStorage::prefetched, RowStorage::registers}) {
        const KernelConfig config{threads, 1, vec, static_cast<int>(storage), ctas};
        if (fits(config)) return config;
      }
    }
  }
  // Programs with two reduction phases (LayerNorm) keep up to eight vectors per thread on long
  // rows: fewer warps per row make each phase's barrier cheaper (H200, N = 16384: 256 threads
  // per row 86.9% of the copy ceiling, 512 threads 57%).
  const std::int64_t vectors_per_thread =
      program.reduction_phases.size() >= 2 && chunks > kLongRowVectors ? 8 : 4;
  for (int threads =
           std::clamp(next_power_of_two((chunks + vectors_per_thread - 1) / vectors_per_thread),
                      narrowest, 1024);
       threads <= 1024; threads *= 2) {
    const KernelConfig config = with_rows(threads, vec, RowStorage::registers);
    if (!fits(config)) continue;
    const std::int64_t values_per_thread = (chunks + threads - 1) / threads * vec;
    if (persistent && values_per_thread <= kPrefetchValues) {
      const KernelConfig prefetched = with_rows(threads, vec, RowStorage::prefetched);
      if (fits(prefetched)) return prefetched;
    }
    return config;
  }
  // Too large for registers: stash the row in shared memory, else re-read it from L2/HBM.
  // (Reached only without clusters, or for rows too long even for a cluster of 16.)
  const KernelConfig shared = with_rows(1024, vec, RowStorage::shared);
  if (fits(shared)) return shared;
  return with_rows(1024, vec, RowStorage::global);
}

}  // namespace tilenorm
