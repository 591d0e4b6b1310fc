// Run-time errors of the DSL layer: each one must name what is wrong.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tilenorm/dsl/autodiff.hpp"
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

// As the runtime reads a tuning entry: fields added since (the load pin) may be absent.
tilenorm::KernelConfig config_from_json(const std::string& text) {
  return tilenorm::reflect::from_json<tilenorm::KernelConfig>(
      nlohmann::json::parse(text), "tuned config", tilenorm::kKernelConfigLaterFields);
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
        "layer_norm_no_affine, rms_norm, rms_norm_no_weight, layer_norm_backward, "
        "layer_norm_no_bias_backward, layer_norm_no_affine_backward, rms_norm_backward, "
        "rms_norm_no_weight_backward, layer_norm_backward_recompute, "
        "layer_norm_no_bias_backward_recompute, layer_norm_no_affine_backward_recompute, "
        "rms_norm_backward_recompute, rms_norm_no_weight_backward_recompute)");
  // Names are matched exactly.
  CHECK(message_of<tilenorm::Error>([] {
          tilenorm::kernels::builtin_program("RMS_NORM");
        }).starts_with("unknown kernel 'RMS_NORM' (built-in kernels: layer_norm, "));
  CHECK(message_of<tilenorm::Error>([] {
          tilenorm::kernels::builtin_program("rms_norm_backward_saved");
        }).starts_with("unknown kernel 'rms_norm_backward_saved' (built-in kernels: "));
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
  auto unwritten = no_output.input("x");
  (void)unwritten;
  const auto no_output_program = std::move(no_output).build();
  CHECK(message_of<tilenorm::ProgramError>([&] { tilenorm::lower(no_output_program); }) ==
        "program 'statistics': writes no row output; add one with output(name, tile)");
}

TEST_CASE("errors: lower() rejects a constant outside the fp32 range, naming it") {
  const auto huge = tilenorm::dsl::make_program("huge_scale", [](auto& p) {
    auto x = p.input("x");
    p.output("y", x * 1e300);
  });
  CHECK(message_of<tilenorm::ProgramError>([&] { tilenorm::lower(huge); }) ==
        "program 'huge_scale': the constant 1.0000000000000001e+300 is outside the fp32 range; "
        "kernels compute in fp32, so it would become infinity");
  const auto tiny_negative = tilenorm::dsl::make_program("shifted", [](auto& p) {
    auto x = p.input("x");
    auto w = p.column("w");
    p.output("y", x * w - 4e38);
  });
  CHECK(message_of<tilenorm::ProgramError>([&] { tilenorm::lower(tiny_negative); }) ==
        "program 'shifted': the constant 3.9999999999999999e+38 is outside the fp32 range; "
        "kernels compute in fp32, so it would become infinity");
  // Inside the range it is fine, and so is an explicit infinity.
  const auto fine = tilenorm::dsl::make_program("fine", [](auto& p) {
    auto x = p.input("x");
    p.output("y", min(x * 3e38, 1.0 / 0.0));
  });
  CHECK_NOTHROW(tilenorm::lower(fine));
}

TEST_CASE("errors: lower() names a slot whose name is not a valid identifier") {
  const std::string rule =
      " is not an identifier (letters, digits and '_', not starting with a digit, at most 64 "
      "characters)";
  auto input_named = [](const std::string& name) {
    return tilenorm::dsl::make_program("named", [&name](auto& p) {
      auto x = p.input(name);
      p.output("y", x * 2.0);
    });
  };
  auto lower_error = [](const tilenorm::ir::Program& program) {
    return message_of<tilenorm::ProgramError>([&] { tilenorm::lower(program); });
  };
  CHECK(lower_error(input_named("")) == "program 'named': row input name ''" + rule);
  CHECK(lower_error(input_named("2x")) == "program 'named': row input name '2x'" + rule);
  CHECK(lower_error(input_named("the input")) ==
        "program 'named': row input name 'the input'" + rule);
  CHECK(lower_error(input_named(" x")) == "program 'named': row input name ' x'" + rule);
  CHECK(lower_error(input_named(std::string(65, 'x'))) ==
        "program 'named': row input name '" + std::string(64, 'x') + "...'" + rule);
  CHECK_NOTHROW(tilenorm::lower(input_named(std::string(64, 'x'))));
  CHECK(lower_error(input_named("tn_x")) ==
        "program 'named': row input name 'tn_x' uses the reserved prefix 'tn_'");

  CHECK(lower_error(input_named("_x")) ==
        "program 'named': slot name '_x' starts with '_' or contains \"__\" (reserved in "
        "generated C++)");
  CHECK(lower_error(input_named("for")) ==
        "program 'named': slot name 'for' is a C++ or CUDA keyword");

  const auto column = tilenorm::dsl::make_program("named", [](auto& p) {
    auto x = p.input("x");
    p.output("y", x * p.column("gain 2"));
  });
  CHECK(lower_error(column) == "program 'named': column name 'gain 2'" + rule);
  const auto scalar = tilenorm::dsl::make_program("named", [](auto& p) {
    auto x = p.input("x");
    p.output("y", x * p.scalar("9lives"));
  });
  CHECK(lower_error(scalar) == "program 'named': scalar name '9lives'" + rule);
  const auto saved = tilenorm::dsl::make_program("named", [](auto& p) {
    auto x = p.input("x");
    p.save("tn_mean", mean(x));
    p.output("y", x);
  });
  CHECK(lower_error(saved) ==
        "program 'named': saved statistic name 'tn_mean' uses the reserved prefix 'tn_'");
  const auto duplicate_column = tilenorm::dsl::make_program("named", [](auto& p) {
    auto x = p.input("x");
    auto w = p.column("w");
    auto w_again = p.column("w");
    p.output("y", x * w + w_again);
  });
  CHECK(lower_error(duplicate_column) == "program 'named': the name 'w' is used twice");
  const auto duplicate_output = tilenorm::dsl::make_program("named", [](auto& p) {
    auto x = p.input("x");
    p.output("y", x);
    p.output("y", x * 2.0);
  });
  CHECK(lower_error(duplicate_output) == "program 'named': the name 'y' is used twice");
}

TEST_CASE("errors: backward() names the program when no slot needs a gradient") {
  const auto frozen = tilenorm::dsl::make_program("frozen_norm", [](auto& p) {
    auto x = p.input("x", tilenorm::dsl::Grad::no);
    auto w = p.column("w", tilenorm::dsl::Grad::no);
    auto eps = p.scalar("eps");
    p.output("y", x * rsqrt(mean(x * x) + eps) * w);
  });
  for (auto mode : {tilenorm::StatisticsMode::saved, tilenorm::StatisticsMode::recompute}) {
    CAPTURE(tilenorm::statistics_mode_name(mode));
    CHECK(message_of<tilenorm::ProgramError>([&] { tilenorm::backward(frozen, {mode}); }) ==
          "program 'frozen_norm': no slot needs a gradient (mark inputs, columns or scalars "
          "Grad::yes)");
  }
}

TEST_CASE("errors: backward() verifies the forward program first") {
  const auto unused = tilenorm::dsl::make_program("unused_gate", [](auto& p) {
    auto x = p.input("x");
    p.column("gate");
    p.output("y", x * 2.0);
  });
  CHECK(message_of<tilenorm::ProgramError>([&] { tilenorm::backward(unused); }) ==
        "program 'unused_gate': column 'gate' is declared but never used");
  const auto huge = tilenorm::dsl::make_program("huge", [](auto& p) {
    auto x = p.input("x");
    p.output("y", x * -1e39);
  });
  CHECK(message_of<tilenorm::ProgramError>([&] { tilenorm::backward(huge); })
            .starts_with("program 'huge': the constant -9.9999999999999994e+38 is outside the "
                         "fp32 range"));
}

TEST_CASE("errors: backward() rejects a gradient name that is not a valid slot name") {
  // The gradient of an input called o would be called do.
  const auto short_name = tilenorm::dsl::make_program("short_names", [](auto& p) {
    auto o = p.input("o");
    p.output("y", o * 2.0);
  });
  CHECK(message_of<tilenorm::ProgramError>([&] { tilenorm::backward(short_name); }) ==
        "program 'short_names': slot name 'do' is a C++ or CUDA keyword");
}

TEST_CASE("errors: backward() rejects a gradient name that collides with a forward slot") {
  // The incoming gradient of y is called dy; here the forward already reads a dy.
  const auto clash = tilenorm::dsl::make_program("clash", [](auto& p) {
    auto x = p.input("x");
    auto dy = p.input("dy", tilenorm::dsl::Grad::no);
    p.output("y", x * dy);
  });
  CHECK(message_of<tilenorm::ProgramError>([&] { tilenorm::backward(clash); }) ==
        "program 'clash': the gradient of 'y' would be called 'dy', which the program already "
        "uses; rename that slot");
}

TEST_CASE("errors: generate_cuda names the program, the config and the problem") {
  const auto lowered = tilenorm::lower(tilenorm::kernels::builtin_program("layer_norm"));
  const auto refusal = [&](const tilenorm::KernelSpec& spec) {
    return message_of<tilenorm::ProgramError>([&] { tilenorm::generate_cuda(lowered, spec); });
  };
  const tilenorm::KernelSpec too_wide{
      tilenorm::DType::f32, tilenorm::DType::f32, 4096, {256, 1, 8, 2, 1, 0, 0}};
  CHECK(refusal(too_wide) ==
        "cannot generate 'layer_norm' with threads_per_row=256 rows_per_cta=1 vec=8 "
        "row_storage=global ctas_per_row=1: vec must be a power of two with vec * element size <= "
        "16 bytes, got 8");
  // 1024 bf16 values per thread, held raw two to a register.
  const tilenorm::KernelSpec too_long{
      tilenorm::DType::bf16, tilenorm::DType::bf16, 1 << 20, {1024, 1, 8, 0, 1, 0, 0}};
  CHECK(refusal(too_long) ==
        "cannot generate 'layer_norm' with threads_per_row=1024 rows_per_cta=1 vec=8 "
        "row_storage=registers ctas_per_row=1: the row does not fit in registers (512 values per "
        "thread, budget "
        "24)");
  const tilenorm::KernelSpec empty_row{
      tilenorm::DType::bf16, tilenorm::DType::bf16, 0, {128, 2, 8, 0, 1, 0, 0}};
  CHECK(contains(message_of<tilenorm::Error>([&] { tilenorm::generate_cuda(lowered, empty_row); }),
                 "N must be at least 1, got 0"));
  // The load pin: a LoadPin value, and only where there is a pin to choose.
  const tilenorm::KernelSpec bad_pin{
      tilenorm::DType::bf16, tilenorm::DType::bf16, 4096, {128, 2, 8, 0, 1, 7, 0}};
  CHECK(refusal(bad_pin) ==
        "cannot generate 'layer_norm' with threads_per_row=128 rows_per_cta=2 vec=8 "
        "row_storage=registers ctas_per_row=1 load_pin=7: load_pin must be 0 (rule), 1 (on), 2 "
        "(off) or 3 (early), got 7");
  const tilenorm::KernelSpec forward_pin{
      tilenorm::DType::bf16, tilenorm::DType::bf16, 65536, {128, 1, 8, 3, 16, 1, 0}};
  CHECK(refusal(forward_pin) ==
        "cannot generate 'layer_norm' with threads_per_row=128 rows_per_cta=1 vec=8 "
        "row_storage=prefetched ctas_per_row=16 load_pin=on: load_pin on chooses where a "
        "prefetched cluster kernel that sums across rows issues its next row block's loads: it "
        "needs row_storage prefetched, ctas_per_row > 1 and a program that sums across rows (got "
        "prefetched, ctas_per_row 16, a program that does not); use 0 (rule)");
  // The moments knob: a MomentFusion value.
  const tilenorm::KernelSpec bad_moments{
      tilenorm::DType::bf16, tilenorm::DType::bf16, 4096, {128, 2, 8, 0, 1, 0, 3}};
  CHECK(refusal(bad_moments) ==
        "cannot generate 'layer_norm' with threads_per_row=128 rows_per_cta=2 vec=8 "
        "row_storage=registers ctas_per_row=1 moments=3: moments must be 0 (rule), 1 (on) or 2 "
        "(off), got 3");
  // The column fetch: a ColumnFetch value.
  const tilenorm::KernelSpec bad_fetch{
      tilenorm::DType::bf16, tilenorm::DType::bf16, 4096, {128, 2, 8, 0, 1, 0, 0, -1}};
  CHECK(refusal(bad_fetch) ==
        "cannot generate 'layer_norm' with threads_per_row=128 rows_per_cta=2 vec=8 "
        "row_storage=registers ctas_per_row=1 column_fetch=-1: column_fetch must be 0 (rule), 1 "
        "(early) or 2 (late), got -1");
}

TEST_CASE("errors: a KernelConfig from JSON must have exactly the integer fields") {
  // Written before the load pin, the moments and the column fetch knobs existed: they read as
  // the rule, which is what it meant.
  const auto good = config_from_json(
      R"({"threads_per_row": 128, "rows_per_cta": 2, "vec": 8, "row_storage": 1, "ctas_per_row": 1})");
  CHECK(good ==
        tilenorm::KernelConfig{128, 2, 8, 1, 1, tilenorm::kPinByRule, tilenorm::kMomentsByRule});
  CHECK(config_from_json(tilenorm::reflect::to_json(good).dump()) == good);
  CHECK(tilenorm::reflect::to_json(good).contains("load_pin"));
  CHECK(tilenorm::reflect::to_json(good).contains("moments"));
  CHECK(tilenorm::reflect::to_json(good).contains("column_fetch"));
  CHECK(good.column_fetch == tilenorm::kColumnFetchByRule);
  CHECK(
      config_from_json(
          R"({"threads_per_row": 64, "rows_per_cta": 1, "vec": 8, "row_storage": 0, "ctas_per_row": 1, "load_pin": 0, "moments": 0, "column_fetch": 2})")
          .column_fetch == static_cast<int>(tilenorm::ColumnFetch::late));
  CHECK(
      config_from_json(
          R"({"threads_per_row": 128, "rows_per_cta": 1, "vec": 8, "row_storage": 3, "ctas_per_row": 4, "load_pin": 0, "moments": 1})")
          .moments == static_cast<int>(tilenorm::MomentFusion::on));
  CHECK(
      message_of<tilenorm::Error>([] {
        config_from_json(
            R"({"threads_per_row": 128, "rows_per_cta": 1, "vec": 8, "row_storage": 3, "ctas_per_row": 4, "moments": 1.5})");
      }) == "tuned config: field 'moments' is missing or not an integer");
  CHECK(
      config_from_json(
          R"({"threads_per_row": 128, "rows_per_cta": 1, "vec": 8, "row_storage": 3, "ctas_per_row": 16, "load_pin": 1})")
          .load_pin == static_cast<int>(tilenorm::LoadPin::on));
  CHECK(
      message_of<tilenorm::Error>([] {
        config_from_json(
            R"({"threads_per_row": 128, "rows_per_cta": 1, "vec": 8, "row_storage": 3, "ctas_per_row": 16, "load_pin": "on"})");
      }) == "tuned config: field 'load_pin' is missing or not an integer");
  // Only the later fields may be absent: without the list, the pin is required too.
  CHECK(
      message_of<tilenorm::Error>([] {
        tilenorm::reflect::from_json<tilenorm::KernelConfig>(
            nlohmann::json::parse(
                R"({"threads_per_row": 128, "rows_per_cta": 2, "vec": 8, "row_storage": 1, "ctas_per_row": 1})"),
            "strict config");
      }) == "strict config: field 'load_pin' is missing or not an integer");

  CHECK(
      message_of<tilenorm::Error>([] {
        config_from_json(
            R"({"threads_per_row": 128, "rows_per_cta": 2, "row_storage": 1, "ctas_per_row": 1})");
      }) == "tuned config: field 'vec' is missing or not an integer");
  CHECK(
      message_of<tilenorm::Error>([] {
        config_from_json(
            R"({"threads_per_row": 128, "rows_per_cta": 2, "vec": 8.5, "row_storage": 1, "ctas_per_row": 1})");
      }) == "tuned config: field 'vec' is missing or not an integer");
  CHECK(
      message_of<tilenorm::Error>([] {
        config_from_json(
            R"({"threads_per_row": "128", "rows_per_cta": 2, "vec": 8, "row_storage": 1, "ctas_per_row": 1})");
      }) == "tuned config: field 'threads_per_row' is missing or not an integer");
  CHECK(
      message_of<tilenorm::Error>([] {
        config_from_json(
            R"({"threads_per_row": 128, "rows_per_cta": 2, "vec": 8, "row_storage": null, "ctas_per_row": 1})");
      }) == "tuned config: field 'row_storage' is missing or not an integer");
  const std::string extra = message_of<tilenorm::Error>([] {
    config_from_json(
        R"({"threads_per_row": 128, "rows_per_cta": 2, "vec": 8, "row_storage": 1, "ctas_per_row": 1, "unroll": 4})");
  });
  CHECK(contains(extra, "tuned config: unexpected fields in "));
  CHECK(contains(extra, "\"unroll\":4"));
  CHECK(message_of<tilenorm::Error>([] { config_from_json("[128, 2, 8, 1]"); }) ==
        "tuned config: expected a JSON object, got [128,2,8,1]");
}
