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

namespace {

// The directory of the file this library was loaded from, links resolved (a library linked into
// another directory still finds its own prefix); empty when the loader cannot say.
std::filesystem::path library_directory() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&cache_directory), &info) == 0 || !info.dli_fname) return {};
  std::error_code error;
  const std::filesystem::path file = std::filesystem::canonical(info.dli_fname, error);
  return error ? std::filesystem::path{} : file.parent_path();
}

}  // namespace

std::optional<std::filesystem::path> shipped_databases_directory() {
  const std::filesystem::path library = library_directory();
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
