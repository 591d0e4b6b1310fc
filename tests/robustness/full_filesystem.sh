#!/usr/bin/env bash
# A full filesystem, simulated with a file-size limit (ulimit -f, SIGXFSZ ignored so writes fail
# with EFBIG instead of killing the process): a database write fails with a clear error and
# leaves the old file; a cache write warns and leaves the old entry.
# usage: full_filesystem.sh WORK_DIR HELPER TILENORM_TUNE
source "$(dirname "$0")/lib.sh" "$1"
helper="$2"
tune="$3"
trap '' XFSZ

run 0 "$helper" db-upsert "$work/tuning.json" 1
before="$(cksum <"$work/tuning.json")"
run 1 bash -c "ulimit -f 8 && exec '$helper' db-upsert '$work/tuning.json' 2 20000"
expect_in "$work/err" "cannot write $work/tuning.json.tmp-"
expect_in "$work/err" "File too large"
[ "$(cksum <"$work/tuning.json")" = "$before" ] || fail "the database changed"
run 0 "$helper" db-check "$work/tuning.json"
expect_in "$work/out" 1
[ -z "$(find "$work" -name '*.tmp-*' -o -name '*.lock')" ] || fail "temporary or lock file left"

# The same through tilenorm-tune merge.
run 0 "$helper" db-upsert "$work/big.json" 3 20000
run 1 bash -c "ulimit -f 8 && exec '$tune' merge '$work/tuning.json' '$work/big.json'"
expect_in "$work/err" "tilenorm-tune: error: cannot write $work/tuning.json.tmp-"
[ "$(cksum <"$work/tuning.json")" = "$before" ] || fail "merge changed the database"

mkdir "$work/cache"
run 0 "$helper" cache-store "$work/cache" 1000
run 0 bash -c "ulimit -f 8 && exec '$helper' cache-store '$work/cache' 100000"
expect_in "$work/err" "tilenorm: warning: disk cache: cannot write $work/cache/"
expect_in "$work/err" "File too large; the compiled kernel is not cached"
run 0 "$helper" cache-check "$work/cache"
expect_in "$work/out" 1000
[ -z "$(find "$work" -name '*.tmp-*')" ] || fail "temporary file left"
echo "ok"
