// A statistic of one program saved by another.
// expect: saved statistics must be computed from this program's inputs
#include "tilenorm/dsl/language.hpp"

struct FirstProgram {};
struct SecondProgram {};

int main() {
  tilenorm::dsl::ProgramBuilder<FirstProgram> first("first");
  tilenorm::dsl::ProgramBuilder<SecondProgram> second("second");
  auto x = first.input("x");
  second.save("mean", mean(x));
}
