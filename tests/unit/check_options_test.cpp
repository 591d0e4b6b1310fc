// The check harness's options that are checked before anything runs: no GPU needed.
#include <doctest/doctest.h>

#include "tilenorm/dsl/autodiff.hpp"
#include "tilenorm/dsl/error.hpp"
#include "tilenorm/kernels/programs.hpp"
#include "tilenorm/runtime/check.hpp"

TEST_CASE("check: slot_offsets names read slots other than scalars, and a wrong name is an error") {
  const auto& program = tilenorm::kernels::builtin_program("layer_norm_backward");
  auto offsets = [](std::map<std::string, double> slot_offsets) {
    tilenorm::CheckOptions options;
    options.slot_offsets = std::move(slot_offsets);
    return options;
  };
  // Rows, their saved mean and a column parameter far from zero.
  CHECK_NOTHROW(tilenorm::check_slot_offsets(
      program, offsets({{"x", 100.0}, {"mean", 100.0}, {"weight", -3.0}})));
  CHECK_NOTHROW(tilenorm::check_slot_offsets(program, offsets({})));
  const std::string readable = " (slots it can offset: x, weight, dy, mean, rstd)";
  CHECK_THROWS_WITH_AS(tilenorm::check_slot_offsets(program, offsets({{"x", 1.0}, {"z", 1.0}})),
                       ("CheckOptions::slot_offsets names 'z', which in program "
                        "'layer_norm_backward' is no slot" +
                        readable)
                           .c_str(),
                       tilenorm::Error);
  CHECK_THROWS_WITH_AS(tilenorm::check_slot_offsets(program, offsets({{"dx", 1.0}})),
                       ("CheckOptions::slot_offsets names 'dx', which in program "
                        "'layer_norm_backward' is written, not read" +
                        readable)
                           .c_str(),
                       tilenorm::Error);
  const auto& forward = tilenorm::kernels::builtin_program("rms_norm");
  CHECK_THROWS_WITH_AS(tilenorm::check_slot_offsets(forward, offsets({{"eps", 1.0}})),
                       "CheckOptions::slot_offsets names 'eps', which in program 'rms_norm' is a "
                       "scalar (its value is one of CheckOptions::scalars) (slots it can offset: "
                       "x, weight)",
                       tilenorm::Error);
}
