# Shared by the robustness scripts: a fresh work directory and checks that explain a failure.
set -u
work="$1"
shift
rm -rf "$work"
mkdir -p "$work"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# run EXPECTED_STATUS COMMAND...: runs it with stdout in $work/out and stderr in $work/err.
run() {
  local expected="$1" status
  shift
  "$@" >"$work/out" 2>"$work/err"
  status=$?
  if [ "$status" != "$expected" ]; then
    echo "--- stdout:" >&2; cat "$work/out" >&2
    echo "--- stderr:" >&2; cat "$work/err" >&2
    fail "'$*' exited with $status, expected $expected"
  fi
}

# expect_in FILE TEXT: the file holds TEXT.
expect_in() {
  grep -qF -- "$2" "$1" || { cat "$1" >&2; fail "'$2' not in $(basename "$1")"; }
}
