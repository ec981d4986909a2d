#!/usr/bin/env bash
# Runs every test program in BUILD/tests (or those named in TESTS, e.g. TESTS="test_model test_cli"; less
# those named in TESTS_SKIP), prints their output, and one combined closing line.
# A program that crashes or exits non-zero without counting a failure counts as one failure.
build=${1:-build}
pass=0; fail=0
# The products' kernels chosen by measurement are kept in one file for the run (a fresh one each run,
# unless the caller names another), so that every test process of the run takes the same kernels.
if [ -z "${COLLAGE_PRODUCTS_FILE:-}" ]; then
  export COLLAGE_PRODUCTS_FILE="$build/tests/products"
  rm -f "$COLLAGE_PRODUCTS_FILE"
fi
# leaks of the sanitizer runtime and Open MPI, not collage's (tests/lsan.supp), suppressed silently;
# other LSAN_OPTIONS are kept
export LSAN_OPTIONS="suppressions=$(cd "$(dirname "$0")" && pwd)/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
cpu_file=$(mktemp); TIMEFORMAT='%U %S'
trap 'rm -f "$cpu_file"' EXIT
for t in "$build"/tests/test_*; do
  [ -x "$t" ] || continue
  if [ -n "${TESTS:-}" ] && [[ " $TESTS " != *" $(basename "$t") "* ]]; then continue; fi
  if [[ " ${TESTS_SKIP:-} " == *" $(basename "$t") "* ]]; then continue; fi
  echo "== $(basename "$t")"
  t0=$SECONDS
  # its CPU time (user + system, its processes together) beside the wall time
  { time { out=$(COLLAGE_BIN="$build/collage" "$t" 2>&1); rc=$?; }; } 2>"$cpu_file"
  printf '%s\n' "$out"
  echo "== $(basename "$t"): $((SECONDS - t0)) s, CPU $(awk '{printf "%.0f", $1 + $2}' "$cpu_file") s"
  last=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
  if [ -n "$last" ]; then
    p=${last%% passed*}; f=${last#*, }; f=${f%% failed*}
    pass=$((pass + p)); fail=$((fail + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then fail=$((fail + 1)); echo "FAIL $(basename "$t") exited $rc"; fi
  else
    fail=$((fail + 1)); echo "FAIL $(basename "$t") exited $rc without a result line"
  fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
