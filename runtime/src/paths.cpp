#include "tilenorm/runtime/paths.hpp"

#include <cstdlib>

#include "tilenorm/dsl/error.hpp"

namespace tilenorm {

std::filesystem::path cache_directory() {
  auto non_empty_env = [](const char* name) -> const char* {
    const char* value = std::getenv(name);
    return value && *value ? value : nullptr;
  };
  if (const char* dir = non_empty_env("TILENORM_CACHE_DIR")) return dir;
  if (const char* xdg = non_empty_env("XDG_CACHE_HOME"))
    return std::filesystem::path(xdg) / "tilenorm";
  if (const char* home = non_empty_env("HOME")) {
    return std::filesystem::path(home) / ".cache" / "tilenorm";
  }
  throw Error(
      "cannot choose a cache directory: none of TILENORM_CACHE_DIR, XDG_CACHE_HOME or HOME is set");
}

}  // namespace tilenorm
