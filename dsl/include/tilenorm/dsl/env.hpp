#pragma once
// Reading tilenorm's environment variables, the same way everywhere.
#include <optional>
#include <string>

namespace tilenorm {

// The variable's value when it is set and not empty; nullopt otherwise (an empty value counts as
// unset, as for PATH-like variables).
std::optional<std::string> env_value(const char* name);

// An on/off switch such as TILENORM_DISABLE_DISK_CACHE: on when the variable is set, not empty
// and not "0". So "1", "yes" and "true" turn it on; unset, "" and "0" leave it off.
bool env_flag(const char* name);

}  // namespace tilenorm
