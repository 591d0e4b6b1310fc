// A reduction of a RowScalar: sum(mean(x)) has nothing left to reduce along the row.
// expect: tilenorm: cannot reduce a RowScalar: it already holds one value per row
#include "tilenorm/dsl/language.hpp"

int main() {
  tilenorm::dsl::make_program("bad", [](auto& p) {
    auto x = p.input("x");
    p.save("twice", sum(mean(x)));
    p.output("y", x);
  });
}
