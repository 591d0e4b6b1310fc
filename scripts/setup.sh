# Sourced by scripts/test, scripts/demo and scripts/device-run: makes sure the build
# dependencies are present (installing the Debian packages when running as root), then
# configures and builds tilenorm in $TILENORM_BUILD_DIR (default: build/).

tilenorm_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${TILENORM_BUILD_DIR:-$tilenorm_root/build}"
tilenorm_cmake_minimum=3.25

# The device machine keeps ninja inside the PyTorch virtual environment.
for extra in /opt/torch/.venv/bin /usr/local/cuda/bin; do
  [ -d "$extra" ] && PATH="$PATH:$extra"
done
export PATH

# Debian packages that provide what the build needs (ninja is optional: Make is the fallback).
missing_packages() {
  local missing=()
  [ -f /usr/include/boost/hana.hpp ] || missing+=(libboost-dev)
  [ -f /usr/include/doctest/doctest.h ] || missing+=(doctest-dev)
  [ -f /usr/include/nlohmann/json.hpp ] || missing+=(nlohmann-json3-dev)
  [ -f /usr/include/CLI/CLI.hpp ] || missing+=(libcli11-dev)
  [ -f /usr/include/openssl/evp.h ] || missing+=(libssl-dev)
  command -v cmake >/dev/null || missing+=(cmake)
  command -v g++ >/dev/null || missing+=(g++)
  echo "${missing[@]:-}"
}

install_dependencies() {
  local missing
  missing="$(missing_packages)"
  [ -z "$missing" ] && return 0
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "tilenorm: installing $missing"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
  else
    echo "tilenorm: missing build dependencies. Install them with:" >&2
    echo "  sudo apt-get install $missing" >&2
    exit 1
  fi
}

check_cmake_version() {
  local version
  version="$(cmake --version | sed -n 's/^cmake version \([0-9][0-9.]*\).*/\1/p')"
  if [ -z "$version" ] ||
    [ "$(printf '%s\n%s\n' "$tilenorm_cmake_minimum" "$version" | sort -V | head -n 1)" != "$tilenorm_cmake_minimum" ]; then
    echo "tilenorm: CMake $tilenorm_cmake_minimum or newer is needed, but $(command -v cmake) is version ${version:-unknown}." >&2
    echo "  Install a newer CMake (e.g. from backports or pip install cmake) and put it first on PATH." >&2
    exit 1
  fi
}

find_cuda_toolkit() {
  for candidate in "${CUDA_HOME:-}" /usr/local/cuda; do
    if [ -n "$candidate" ] && [ -f "$candidate/include/nvrtc.h" ]; then
      echo "$candidate"
      return 0
    fi
  done
  echo "tilenorm: the CUDA toolkit (with NVRTC) was not found; install it at /usr/local/cuda or set CUDA_HOME" >&2
  exit 1
}

# The value of a variable in the build directory's CMakeCache.txt (empty if absent).
cached_value() {
  sed -n "s/^$1:[A-Z]*=//p" "$build_dir/CMakeCache.txt" | head -n 1
}

# Decides whether the existing build directory can be reused. Refuses one configured for
# another source tree; wipes the configuration (not the sources) when the toolkit or the
# generator it was configured with is no longer the right one.
check_existing_build_dir() {
  local cuda="$1" cache="$build_dir/CMakeCache.txt"
  [ -f "$cache" ] || return 0
  local home
  home="$(cached_value CMAKE_HOME_DIRECTORY)"
  if [ -z "$home" ] || [ "$(cd "$home" 2>/dev/null && pwd -P)" != "$(cd "$tilenorm_root" && pwd -P)" ]; then
    echo "tilenorm: $build_dir was configured for the source tree '${home:-unknown}', not for $tilenorm_root." >&2
    echo "  Point TILENORM_BUILD_DIR at a build directory of this tree (or an empty one), or remove $build_dir." >&2
    exit 1
  fi
  local reason=""
  if [ "$(cached_value TILENORM_CUDA_HOME)" != "$cuda" ]; then
    reason="the CUDA toolkit changed to $cuda (was '$(cached_value TILENORM_CUDA_HOME)')"
  elif [ "$(cached_value CMAKE_GENERATOR)" = "Ninja" ] && ! command -v ninja >/dev/null; then
    reason="it was configured for ninja, which is no longer on PATH"
  fi
  if [ -n "$reason" ]; then
    echo "tilenorm: re-configuring $build_dir: $reason"
    rm -rf "$cache" "$build_dir/CMakeFiles"
  fi
}

configure_and_build() {
  install_dependencies
  check_cmake_version
  local cuda generator=(-G "Unix Makefiles")
  cuda="$(find_cuda_toolkit)"
  command -v ninja >/dev/null && generator=(-G Ninja)
  check_existing_build_dir "$cuda"
  if [ ! -f "$build_dir/CMakeCache.txt" ]; then
    cmake -S "$tilenorm_root" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCUDAToolkit_ROOT="$cuda" -DTILENORM_CUDA_HOME="$cuda" -DTILENORM_WERROR=ON "$@"
  fi
  cmake --build "$build_dir" --parallel "$(nproc)"
}
