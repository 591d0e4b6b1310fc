#pragma once
#include <filesystem>
#include <optional>

namespace tilenorm {

// The directory for compiled kernels and the default tuning database:
// $TILENORM_CACHE_DIR, else $XDG_CACHE_HOME/tilenorm, else $HOME/.cache/tilenorm.
// Not created here; writers create it when they first store something.
std::filesystem::path cache_directory();

// The directory of the file (a shared library) that `symbol` was loaded from, links resolved;
// empty when the loader cannot say.
std::filesystem::path directory_of_loaded_file(const void* symbol);

// Where the tuning databases that ship with tilenorm (autotune/databases) are, found from this
// library's own file: the build tree keeps a copy beside it (share/tilenorm/databases), and an
// install puts them under <prefix>/share/tilenorm/databases, which is found from <prefix>/lib
// however the prefix was moved. nullopt where neither directory exists.
std::optional<std::filesystem::path> shipped_databases_directory();

}  // namespace tilenorm
