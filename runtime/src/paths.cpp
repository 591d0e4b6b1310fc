#include "tilenorm/runtime/paths.hpp"

#include <dlfcn.h>

#include <system_error>

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

std::filesystem::path directory_of_loaded_file(const void* symbol) {
  Dl_info info{};
  if (::dladdr(symbol, &info) == 0 || !info.dli_fname) return {};
  std::error_code error;
  const std::filesystem::path file = std::filesystem::canonical(info.dli_fname, error);
  return error ? std::filesystem::path{} : file.parent_path();
}

std::optional<std::filesystem::path> shipped_databases_directory() {
  // This library's own directory, links resolved: a library linked into another directory
  // still finds its own prefix.
  const std::filesystem::path library =
      directory_of_loaded_file(reinterpret_cast<const void*>(&cache_directory));
  if (library.empty()) return std::nullopt;
  // The build tree's copy first: a build directory inside an install prefix (say /usr/build)
  // would otherwise read that prefix's databases.
  for (const char* relative : {"share/tilenorm/databases", TILENORM_LIB_TO_DATABASES}) {
    const std::filesystem::path directory = (library / relative).lexically_normal();
    std::error_code error;
    if (std::filesystem::is_directory(directory, error)) return directory;
  }
  return std::nullopt;
}

}  // namespace tilenorm
