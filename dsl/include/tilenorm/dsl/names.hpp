#pragma once
// What a slot name (ProgramBuilder::input, column, scalar, output, save) may be. Names end up in
// generated CUDA identifiers, in the interpreter's and the check harness's maps, and in error
// messages, so they are plain identifiers: [A-Za-z_][A-Za-z0-9_]*, at most kMaxSlotNameLength
// characters, no "__" anywhere and no leading '_' (generated code prefixes names with "in_",
// "col_" ..., and identifiers containing "__" are reserved in C++), and no C++ or CUDA keyword.
#include <cstddef>
#include <string_view>

namespace tilenorm {

inline constexpr std::size_t kMaxSlotNameLength = 64;

// Throws ProgramError "program '<program>': slot name '<name>' <why>" (a long name is shown
// shortened) unless `name` is a valid slot name.
void check_slot_name(std::string_view program, std::string_view name);

}  // namespace tilenorm
