// A value captured from an enclosing program and written as an output of an inner one: each
// make_program lambda is its own program.
// expect: outputs must be computed from this program's inputs
#include "tilenorm/dsl/language.hpp"

int main() {
  tilenorm::dsl::make_program("outer", [](auto& outer) {
    auto x = outer.input("x");
    outer.output("y", x);
    tilenorm::dsl::make_program("inner", [&x](auto& inner) {
      inner.input("z");
      inner.output("y", x * 2.0);
    });
  });
}
