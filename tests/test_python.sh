#!/usr/bin/env bash
# test_python — the Python package's suite (python/tests, pytest) against this build's libcollage.so and
# collage command, with Debian's interpreter (its python3-torch, -numpy, -pytest), then `pip install` of
# the package into a fresh virtual environment without network, imported from there, and the wheel:
# built by pip from a clean copy of the sources, installed and used in another. pytest's summary becomes
# the closing line "N passed, N failed". COLLAGE_PYTHON selects the interpreter. The Makefile writes this
# script into BUILD/tests; in a build with sanitizers it skips, saying why (docs/testing.md).
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
# The wheel, as someone without a build of collage gets it: `pip wheel --no-deps --no-index ./python` in a
# clean copy of the sources (the files git knows, so no build/ and no earlier make), which builds libcollage
# inside pip; the wheel installed into a new virtual environment (no COLLAGE_LIB, no PYTHONPATH, run from
# an empty folder), where it must load its own library, say the library's version and step AdamW. Building
# the library is most of this check's time, so the wheel is kept in BUILD/tests/wheel/ with a hash of the
# sources it was built from: a run on the same sources (with another COLLAGE_PYTHON, another torch)
# installs that wheel, built honestly from a clean copy by the run before, instead of building it again
# (the wheel is py3-none-<platform>: the same file for every Python 3).
wheel_fail() { fail=$((fail + 1)); echo "FAIL wheel: $*"; }
copy_sources() { # into $1: what `git clone` plus the working tree's changes would give
  mkdir -p "$1"
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard | tar --null -T - --ignore-failed-read -cf - 2>/dev/null \
      | tar -xf - -C "$1"
  else
    tar --exclude='./build' --exclude='./build-*' --exclude='./runs' --exclude='./python/build' \
        --exclude='*.egg-info' --exclude='__pycache__' --exclude='./.git' -cf - . | tar -xf - -C "$1"
  fi
}
wheel_check() {
  local src="$tmp/src" cache="$BUILD/tests/wheel" sum whl t0 plat t1=$SECONDS
  copy_sources "$src"
  sum=$(cd "$src" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-64)
  plat=$("$PY" -c 'import sysconfig; print(sysconfig.get_platform().replace("-", "_").replace(".", "_"))')
  if [ "$(cat "$cache/sources.sha256" 2>/dev/null)" = "$sum" ] && whl=$(ls "$cache"/collage-*.whl 2>/dev/null); then
    echo "     the wheel of these sources (hash ${sum:0:12}) is in $cache from an earlier run: installing it"
  else
    rm -rf "$cache"; mkdir -p "$cache"; t0=$SECONDS
    if ! (cd "$src" && env -u COLLAGE_LIB -u PYTHONPATH "$PY" -m pip wheel --no-deps --no-index -w "$tmp/dist" \
            ./python >"$tmp/wheel.log" 2>&1); then
      wheel_fail "pip wheel --no-deps --no-index ./python in a clean copy: $(tail -n 25 "$tmp/wheel.log")"; return
    fi
    whl=$(ls "$tmp"/dist/collage-*.whl) && cp "$whl" "$cache/" && echo "$sum" > "$cache/sources.sha256"
    echo "     pip wheel built $(basename "$whl") in $((SECONDS - t0)) s"
  fi
  case "$(basename "$whl")" in
    *-py3-none-"$plat".whl) ;;
    *) wheel_fail "$(basename "$whl") is not tagged py3-none-$plat (it carries a library for one platform)"; return ;;
  esac
  if ! "$PY" -m venv --system-site-packages "$tmp/wvenv" >"$tmp/log" 2>&1; then
    wheel_fail "python3 -m venv: $(tail -n 3 "$tmp/log")"; return
  fi
  # A venv made by an interpreter of a venv sees the base's site-packages only: add the interpreter's own,
  # so that the step below runs with the torch COLLAGE_PYTHON has.
  "$PY" -c 'import site, sys; sys.prefix != sys.base_prefix and print("\n".join(site.getsitepackages()))' \
    > "$("$tmp/wvenv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/interpreter.pth"
  if ! "$tmp/wvenv/bin/pip" install --no-index -q "$whl" >"$tmp/log" 2>&1; then
    wheel_fail "pip install --no-index $(basename "$whl"): $(tail -n 5 "$tmp/log")"; return
  fi
  mkdir -p "$tmp/empty"
  if ! got=$(cd "$tmp/empty" && env -u COLLAGE_LIB -u PYTHONPATH -u LD_LIBRARY_PATH "$tmp/wvenv/bin/python" -c '
import os, sys, torch, collage, collage.torch
from collage import _lib
lib = os.path.realpath(collage.library_path)
assert lib == os.path.join(os.path.dirname(os.path.realpath(collage.__file__)), "libcollage.so") and \
    lib.startswith(os.path.realpath(sys.prefix) + os.sep), f"not the bundled library: {lib}"
have = _lib.lib.collage_version().decode()
assert collage.__version__ == have, f"collage.__version__ {collage.__version__} but the library says {have}"
out = []
for backend in ("c", "torch"):
    p = torch.nn.Parameter((torch.arange(64, dtype=torch.float32) / 7 - 4).to(torch.bfloat16))
    opt = collage.torch.AdamW([p], precision="collage-light", lr=1e-2, backend=backend)
    p.grad = (torch.arange(64, dtype=torch.float32) % 5 - 2).to(torch.bfloat16)
    opt.step()
    out.append(p.detach().view(torch.int16).clone())
start = (torch.arange(64, dtype=torch.float32) / 7 - 4).to(torch.bfloat16).view(torch.int16)
assert torch.equal(out[0], out[1]), "the library step and the torch step differ"
assert not torch.equal(out[0], start), "the step left the weights as they were"
print(lib, collage.__version__, "torch", torch.__version__)
print(" ".join(_lib.RUNTIME_NEEDS))
' 2>&1); then
    wheel_fail "the installed wheel does not work: $got"; return
  fi
  # What the library needs: the C library and what an import that cannot load it names (_lib.RUNTIME_NEEDS)
  local so needs; so=$(printf '%s\n' "$got" | tail -n 2 | head -n 1 | cut -d' ' -f1)
  needs="libc.so.6 libm.so.6 ld-linux-x86-64.so.2 $(printf '%s\n' "$got" | tail -n 1)"; got=$(printf '%s\n' "$got" | tail -n 2 | head -n 1)
  local needed extra=""; needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  for n in $needed; do [[ " $needs " == *" $n "* ]] || extra="$extra $n"; done
  if [ -n "$extra" ]; then wheel_fail "its libcollage.so needs$extra besides $needs"; return; fi
  # Built with the Makefile's flags and for any x86-64 (its AVX2 and AVX-512 kernels are chosen at run
  # time): every unit's DW_AT_producer (GCC's -g records the flags; clang's does not) has -ffp-contract=off
  # and none -march=native or the fast-math family.
  local prod; prod=$(readelf --debug-dump=info --dwarf-depth=1 "$so" 2>/dev/null | grep -a 'DW_AT_producer' \
                     | grep -ao 'GNU C.*' | sort -u)
  if [ -n "$prod" ] && { printf '%s\n' "$prod" | grep -qv -- '-ffp-contract=off' \
     || printf '%s\n' "$prod" | grep -qE -- '-march=native|-ffast-math|-Ofast'; }; then
    wheel_fail "its libcollage.so was not built with the Makefile's flags: $(printf '%s\n' "$prod" | head -n 3)"; return
  fi
  pass=$((pass + 1))
  echo "ok   the wheel $(basename "$whl") from a clean copy, in a new virtual environment ($((SECONDS - t1)) s):" \
       "$got; needs $(echo $needed); the Makefile's flags in $(printf '%s' "$prod" | grep -c .) kinds of unit"
}
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
wheel_check
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
