#include "tilenorm/runtime/paths.hpp"

#include "tilenorm/dsl/env.hpp"
#include "tilenorm/dsl/error.hpp"

namespace tilenorm {

std::filesystem::path cache_directory() {
  if (auto dir = env_value("TILENORM_CACHE_DIR")) return *dir;
  if (auto xdg = env_value("XDG_CACHE_HOME")) return std::filesystem::path(*xdg) / "tilenorm";
  if (auto home = env_value("HOME")) return std::filesystem::path(*home) / ".cache" / "tilenorm";
  throw Error(
      "cannot choose a cache directory: none of TILENORM_CACHE_DIR, XDG_CACHE_HOME or HOME is set");
}

}  // namespace tilenorm
