#!/usr/bin/env bash
# scripts/sanitize-gpu-tests --split: a unit's doctest test cases run one at a time, each named
# in the summary. A stand-in compute-sanitizer (it drops the tool's arguments and runs the test)
# and doctest's --no-run keep this to the plumbing: no GPU work, with or without a GPU.
# Exit 77 (skipped) without python3.
set -euo pipefail
script="$1"
build="$2"
work="$3"
command -v python3 >/dev/null || { echo "skipped: python3 is not installed"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$work"
mkdir -p "$work/bin" "$work/logs"
cat >"$work/bin/compute-sanitizer" <<'SH'
#!/usr/bin/env bash
shift 4  # --tool NAME --error-exitcode CODE
exec "$@"
SH
chmod +x "$work/bin/compute-sanitizer"
PATH="$work/bin:$PATH" python3 "$script" --build-dir "$build" --tool racecheck \
  --tests '^gpu\.backward_(storage|clusters)$' --split clusters --jobs 2 --limit 60 \
  --log-dir "$work/logs" --test-arg=--no-run >"$work/summary.txt" ||
  fail "exit $?: $(cat "$work/summary.txt")"
cat "$work/summary.txt"
# The unit's own doctest filters, as tests/CMakeLists.txt wrote them (tab-separated after its name).
IFS=$'\t' read -r -a unit_filters < \
  <(grep $'^backward_clusters\t' "$build/tests/gpu_group_filters.txt" | cut -f2-)
cases=$("$build/tests/tilenorm_gpu_tests" --list-test-cases "${unit_filters[@]}" | grep -c '^backward: ')
[ "$cases" -ge 2 ] || fail "expected several cluster test cases, listed $cases"
grep -q "^racecheck: $((cases + 1)) units" "$work/summary.txt" || fail "not split into $cases + 1 units"
for k in $(seq 1 "$cases"); do
  grep -qE "^  gpu\.backward_clusters\.$k \(backward: [^)]*\): (skipped \(no GPU\)|clean)" \
    "$work/summary.txt" || fail "no verdict for test case $k"
  [ -f "$work/logs/racecheck-gpu.backward_clusters.$k.log" ] || fail "no log for test case $k"
done
grep -qE "^  gpu\.backward_storage: (skipped \(no GPU\)|clean)" "$work/summary.txt" ||
  fail "the unit not split is missing"
# A --test-case-exclude among the test arguments leaves its cases out of the split.
PATH="$work/bin:$PATH" python3 "$script" --build-dir "$build" --tool racecheck \
  --tests '^gpu\.backward_clusters$' --split clusters --jobs 2 --limit 60 \
  --log-dir "$work/logs" --test-arg=--no-run --test-arg=--test-case-exclude='*DyT*' \
  >"$work/excluded.txt" || fail "exit $?: $(cat "$work/excluded.txt")"
grep -q "^racecheck: $((cases - 1)) units" "$work/excluded.txt" ||
  fail "the excluded case was split out: $(head -n 1 "$work/excluded.txt")"
! grep -q "DyT" "$work/excluded.txt" || fail "the excluded case ran"
echo "sanitize-gpu-tests --split: ok"
