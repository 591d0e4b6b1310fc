# Sourced by a device call's command: several steps (scripts/device-run or anything else) in one
# call, each only while the call's time allows, each writing under its own folder of $OUT, and
# everything packed for the trip back at the end. A device call has a time limit and comes back
# with at most 8 files; a call that outlives its limit loses what it had not packed.
#
#   source scripts/device-steps.sh 560        # the seconds this call may take in all
#   step tests 250 env TESTS_LABEL=gpu scripts/device-run tests memcheck
#   step bf16 120 env BENCH_N=128,256 scripts/device-run bench variants
#   finish --keep '*/variants.md'             # scripts/pack-out's --keep globs
#
# step NAME NEEDS COMMAND...: runs COMMAND with OUT=$OUT/NAME if at least NEEDS seconds are left
# (else says so and skips it), and stops it when only the reserve for finish is left. Steps run
# in order and one failing does not stop the next; finish exits 1 if any failed or was skipped
# or cut short, after packing. The budget counts from the source line.
device_steps_root="${OUT:?device-steps.sh: OUT is not set (the device tool sets it)}"
device_steps_budget="${1:?device-steps.sh: give the seconds this call may take}"
device_steps_reserve="${DEVICE_STEPS_RESERVE:-15}"  # kept back for finish
device_steps_started=$SECONDS
device_steps_status=0
device_steps_script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

device_steps_left() {
  echo $((device_steps_budget - (SECONDS - device_steps_started)))
}

step() {
  local name="$1" needs="$2"
  shift 2
  local left
  left=$(device_steps_left)
  local limit=$((left - device_steps_reserve))
  # (timeout 0 would mean no limit at all.)
  if [ "$left" -lt "$needs" ] || [ "$limit" -lt 1 ]; then
    echo "=== step $name: skipped, $left s left of the $needs s it needs" \
      "($device_steps_reserve s kept for finish)"
    device_steps_status=1
    return 0
  fi
  echo "=== step $name: $* (at most $limit s)"
  mkdir -p "$device_steps_root/$name"
  local rc=0
  OUT="$device_steps_root/$name" timeout "$limit" "$@" || rc=$?
  if [ "$rc" -eq 124 ]; then
    echo "=== step $name: cut short after $limit s"
  fi
  [ "$rc" -eq 0 ] || device_steps_status=1
  echo "=== step $name: exit $rc, $(device_steps_left) s left"
}

finish() {
  "$device_steps_script_dir/pack-out" "$@" "$device_steps_root" || device_steps_status=1
  return "$device_steps_status"
}
