# Sourced by the report.py tests: their arguments (REPORT the script, WORK a scratch folder),
# the skip without python3 (exit 77), and fail MESSAGE.
set -euo pipefail
report="$1"
work="$2"
command -v python3 >/dev/null || { echo "skipped: python3 is not installed"; exit 77; }
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
