// The tuning databases shipped in autotune/databases/ must match this build: a code-generator or
// program change that makes its entries stale (so that the runtime would ignore them) fails
// here, and every tuned configuration must still be one the code generator accepts.
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "tilenorm/dsl/codegen.hpp"
#include "tilenorm/dsl/passes.hpp"
#include "tilenorm/dsl/reflect.hpp"
#include "tilenorm/kernels/programs.hpp"
#include "tilenorm/runtime/heuristics.hpp"
#include "tilenorm/runtime/tuning_db.hpp"

namespace {

// Checks one shipped file, whose entries are all of `dtype`, measured on `device` (named as its
// driver does), a GPU with the limits of `known_device`.
void check_shipped_database(const char* file_name, tilenorm::DType dtype, const char* device,
                            const char* known_device) {
  const tilenorm::DeviceLimits& limits = tilenorm::known_device(known_device);
  const std::filesystem::path file = std::filesystem::path(TILENORM_DATABASES_DIR) / file_name;
  CAPTURE(file);
  const tilenorm::TuningFileContents contents = tilenorm::read_tuning_file(file);
  REQUIRE(contents.exists);
  CHECK_MESSAGE(contents.problems.empty(), contents.problem_summary());
  // LayerNorm and RMSNorm, each pass, by the hash the runtime looks entries up with.
  std::map<std::string, std::string> kernel_by_hash;
  for (const char* kernel : {"layer_norm", "rms_norm"}) {
    for (const char* pass : {"", "_backward", "_backward_recompute"}) {
      const std::string name = std::string(kernel) + pass;
      kernel_by_hash[tilenorm::kernels::builtin_program(name).hash()] = name;
    }
  }
  std::set<std::pair<std::string, std::int64_t>> tuned;
  for (const tilenorm::TuningEntry& entry : contents.entries) {
    const tilenorm::TuningKey& key = entry.key;
    CAPTURE(key.n);
    CAPTURE(key.m_bucket);
    CHECK(key.device_name == device);
    CHECK(key.codegen_version == tilenorm::kCodegenVersion);
    CHECK(key.dtype == tilenorm::dtype_name(dtype));
    const auto kernel = kernel_by_hash.find(key.program_hash);
    REQUIRE_MESSAGE(kernel != kernel_by_hash.end(),
                    "no built-in program has hash " << key.program_hash);
    CAPTURE(kernel->second);
    tuned.insert({kernel->second, key.n});
    const auto config = tilenorm::reflect::from_json<tilenorm::KernelConfig>(
        entry.config, "tuning entry config", tilenorm::kKernelConfigLaterFields);
    const tilenorm::LoweredProgram lowered =
        tilenorm::lower(tilenorm::kernels::builtin_program(kernel->second));
    // As the runtime launches it (staged slices on a cluster stage dy alone).
    const tilenorm::KernelSpec spec =
        tilenorm::fit_shared_memory(lowered, {dtype, dtype, key.n, config}, limits);
    CHECK_FALSE(tilenorm::config_problem(lowered, spec).has_value());
    CHECK(tilenorm::dynamic_shared_memory_bytes(lowered, spec) <= 227 * 1024);
    CHECK(tilenorm::dynamic_shared_memory_bytes(lowered, spec) <= limits.shared_memory_per_block);
  }
  // Every kernel and pass at the 16 row lengths of `tilenorm-tune --all`.
  CHECK(tuned.size() == 6 * 16);
}

}  // namespace

TEST_CASE("the shipped tuning databases are current and every entry generates") {
  SUBCASE("H200 bf16") {
    check_shipped_database("h200-bf16.json", tilenorm::DType::bf16, "NVIDIA H200", "H200");
  }
  SUBCASE("H200 fp32") {
    check_shipped_database("h200-fp32.json", tilenorm::DType::f32, "NVIDIA H200", "H200");
  }
  SUBCASE("H100 bf16") {
    check_shipped_database("h100-bf16.json", tilenorm::DType::bf16, "NVIDIA H100 80GB HBM3",
                           "H100");
  }
  SUBCASE("H100 fp32") {
    check_shipped_database("h100-fp32.json", tilenorm::DType::f32, "NVIDIA H100 80GB HBM3", "H100");
  }
}
