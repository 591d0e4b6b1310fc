#!/usr/bin/env bash
# Every tool with an empty environment (no HOME, no XDG variables, no TILENORM variables): it
# works where it needs no cache directory, and otherwise fails with one clear error line. No
# tool may die from a signal (abort, segfault).
# usage: empty_environment.sh WORK_DIR TOOL_DIR HELPER
source "$(dirname "$0")/lib.sh" "$1"
tools="$2"
helper="$3"
run 0 "$helper" db-upsert "$work/a.json" 1
bare() { env -i PATH=/usr/bin:/bin "$@"; }

run 0 bare "$tools/tilenorm-dump" --kernel rms_norm --n 1024
expect_in "$work/out" "__global__"
run 0 bare "$tools/tilenorm-dump" --version
run 0 bare "$tools/tilenorm-tune" --version
run 0 bare "$tools/tilenorm-tune" --dry-run --kernel rms_norm --dtype bf16 --n 1024 --quiet
run 0 bare "$tools/tilenorm-tune" show --db "$work/a.json"
expect_in "$work/out" "1 entries"
run 0 bare "$tools/tilenorm-tune" merge "$work/b.json" "$work/a.json"
run 1 bare "$tools/tilenorm-tune" show
expect_in "$work/err" "tilenorm-tune: error: cannot choose a cache directory"
run 0 bare "$tools/tilenorm-demo" --help

# Tuning and the demo need a GPU and a cache directory: a clear error either way. (Any GPU is
# hidden with CUDA_VISIBLE_DEVICES= so that a GPU machine does not start tuning here.)
for tool in "tilenorm-tune --n 1024 --kernel rms_norm --dtype bf16" tilenorm-demo; do
  # shellcheck disable=SC2086
  bare CUDA_VISIBLE_DEVICES= "$tools"/$tool >"$work/out" 2>"$work/err"
  status=$?
  [ "$status" -lt 128 ] || fail "$tool died with status $status"
  if [ "$status" != 0 ]; then
    grep -q "^${tool%% *}: error: " "$work/err" || fail "$tool: no error line: $(cat "$work/err")"
  fi
  echo "ok: $tool exited with $status: $(head -n 1 "$work/err")"
done
echo "ok"
