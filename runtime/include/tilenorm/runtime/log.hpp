#pragma once
// Warnings that must not stop the program (a corrupt cache entry, a foreign tuning file).
// They go to stderr as "tilenorm: warning: ..." unless a handler is installed (tests do).
#include <functional>
#include <string_view>

namespace tilenorm {

using WarningHandler = std::function<void(std::string_view message)>;

void warn(std::string_view message);

// Installs `handler` for all later warnings and returns the previous one (empty = stderr).
WarningHandler set_warning_handler(WarningHandler handler);

}  // namespace tilenorm
