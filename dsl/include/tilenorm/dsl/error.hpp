#pragma once
// Every error tilenorm reports is a tilenorm::Error (or a subclass) carrying a message that
// names the problem and the argument or file involved.
#include <stdexcept>
#include <string>

namespace tilenorm {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A DSL program that makes no sense (found by the verifier or the front end at run time).
class ProgramError : public Error {
 public:
  using Error::Error;
};

}  // namespace tilenorm
