// A reduction of a Column: reductions run along a row, and a Column is not a row.
// expect: tilenorm: cannot reduce a Column: reductions run along a row, so they take a Tile
#include "tilenorm/dsl/language.hpp"

int main() {
  tilenorm::dsl::make_program("bad", [](auto& p) {
    auto x = p.input("x");
    auto w = p.column("w");
    p.output("y", x * max(w));
  });
}
