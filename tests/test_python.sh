#!/usr/bin/env bash
# test_python — the Python package's suite (python/tests, pytest) against this build's libcollage.so and
# collage command, with Debian's interpreter (its python3-torch, -numpy, -pytest), then `pip install` of
# the package into a fresh virtual environment without network, imported from there. pytest's summary
# becomes the closing line "N passed, N failed". The Makefile writes this script into BUILD/tests; in a
# build with sanitizers it skips, saying why (docs/testing.md).
BUILD=$(cd '@BUILD@' && pwd)
if [ '@SAN@' = 1 ]; then
  echo "skip the Python suite in this sanitizer build: its libcollage.so is instrumented with ASan, which an"
  echo "     interpreter built without it loads only with libasan preloaded (LD_PRELOAD); the plain build's"
  echo "     make test runs the suite, and this build's test_adamw and test_export check the library calls"
  echo "     the package makes"
  echo "0 passed, 0 failed"; exit 0
fi
# The Makefile writes this script twice: test_python with Debian's interpreter (PyTorch 1.13) or
# $COLLAGE_PYTHON, and test_python_torch2 with the cached environment of python/torch2-pin.txt
# (scripts/torch2-env.sh, which scripts/setup.sh runs) or $COLLAGE_PYTHON2.
if [ '@TORCH@' = 2 ]; then
  if [ "${COLLAGE_TORCH2:-1}" = 0 ] && [ -z "${COLLAGE_PYTHON2:-}" ]; then
    echo "skip the Python suite on PyTorch 2: COLLAGE_TORCH2=0"
    echo "0 passed, 0 failed"; exit 0
  fi
  if ! PY=${COLLAGE_PYTHON2:-$(bash scripts/torch2-env.sh --print)}; then
    echo "FAIL no PyTorch 2 environment (scripts/setup.sh installs it; COLLAGE_TORCH2=0 skips this suite)"
    echo "0 passed, 1 failed"; exit 1
  fi
  # torch.compile's kernels kept beside the environment, so that a later run does not compile them again
  export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$(dirname "$(dirname "$PY")")/inductor-cache}
else
  PY=${COLLAGE_PYTHON:-/usr/bin/python3}
fi
"$PY" -c 'import sys, torch; print(f"Python {sys.version.split()[0]} ({sys.executable}), torch {torch.__version__}")' 2>/dev/null
if ! "$PY" -c 'import numpy, torch, pytest' 2>/dev/null; then
  echo "FAIL $PY cannot import numpy, torch and pytest (scripts/setup.sh installs python3-numpy, -torch, -pytest)"
  echo "0 passed, 1 failed"; exit 1
fi
out=$(COLLAGE_LIB="$BUILD/libcollage.so" COLLAGE_BIN="$BUILD/collage" PYTHONPATH=python PYTHONDONTWRITEBYTECODE=1 \
      "$PY" -m pytest -q -p no:cacheprovider python/tests 2>&1); rc=$?
printf '%s\n' "$out"
summary=$(printf '%s\n' "$out" | grep -E '^[0-9]+ (passed|failed)|^(=+ )?[0-9]+ (passed|failed|error)' | tail -n 1)
num() { echo "$summary" | grep -oE "[0-9]+ $1" | grep -oE '^[0-9]+' || echo 0; }
pass=$(num passed); fail=$(( $(num failed) + $(num error) ))
if [ "$rc" -ne 0 ] && [ "$fail" -eq 0 ]; then fail=1; echo "FAIL pytest exited $rc"; fi
# pip install without network: a plain setuptools package, in a virtual environment that sees Debian's
# torch and numpy; the installed copy must find this build's library by itself
tmp=$(mktemp -d /tmp/collage-pip-XXXXXX); trap 'rm -rf "$tmp"; rm -rf python/build python/collage.egg-info' EXIT
if ! "$PY" -m venv --system-site-packages "$tmp/venv" >"$tmp/log" 2>&1; then
  fail=$((fail + 1)); echo "FAIL python3 -m venv (python3-venv): $(tail -n 3 "$tmp/log")"
elif ! COLLAGE_LIB="$BUILD/libcollage.so" "$tmp/venv/bin/pip" install --no-index -q ./python >"$tmp/log" 2>&1; then
  fail=$((fail + 1)); echo "FAIL pip install --no-index ./python: $(tail -n 5 "$tmp/log")"
elif ! got=$(cd "$tmp" && env -u COLLAGE_LIB "$tmp/venv/bin/python" -c \
       'import collage, collage.torch; print(collage.library_path, len(collage.strategies()))' 2>&1); then
  fail=$((fail + 1)); echo "FAIL the pip-installed package does not import: $got"
else
  pass=$((pass + 1)); echo "ok   pip install --no-index ./python, imported from a virtual environment: $got"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
