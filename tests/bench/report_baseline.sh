#!/usr/bin/env bash
# bench/report.py --baseline: this tree's run against an older tree's, shape by shape, with the
# change in points, the configurations that differ, and a summary; and --variant: several trees'
# runs against this one in one table. tilenorm-bench JSON documents written here stand in for
# device runs. Exit 77 (skipped) without python3.
source "$(dirname "$0")/report_test_setup.sh"

# document FILE DEVICE ROWS: a tilenorm-bench document with a 4.0 TB/s ceiling.
document() {
  cat >"$1" <<JSON
{"tool": "tilenorm-bench", "device": "$2", "arch": "sm_90", "date_utc": "2026-12-05",
 "dtype": "bf16", "elements": 67108864, "timing": "graph", "tuning_database": false,
 "copy_ceiling": {"method": "cuMemcpyDtoDAsync", "bytes": 2147483648, "median_us": 500.0,
                  "tbps": 4.0},
 "rows": [$3]}
JSON
}
# row OP PASS N US PERCENT CONFIG: one timed row.
row() {
  echo "{\"op\": \"$1\", \"pass\": \"$2\", \"m\": $((67108864 / $3)), \"n\": $3,
        \"row_stride\": $3, \"bytes\": 1, \"timing\": \"graph\", \"median_us\": $4,
        \"tbps\": 1.0, \"percent_of_ceiling\": $5, \"config_text\": \"$6\",
        \"config_source\": \"heuristic\"}"
}
document "$work/new.json" "NVIDIA H100" "$(row layer_norm backward 4096 150.0 90.0 a), \
  $(row layer_norm backward 262144 160.0 80.0 b), $(row rms_norm recompute 262144 200.0 64.96 c)"
document "$work/old.json" "NVIDIA H100" "$(row layer_norm backward 4096 150.5 89.7 a), \
  $(row layer_norm backward 262144 200.0 62.5 old), $(row rms_norm recompute 262144 190.0 65.0 c)"

python3 "$report" --tilenorm "$work/new.json" --baseline "$work/old.json" \
  --markdown "$work/report.md" >/dev/null
grep -q "^## against the baseline" "$work/report.md" || fail "no baseline table"
grep -qF "| layer_norm | backward | 4096 | 16384 | 150.50 | 89.7% | 150.00 | 90.0% | +0.3 | a, heuristic |" \
  "$work/report.md" || fail "the 4096 row: $(grep '| 4096 |' "$work/report.md")"
# A configuration that changed names the baseline's.
grep -qF "| 200.00 | 62.5% | 160.00 | 80.0% | +17.5 | b, heuristic (baseline: old, heuristic) |" \
  "$work/report.md" || fail "the 262144 row: $(grep 'layer_norm | backward | 262144' "$work/report.md")"
# -0.04 points reads +0.0, not -0.0.
grep -qF "| 190.00 | 65.0% | 200.00 | 65.0% | +0.0 | c, heuristic |" "$work/report.md" ||
  fail "the rounding: $(grep 'rms_norm' "$work/report.md")"
grep -qF "Of 3 shapes timed the same way: 1 more than a point faster, 0 more than a point slower. Largest gain +17.5 (layer_norm backward 256x262144), largest loss +0.0 (rms_norm recompute 256x262144)." \
  "$work/report.md" || fail "summary: $(grep '^Of ' "$work/report.md")"
! grep -q "Warning" "$work/report.md" || fail "a warning for matching runs"
# Runs of different devices are compared with a warning.
document "$work/other.json" "NVIDIA H200" "$(row layer_norm backward 4096 150.5 89.7 a)"
python3 "$report" --tilenorm "$work/new.json" --baseline "$work/other.json" >"$work/other.md"
grep -qF "**Warning:** device differs: this run 'NVIDIA H100', baseline 'NVIDIA H200'." \
  "$work/other.md" || fail "no device warning"
# A run with programmatic dependent launch says so, and against a plain baseline warns; a
# document from before the field existed counts as plain.
sed 's/"tuning_database": false,/"tuning_database": false, "programmatic_launch": true,/' \
  "$work/new.json" >"$work/programmatic.json"
python3 "$report" --tilenorm "$work/programmatic.json" --baseline "$work/old.json" \
  >"$work/programmatic.md"
grep -qF "tilenorm launched with programmatic dependent launch" "$work/programmatic.md" ||
  fail "no programmatic launch line"
grep -qF "**Warning:** programmatic_launch differs: this run True, baseline False." \
  "$work/programmatic.md" || fail "no programmatic launch warning"
! grep -q "programmatic" "$work/report.md" || fail "programmatic launch named for plain runs"
# A shape the baseline failed is listed among the failures, as the baseline's.
failed='{"op": "rms_norm", "pass": "forward", "m": 16384, "n": 4096, "row_stride": 4096,
         "error": "launch failed"}'
document "$work/failed.json" "NVIDIA H100" "$(row layer_norm backward 4096 150.5 89.7 a), $failed"
python3 "$report" --tilenorm "$work/new.json" --baseline "$work/failed.json" >"$work/failed.md"
grep -qF -- "- rms_norm forward baseline 16384x4096: launch failed" "$work/failed.md" ||
  fail "the baseline's failure: $(grep -A3 Failures "$work/failed.md")"
# Without --baseline there is no such table.
python3 "$report" --tilenorm "$work/new.json" >"$work/plain.md"
! grep -q "against the baseline" "$work/plain.md" || fail "a baseline table without --baseline"
# --variant NAME=PATH, twice: one table, a column of points per variant, a summary line each.
python3 "$report" --tilenorm "$work/new.json" --variant "before=$work/old.json" \
  --variant "same=$work/new.json" --markdown "$work/variants.md" >/dev/null
grep -q "^## variants against this run" "$work/variants.md" || fail "no variants table"
grep -qF "| op | pass | N | M | % | before | same | config |" "$work/variants.md" ||
  fail "the header: $(grep '^| op' "$work/variants.md")"
# The old tree ran the 262144 row 17.5 points slower, in another configuration (†).
grep -qF "| layer_norm | backward | 262144 | 256 | 80.0% | -17.5 † | +0.0 | b, heuristic |" \
  "$work/variants.md" || fail "the 262144 row: $(grep 'backward | 262144' "$work/variants.md")"
grep -qF "| layer_norm | backward | 4096 | 16384 | 90.0% | -0.3 | +0.0 | a, heuristic |" \
  "$work/variants.md" || fail "the 4096 row: $(grep 'backward | 4096' "$work/variants.md")"
grep -qF -- "- before: Of 3 shapes timed the same way: 0 more than a point faster, 1 more than a point slower. Largest gain +0.0 (rms_norm recompute 256x262144), largest loss -17.5 (layer_norm backward 256x262144)." \
  "$work/variants.md" || fail "the summary: $(grep '^- before' "$work/variants.md")"
grep -qF -- "- same: Of 3 shapes timed the same way: 0 more than a point faster, 0 more than a point slower." \
  "$work/variants.md" || fail "the second summary: $(grep '^- same' "$work/variants.md")"
# A variant without NAME= is a usage error that names the argument.
if python3 "$report" --tilenorm "$work/new.json" --variant "$work/old.json" 2>"$work/bad.txt"; then
  fail "--variant without a name was accepted"
fi
grep -qF -- "--variant takes NAME=PATH, got '$work/old.json'" "$work/bad.txt" ||
  fail "the error: $(cat "$work/bad.txt")"
echo "report.py --baseline and --variant: ok"
