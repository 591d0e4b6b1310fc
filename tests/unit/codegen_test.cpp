// CUDA generation: the text it produces, the configurations it refuses, the heuristic's
// choices, and real NVRTC compiles of the result (no GPU needed).
#include "tilenorm/dsl/codegen.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include "tilenorm/dsl/error.hpp"
#include "tilenorm/kernels/programs.hpp"
#include "tilenorm/runtime/heuristics.hpp"
#include "tilenorm/runtime/runtime.hpp"

namespace {

using tilenorm::DType;
using tilenorm::KernelConfig;
using tilenorm::KernelSpec;
using tilenorm::LoweredProgram;
using tilenorm::RowStorage;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const LoweredProgram& lowered(const std::string& name) {
  static const std::vector<std::pair<std::string, LoweredProgram>> all = [] {
    std::vector<std::pair<std::string, LoweredProgram>> list;
    for (const auto& kernel : tilenorm::kernels::builtin_kernels()) {
      list.emplace_back(kernel.name, tilenorm::lower(kernel.program));
    }
    return list;
  }();
  for (const auto& [kernel_name, program] : all) {
    if (kernel_name == name) return program;
  }
  FAIL("no built-in kernel named ", name);
  return all.front().second;
}

std::vector<std::string> builtin_names() {
  std::vector<std::string> names;
  for (const auto& kernel : tilenorm::kernels::builtin_kernels()) names.push_back(kernel.name);
  return names;
}

KernelSpec heuristic_spec(const LoweredProgram& program, DType dtype, std::int64_t n) {
  const KernelConfig config =
      tilenorm::heuristic_config(program, dtype, dtype, n, tilenorm::DeviceLimits::hopper());
  return {dtype, dtype, n, config};
}

KernelConfig config(int threads_per_row, int rows_per_cta, int vec, RowStorage storage) {
  return {threads_per_row, rows_per_cta, vec, static_cast<int>(storage)};
}

std::string problem(const std::string& kernel, DType dtype, std::int64_t n,
                    const KernelConfig& config) {
  return tilenorm::config_problem(lowered(kernel), {dtype, dtype, n, config}).value_or("");
}

// The kernel's parameter declarations, in source order.
std::vector<std::string> declared_parameters(const tilenorm::GeneratedKernel& kernel) {
  const std::string opening = kernel.name + "(";
  const auto begin = kernel.source.find(opening);
  const auto end = kernel.source.find(") {", begin);
  REQUIRE(begin != std::string::npos);
  REQUIRE(end != std::string::npos);
  const std::string list =
      kernel.source.substr(begin + opening.size(), end - begin - opening.size());
  std::vector<std::string> parameters;
  std::size_t start = 0;
  while (start <= list.size()) {
    const auto comma = std::min(list.find(',', start), list.size());
    std::string parameter = list.substr(start, comma - start);
    parameter.erase(0, parameter.find_first_not_of(" \n"));
    parameters.push_back(parameter);
    start = comma + 1;
  }
  return parameters;
}

// What the declaration of `param` must look like for `program` with rows of `io` and
// parameters of `param_type` (the CUDA type names of the prelude).
std::string expected_declaration(const tilenorm::ir::Program& program,
                                 const tilenorm::KernelParam& param, const std::string& io,
                                 const std::string& param_type) {
  using tilenorm::ParamKind;
  const auto slot = static_cast<std::size_t>(param.slot);
  switch (param.kind) {
    case ParamKind::row_input:
      return "const " + io + "* __restrict__ in_" + program.row_inputs.at(slot);
    case ParamKind::row_input_stride:
      return "long long stride_" + program.row_inputs.at(slot);
    case ParamKind::row_output:
      return io + "* __restrict__ out_" + program.row_outputs.at(slot).name;
    case ParamKind::row_output_stride:
      return "long long stride_" + program.row_outputs.at(slot).name;
    case ParamKind::column:
      return "const " + param_type + "* __restrict__ col_" + program.columns.at(slot);
    case ParamKind::row_stat:
      return "float* __restrict__ stat_" + program.row_stats.at(slot).name;
    case ParamKind::scalar:
      return "float sc_" + program.scalars.at(slot);
    case ParamKind::rows:
      return "long long rows";
  }
  return "?";
}

std::string generate_error(const std::string& kernel, const KernelSpec& spec) {
  try {
    tilenorm::generate_cuda(lowered(kernel), spec);
  } catch (const tilenorm::ProgramError& error) {
    return error.what();
  }
  FAIL("generate_cuda accepted ", spec.config.describe());
  return {};
}

constexpr std::int64_t kSweepSizes[] = {1, 7, 128, 1000, 1024, 4096, 5120, 12345, 65536, 262144};

}  // namespace

// ---- the generated text

TEST_CASE("codegen: the source bakes in N and names the kernel after the program") {
  for (const auto& name : builtin_names()) {
    CAPTURE(name);
    const tilenorm::LoweredProgram program = lowered(name);
    const KernelSpec spec = heuristic_spec(program, DType::bf16, 4096);
    const auto kernel = tilenorm::generate_cuda(program, spec);
    CHECK(kernel.name == "tilenorm_" + name);
    CHECK(contains(kernel.source, "extern \"C\" __global__ void __launch_bounds__(" +
                                      std::to_string(kernel.threads_per_block) + ")\n" +
                                      kernel.name + "("));
    CHECK(contains(kernel.source, "  constexpr int N = 4096;\n"));
    CHECK(
        contains(kernel.source, "  constexpr int VEC = " + std::to_string(spec.config.vec) + ";"));
    CHECK(contains(kernel.source, "typedef tn::bf16 T;"));
    CHECK(kernel.threads_per_block == spec.config.threads_per_row * spec.config.rows_per_cta);
    CHECK(kernel.rows_per_cta == spec.config.rows_per_cta);
    CHECK(kernel.full_source().starts_with(tilenorm::device_prelude()));
    CHECK(kernel.full_source().ends_with(kernel.source));
  }
}

TEST_CASE("codegen: the parameter list is in the order GeneratedKernel::params gives") {
  const std::pair<DType, DType> dtypes[] = {
      {DType::bf16, DType::bf16}, {DType::f16, DType::f32}, {DType::f32, DType::f32}};
  const auto cuda_type = [](DType dtype) -> std::string {
    return dtype == DType::f32 ? "float" : dtype == DType::f16 ? "tn::fp16" : "tn::bf16";
  };
  for (const auto& name : builtin_names()) {
    for (const auto& [io, param] : dtypes) {
      CAPTURE(name);
      CAPTURE(tilenorm::dtype_name(io));
      const tilenorm::LoweredProgram program = lowered(name);
      const KernelSpec spec{io, param, 1000, config(128, 2, 4, RowStorage::registers)};
      const auto kernel = tilenorm::generate_cuda(program, spec);
      const auto declared = declared_parameters(kernel);
      REQUIRE(declared.size() == kernel.params.size());
      for (std::size_t i = 0; i < declared.size(); ++i) {
        CHECK(declared[i] == expected_declaration(program.program, kernel.params[i], cuda_type(io),
                                                  cuda_type(param)));
      }
      // Every slot of every kind appears exactly once, and `rows` comes last.
      const auto& p = program.program;
      const std::size_t expected_count = 2 * p.row_inputs.size() + 2 * p.row_outputs.size() +
                                         p.columns.size() + p.row_stats.size() + p.scalars.size() +
                                         1;
      CHECK(kernel.params.size() == expected_count);
      CHECK(kernel.params.back().kind == tilenorm::ParamKind::rows);
    }
  }
}

TEST_CASE("codegen: the device prelude holds nothing specific to one norm") {
  const std::string prelude(tilenorm::device_prelude());
  REQUIRE_FALSE(prelude.empty());
  for (const char* word : {"rsqrt", "mean", "layer", "rms"}) {
    CAPTURE(word);
    CHECK_FALSE(contains(prelude, word));
  }
}

TEST_CASE("codegen: shared storage asks for dynamic shared memory, the others do not") {
  const tilenorm::LoweredProgram program = lowered("layer_norm");
  for (RowStorage storage : {RowStorage::registers, RowStorage::shared, RowStorage::global}) {
    CAPTURE(tilenorm::row_storage_name(storage));
    const KernelSpec spec{DType::bf16, DType::bf16, 5120, config(256, 2, 8, storage)};
    const auto kernel = tilenorm::generate_cuda(program, spec);
    const std::size_t expected = storage == RowStorage::shared ? 5120 * 2 * 2 : 0;
    CHECK(kernel.dynamic_shared_bytes == expected);
    CHECK(tilenorm::dynamic_shared_memory_bytes(program, spec) == expected);
    CHECK(contains(kernel.source, "extern __shared__") == (storage == RowStorage::shared));
    CHECK(contains(kernel.source, "(" + std::string(tilenorm::row_storage_name(storage)) + ")"));
  }
}

// ---- configurations that cannot be generated

TEST_CASE("codegen: config_problem names what is wrong with a configuration") {
  const auto registers = RowStorage::registers;
  CHECK(problem("rms_norm", DType::bf16, 1024, config(48, 1, 8, registers)) ==
        "threads_per_row must be a power of two in 1..1024, got 48");
  CHECK(problem("rms_norm", DType::bf16, 1024, config(2048, 1, 8, registers)) ==
        "threads_per_row must be a power of two in 1..1024, got 2048");
  CHECK(problem("rms_norm", DType::bf16, 1024, config(32, 3, 8, registers)) ==
        "rows_per_cta must be a power of two, got 3");
  CHECK(problem("rms_norm", DType::bf16, 1024, config(8, 2, 8, registers)) ==
        "threads per CTA (threads_per_row * rows_per_cta) must be in 32..1024, got 16");
  CHECK(problem("rms_norm", DType::bf16, 1024, config(1024, 2, 8, registers)) ==
        "threads per CTA (threads_per_row * rows_per_cta) must be in 32..1024, got 2048");
  CHECK(problem("rms_norm", DType::f32, 1024, config(128, 1, 8, registers)) ==
        "vec must be a power of two with vec * element size <= 16 bytes, got 8");
  CHECK(problem("rms_norm", DType::bf16, 1024, config(128, 1, 16, registers)) ==
        "vec must be a power of two with vec * element size <= 16 bytes, got 16");
  CHECK(problem("rms_norm", DType::bf16, 1024, config(128, 1, 6, registers)) ==
        "vec must be a power of two with vec * element size <= 16 bytes, got 6");
  // Parameters wider than the rows limit the vector too.
  CHECK(tilenorm::config_problem(lowered("rms_norm"),
                                 {DType::bf16, DType::f32, 1024, config(128, 1, 8, registers)}) ==
        "vec must be a power of two with vec * element size <= 16 bytes, got 8");
  CHECK(problem("rms_norm", DType::bf16, 1024, config(128, 1, 8, static_cast<RowStorage>(3))) ==
        "row_storage must be 0 (registers), 1 (shared) or 2 (global), got 3");
  CHECK(problem("rms_norm", DType::bf16, 262144, config(1024, 1, 8, registers)) ==
        "the row does not fit in registers (256 values per thread, budget 24)");
  CHECK(problem("rms_norm", DType::bf16, 0, config(128, 1, 8, registers)) ==
        "N must be at least 1, got 0");
  CHECK(problem("rms_norm", DType::bf16, (std::int64_t{1} << 30) + 1,
                config(1024, 1, 8, RowStorage::global)) == "N 1073741825 is larger than 2^30");
  // The same row fits once it is not kept in registers.
  CHECK(problem("rms_norm", DType::bf16, 262144, config(1024, 1, 8, RowStorage::global)).empty());
  CHECK(problem("rms_norm", DType::bf16, 262144, config(1024, 1, 8, RowStorage::shared)).empty());
}

TEST_CASE("codegen: generate_cuda refuses what config_problem reports") {
  CHECK(generate_error("rms_norm",
                       {DType::bf16, DType::bf16, 1024, config(48, 1, 8, RowStorage::registers)}) ==
        "cannot generate 'rms_norm' with threads_per_row=48 rows_per_cta=1 vec=8 row_storage=0: "
        "threads_per_row must be a power of two in 1..1024, got 48");
  CHECK(generate_error("layer_norm",
                       {DType::f32, DType::f32, 4096, config(4, 4, 4, RowStorage::global)}) ==
        "cannot generate 'layer_norm' with threads_per_row=4 rows_per_cta=4 vec=4 row_storage=2: "
        "threads per CTA (threads_per_row * rows_per_cta) must be in 32..1024, got 16");
  CHECK(contains(generate_error("layer_norm", {DType::f16, DType::f16, 4096,
                                               config(256, 1, 16, RowStorage::registers)}),
                 "vec must be a power of two with vec * element size <= 16 bytes, got 16"));
  CHECK(contains(generate_error("rms_norm_no_weight", {DType::f32, DType::f32, 65536,
                                                       config(32, 1, 4, RowStorage::registers)}),
                 "the row does not fit in registers"));
}

// ---- the heuristic

TEST_CASE("codegen: the heuristic gives a valid configuration for every kernel, dtype and N") {
  const auto limits = tilenorm::DeviceLimits::hopper();
  for (const auto& name : builtin_names()) {
    const tilenorm::LoweredProgram program = lowered(name);
    for (DType dtype : tilenorm::kAllDTypes) {
      for (std::int64_t n : kSweepSizes) {
        CAPTURE(name);
        CAPTURE(tilenorm::dtype_name(dtype));
        CAPTURE(n);
        const KernelSpec spec = heuristic_spec(program, dtype, n);
        CAPTURE(spec.config.describe());
        CHECK_FALSE(tilenorm::config_problem(program, spec).has_value());
        CHECK(tilenorm::dynamic_shared_memory_bytes(program, spec) <=
              limits.shared_memory_per_block);
        CHECK(spec.config.vec == tilenorm::widest_vec(dtype, dtype));
        CHECK_NOTHROW(tilenorm::generate_cuda(program, spec));
      }
    }
  }
}

TEST_CASE("codegen: the heuristic keeps rows in registers, then shared memory, then global") {
  const tilenorm::LoweredProgram program = lowered("rms_norm");
  auto storage = [&](DType dtype, std::int64_t n) {
    return static_cast<RowStorage>(heuristic_spec(program, dtype, n).config.row_storage);
  };
  CHECK(storage(DType::bf16, 4096) == RowStorage::registers);
  CHECK(storage(DType::bf16, 12345) == RowStorage::registers);
  CHECK(storage(DType::bf16, 65536) == RowStorage::shared);
  CHECK(storage(DType::f32, 32768) == RowStorage::shared);
  CHECK(storage(DType::f32, 65536) == RowStorage::global);  // 256 KiB: more than 227 KiB
  CHECK(storage(DType::bf16, 262144) == RowStorage::global);
  // A narrower vector when the pointers are less aligned.
  const auto narrow = tilenorm::heuristic_config(program, DType::bf16, DType::bf16, 4096,
                                                 tilenorm::DeviceLimits::hopper(), 2);
  CHECK(narrow.vec == 2);
  CHECK_FALSE(
      tilenorm::config_problem(program, {DType::bf16, DType::bf16, 4096, narrow}).has_value());
}

// ---- NVRTC

namespace {

struct CompileJob {
  std::string kernel;
  std::string arch;
  KernelSpec spec;
  std::string label() const {
    return kernel + " " + std::string(tilenorm::dtype_name(spec.io_dtype)) +
           " N=" + std::to_string(spec.n) + " " + spec.config.describe() + " " + arch;
  }
};

struct CompileResult {
  int registers = -1;
  int spill_bytes = -1;
  std::size_t cubin_bytes = 0;
  std::string error;
};

// NVRTC runs on the host CPU; two workers overlap two compiles at a time.
std::vector<CompileResult> compile_all(const std::vector<CompileJob>& jobs) {
  std::vector<CompileResult> results(jobs.size());
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i = next++; i < jobs.size(); i = next++) {
      try {
        const auto built = tilenorm::build_kernel(lowered(jobs[i].kernel), jobs[i].spec,
                                                  jobs[i].arch, /*use_disk_cache=*/false);
        results[i] = {built.registers, built.spill_bytes, built.cubin.size(), {}};
      } catch (const std::exception& error) {
        results[i].error = error.what();
      }
    }
  };
  auto first = std::async(std::launch::async, worker);
  auto second = std::async(std::launch::async, worker);
  first.get();
  second.get();
  return results;
}

std::vector<CompileJob> representative_jobs() {
  std::vector<CompileJob> jobs;
  auto add = [&](const std::string& kernel, const KernelSpec& spec) {
    for (const char* arch : {"sm_80", "sm_90"}) jobs.push_back({kernel, arch, spec});
  };
  for (const auto& name : builtin_names()) {
    add(name, heuristic_spec(lowered(name), DType::bf16, 4096));
  }
  const std::pair<DType, std::int64_t> shapes[] = {
      {DType::f16, 7},        // one partial vector
      {DType::f32, 32768},    // shared-memory storage
      {DType::f32, 65536},    // 256 KiB: more than shared memory holds, so global
      {DType::bf16, 262144},  // re-read from global memory
      {DType::bf16, 12345},   // N not a multiple of the vector width
  };
  for (const char* name : {"rms_norm", "layer_norm"}) {
    for (const auto& [dtype, n] : shapes) add(name, heuristic_spec(lowered(name), dtype, n));
  }
  for (RowStorage storage : {RowStorage::registers, RowStorage::shared, RowStorage::global}) {
    add("layer_norm", {DType::bf16, DType::bf16, 5120, config(256, 2, 8, storage)});
  }
  return jobs;
}

}  // namespace

TEST_CASE("codegen: generated kernels compile for sm_80 and sm_90 without spilling") {
  const auto jobs = representative_jobs();
  // The shapes above are meant to cover every storage strategy through the heuristic too.
  CHECK(static_cast<RowStorage>(
            heuristic_spec(lowered("rms_norm"), DType::f32, 32768).config.row_storage) ==
        RowStorage::shared);
  CHECK(static_cast<RowStorage>(
            heuristic_spec(lowered("rms_norm"), DType::bf16, 262144).config.row_storage) ==
        RowStorage::global);
  const auto results = compile_all(jobs);
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    CAPTURE(jobs[i].label());
    CHECK_MESSAGE(results[i].error.empty(), results[i].error);
    CHECK(results[i].registers > 0);
    CHECK(results[i].spill_bytes == 0);
    CHECK(results[i].cubin_bytes > 0);
  }
}
