#include "tilenorm/runtime/occupancy.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "tilenorm/dsl/codegen.hpp"
#include "tilenorm/dsl/passes.hpp"
#include "tilenorm/kernels/programs.hpp"
#include "tilenorm/runtime/runtime.hpp"

namespace {

using tilenorm::ctas_per_sm_by_registers;
using tilenorm::registers_for_ctas;

constexpr std::size_t kH200SharedPerSm = 228 * 1024;

// A built-in program's bf16 kernel at N in a prefetching configuration of `threads` x `rows`,
// its sm_90 compile request, and that request compiled plainly.
struct BuiltKernel {
  tilenorm::GeneratedKernel kernel;
  tilenorm::CompileRequest request;
  tilenorm::CompiledKernel plain;

  // compile_for_occupancy of this kernel, given the shared memory per SM, the CTA limit and the
  // register ceiling.
  tilenorm::CompiledKernel fitted(std::size_t shared_per_sm, int cta_limit,
                                  int register_ceiling = 0) const {
    return tilenorm::compile_for_occupancy(request, kernel.threads_per_block,
                                           kernel.dynamic_shared_bytes, shared_per_sm, cta_limit,
                                           register_ceiling, nullptr);
  }
  // compile_for_occupancy as the runtime calls it, on an H200's shared memory per SM.
  tilenorm::CompiledKernel fitted_by_rules() const {
    return fitted(kH200SharedPerSm, tilenorm::occupancy_cta_limit(kernel),
                  tilenorm::occupancy_register_ceiling(kernel));
  }
};

// A built-in program's kernel for `spec`, its sm_90 compile request, and that request compiled
// plainly.
BuiltKernel build(const char* name, const tilenorm::KernelSpec& spec) {
  tilenorm::GeneratedKernel kernel =
      tilenorm::generate_cuda(tilenorm::lower(tilenorm::kernels::builtin_program(name)), spec);
  tilenorm::CompileRequest request{kernel.source, kernel.name, "sm_90", {}};
  tilenorm::CompiledKernel plain = tilenorm::compile_cached(request, nullptr);
  return {std::move(kernel), std::move(request), std::move(plain)};
}

BuiltKernel build_prefetched(const char* name, std::int64_t n, int threads, int rows,
                             int ctas_per_row = 1) {
  return build(name, {tilenorm::DType::bf16,
                      tilenorm::DType::bf16,
                      n,
                      {threads, rows, 8, static_cast<int>(tilenorm::RowStorage::prefetched),
                       ctas_per_row, 0, 0}});
}

// A kernel for rows that may start misaligned, one row of `threads` threads per CTA.
BuiltKernel build_peeled(const char* name, tilenorm::DType dtype, std::int64_t n, int threads,
                         tilenorm::RowStorage storage) {
  return build(name, {dtype, dtype, n, {threads, 1, 8, static_cast<int>(storage), 1, 0, 0}, true});
}

}  // namespace

TEST_CASE("occupancy: CTAs per SM by registers and resident threads") {
  // 64K registers, allocated 8 per thread at a time: 80 registers fit three CTAs of 256 threads,
  // 81 to 88 two.
  CHECK(ctas_per_sm_by_registers(256, 80, "sm_90") == 3);
  CHECK(ctas_per_sm_by_registers(256, 81, "sm_90") == 2);
  CHECK(ctas_per_sm_by_registers(256, 88, "sm_90") == 2);
  CHECK(ctas_per_sm_by_registers(1024, 64, "sm_90") == 1);
  CHECK(ctas_per_sm_by_registers(1024, 65, "sm_90") == 0);
  // Few registers: the resident threads decide, 2048 on sm_90 and 1536 on sm_89.
  CHECK(ctas_per_sm_by_registers(512, 16, "sm_90") == 4);
  CHECK(ctas_per_sm_by_registers(512, 16, "sm_89") == 3);
  CHECK(ctas_per_sm_by_registers(0, 16, "sm_90") == 0);

  CHECK(registers_for_ctas(256, 3) == 80);
  CHECK(registers_for_ctas(128, 4) == 128);
  CHECK(registers_for_ctas(128, 1) == 248);  // at most 255, a multiple of 8
  CHECK(registers_for_ctas(256, 0) == 0);
}

TEST_CASE("occupancy: a kernel a few registers over another CTA per SM is compiled to fit it") {
  // RMSNorm's backward at bf16 N = 512 on 32 threads x 8 rows (256 threads, the heuristic's
  // configuration): NVRTC 13.0 gives it 86 registers, two CTAs per SM; asked for three, 80 and
  // no spills.
  const BuiltKernel built = build_prefetched("rms_norm_backward", 512, 32, 8);
  const tilenorm::CompiledKernel& plain = built.plain;
  const tilenorm::CompiledKernel fitted =
      built.fitted(kH200SharedPerSm, tilenorm::occupancy_cta_limit(built.kernel));
  CAPTURE(plain.registers);
  CAPTURE(fitted.registers);
  CHECK_FALSE(fitted.spills());
  CHECK(ctas_per_sm_by_registers(256, plain.registers, "sm_90") == 2);
  CHECK(ctas_per_sm_by_registers(256, fitted.registers, "sm_90") == 3);
  // Without the shared memory for a third CTA, nothing is squeezed.
  const std::size_t per_cta = static_cast<std::size_t>(plain.shared_memory_bytes) + 1024;
  CHECK(built.fitted(3 * per_cta - 1, 32).registers == plain.registers);
  // Nor past the CTA limit: this persistent kernel may gain a CTA from two resident ones, and
  // has two.
  CHECK(built.kernel.persistent);
  CHECK(tilenorm::occupancy_cta_limit(built.kernel) == 2);
  CHECK(built.fitted(kH200SharedPerSm, 1).registers == plain.registers);
}

TEST_CASE("occupancy: a persistent kernel at three CTAs per SM is not squeezed to four") {
  // RMSNorm's recomputing backward at N = 1024 on CTAs of 128 threads: a few registers over the
  // count for a fourth CTA, which measured 7 points slower than three (H200, bf16).
  const BuiltKernel built = build_prefetched("rms_norm_backward_recompute", 1024, 32, 4);
  CAPTURE(built.plain.registers);
  REQUIRE(ctas_per_sm_by_registers(128, built.plain.registers, "sm_90") == 3);
  const int limit = tilenorm::occupancy_cta_limit(built.kernel);
  CHECK(built.fitted(kH200SharedPerSm, limit).registers == built.plain.registers);
  // With room for more CTAs, the same kernel would be squeezed to four.
  CHECK(ctas_per_sm_by_registers(128, built.fitted(kH200SharedPerSm, 32).registers, "sm_90") == 4);
}

TEST_CASE("occupancy: a kernel that spills with no minimum of CTAs is built without spills") {
  // A peeled RMSNorm at bf16 N = 4097 on 128 threads, in registers (the heuristic's
  // configuration): given no minimum, NVRTC 13.0 held it to 56 registers and spilled 16 bytes;
  // with a minimum of one CTA per SM it spills nothing. The kernel built is one that does not
  // spill.
  const BuiltKernel built =
      build_peeled("rms_norm", tilenorm::DType::bf16, 4097, 128, tilenorm::RowStorage::registers);
  tilenorm::CompileRequest relaxed = built.request;
  relaxed.options.push_back("-D" + std::string(tilenorm::kMinCtasMacro) + "=1");
  const tilenorm::CompiledKernel one_cta = tilenorm::compile_cached(relaxed, nullptr);
  CAPTURE(built.plain.registers);
  CAPTURE(one_cta.registers);
  REQUIRE_FALSE(one_cta.spills());
  if (!built.plain.spills())
    MESSAGE("this NVRTC does not spill the plain compile: the fallback is idle");
  CHECK_FALSE(built.fitted(kH200SharedPerSm, tilenorm::occupancy_cta_limit(built.kernel)).spills());
}

TEST_CASE("occupancy: a kernel that spills takes the next occupancies' registers before no limit") {
  // A peeled LayerNorm backward at bf16 N = 1025 on 64 threads, prefetched: NVRTC 13.0 held it
  // to 72 registers (14 CTAs per SM) and spilled 8 bytes; at a minimum of one CTA per SM it took
  // 95 (10 CTAs). At the next occupancy that allows more registers, 12 CTAs, 80 spill nothing.
  const BuiltKernel built = build_peeled("layer_norm_backward", tilenorm::DType::bf16, 1025, 64,
                                         tilenorm::RowStorage::prefetched);
  const tilenorm::CompiledKernel fitted =
      built.fitted(kH200SharedPerSm, tilenorm::occupancy_cta_limit(built.kernel));
  CAPTURE(built.plain.registers);
  CAPTURE(fitted.registers);
  CHECK_FALSE(fitted.spills());
  if (!built.plain.spills()) {
    MESSAGE("this NVRTC does not spill the plain compile: the stepped relaxation is idle");
    return;
  }
  CHECK(ctas_per_sm_by_registers(64, fitted.registers, "sm_90") >=
        ctas_per_sm_by_registers(64, built.plain.registers, "sm_90") - 2);
}

TEST_CASE("occupancy: a kernel alone on its SM takes a second CTA at any register count") {
  // A peeled fp32 RMSNorm at N = 16383 on 1024 threads, its row in shared memory (the
  // heuristic's configuration): NVRTC 13.0 gives it 44 registers, one CTA per SM, 12 over the
  // count for two; asked for two, 32 and no spills (H200, twenty-sixth session: 68.6% of the copy
  // ceiling against 86.6%). A kernel with two CTAs per SM is still squeezed only within
  // kOccupancySlack.
  const BuiltKernel built =
      build("rms_norm", {tilenorm::DType::f32,
                         tilenorm::DType::f32,
                         16383,
                         {1024, 1, 4, static_cast<int>(tilenorm::RowStorage::shared), 1, 0, 0},
                         true});
  const tilenorm::CompiledKernel fitted =
      built.fitted(kH200SharedPerSm, tilenorm::occupancy_cta_limit(built.kernel));
  CAPTURE(built.plain.registers);
  CAPTURE(fitted.registers);
  REQUIRE(ctas_per_sm_by_registers(1024, built.plain.registers, "sm_90") == 1);
  CHECK(built.plain.registers - registers_for_ctas(1024, 2) > tilenorm::kOccupancySlack);
  CHECK_FALSE(fitted.spills());
  CHECK(ctas_per_sm_by_registers(1024, fitted.registers, "sm_90") == 2);
}

TEST_CASE("occupancy: a forward on clusters is built within 128 registers, a backward is not") {
  // LayerNorm's bf16 forward at N = 65536 on clusters of 8 x 128 threads, prefetched (the
  // heuristic's configuration): NVRTC 13.0 gives it 168 registers, three CTAs per SM; within
  // 128, four, and no spills.
  const BuiltKernel forward = build_prefetched("layer_norm", 65536, 128, 1, 8);
  REQUIRE(tilenorm::occupancy_register_ceiling(forward.kernel) == 128);
  const tilenorm::CompiledKernel fitted = forward.fitted_by_rules();
  CAPTURE(forward.plain.registers);
  CAPTURE(fitted.registers);
  CHECK(forward.plain.registers > 128);
  CHECK(fitted.registers <= 128);
  CHECK_FALSE(fitted.spills());
  CHECK(ctas_per_sm_by_registers(128, fitted.registers, "sm_90") == 4);
  // Without the shared memory for the fourth CTA, the plain build stays.
  const std::size_t per_cta = static_cast<std::size_t>(forward.plain.shared_memory_bytes) +
                              forward.kernel.dynamic_shared_bytes + 1024;
  CHECK(forward.fitted(4 * per_cta - 1, 0, 128).registers == forward.plain.registers);

  // RMSNorm's forward there is within the ceiling already; the backward's cluster kernels (which
  // have a finishing kernel) have no ceiling.
  const BuiltKernel rms = build_prefetched("rms_norm", 65536, 128, 1, 8);
  CHECK(rms.fitted_by_rules().registers == rms.plain.registers);
  const BuiltKernel backward = build_prefetched("layer_norm_backward", 65536, 128, 1, 8);
  CHECK(tilenorm::occupancy_register_ceiling(backward.kernel) == 0);

  // build_kernel (the runtime's and the tuner's compile) applies the ceiling.
  const tilenorm::BuiltKernel built = tilenorm::build_kernel(
      tilenorm::lower(tilenorm::kernels::builtin_program("layer_norm")),
      {tilenorm::DType::bf16,
       tilenorm::DType::bf16,
       65536,
       {128, 1, 8, static_cast<int>(tilenorm::RowStorage::prefetched), 8, 0, 0}},
      "sm_90", false);
  CHECK(built.registers == fitted.registers);
  CHECK(built.spill_bytes == 0);
}
