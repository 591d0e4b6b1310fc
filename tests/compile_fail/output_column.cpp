// A Column stored as a row output: it does not depend on any row input.
// expect: tilenorm: a row output must be a Tile (it must depend on a row input)
#include "tilenorm/dsl/language.hpp"

int main() {
  tilenorm::dsl::make_program("bad", [](auto& p) {
    auto x = p.input("x");
    auto w = p.column("w");
    p.save("total", sum(x));
    p.output("y", w * 2.0);
  });
}
