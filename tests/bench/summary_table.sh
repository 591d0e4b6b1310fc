#!/usr/bin/env bash
# bench/summary_table.py: the README's table from one tilenorm-bench and one torch_compare
# document per dtype, written here in place of device runs: the cells, a ratio refused across
# timing methods, the geometric means and the shapes slower than torch.compile. Exit 77
# (skipped) without python3.
source "$(dirname "$0")/report_test_setup.sh"

# bench FILE ROWS / torch FILE ROWS: the two tools' documents with a 4.0 TB/s ceiling.
bench() {
  echo "{\"tool\": \"tilenorm-bench\", \"device\": \"NVIDIA H100\", \"timing\": \"graph\",
         \"copy_ceiling\": {\"tbps\": 4.0}, \"rows\": [$2]}" >"$1"
}
torch() {
  echo "{\"tool\": \"torch_compare\", \"device\": \"NVIDIA H100\", \"timing\": \"graph\",
         \"copy_ceiling\": {\"tbps\": 4.0}, \"rows\": [$2]}" >"$1"
}
# row OP PASS N TBPS PERCENT [TIMING]: a tilenorm row; compiled OP PASS N TBPS [TIMING]: a
# torch.compile row (and an eager one, which the table does not use).
row() {
  echo "{\"op\": \"$1\", \"pass\": \"$2\", \"m\": $((1048576 / $3)), \"n\": $3, \"tbps\": $4,
         \"percent_of_ceiling\": $5, \"median_us\": 1.0, \"timing\": \"${6:-graph}\"}"
}
compiled() {
  echo "{\"op\": \"$1\", \"pass\": \"$2\", \"impl\": \"compile\", \"m\": $((1048576 / $3)),
         \"n\": $3, \"tbps\": $4, \"percent_of_ceiling\": 50.0, \"median_us\": 1.0,
         \"timing\": \"${5:-graph}\"},
        {\"op\": \"$1\", \"pass\": \"$2\", \"impl\": \"eager\", \"m\": $((1048576 / $3)),
         \"n\": $3, \"tbps\": 0.5, \"percent_of_ceiling\": 12.5, \"median_us\": 9.0,
         \"timing\": \"${5:-graph}\"}"
}
bench "$work/bf16.json" "$(row layer_norm forward 1024 3.8 95.0), \
  $(row layer_norm backward 1024 3.6 90.0), $(row layer_norm recompute 1024 3.4 85.0), \
  $(row rms_norm forward 4096 3.9 97.5)"
torch "$work/bf16-torch.json" "$(compiled layer_norm forward 1024 4.0), \
  $(compiled layer_norm backward 1024 1.8), $(compiled rms_norm forward 4096 3.0 events)"
bench "$work/fp32.json" "$(row layer_norm forward 1024 2.0 50.0)"
torch "$work/fp32-torch.json" "$(compiled layer_norm forward 1024 1.0)"

table="$work/table.md"
python3 "$report" --run "bf16=$work/bf16.json,$work/bf16-torch.json" \
  --run "fp32=$work/fp32.json,$work/fp32-torch.json" --markdown "$table" >/dev/null
grep -qF "| op | N | bf16 fwd % | fwd / compile | bf16 bwd % | bwd / compile | bf16 rec % | fp32 fwd % | fwd / compile | fp32 bwd % | bwd / compile | fp32 rec % |" \
  "$table" || fail "the header: $(head -1 "$table")"
# 3.8 / 4.0 rounds to 0.95×, 3.6 / 1.8 to 2.00×; fp32 has only the forward.
grep -qF "| LayerNorm | 1024 | 95.0 | 0.95× | 90.0 | 2.00× | 85.0 | 50.0 | 2.00× | — | — | — |" \
  "$table" || fail "the LayerNorm row: $(grep '| LayerNorm' "$table")"
# torch.compile timed by events, tilenorm by graph replay: no ratio.
grep -qF "| RMSNorm | 4096 | 97.5 | ‡ | — | — | — | — | — | — | — | — |" "$table" ||
  fail "the mixed-timing row: $(grep '| RMSNorm' "$table")"
grep -qF -- "- bf16, tilenorm / torch.compile, geometric mean: LayerNorm forward 0.95× over 1; LayerNorm backward 2.00× over 1." \
  "$table" || fail "the bf16 means: $(grep -- '- bf16, tilenorm' "$table")"
grep -qF -- "- bf16, slower than torch.compile: LayerNorm forward 1024 (0.95×)." "$table" ||
  fail "the slower shapes: $(grep -- '- bf16, slower' "$table")"
grep -qF -- "- fp32, slower than torch.compile: none." "$table" ||
  fail "fp32's slower shapes: $(grep -- '- fp32, slower' "$table")"
# A --run without its two paths is a usage error that names it.
if python3 "$report" --run "bf16=$work/bf16.json" 2>"$work/bad.txt"; then
  fail "--run without the torch document was accepted"
fi
grep -qF -- "--run takes NAME=TILENORM.json,TORCH.json[,HEURISTIC.json], got 'bf16=$work/bf16.json'" \
  "$work/bad.txt" || fail "the usage error: $(cat "$work/bad.txt")"
# A third document, the heuristic's run: each % cell gives it in brackets, a shape it lacks a
# dash, and a line the lowest heuristic / tuned share and how many shapes reach 0.90 (85.5 / 95.0
# = 0.90 counts; 76.5 / 90.0 = 0.85 does not; events against graph is left out).
bench "$work/bf16-heuristic.json" "$(row layer_norm forward 1024 3.42 85.5), \
  $(row layer_norm backward 1024 3.06 76.5), $(row rms_norm forward 4096 3.9 97.0 events)"
python3 "$report" --run "bf16=$work/bf16.json,$work/bf16-torch.json,$work/bf16-heuristic.json" \
  --markdown "$table" >/dev/null
grep -qF "| LayerNorm | 1024 | 95.0 (85.5) | 0.95× | 90.0 (76.5) | 2.00× | 85.0 (—) |" "$table" ||
  fail "the LayerNorm row with the heuristic: $(grep '| LayerNorm' "$table")"
grep -qF "| RMSNorm | 4096 | 97.5 (97.0) | ‡ |" "$table" ||
  fail "the RMSNorm row with the heuristic: $(grep '| RMSNorm' "$table")"
grep -qF -- "- bf16, heuristic / tuned: at least 0.90 at 1 of 2 shapes; lowest 0.85 (LayerNorm backward 1024)." \
  "$table" || fail "the heuristic line: $(grep -- '- bf16, heuristic' "$table")"
# Without it, no such line.
python3 "$report" --run "bf16=$work/bf16.json,$work/bf16-torch.json" --markdown "$table" \
  >/dev/null
! grep -q -- "heuristic / tuned" "$table" || fail "a heuristic line without a heuristic run"
if python3 "$report" --run "bf16=$work/bf16.json,$work/bf16-torch.json,$work/bf16.json,x" \
  2>"$work/bad.txt"; then
  fail "--run with four paths was accepted"
fi
# A document that is not JSON is an error that says so, with nothing written.
echo "not json" >"$work/broken.json"
rm -f "$work/broken.md"
if python3 "$report" --run "bf16=$work/broken.json,$work/bf16-torch.json" \
  --markdown "$work/broken.md" 2>"$work/broken.txt"; then
  fail "a broken document was accepted"
fi
grep -qF "summary_table.py: cannot read the results: JSONDecodeError" "$work/broken.txt" ||
  fail "the read error: $(cat "$work/broken.txt")"
[ ! -e "$work/broken.md" ] || fail "a table was written for a broken document"
echo "summary_table.py: ok"
