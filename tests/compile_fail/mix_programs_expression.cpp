// Arithmetic on values of two different programs (two builders with different tags).
// expect: tilenorm: cannot combine values from two different programs
#include "tilenorm/dsl/language.hpp"

struct FirstProgram {};
struct SecondProgram {};

int main() {
  tilenorm::dsl::ProgramBuilder<FirstProgram> first("first");
  tilenorm::dsl::ProgramBuilder<SecondProgram> second("second");
  auto x = first.input("x");
  auto w = second.column("w");
  second.output("y", second.input("z") + x * w);
}
