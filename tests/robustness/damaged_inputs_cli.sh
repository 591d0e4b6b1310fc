#!/usr/bin/env bash
# tilenorm-tune show and merge on inputs that are not tuning databases (wrong schema, garbage,
# truncated, too large): a non-zero exit naming the file; merge changes nothing and leaves no
# lock file.
# usage: damaged_inputs_cli.sh WORK_DIR HELPER TILENORM_TUNE
source "$(dirname "$0")/lib.sh" "$1"
helper="$2"
tune="$3"
run 0 "$helper" db-upsert "$work/good.json" 1
before="$(cksum <"$work/good.json")"
echo '{"schema": "someone-elses", "version": 1, "entries": []}' >"$work/schema.json"
head -c 3000 /dev/urandom >"$work/garbage.json"
head -c 40 "$work/good.json" >"$work/truncated.json"
echo '{}' >"$work/huge.json"
truncate -s 100M "$work/huge.json"
for bad in schema garbage truncated huge; do
  run 1 "$tune" show --db "$work/$bad.json"
  expect_in "$work/err" "tilenorm-tune: error: $work/$bad.json is not a usable tuning database"
  run 1 "$tune" merge "$work/good.json" "$work/$bad.json"
  expect_in "$work/err" "tilenorm-tune: error: merge input $work/$bad.json is not a usable"
  [ "$(cksum <"$work/good.json")" = "$before" ] || fail "merge of $bad changed the output"
  [ ! -e "$work/good.json.lock" ] || fail "merge of $bad left a lock file"
done
echo "ok"
