#!/usr/bin/env bash
# kill -9 a process at random moments while it writes the tuning database (mode db) or one disk
# cache entry (mode cache), over and over. After every kill the file must be the old or the new
# one: it parses with no problem, and the database never has fewer entries than before.
# usage: kill_during_write.sh WORK_DIR HELPER db|cache
source "$(dirname "$0")/lib.sh" "$1"
helper="$2"
mode="$3"
rounds=30
previous=0
for round in $(seq 1 "$rounds"); do
  if [ "$mode" = db ]; then
    "$helper" db-writer "$work/tuning.json" "$round" &
  else
    "$helper" cache-writer "$work/cache" &
  fi
  pid=$!
  sleep "0.0$((RANDOM % 8 + 2))"  # 20 to 90 ms
  kill -9 "$pid"
  wait "$pid" 2>/dev/null
  if [ "$mode" = db ]; then
    count="$("$helper" db-check "$work/tuning.json")" || fail "round $round: the database is damaged"
    [ "$count" -ge "$previous" ] || fail "round $round: $count entries, $previous before"
    previous="$count"
  else
    size="$("$helper" cache-check "$work/cache")" || fail "round $round: the cache entry is damaged"
    [ "$size" = 0 ] || [ "$size" = 1000 ] || [ "$size" = 300000 ] || fail "entry of $size bytes"
    previous=$((previous + (size > 0)))
  fi
done
[ "$previous" -gt 0 ] || fail "no write ever completed; the test proved nothing"
leftovers="$(find "$work" -name '*.tmp-*' | wc -l)"
echo "ok: $rounds kills; $previous (entries or loadable rounds); $leftovers temporary files left by killed writers"
