#!/usr/bin/env bash
# Installs the Debian packages collage needs, only when missing (idempotent).
# Usage: scripts/setup.sh        (as root, or with sudo available)
set -euo pipefail
PKGS=(build-essential libopenblas-dev libmpfr-dev libgmp-dev libopenmpi-dev openmpi-bin
      fortunes gnuplot-nox)
missing=()
for p in "${PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
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
