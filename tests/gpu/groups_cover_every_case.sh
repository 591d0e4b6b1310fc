#!/usr/bin/env bash
# Every TEST_CASE of the GPU tests must be selected by the doctest filters of exactly one CTest
# group (tests/CMakeLists.txt writes them, a group per line: name, then its arguments, tab-
# separated). A case no group selects would never run under ctest -L gpu or the sanitizers; one
# that two groups select would take device time twice.
# doctest's filters: comma-separated wildcards, case-insensitive; a case runs if it matches a
# --test-case pattern (when there is one) and no --test-case-exclude pattern.
set -euo pipefail
filters="$1"
sources="$2"
shopt -s nocasematch

# matches NAME PATTERNS: whether NAME matches one of the comma-separated PATTERNS.
matches() {
  local name="$1" pattern
  local -a patterns
  IFS=',' read -r -a patterns <<<"$2"
  for pattern in "${patterns[@]}"; do
    # shellcheck disable=SC2053  # the pattern is a glob on purpose
    [[ "$name" == $pattern ]] && return 0
  done
  return 1
}

# selects NAME ARGUMENTS...: whether a group with these arguments runs case NAME.
selects() {
  local name="$1" argument included=1 excluded=0
  shift
  for argument in "$@"; do
    case "$argument" in
      --test-case=*)
        included=0
        matches "$name" "${argument#--test-case=}" && included=1 ;;
      --test-case-exclude=*)
        matches "$name" "${argument#--test-case-exclude=}" && excluded=1 ;;
    esac
  done
  [ "$included" = 1 ] && [ "$excluded" = 0 ]
}

# The case names, also where clang-format put a long one on the line after TEST_CASE(.
mapfile -t cases < <(cat "$sources"/*.cpp | tr '\n' ' ' |
  grep -oE 'TEST_CASE\( *"[^"]*"\)' | sed -E 's/^TEST_CASE\( *"//; s/"\)$//')
[ "${#cases[@]}" -gt 0 ] || { echo "no TEST_CASE found in $sources"; exit 1; }
declared=$(cat "$sources"/*.cpp | grep -o 'TEST_CASE(' | wc -l)
if [ "$declared" -ne "${#cases[@]}" ]; then
  echo "$declared TEST_CASE( in $sources, but only ${#cases[@]} names read: a name this script cannot parse"
  exit 1
fi
mapfile -t groups <"$filters"
[ "${#groups[@]}" -gt 0 ] || { echo "no groups in $filters"; exit 1; }
wrong=0
for name in "${cases[@]}"; do
  selected=()
  for line in "${groups[@]}"; do
    IFS=$'\t' read -r -a fields <<<"$line"
    selects "$name" "${fields[@]:1}" && selected+=("${fields[0]}")
  done
  if [ "${#selected[@]}" -eq 0 ]; then
    echo "no CTest group runs the GPU case \"$name\""
    wrong=$((wrong + 1))
  elif [ "${#selected[@]}" -gt 1 ]; then
    echo "the GPU case \"$name\" runs in ${#selected[@]} CTest groups: ${selected[*]}"
    wrong=$((wrong + 1))
  fi
done
[ "$wrong" = 0 ] || exit 1
echo "${#cases[@]} GPU cases, each run by exactly one CTest group (${#groups[@]} groups)"
