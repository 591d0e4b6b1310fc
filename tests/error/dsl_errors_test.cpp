// Run-time errors of the DSL layer: each one must name what is wrong.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tilenorm/dsl/codegen.hpp"
#include "tilenorm/dsl/dtype.hpp"
#include "tilenorm/dsl/error.hpp"
#include "tilenorm/dsl/language.hpp"
#include "tilenorm/dsl/passes.hpp"
#include "tilenorm/dsl/reflect.hpp"
#include "tilenorm/kernels/programs.hpp"

namespace {

// The message of the `Exception` that `action` throws (a failed check if it throws none).
template <class Exception>
std::string message_of(auto&& action) {
  try {
    action();
  } catch (const Exception& error) {
    return error.what();
  }
  FAIL("no exception was thrown");
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

tilenorm::KernelConfig config_from_json(const std::string& text) {
  return tilenorm::reflect::from_json<tilenorm::KernelConfig>(nlohmann::json::parse(text),
                                                              "tuned config");
}

}  // namespace

TEST_CASE("errors: parse_dtype names the text it does not know") {
  CHECK(message_of<tilenorm::Error>([] { tilenorm::parse_dtype("fp8"); }) ==
        "unknown dtype 'fp8' (expected fp32, fp16 or bf16)");
  CHECK(message_of<tilenorm::Error>([] { tilenorm::parse_dtype("BF16"); }) ==
        "unknown dtype 'BF16' (expected fp32, fp16 or bf16)");
  CHECK(message_of<tilenorm::Error>([] { tilenorm::parse_dtype(""); }) ==
        "unknown dtype '' (expected fp32, fp16 or bf16)");
  CHECK(tilenorm::parse_dtype("half") == tilenorm::DType::f16);
  CHECK(tilenorm::parse_dtype("bfloat16") == tilenorm::DType::bf16);
}

TEST_CASE("errors: builtin_program lists the valid names") {
  CHECK(message_of<tilenorm::Error>([] { tilenorm::kernels::builtin_program("nope"); }) ==
        "unknown kernel 'nope' (built-in kernels: layer_norm, layer_norm_no_bias, "
        "layer_norm_no_affine, rms_norm, rms_norm_no_weight)");
}

TEST_CASE("errors: lower() rejects a program that makes no sense") {
  struct UnusedTag {};
  tilenorm::dsl::ProgramBuilder<UnusedTag> unused("gated_norm");
  auto x = unused.input("x");
  unused.input("gate");
  unused.output("y", x * 2.0);
  const auto unused_program = std::move(unused).build();
  CHECK(message_of<tilenorm::ProgramError>([&] { tilenorm::lower(unused_program); }) ==
        "program 'gated_norm': row input 'gate' is declared but never used");

  struct DuplicateTag {};
  tilenorm::dsl::ProgramBuilder<DuplicateTag> duplicate("scaled");
  auto input = duplicate.input("x");
  auto scale = duplicate.scalar("scale");
  duplicate.output("scale", input * scale);
  const auto duplicate_program = std::move(duplicate).build();
  CHECK(message_of<tilenorm::ProgramError>([&] { tilenorm::lower(duplicate_program); }) ==
        "program 'scaled': the name 'scale' is used twice");

  struct NoOutputTag {};
  tilenorm::dsl::ProgramBuilder<NoOutputTag> no_output("statistics");
  no_output.save("mean", mean(no_output.input("x")));
  const auto no_output_program = std::move(no_output).build();
  CHECK(message_of<tilenorm::ProgramError>([&] { tilenorm::lower(no_output_program); }) ==
        "program 'statistics': writes no row output; add one with output(name, tile)");
}

TEST_CASE("errors: generate_cuda names the program, the config and the problem") {
  const auto lowered = tilenorm::lower(tilenorm::kernels::builtin_program("layer_norm"));
  const tilenorm::KernelSpec too_wide{
      tilenorm::DType::f32, tilenorm::DType::f32, 4096, {256, 1, 8, 2}};
  CHECK(message_of<tilenorm::ProgramError>([&] { tilenorm::generate_cuda(lowered, too_wide); }) ==
        "cannot generate 'layer_norm' with threads_per_row=256 rows_per_cta=1 vec=8 "
        "row_storage=2: vec must be a power of two with vec * element size <= 16 bytes, got 8");
  const tilenorm::KernelSpec too_long{
      tilenorm::DType::bf16, tilenorm::DType::bf16, 1 << 20, {1024, 1, 8, 0}};
  CHECK(message_of<tilenorm::ProgramError>([&] { tilenorm::generate_cuda(lowered, too_long); }) ==
        "cannot generate 'layer_norm' with threads_per_row=1024 rows_per_cta=1 vec=8 "
        "row_storage=0: the row does not fit in registers (1024 values per thread, budget 24)");
  const tilenorm::KernelSpec empty_row{
      tilenorm::DType::bf16, tilenorm::DType::bf16, 0, {128, 2, 8, 0}};
  CHECK(contains(message_of<tilenorm::Error>([&] { tilenorm::generate_cuda(lowered, empty_row); }),
                 "N must be at least 1, got 0"));
}

TEST_CASE("errors: a KernelConfig from JSON must have exactly the integer fields") {
  const auto good = config_from_json(
      R"({"threads_per_row": 128, "rows_per_cta": 2, "vec": 8, "row_storage": 1})");
  CHECK(good == tilenorm::KernelConfig{128, 2, 8, 1});
  CHECK(config_from_json(tilenorm::reflect::to_json(good).dump()) == good);

  CHECK(message_of<tilenorm::Error>([] {
          config_from_json(R"({"threads_per_row": 128, "rows_per_cta": 2, "row_storage": 1})");
        }) == "tuned config: field 'vec' is missing or not an integer");
  CHECK(message_of<tilenorm::Error>([] {
          config_from_json(
              R"({"threads_per_row": 128, "rows_per_cta": 2, "vec": 8.5, "row_storage": 1})");
        }) == "tuned config: field 'vec' is missing or not an integer");
  CHECK(message_of<tilenorm::Error>([] {
          config_from_json(
              R"({"threads_per_row": "128", "rows_per_cta": 2, "vec": 8, "row_storage": 1})");
        }) == "tuned config: field 'threads_per_row' is missing or not an integer");
  CHECK(message_of<tilenorm::Error>([] {
          config_from_json(
              R"({"threads_per_row": 128, "rows_per_cta": 2, "vec": 8, "row_storage": null})");
        }) == "tuned config: field 'row_storage' is missing or not an integer");
  const std::string extra = message_of<tilenorm::Error>([] {
    config_from_json(
        R"({"threads_per_row": 128, "rows_per_cta": 2, "vec": 8, "row_storage": 1, "unroll": 4})");
  });
  CHECK(contains(extra, "tuned config: unexpected fields in "));
  CHECK(contains(extra, "\"unroll\":4"));
  CHECK(message_of<tilenorm::Error>([] { config_from_json("[128, 2, 8, 1]"); }) ==
        "tuned config: expected a JSON object, got [128,2,8,1]");
}
