#!/usr/bin/env bash
# Fails when a file of cli/ (or of the folder given) includes a header that is neither public
# (include/) nor the CLI's own (cli/): the CLI is a client of the installed headers only.
# Usage: scripts/check-headers.sh [DIR]      (default: cli)
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/cli}
bad=0
for f in "$dir"/*.c "$dir"/*.h; do
  [ -f "$f" ] || continue
  while IFS= read -r h; do
    [ -f "$root/include/$h" ] || [ -f "$dir/$h" ] || { echo "$f: includes \"$h\", a private header"; bad=1; }
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done
[ "$bad" -eq 0 ] && echo "check-headers: every file of $(basename "$dir")/ includes public headers only"
exit "$bad"
