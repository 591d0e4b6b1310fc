#!/usr/bin/env bash
# scripts/stall-summary: Nsight Compute's source page (CSV) as stall shares, the hottest
# instructions and the stores or loads that touch excess L2 sectors; input without a source
# table, or without samples, fails with a message. Skipped (77) without python3.
source "$(dirname "$0")/python_script_test.sh"
cat >"$work/source.csv" <<'CSV'
"Kernel Name","tilenorm_layer_norm_backward",
"Address","Source","Warp Stall Sampling (All Samples)","L2 Theoretical Sectors Global Excessive","L2 Theoretical Sectors Global","stall_barrier","stall_long_sb","stall_long_sb (Not Issued)"
"0x10","  @!P1  BRA 0x90","60","0","0","0","60","55"
"0x20","  LDS.128 R4, [R2]","30","0","0","27","3","1"
"0x30","  STG.E desc[UR4][R2.64], R7","10","1,200","1,600","0","10","0"
"0x40","  STG.E.128 desc[UR4][R2.64], R8","0","0","400","0","0","0"
CSV
"$script" "$work/source.csv" >"$work/out.md"
grep -qF "100 warp samples over 4 instructions." "$work/out.md" || fail "count: $(cat "$work/out.md")"
grep -qF "| long_sb | 73.0% |" "$work/out.md" || fail "long_sb: $(cat "$work/out.md")"
grep -qF "| barrier | 27.0% |" "$work/out.md" || fail "barrier: $(cat "$work/out.md")"
grep -qF "| 0x10 | \`@!P1  BRA 0x90\` | 60.0% | long_sb 100% |" "$work/out.md" ||
  fail "hottest: $(cat "$work/out.md")"
grep -qF "| 0x20 | \`LDS.128 R4, [R2]\` | 30.0% | barrier 90%, long_sb 10% |" "$work/out.md" ||
  fail "second: $(cat "$work/out.md")"
grep -qF "Excessive L2 sectors: 1200 of 2000 (60.0%), from 1 instructions." "$work/out.md" ||
  fail "sectors: $(cat "$work/out.md")"
grep -qF "| 0x30 | \`STG.E desc[UR4][R2.64], R7\` | 1200 |" "$work/out.md" ||
  fail "sector row: $(cat "$work/out.md")"
# "Not Issued" columns are a subset of the samples: not counted again.
if grep -q "Not Issued" "$work/out.md"; then fail "counted Not Issued: $(cat "$work/out.md")"; fi
"$script" --top 1 <"$work/source.csv" >"$work/top.md"
[ "$(grep -c '^| 0x' "$work/top.md")" -eq 2 ] || fail "--top 1: $(cat "$work/top.md")"
echo '"Kernel Name","k",' >"$work/empty.csv"
if "$script" "$work/empty.csv" 2>"$work/err.txt"; then fail "a CSV without a source table passed"; fi
grep -q "no source table with warp samples" "$work/err.txt" || fail "message: $(cat "$work/err.txt")"
head -2 "$work/source.csv" >"$work/nosamples.csv"
echo '"0x10","  NOP","0","0","0","0","0","0"' >>"$work/nosamples.csv"
if "$script" "$work/nosamples.csv" 2>"$work/err2.txt"; then fail "a table without samples passed"; fi
grep -q "the report has no warp samples" "$work/err2.txt" || fail "message: $(cat "$work/err2.txt")"
echo "stall-summary: ok"
