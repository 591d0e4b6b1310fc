#include "tilenorm/dsl/names.hpp"

#include <algorithm>
#include <array>
#include <string>

#include "tilenorm/dsl/error.hpp"

namespace tilenorm {
namespace {

// C++20 keywords and alternative tokens, and the CUDA words that generated code uses as
// qualifiers or types.
constexpr std::array<std::string_view, 104> kReserved = {
    "alignas",       "alignof",     "and",
    "and_eq",        "asm",         "auto",
    "bitand",        "bitor",       "bool",
    "break",         "case",        "catch",
    "char",          "char8_t",     "char16_t",
    "char32_t",      "class",       "compl",
    "concept",       "const",       "consteval",
    "constexpr",     "constinit",   "const_cast",
    "continue",      "co_await",    "co_return",
    "co_yield",      "decltype",    "default",
    "delete",        "do",          "double",
    "dynamic_cast",  "else",        "enum",
    "explicit",      "export",      "extern",
    "false",         "float",       "for",
    "friend",        "goto",        "if",
    "inline",        "int",         "long",
    "mutable",       "namespace",   "new",
    "noexcept",      "not",         "not_eq",
    "nullptr",       "operator",    "or",
    "or_eq",         "private",     "protected",
    "public",        "register",    "reinterpret_cast",
    "requires",      "return",      "short",
    "signed",        "sizeof",      "static",
    "static_assert", "static_cast", "struct",
    "switch",        "template",    "this",
    "thread_local",  "throw",       "true",
    "try",           "typedef",     "typeid",
    "typename",      "union",       "unsigned",
    "using",         "virtual",     "void",
    "volatile",      "wchar_t",     "while",
    "xor",           "xor_eq",      "threadIdx",
    "blockIdx",      "blockDim",    "gridDim",
    "warpSize",      "half",        "float2",
    "float4",        "int2",        "int4",
    "uint2",         "uint4"};

bool is_identifier_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// The name as it appears in a message: printable, and shortened when long.
std::string shown(std::string_view name) {
  constexpr std::size_t kShown = 40;
  std::string text(name.substr(0, kShown));
  for (char& c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte >= 0x7f) c = '?';
  }
  if (name.size() > kShown) text += "...";
  return "'" + text + "'";
}

}  // namespace

void check_slot_name(std::string_view program, std::string_view name) {
  const auto fail = [&](const std::string& why) {
    throw ProgramError("program '" + std::string(program) + "': slot name " + shown(name) + " " +
                       why);
  };
  if (name.empty()) fail("is empty");
  if (name.size() > kMaxSlotNameLength) {
    fail("has " + std::to_string(name.size()) + " characters; at most " +
         std::to_string(kMaxSlotNameLength) + " are allowed");
  }
  if (name.front() >= '0' && name.front() <= '9') fail("starts with a digit");
  if (!std::all_of(name.begin(), name.end(), is_identifier_char)) {
    fail("is not an identifier: use letters, digits and '_'");
  }
  if (name.front() == '_' || name.find("__") != std::string_view::npos) {
    fail("starts with '_' or contains \"__\" (reserved in generated C++)");
  }
  if (std::find(kReserved.begin(), kReserved.end(), name) != kReserved.end()) {
    fail("is a C++ or CUDA keyword");
  }
}

}  // namespace tilenorm
