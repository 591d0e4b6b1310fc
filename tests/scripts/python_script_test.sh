# Sourced by the tests of the Python scripts under scripts/: takes the script and a work folder
# from the arguments, skips (77) without python3, empties the folder, and defines fail.
set -euo pipefail
script="$1"
work="$2"
command -v python3 >/dev/null || { echo "SKIPPED: no python3"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work"
