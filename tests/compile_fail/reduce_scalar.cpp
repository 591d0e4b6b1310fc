// A reduction of a Scalar, here a plain number promoted to one.
// expect: tilenorm: cannot reduce a Scalar: reductions (sum, mean, max, min) take a Tile
#include "tilenorm/dsl/language.hpp"

int main() {
  tilenorm::dsl::make_program("bad", [](auto& p) {
    auto x = p.input("x");
    auto eps = p.scalar("eps");
    p.output("y", x * mean(eps * 2.0));
  });
}
