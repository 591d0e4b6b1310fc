#!/usr/bin/env bash
# Several tuners (processes adding entries one write at a time) and several tilenorm-tune merge
# processes work on one database at once. Every entry of every process must be in it afterwards.
# usage: concurrency.sh WORK_DIR HELPER TILENORM_TUNE
source "$(dirname "$0")/lib.sh" "$1"
helper="$2"
tune="$3"
writers=4
mergers=3
per_process=15
for m in $(seq 1 "$mergers"); do  # each merge input holds its own entries
  for i in $(seq 1 "$per_process"); do
    "$helper" db-upsert "$work/input$m.json" $(((100 + m) * 1000000 + i)) || fail "input $m"
  done
done
pids=()
for w in $(seq 1 "$writers"); do
  (for i in $(seq 1 "$per_process"); do
    "$helper" db-upsert "$work/tuning.json" $((w * 1000000 + i)) || exit 1
  done) &
  pids+=($!)
done
for m in $(seq 1 "$mergers"); do
  "$tune" merge "$work/tuning.json" "$work/input$m.json" >/dev/null &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || fail "process $pid failed"; done
run 0 "$helper" db-check "$work/tuning.json"
expected=$(((writers + mergers) * per_process))
[ "$(cat "$work/out")" = "$expected" ] || fail "$(cat "$work/out") entries, expected $expected"
[ -z "$(find "$work" -name '*.tmp-*' -o -name '*.lock')" ] || fail "temporary or lock file left"
echo "ok: $expected entries"
