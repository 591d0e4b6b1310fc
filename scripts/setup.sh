# Sourced by scripts/test, scripts/demo and scripts/device-run: makes sure the build
# dependencies are present (installing the Debian packages when running as root), then
# configures and builds tilenorm in $TILENORM_BUILD_DIR (default: build/).

tilenorm_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${TILENORM_BUILD_DIR:-$tilenorm_root/build}"

# The device machine keeps ninja inside the PyTorch virtual environment.
for extra in /opt/torch/.venv/bin /usr/local/cuda/bin; do
  [ -d "$extra" ] && PATH="$PATH:$extra"
done
export PATH

missing_packages() {
  local missing=()
  [ -f /usr/include/boost/hana.hpp ] || missing+=(libboost-dev)
  [ -f /usr/include/doctest/doctest.h ] || missing+=(doctest-dev)
  [ -f /usr/include/nlohmann/json.hpp ] || missing+=(nlohmann-json3-dev)
  command -v cmake >/dev/null || missing+=(cmake)
  command -v g++ >/dev/null || missing+=(g++)
  command -v ninja >/dev/null || missing+=(ninja-build)
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

configure_and_build() {
  install_dependencies
  local cuda generator=()
  cuda="$(find_cuda_toolkit)"
  command -v ninja >/dev/null && generator=(-G Ninja)
  if [ ! -f "$build_dir/CMakeCache.txt" ]; then
    cmake -S "$tilenorm_root" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DCUDAToolkit_ROOT="$cuda" -DTILENORM_WERROR=ON "$@"
  fi
  cmake --build "$build_dir" --parallel "$(nproc)"
}
