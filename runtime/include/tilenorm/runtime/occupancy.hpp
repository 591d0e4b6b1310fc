#pragma once
// Register counts and CTAs per SM: a kernel a few registers over what one more CTA per SM
// allows is compiled again at that count (ptxas's register choice does not look at occupancy).
#include <cstddef>
#include <string_view>

#include "tilenorm/dsl/codegen.hpp"
#include "tilenorm/runtime/disk_cache.hpp"
#include "tilenorm/runtime/nvrtc.hpp"

namespace tilenorm {

// How far (registers per thread) a kernel may be pushed down to reach one more CTA per SM.
inline constexpr int kOccupancySlack = 8;

// CTAs of `threads` threads that fit an SM's 64K registers at `registers` per thread (allocated
// per warp, in units of 8 per thread) and its resident-thread limit for `arch` (2048 on sm_80,
// sm_90 and sm_100; 1536 on the others).
int ctas_per_sm_by_registers(int threads, int registers, std::string_view arch);

// The most registers per thread (a multiple of 8, at most 255) at which `ctas` CTAs of
// `threads` threads fit an SM's registers, or 0 if none does.
int registers_for_ctas(int threads, int ctas);

// Up to how many resident CTAs per SM a generated kernel is worth another one (measured on the
// H200, docs/performance.md, twelfth and thirteenth sessions): a kernel of one row block per CTA
// at any occupancy (more CTAs hide more latency); a persistent one only from two CTAs (a third
// paid 11-12 points; a fourth of 128 threads cost 7, a sixth of 256 threads 7); 0, never, for
// clusters (their CTAs per SM follow the cluster) and kernels whose generator asked for its own
// count (staged rows).
int occupancy_cta_limit(const GeneratedKernel& kernel);

// The register count a generated kernel is rebuilt down to when ptxas gives it more, or 0 for
// none: 128 for a forward split across a cluster's CTAs (no finishing kernel). LayerNorm's bf16
// and fp16 forwards there took 168, holding the CTA's weight and bias chunks across the row
// loop; at 128 (RMSNorm's count) and no spills, N = 65536 on clusters of 8 x 128 threads went
// from 3 to 4 CTAs per SM and +1.8-1.9 points of the copy ceiling (H100, seventy-first session),
// 32768 on 8 x 64 from 6 to 8 and within 0.3.
int occupancy_register_ceiling(const GeneratedKernel& kernel);

// compile_cached; where that spilled, again with kMinCtasMacro defined to the next two CTA
// counts per SM below the spilled build's that allow more registers, then to 1, keeping the
// first build that does not spill (given no minimum, ptxas may hold a kernel to fewer registers
// than it needs). Then, where the kernel has at most `cta_limit` resident CTAs per SM and its
// registers are at most kOccupancySlack (any number, for a kernel alone on its SM) above the
// count at which one more CTA of `threads_per_block` threads fits an SM (by registers, resident
// threads and shared memory: the kernel's static and `dynamic_shared_bytes` per CTA, plus the
// 1 KiB the system reserves per CTA, out of `shared_memory_per_sm`), compiles again with
// kMinCtasMacro defined to that many CTAs (generated kernels read it in their
// __launch_bounds__), and keeps that build if ptxas did not spill. A kernel over a nonzero
// `register_ceiling` is instead compiled at the CTAs per SM that the ceiling allows (shared
// memory permitting), kept if it does not spill.
CompiledKernel compile_for_occupancy(const CompileRequest& request, int threads_per_block,
                                     std::size_t dynamic_shared_bytes,
                                     std::size_t shared_memory_per_sm, int cta_limit,
                                     int register_ceiling, const DiskCache* cache);

}  // namespace tilenorm
