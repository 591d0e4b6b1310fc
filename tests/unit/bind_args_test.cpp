// Binding launch arguments by name: no GPU needed (nothing is launched).
#include <doctest/doctest.h>

#include "tilenorm/dsl/error.hpp"
#include "tilenorm/kernels/programs.hpp"
#include "tilenorm/runtime/runtime.hpp"

TEST_CASE("bind_args puts named arguments in slot order and names a missing one") {
  const auto& program = tilenorm::kernels::builtin_program("rms_norm");  // x, eps, rstd, weight, y
  float x = 0, y = 0, rstd = 0;
  const tilenorm::TensorView x_view{&x, tilenorm::DType::bf16, 1, 1, 1};
  const tilenorm::TensorView y_view{&y, tilenorm::DType::bf16, 1, 1, 1};
  const tilenorm::BoundArgs args =
      tilenorm::bind_args(program, {{"y", y_view},
                                    {"weight", tilenorm::ColumnView{}},
                                    {"unused", 3.0f},  // names the program lacks are ignored
                                    {"rstd", tilenorm::RowStatView{&rstd, 1}},
                                    {"eps", 0.5f},
                                    {"x", x_view}});
  const tilenorm::KernelArgs span = args;
  REQUIRE(span.size() == 5);
  CHECK(span[0].kind() == tilenorm::Arg::Kind::rows);
  CHECK(span[0].view().data == &x);
  CHECK(span[1].kind() == tilenorm::Arg::Kind::scalar_value);
  CHECK(span[1].value() == 0.5f);
  CHECK(span[2].kind() == tilenorm::Arg::Kind::row_stat);
  CHECK(span[3].kind() == tilenorm::Arg::Kind::column);
  CHECK(span[4].view().data == &y);
  CHECK_THROWS_WITH_AS(tilenorm::bind_args(program, {{"x", x_view}, {"y", y_view}}),
                       "rms_norm: no argument for slot 'eps'", tilenorm::Error);
}
