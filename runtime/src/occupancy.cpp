#include "tilenorm/runtime/occupancy.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "tilenorm/dsl/codegen.hpp"

namespace tilenorm {
namespace {

constexpr int kRegistersPerSm = 65536;
constexpr int kRegisterUnit = 8;  // per thread: a warp is given registers 256 at a time
constexpr int kCtasPerSm = 32;  // resident CTAs on sm_80, sm_90 and sm_100 (fewer on sm_86, sm_89)
constexpr int kClusterForwardRegisters = 128;

int threads_per_sm(std::string_view arch) {
  return arch.starts_with("sm_80") || arch.starts_with("sm_90") || arch.starts_with("sm_100")
             ? 2048
             : 1536;
}

// Whether `ctas` CTAs of `kernel` fit an SM's shared memory: each its static and dynamic bytes,
// and the 1 KiB the system reserves per CTA.
bool shared_memory_fits(const CompiledKernel& kernel, std::size_t dynamic_shared_bytes, int ctas,
                        std::size_t shared_memory_per_sm) {
  const std::size_t per_cta =
      static_cast<std::size_t>(kernel.shared_memory_bytes) + dynamic_shared_bytes + 1024;
  return per_cta * static_cast<std::size_t>(ctas) <= shared_memory_per_sm;
}

// `request` compiled with kMinCtasMacro defined to `ctas` (generated kernels read it in their
// __launch_bounds__).
CompiledKernel compile_with_min_ctas(const CompileRequest& request, int ctas,
                                     const DiskCache* cache) {
  CompileRequest bounded = request;
  bounded.options.push_back("-D" + std::string(kMinCtasMacro) + "=" + std::to_string(ctas));
  return compile_cached(bounded, cache);
}

}  // namespace

int ctas_per_sm_by_registers(int threads, int registers, std::string_view arch) {
  if (threads <= 0 || registers <= 0) return 0;
  const int allocated = (registers + kRegisterUnit - 1) / kRegisterUnit * kRegisterUnit;
  return std::min(
      {kRegistersPerSm / (allocated * threads), threads_per_sm(arch) / threads, kCtasPerSm});
}

int registers_for_ctas(int threads, int ctas) {
  if (threads <= 0 || ctas <= 0) return 0;
  const int registers = kRegistersPerSm / (threads * ctas) / kRegisterUnit * kRegisterUnit;
  return std::min(registers, 255 / kRegisterUnit * kRegisterUnit);
}

int occupancy_cta_limit(const GeneratedKernel& kernel) {
  if (kernel.ctas_per_row > 1 || kernel.min_ctas_per_sm > 0) return 0;
  return kernel.persistent ? 2 : kCtasPerSm;
}

int occupancy_register_ceiling(const GeneratedKernel& kernel) {
  const bool cluster_forward = kernel.ctas_per_row > 1 && !kernel.plan.needs_finish();
  return cluster_forward && kernel.min_ctas_per_sm == 0 ? kClusterForwardRegisters : 0;
}

CompiledKernel compile_for_occupancy(const CompileRequest& request, int threads_per_block,
                                     std::size_t dynamic_shared_bytes,
                                     std::size_t shared_memory_per_sm, int cta_limit,
                                     int register_ceiling, const DiskCache* cache) {
  CompiledKernel first = compile_cached(request, cache);
  if (first.spills()) {
    // Given no minimum of CTAs per SM, ptxas may hold a kernel to fewer registers than it needs
    // and spill (a peeled RMSNorm, bf16 N = 4097 on 128 threads: 56 registers and 8 bytes
    // spilled, NVRTC 13.0). The kernel that does not spill is the one to run: first at the next
    // two occupancies below the spilled build's (the next two minima of CTAs per SM that allow
    // it more registers), then at a minimum of one. A minimum of one alone takes more registers
    // than needed: a peeled LayerNorm backward, bf16 N = 1025 on 64 threads, prefetched, spills
    // at 72 and takes 95 at a minimum of one, where 80 (12 CTAs per SM) spill nothing; in the
    // twenty-third session a peeled fp16 LayerNorm at N = 2881 went from 72.8% to 54.0% of the
    // copy ceiling on the H200 that way (127 registers where 72 sufficed).
    std::vector<int> minima;
    for (int ctas = ctas_per_sm_by_registers(threads_per_block, first.registers, request.arch) - 1;
         ctas > 1 && minima.size() < 2; --ctas) {
      if (registers_for_ctas(threads_per_block, ctas) > first.registers) minima.push_back(ctas);
    }
    minima.push_back(1);
    for (const int minimum : minima) {
      CompiledKernel unspilled = compile_with_min_ctas(request, minimum, cache);
      if (!unspilled.spills()) {
        first = std::move(unspilled);
        break;
      }
    }
  }
  if (first.registers <= 0) return first;
  if (register_ceiling > 0 && first.registers > register_ceiling) {
    const int ctas = ctas_per_sm_by_registers(threads_per_block, register_ceiling, request.arch);
    if (ctas <= 0 || !shared_memory_fits(first, dynamic_shared_bytes, ctas, shared_memory_per_sm))
      return first;
    CompiledKernel capped = compile_with_min_ctas(request, ctas, cache);
    return capped.spills() ? first : capped;
  }
  const int ctas = ctas_per_sm_by_registers(threads_per_block, first.registers, request.arch);
  if (ctas > cta_limit) return first;
  const int wanted = ctas + 1;
  const bool room = ctas_per_sm_by_registers(threads_per_block, 1, request.arch) >= wanted &&
                    shared_memory_fits(first, dynamic_shared_bytes, wanted, shared_memory_per_sm);
  const int target = registers_for_ctas(threads_per_block, wanted);
  // A kernel alone on its SM overlaps nothing with its loads: a second CTA is worth any count
  // of registers that does not spill.
  const bool too_far = ctas != 1 && first.registers - target > kOccupancySlack;
  if (!room || target <= 0 || too_far) return first;
  CompiledKernel second = compile_with_min_ctas(request, wanted, cache);
  return second.spills() ? first : second;
}

}  // namespace tilenorm
