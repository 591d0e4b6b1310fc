#include "tilenorm/runtime/occupancy.hpp"

#include <doctest/doctest.h>

#include "tilenorm/dsl/codegen.hpp"
#include "tilenorm/dsl/passes.hpp"
#include "tilenorm/kernels/programs.hpp"

namespace {

using tilenorm::ctas_per_sm_by_registers;
using tilenorm::registers_for_ctas;

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
  const tilenorm::LoweredProgram program =
      tilenorm::lower(tilenorm::kernels::builtin_program("rms_norm_backward"));
  const tilenorm::KernelSpec spec{
      tilenorm::DType::bf16,
      tilenorm::DType::bf16,
      512,
      {32, 8, 8, static_cast<int>(tilenorm::RowStorage::prefetched), 1}};
  const tilenorm::GeneratedKernel kernel = tilenorm::generate_cuda(program, spec);
  const tilenorm::CompileRequest request{kernel.source, kernel.name, "sm_90", {}};
  const tilenorm::CompiledKernel plain = tilenorm::compile_cached(request, nullptr);
  const tilenorm::CompiledKernel fitted = tilenorm::compile_for_occupancy(
      request, kernel.threads_per_block, kernel.dynamic_shared_bytes, 228 * 1024,
      tilenorm::occupancy_cta_limit(kernel), nullptr);
  CAPTURE(plain.registers);
  CAPTURE(fitted.registers);
  CHECK_FALSE(fitted.spills());
  CHECK(ctas_per_sm_by_registers(256, plain.registers, "sm_90") == 2);
  CHECK(ctas_per_sm_by_registers(256, fitted.registers, "sm_90") == 3);
  // Without the shared memory for a third CTA, nothing is squeezed.
  const std::size_t per_cta = static_cast<std::size_t>(plain.shared_memory_bytes) + 1024;
  const tilenorm::CompiledKernel crowded = tilenorm::compile_for_occupancy(
      request, kernel.threads_per_block, kernel.dynamic_shared_bytes, 3 * per_cta - 1, 32, nullptr);
  CHECK(crowded.registers == plain.registers);
  // Nor past the CTA limit: this persistent kernel may gain a CTA from two resident ones, and
  // has two.
  CHECK(kernel.persistent);
  CHECK(tilenorm::occupancy_cta_limit(kernel) == 2);
  const tilenorm::CompiledKernel limited = tilenorm::compile_for_occupancy(
      request, kernel.threads_per_block, kernel.dynamic_shared_bytes, 228 * 1024, 1, nullptr);
  CHECK(limited.registers == plain.registers);
}

TEST_CASE("occupancy: a persistent kernel at three CTAs per SM is not squeezed to four") {
  // RMSNorm's recomputing backward at N = 1024 on CTAs of 128 threads: a few registers over the
  // count for a fourth CTA, which measured 7 points slower than three (H200, bf16).
  const tilenorm::LoweredProgram program =
      tilenorm::lower(tilenorm::kernels::builtin_program("rms_norm_backward_recompute"));
  const tilenorm::KernelSpec spec{
      tilenorm::DType::bf16,
      tilenorm::DType::bf16,
      1024,
      {32, 4, 8, static_cast<int>(tilenorm::RowStorage::prefetched), 1}};
  const tilenorm::GeneratedKernel kernel = tilenorm::generate_cuda(program, spec);
  const tilenorm::CompileRequest request{kernel.source, kernel.name, "sm_90", {}};
  const tilenorm::CompiledKernel plain = tilenorm::compile_cached(request, nullptr);
  CAPTURE(plain.registers);
  REQUIRE(ctas_per_sm_by_registers(128, plain.registers, "sm_90") == 3);
  const tilenorm::CompiledKernel fitted = tilenorm::compile_for_occupancy(
      request, kernel.threads_per_block, kernel.dynamic_shared_bytes, 228 * 1024,
      tilenorm::occupancy_cta_limit(kernel), nullptr);
  CHECK(fitted.registers == plain.registers);
  // With room for more CTAs, the same kernel would be squeezed to four.
  const tilenorm::CompiledKernel unlimited = tilenorm::compile_for_occupancy(
      request, kernel.threads_per_block, kernel.dynamic_shared_bytes, 228 * 1024, 32, nullptr);
  CHECK(ctas_per_sm_by_registers(128, unlimited.registers, "sm_90") == 4);
}
