#!/usr/bin/env bash
# bench/report.py --heuristic: the heuristic's run against the tuned one, shape by shape, with
# the shapes below the untuned goal marked. Two tilenorm-bench JSON documents written here
# stand in for a device run. Exit 77 (skipped) without python3.
source "$(dirname "$0")/report_test_setup.sh"

# document FILE TUNING_DATABASE ROWS: a tilenorm-bench document with a 4.0 TB/s ceiling.
document() {
  cat >"$1" <<JSON
{"tool": "tilenorm-bench", "device": "NVIDIA H200", "arch": "sm_90", "date_utc": "2026-12-05",
 "dtype": "bf16", "elements": 67108864, "timing": "graph", "tuning_database": $2,
 "copy_ceiling": {"method": "cuMemcpyDtoDAsync", "bytes": 2147483648, "median_us": 500.0,
                  "tbps": 4.0},
 "rows": [$3]}
JSON
}
# row OP N TBPS SOURCE: one timed forward row.
row() {
  local percent
  percent=$(python3 -c "print(100 * $3 / 4.0)")
  echo "{\"op\": \"$1\", \"pass\": \"forward\", \"m\": $((67108864 / $2)), \"n\": $2,
        \"row_stride\": $2, \"bytes\": 1, \"timing\": \"graph\", \"median_us\": 1.0,
        \"tbps\": $3, \"percent_of_ceiling\": $percent, \"config_text\": \"cfg\",
        \"config_source\": \"$4\"}"
}
document "$work/tuned.json" true "$(row layer_norm 4096 3.8 tuned_exact), \
  $(row layer_norm 45056 3.6 tuned_exact), $(row rms_norm 4096 3.9 heuristic)"
document "$work/heuristic.json" false "$(row layer_norm 4096 3.7 heuristic), \
  $(row layer_norm 45056 2.7 heuristic), $(row rms_norm 4096 3.9 heuristic)"

python3 "$report" --tilenorm "$work/tuned.json" --heuristic "$work/heuristic.json" \
  --markdown "$work/report.md" >/dev/null
grep -q "^## untuned against tuned" "$work/report.md" || fail "no untuned table"
# 3.7 / 3.8 = 0.97 passes; 2.7 / 3.6 = 0.75 is marked.
grep -qF "| layer_norm | forward | 4096 | 16384 | 95.0% | cfg, tuned_exact | 92.5% | cfg, heuristic | 0.97 |" \
  "$work/report.md" || fail "the 4096 row: $(grep '| 4096 |' "$work/report.md")"
grep -qF "| 0.75 ✗ |" "$work/report.md" || fail "45056 is not marked below the goal"
grep -qF "heuristic at ≥ 0.90 of the tuned figure: 2 of 3 shapes timed the same way. Lowest: 0.75, layer_norm forward 1489x45056." \
  "$work/report.md" || fail "summary: $(grep 'heuristic at' "$work/report.md")"
# Without --heuristic there is no such table.
python3 "$report" --tilenorm "$work/tuned.json" >"$work/plain.md"
! grep -q "untuned against tuned" "$work/plain.md" || fail "an untuned table without --heuristic"
echo "report.py --heuristic: ok"
