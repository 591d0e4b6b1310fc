#!/usr/bin/env bash
# Cache and database locations that cannot be written. The tests run as root, for whom file
# modes do not stop a write, so the places are: a path below a regular file (ENOTDIR), /proc
# (ENOENT on create), and /sys/kernel when this system refuses writes there (EACCES even for
# root). A database write fails with an error naming the path; a cache write warns and the
# compiled kernel is still used (tilenorm-demo compiles every built-in kernel without a GPU).
# usage: read_only.sh WORK_DIR HELPER TILENORM_TUNE TILENORM_DEMO
source "$(dirname "$0")/lib.sh" "$1"
helper="$2"
tune="$3"
demo="$4"
echo "a regular file" >"$work/file"
run 0 "$helper" db-upsert "$work/input.json" 1

places=("$work/file/below" /proc/tilenorm-robustness)
if [ -d /sys/kernel ] && ! touch /sys/kernel/.tilenorm-probe 2>/dev/null; then
  places+=(/sys/kernel)
fi
for place in "${places[@]}"; do
  run 1 "$helper" db-upsert "$place/tuning.json" 1
  expect_in "$work/err" "robustness_helper: error: cannot "
  expect_in "$work/err" "$place"
  run 1 "$tune" merge "$place/tuning.json" "$work/input.json"
  expect_in "$work/err" "tilenorm-tune: error: cannot "
  run 0 "$helper" cache-store "$place/cache" 100
  expect_in "$work/err" "tilenorm: warning: "
  expect_in "$work/err" "the compiled kernel is not cached"
  echo "ok: $place: $(head -n 1 "$work/err")"
done

# CUDA_VISIBLE_DEVICES= hides any GPU, so the demo only compiles (quickly) on a GPU machine too.
run 0 env CUDA_VISIBLE_DEVICES= TILENORM_DISABLE_DISK_CACHE=0 TILENORM_CACHE_DIR="$work/file/cache" "$demo"
expect_in "$work/err" "the compiled kernel is not cached"
echo "ok: tilenorm-demo with an unwritable cache directory"
