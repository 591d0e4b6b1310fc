#!/usr/bin/env bash
# bench/report.py: the goals by row length (forward and backward, ✓ marks and counts), the
# recompute against the saved backward (✗ below 0.95 of it), and the decode goals (✗ over them).
# tilenorm-bench JSON documents written here stand in for device runs. Exit 77 (skipped) without
# python3.
source "$(dirname "$0")/report_test_setup.sh"

# row OP PASS N PERCENT: one timed row of a run with a 4.0 TB/s ceiling.
row() {
  local tbps
  tbps=$(python3 -c "print($4 * 4.0 / 100)")
  echo "{\"op\": \"$1\", \"pass\": \"$2\", \"m\": $((67108864 / $3)), \"n\": $3,
        \"row_stride\": $3, \"bytes\": 1, \"timing\": \"graph\", \"median_us\": 1.0,
        \"tbps\": $tbps, \"percent_of_ceiling\": $4, \"config_text\": \"cfg\",
        \"config_source\": \"heuristic\"}"
}
cat >"$work/run.json" <<JSON
{"tool": "tilenorm-bench", "device": "NVIDIA H200", "arch": "sm_90", "date_utc": "2026-12-07",
 "dtype": "bf16", "elements": 67108864, "timing": "graph", "tuning_database": false,
 "copy_ceiling": {"method": "cuMemcpyDtoDAsync", "bytes": 2147483648, "median_us": 500.0,
                  "tbps": 4.0},
 "rows": [$(row rms_norm forward 32768 94.5), $(row rms_norm forward 65536 94.5),
          $(row rms_norm backward 512 91.0), $(row rms_norm backward 4096 86.0),
          $(row rms_norm recompute 512 90.5), $(row rms_norm recompute 4096 80.0)]}
JSON
python3 "$report" --tilenorm "$work/run.json" --markdown "$work/report.md" >/dev/null
expect() {  # expect LINE: the report holds this line, whole
  grep -qxF -- "$1" "$work/report.md" || fail "no line '$1' in: $(cat "$work/report.md")"
}
expect "✓ marks the goal, of the ceiling: forward ≥ 95% up to N = 32768, ≥ 94% beyond; backward ≥ 92% up to N = 1024, ≥ 85% beyond."
# 94.5% misses the forward's 95% at N = 32768 and meets its 94% at 65536.
grep -qF "| rms_norm | 32768 | 2048 | 3.78 | 94.5% | " "$work/report.md" || fail "32768 marked"
grep -qF "| rms_norm | 65536 | 1024 | 3.78 | 94.5% ✓ | " "$work/report.md" || fail "65536 unmarked"
expect "tilenorm at its goal: 1 of 2 shapes (of the ceiling, ≥ 95% up to N = 32768, ≥ 94% beyond)."
# 91% misses the backward's 92% at N = 512; 86% meets its 85% at 4096.
grep -qF "| rms_norm | 512 | 131072 | 3.64 | 91.0% | " "$work/report.md" || fail "512 marked"
grep -qF "| rms_norm | 4096 | 16384 | 3.44 | 86.0% ✓ | " "$work/report.md" || fail "4096 unmarked"
expect "tilenorm at its goal: 1 of 2 shapes (of the ceiling, ≥ 92% up to N = 1024, ≥ 85% beyond)."
# The recompute has no goal of its own in % of the ceiling: no mark, no count.
grep -qF "| rms_norm | 4096 | 16384 | 3.20 | 80.0% | " "$work/report.md" || fail "recompute marked"
# Against the saved backward: 90.5 / 91 = 0.99 meets 0.95; 80 / 86 = 0.93 does not.
expect "## recompute against saved"
expect "| rms_norm | 512 | 131072 | 91.0% | 90.5% | 0.99 |"
expect "| rms_norm | 4096 | 16384 | 86.0% | 80.0% | 0.93 ✗ |"
expect "recompute at ≥ 0.95 of the saved backward: 1 of 2 shapes timed the same way. Lowest: 0.93, rms_norm 16384x4096."
# Sections are one blank line apart, also where a table ends without a count under it.
python3 -c "import sys; sys.exit('\n\n\n' in open(sys.argv[1]).read())" "$work/report.md" ||
  fail "two blank lines in a row"
# Decode rows: a forward kernel over 1.3x its copy and a launch over 1.2x an empty one are marked;
# a backward kernel has no such goal.
python3 - "$work/run.json" "$work/decode.json" <<'PY'
import json, sys
document = json.load(open(sys.argv[1]))
def decode_row(pass_name, m, kernel_us, copy_us, launch_us):
    return {"op": "layer_norm", "pass": pass_name, "m": m, "n": 4096, "row_stride": 4096,
            "bytes": 1, "timing": "graph", "median_us": kernel_us, "tbps": 1.0,
            "percent_of_ceiling": 25.0, "config_text": "cfg", "config_source": "heuristic",
            "decode": {"kernel_bytes": 16384, "copy_median_us": copy_us,
                       "kernel_over_copy": kernel_us / copy_us, "launch_us": launch_us,
                       "empty_launch_us": 2.0, "launch_over_empty": launch_us / 2.0}}
document["rows"] = [decode_row("forward", 1, 2.25, 1.69, 2.1),
                    decode_row("forward", 8, 2.10, 1.75, 2.6),
                    decode_row("backward", 1, 7.30, 1.70, 2.2)]
json.dump(document, open(sys.argv[2], "w"))
PY
python3 "$report" --tilenorm "$work/decode.json" --markdown "$work/decode.md" >/dev/null
decode_line() {  # decode_line LINE: the decode report holds this line, whole
  grep -qxF -- "$1" "$work/decode.md" || fail "no line '$1' in: $(cat "$work/decode.md")"
}
decode_line "| layer_norm | forward | 1 | 4096 | 4096 | 16384 | 2.25 | 1.69 | 1.33× ✗ | — | — | 2.10 | 2.00 | 1.05× |"
decode_line "| layer_norm | forward | 8 | 4096 | 4096 | 16384 | 2.10 | 1.75 | 1.20× | — | — | 2.60 | 2.00 | 1.30× ✗ |"
decode_line "| layer_norm | backward | 1 | 4096 | 4096 | 16384 | 7.30 | 1.70 | 4.29× | — | — | 2.20 | 2.00 | 1.10× |"
decode_line "Forward kernels within 1.3× their copy: 1 of 2. Launches within 1.2× an empty one: 2 of 3."
# A run without a recompute has no such table.
python3 - "$work/run.json" "$work/forward.json" <<'PY'
import json, sys
document = json.load(open(sys.argv[1]))
document["rows"] = [row for row in document["rows"] if row["pass"] != "recompute"]
json.dump(document, open(sys.argv[2], "w"))
PY
python3 "$report" --tilenorm "$work/forward.json" >"$work/forward.md"
! grep -q "recompute against saved" "$work/forward.md" || fail "a recompute table without a recompute"
echo "report.py goals: ok"
