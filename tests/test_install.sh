#!/usr/bin/env bash
# test_install — `make install` into a temporary prefix, then the README's C example (the ```c block
# that starts with /* example.c) built with `cc $(pkg-config --cflags --libs collage)` against the
# installed library, and run; and check-headers, which must pass on cli/ and fail on a planted
# private include. The Makefile writes this script into BUILD/tests with the build's settings.
BUILD='@BUILD@'; CC='@CC@'; XFLAGS='@XFLAGS@'; MAKEVARS='@MAKEVARS@'
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
tmp=$(mktemp -d /tmp/collage-install-XXXXXX); trap 'rm -rf "$tmp"' EXIT
if out=$(make -s --no-print-directory install PREFIX="$tmp/prefix" BUILD="$BUILD" $MAKEVARS 2>&1) &&
   [ -f "$tmp/prefix/include/collage.h" ] && [ -f "$tmp/prefix/lib/pkgconfig/collage.pc" ] &&
   [ -f "$tmp/prefix/lib/libcollage.so" ] && [ -f "$tmp/prefix/lib/libcollage.a" ]; then
  ok "make install: library, headers, collage.pc"
else
  bad "make install PREFIX=$tmp/prefix: $out"
fi
# the example: from the line after ```c up to the closing ```
awk '/^```c$/{getline l; if (l ~ /^\/\* example\.c/) {p=1; print l; next}} p && /^```$/{exit} p' README.md > "$tmp/example.c"
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
if [ ! -s "$tmp/example.c" ]; then
  bad "README.md has no \`\`\`c block starting with /* example.c"
elif ! flags=$(pkg-config --cflags --libs collage 2>&1); then
  bad "pkg-config --cflags --libs collage: $flags"
elif ! out=$($CC $XFLAGS -o "$tmp/example" "$tmp/example.c" $flags 2>&1); then
  bad "cc example.c \$(pkg-config --cflags --libs collage): $out"
elif ! out=$(LD_LIBRARY_PATH="$tmp/prefix/lib" "$tmp/example" 2>&1); then
  bad "the README's example exited non-zero: $out"
else
  ok "the README's C example, built against the installed library: $(echo "$out" | tail -n 1)"
fi
if out=$(bash scripts/check-headers.sh 2>&1); then ok "check-headers on cli/"; else bad "check-headers: $out"; fi
mkdir "$tmp/cli" && printf '#include "collage.h"\n#include "internal.h"\n' > "$tmp/cli/x.c"
if out=$(bash scripts/check-headers.sh "$tmp/cli" 2>&1); then bad "check-headers missed a private include"
elif echo "$out" | grep -q 'internal.h'; then ok "check-headers refuses a private include"
else bad "check-headers failed without naming the header: $out"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
