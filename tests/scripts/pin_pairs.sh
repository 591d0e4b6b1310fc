#!/usr/bin/env bash
# scripts/pin-pairs: a --show-candidates log's configurations timed with several load pins, each
# pin in points against the rule's kernel; the first M of a shape only unless --all; a log with
# no such pair fails with a message. Skipped (77) without python3.
source "$(dirname "$0")/python_script_test.sh"
cat >"$work/tune.log" <<'LOG'
layer_norm_backward fp16 N=65536 M=1024: 4 candidates timed (first round)
  161.20 us  82.6% copy  tpr=128 rpc=4 vec=8 prefetched cluster=16 pin=on
  168.08 us  77.8% copy  tpr=128 rpc=4 vec=8 prefetched cluster=16
  172.00 us  75.0% copy  tpr=256 rpc=1 vec=8 prefetched cluster=16
  174.00 us  74.0% copy  tpr=256 rpc=1 vec=8 prefetched cluster=16 pin=off

layer_norm_backward fp16 N=65536 M=256: 2 candidates timed (first round)
  55.73 us  59.6% copy  tpr=128 rpc=4 vec=8 prefetched cluster=16 pin=on
  57.41 us  57.9% copy  tpr=128 rpc=4 vec=8 prefetched cluster=16
LOG
"$script" "$work/tune.log" >"$work/out.md"
# One column per pin the log holds (off, on), each row filling its own.
grep -qF "| configuration | rule % | off (points) | on (points) |" "$work/out.md" ||
  fail "header: $(cat "$work/out.md")"
grep -qF "| layer_norm_backward | fp16 | 65536 | 1024 | tpr=128 rpc=4 vec=8 prefetched cluster=16 | 77.8 |  | +4.8 |" \
  "$work/out.md" || fail "row: $(cat "$work/out.md")"
grep -qF "| 1024 | tpr=256 rpc=1 vec=8 prefetched cluster=16 | 75.0 | -1.0 |  |" "$work/out.md" ||
  fail "row: $(cat "$work/out.md")"
[ "$(grep -c '^| layer_norm' "$work/out.md")" -eq 2 ] || fail "rows: $(cat "$work/out.md")"
"$script" --all "$work/tune.log" >"$work/all.md"
grep -qF "| 256 | tpr=128 rpc=4 vec=8 prefetched cluster=16 | 57.9 |  | +1.7 |" "$work/all.md" ||
  fail "--all: $(cat "$work/all.md")"
echo "nothing here" >"$work/empty.log"
if "$script" "$work/empty.log" 2>"$work/err.txt"; then fail "a log without pairs passed"; fi
grep -q "no candidate was timed with more than one load pin" "$work/err.txt" ||
  fail "message: $(cat "$work/err.txt")"
echo "pin-pairs: ok"
