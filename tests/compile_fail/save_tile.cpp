// A Tile passed to save(), which keeps one value per row.
// expect: tilenorm: save() stores one value per row, so it takes a RowScalar (such as mean(x))
#include "tilenorm/dsl/language.hpp"

int main() {
  tilenorm::dsl::make_program("bad", [](auto& p) {
    auto x = p.input("x");
    p.save("centered", x - mean(x));
    p.output("y", x);
  });
}
