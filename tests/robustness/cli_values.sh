#!/usr/bin/env bash
# Bad values are rejected before any output (exit 2, empty stdout, the flag and value named),
# and a failed write to stdout is an error.
# usage: cli_values.sh WORK_DIR TOOL_DIR BENCH
source "$(dirname "$0")/lib.sh" "$1"
tools="$2"
bench="$3"
# tilenorm-bench checks its arguments before it looks for a GPU. The example programs it times
# get their backward derived; one that saves nothing its backward reads back has no recompute of
# its own.
run 2 "$bench" --ops four_reductions --pass forward,recompute
[ ! -s "$work/out" ] || fail "tilenorm-bench --pass recompute printed to stdout"
expect_in "$work/err" "tilenorm-bench: error: --ops 'four_reductions' saves nothing its backward reads back, so its backward recomputes already"
run 2 "$bench" --ops softmax
expect_in "$work/err" "unknown kernel 'softmax'"
expect_in "$work/err" "example programs: four_reductions, residual_rms_norm"
run 2 "$tools/tilenorm-dump" --kernel rms_norm --n ""
[ ! -s "$work/out" ] || fail "--n '' printed to stdout"
for value in 0 -5 abc 99999999999 1e3 " 7" 0x10; do
  run 2 "$tools/tilenorm-dump" --kernel rms_norm --n "$value"
  [ ! -s "$work/out" ] || fail "--n '$value' printed to stdout"
  expect_in "$work/err" "tilenorm-dump: error: --n must be a whole number from 1 to 1073741824, got '$value'"
  run 2 "$tools/tilenorm-tune" --dry-run "--n=$value"
  [ ! -s "$work/out" ] || fail "tune --n '$value' printed to stdout"
  expect_in "$work/err" "tilenorm-tune: error: --n must be a whole number"
done
run 2 "$tools/tilenorm-dump" --kernel rms_norm --source-only --ir-only
expect_in "$work/err" "tilenorm-dump: error: --source-only excludes --ir-only"
run 2 "$tools/tilenorm-dump" --kernel softmax
expect_in "$work/err" "unknown kernel 'softmax'"
run 2 "$tools/tilenorm-dump" --kernel rms_norm --arch sm_75
[ ! -s "$work/out" ] || fail "--arch sm_75 printed to stdout"
expect_in "$work/err" "tilenorm-dump: error: --arch: no known device of sm_75 or an older architecture"
# An arch with no known device of its own gets an older one's limits: no cluster before sm_90.
run 0 "$tools/tilenorm-dump" --kernel rms_norm --n 65536 --arch sm_86 --source-only
grep -qE "ctas_per_row=1$" "$work/out" || fail "sm_86 got a cluster: $(grep -o 'ctas_per_row=[0-9]*' "$work/out")"
run 0 "$tools/tilenorm-dump" --kernel rms_norm --n 65536 --arch sm_90 --source-only
expect_in "$work/out" "ctas_per_row=16"
# sm_120 (the RTX 5090's limits) runs clusters of at most 8 CTAs.
run 0 "$tools/tilenorm-dump" --kernel rms_norm --n 262144 --arch sm_120 --source-only
expect_in "$work/out" "ctas_per_row=8"
run 0 "$tools/tilenorm-dump" --kernel rms_norm --dtype bf16/fp32 --ir-only
# --cubin writes NVRTC's binary (an ELF file), before anything is printed, and only with --arch.
run 2 "$tools/tilenorm-dump" --kernel rms_norm --cubin "$work/k.cubin"
expect_in "$work/err" "tilenorm-dump: error: --cubin needs --arch"
run 0 "$tools/tilenorm-dump" --kernel rms_norm --backward --arch sm_90 --cubin "$work/k.cubin" --source-only
[ "$(head -c 4 "$work/k.cubin" | od -An -c | tr -d ' ')" = '177ELF' ] || fail "--cubin wrote no ELF file"
run 1 "$tools/tilenorm-dump" --kernel rms_norm --arch sm_90 --cubin "$work/missing/k.cubin"
[ ! -s "$work/out" ] || fail "a failed --cubin write printed to stdout"
expect_in "$work/err" "$work/missing"
run 0 "$tools/tilenorm-dump" --kernel=layer_norm --n=2048 --dtype=fp16 --source-only
expect_in "$work/out" "N 2048"
run 2 "$tools/tilenorm-dump" --kernel layer_norm --shift-per-row
expect_in "$work/err" "tilenorm-dump: error: --shift-per-row requires --misaligned"
# Each row at its own shift only where the kernel fetches rows ahead (at 4097 they stay in
# registers): the generator's refusal, and nothing printed.
run 1 "$tools/tilenorm-dump" --kernel layer_norm --n 4097 --misaligned --shift-per-row
[ ! -s "$work/out" ] || fail "an impossible --shift-per-row printed to stdout"
expect_in "$work/err" "shift_per_row (each peeled row at its own shift) needs peel_rows, rows_per_cta 1 and a persistent kernel"
run 0 "$tools/tilenorm-dump" --kernel layer_norm --n 65537 --misaligned --shift-per-row --source-only
expect_in "$work/out" "alignment peeling, this row's"
# Column parameters fetched early only by one-CTA kernels in registers (65536 runs on clusters).
run 1 "$tools/tilenorm-dump" --kernel rms_norm --n 65536 --early-columns
[ ! -s "$work/out" ] || fail "an impossible --early-columns printed to stdout"
expect_in "$work/err" "early_columns (column parameters fetched before the row loop) needs aligned rows"
run 0 "$tools/tilenorm-dump" --kernel rms_norm --n 4096 --early-columns --source-only
expect_in "$work/out" "col3_early[it] = tn::fetch_chunk"
for tool in "tilenorm-dump --kernel rms_norm" "tilenorm-tune --dry-run --n 1024" \
  "tilenorm-dump --help" "tilenorm-tune --version"; do
  # shellcheck disable=SC2086
  "$tools"/$tool >/dev/full 2>"$work/err"
  status=$?
  [ "$status" = 1 ] || fail "$tool >/dev/full exited with $status, expected 1"
  expect_in "$work/err" "error: cannot write to standard output"
done
echo "ok"
