#!/usr/bin/env bash
# scripts/pack-out: every file under the folder ends up in results.tar.gz with its path, the
# --keep matches stay beside it, the rest and the emptied folders are gone, and bad arguments
# (and a second pack) fail with a message.
set -euo pipefail
script="$1"
work="$2"
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$work"
mkdir -p "$work/out/bf16" "$work/out/fp32/deep" "$work/unpacked"
echo a >"$work/out/bf16/tilenorm-bench.json"
echo b >"$work/out/bf16/baseline-compare.md"
echo c >"$work/out/fp32/logs.txt"
echo d >"$work/out/fp32/deep/tune.log"
echo e >"$work/out/top.txt"
"$script" --keep '*/baseline-compare.md' "$work/out" >"$work/summary.txt"
grep -q "5 files in $work/out/results.tar.gz; 1 kept beside it" "$work/summary.txt" ||
  fail "summary: $(cat "$work/summary.txt")"
tar -xzf "$work/out/results.tar.gz" -C "$work/unpacked"
for file in bf16/tilenorm-bench.json bf16/baseline-compare.md fp32/logs.txt fp32/deep/tune.log \
  top.txt; do
  [ -f "$work/unpacked/$file" ] || fail "$file is not in the archive"
done
[ "$(cat "$work/unpacked/fp32/deep/tune.log")" = d ] || fail "tune.log's content changed"
[ -f "$work/out/bf16/baseline-compare.md" ] || fail "the kept file was removed"
left=$(cd "$work/out" && find . -type f | sort | tr '\n' ' ')
[ "$left" = "./bf16/baseline-compare.md ./results.tar.gz " ] || fail "left beside the archive: $left"
[ ! -d "$work/out/fp32" ] || fail "the emptied folder fp32 is still there"
# Packing again would put the first archive out of reach: refused, nothing touched.
if "$script" "$work/out" 2>"$work/err.txt"; then fail "a second pack was accepted"; fi
grep -q "results.tar.gz exists: already packed" "$work/err.txt" || fail "message: $(cat "$work/err.txt")"
[ -f "$work/out/bf16/baseline-compare.md" ] || fail "a refused pack removed a file"
if "$script" "$work/missing" 2>"$work/err.txt"; then fail "a missing folder was accepted"; fi
grep -q "is not a folder" "$work/err.txt" || fail "missing folder message: $(cat "$work/err.txt")"
if OUT='' "$script" 2>"$work/err.txt"; then fail "no folder was accepted"; fi
grep -q "no folder given and OUT is not set" "$work/err.txt" || fail "message: $(cat "$work/err.txt")"
echo "pack-out: ok"
