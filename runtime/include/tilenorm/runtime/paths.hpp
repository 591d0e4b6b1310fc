#pragma once
#include <filesystem>

namespace tilenorm {

// The directory for compiled kernels and the default tuning database:
// $TILENORM_CACHE_DIR, else $XDG_CACHE_HOME/tilenorm, else $HOME/.cache/tilenorm.
// Not created here; writers create it when they first store something.
std::filesystem::path cache_directory();

}  // namespace tilenorm
