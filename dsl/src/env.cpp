#include "tilenorm/dsl/env.hpp"

#include <cstdlib>
#include <string_view>

namespace tilenorm {

std::optional<std::string> env_value(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

bool env_flag(const char* name) {
  const auto value = env_value(name);
  return value && *value != "0";
}

}  // namespace tilenorm
