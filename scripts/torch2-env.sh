#!/usr/bin/env bash
# Installs the PyTorch 2 of python/torch2-pin.txt into a cached virtual environment, only when missing
# (idempotent; a changed pin makes a new environment), and prints its interpreter's path as the last line.
# The environment lives outside the source tree, so that a fresh clone finds it:
#   $COLLAGE_TORCH2_ENV, else ${XDG_CACHE_HOME:-~/.cache}/collage/torch2-<first 12 hex of the pin's SHA-256>
# It is a venv of Debian's python3 with --system-site-packages (numpy, pytest), torch and its Python
# dependencies installed with pip --no-deps from the pin; torch's CUDA libraries come from the CUDA toolkit
# where ld.so finds them, and from PyPI (torch's full dependencies, several GB) where `import torch` fails
# without them. A first install downloads about 1.1 GB; the environment takes about 2.2 GB.
# Usage: scripts/torch2-env.sh           install when missing, print the interpreter
#        scripts/torch2-env.sh --print   print the interpreter, install nothing (exit 1 when missing)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pin=$root/python/torch2-pin.txt
[ -f "$pin" ] || { echo "torch2-env: $pin is missing" >&2; exit 1; }
hash=$(sha256sum "$pin" | cut -c1-12)
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}   # a job runner may start it without HOME
env_dir=${COLLAGE_TORCH2_ENV:-${XDG_CACHE_HOME:-$home/.cache}/collage/torch2-$hash}
py=$env_dir/bin/python
want=$(sed -n 's/^torch==//p' "$pin")
# the environment is complete once this file is written, after the pinned torch imported and added two
# tensors; a later call trusts it (the Python suite tells a damaged environment; delete it to reinstall)
done_file=$env_dir/.collage-complete

if [ "${1:-}" = "--print" ]; then
  [ -f "$done_file" ] && [ -x "$py" ] || { echo "torch2-env: no environment at $env_dir (scripts/setup.sh installs it)" >&2; exit 1; }
  echo "$py"; exit 0
fi
[ $# -eq 0 ] || { echo "torch2-env: unknown argument '$1' (usage: scripts/torch2-env.sh [--print])" >&2; exit 2; }

works() { "$py" - "$want" <<'PYEOF' 2>&1
import sys, torch
assert torch.__version__.split("+")[0] == sys.argv[1], f"torch {torch.__version__}, the pin says {sys.argv[1]}"
assert (torch.ones(3, dtype=torch.bfloat16) + 1).sum().item() == 6
PYEOF
}

mkdir -p "$(dirname "$env_dir")"
exec 9>"$env_dir.lock"
flock 9                          # one installer at a time; the second finds the first one's environment
[ -f "$done_file" ] && [ -x "$py" ] && { echo "$py"; exit 0; }

export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
t0=$SECONDS
echo "torch2-env: installing torch $want into $env_dir (PyPI, about 1.1 GB the first time)" >&2
rm -rf "$env_dir"
/usr/bin/python3 -m venv --system-site-packages "$env_dir" >&2 \
  || { echo "torch2-env: python3 -m venv failed (Debian package python3-venv)" >&2; exit 1; }
"$py" -m pip install -q --no-deps -r "$pin" >&2 \
  || { echo "torch2-env: pip could not install $pin (is PyPI reachable?)" >&2; exit 1; }
if ! why=$(works); then
  echo "torch2-env: torch does not load with the CUDA libraries found here ($(echo "$why" | tail -n 1));" \
       "installing its full dependencies from PyPI" >&2
  "$py" -m pip install -q "torch==$want" >&2 || { echo "torch2-env: pip install torch==$want failed" >&2; exit 1; }
  why=$(works) || { echo "torch2-env: torch $want still does not load: $why" >&2; exit 1; }
fi
touch "$done_file"
echo "torch2-env: torch $want ready in $((SECONDS - t0)) s: $env_dir" >&2
echo "$py"
