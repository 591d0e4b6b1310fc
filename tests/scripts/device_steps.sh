#!/usr/bin/env bash
# scripts/device-steps.sh: steps write under their own folder of $OUT, a step that needs more
# time than is left is skipped with a message, one that outlives the budget is cut short, and
# finish packs everything and fails when a step failed, was skipped or was cut short.
set -euo pipefail
steps="$1"
work="$2"
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$work"
mkdir -p "$work/ok" "$work/cut"

# All steps fit: each one's file lands in its folder, finish succeeds and packs them.
(
  export OUT="$work/ok"
  source "$steps" 60
  step first 5 sh -c 'echo one >"$OUT/result.txt"'
  step second 5 sh -c 'echo two >"$OUT/result.txt"'
  finish --keep 'second/*'
) >"$work/ok.log" 2>&1 || fail "the steps that fit failed: $(cat "$work/ok.log")"
grep -q "=== step first: exit 0" "$work/ok.log" || fail "no exit line: $(cat "$work/ok.log")"
[ "$(cat "$work/ok/second/result.txt")" = two ] || fail "the kept file is not beside the archive"
mkdir -p "$work/unpacked"
tar -xzf "$work/ok/results.tar.gz" -C "$work/unpacked"
[ "$(cat "$work/unpacked/first/result.txt")" = one ] || fail "the first step's file is not packed"

# A budget of 6 s with 2 s kept back: a step needing 10 s is skipped and the next one still
# runs; a 30 s one is stopped after about 4 s; then no time is left, even for a step that asks
# for none.
started=$SECONDS
if (
  export OUT="$work/cut" DEVICE_STEPS_RESERVE=2
  source "$steps" 6
  step long 10 sleep 1
  step quick 1 sh -c 'echo quick >"$OUT/quick.txt"'
  step slow 1 sleep 30
  step after 0 sh -c 'echo after >"$OUT/after.txt"'
  finish
) >"$work/cut.log" 2>&1; then
  fail "finish succeeded after a skipped and a cut step"
fi
[ $((SECONDS - started)) -lt 20 ] || fail "the slow step was not stopped"
grep -qF "=== step long: skipped, " "$work/cut.log" || fail "no skip message: $(cat "$work/cut.log")"
grep -q "of the 10 s it needs" "$work/cut.log" || fail "the skip does not say why"
grep -q "=== step slow: cut short after" "$work/cut.log" || fail "no cut message: $(cat "$work/cut.log")"
grep -q "=== step quick: exit 0" "$work/cut.log" || fail "the step after a skip did not run"
grep -qF "=== step after: skipped, " "$work/cut.log" || fail "a step ran with no time left"
tar -tzf "$work/cut/results.tar.gz" | grep -q "quick/quick.txt" || fail "quick.txt is not packed"
[ -f "$work/cut/results.tar.gz" ] || fail "nothing packed after a failed step"

# Without OUT, sourcing it is an error that says so.
if (unset OUT; source "$steps" 60) 2>"$work/no-out.txt"; then fail "sourced without OUT"; fi
grep -q "OUT is not set" "$work/no-out.txt" || fail "the error: $(cat "$work/no-out.txt")"
echo "device-steps.sh: ok"
