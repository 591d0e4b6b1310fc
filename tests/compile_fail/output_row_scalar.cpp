// A RowScalar stored as a row output: it has one value per row, not one per element.
// expect: tilenorm: a RowScalar cannot be stored as a row output
#include "tilenorm/dsl/language.hpp"

int main() {
  tilenorm::dsl::make_program("bad", [](auto& p) {
    auto x = p.input("x");
    p.output("y", mean(x));
  });
}
