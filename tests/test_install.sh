#!/usr/bin/env bash
# test_install — `make install` into a temporary prefix (the shared library as Debian installs one: the
# file libcollage.so.X.Y.Z with its SONAME libcollage.so.X.Y, the links libcollage.so.X.Y and
# libcollage.so), then the README's C example (the ```c block that starts with /* example.c) built with
# `cc $(pkg-config --cflags --libs collage)` against the installed library and run as the README says,
# without LD_LIBRARY_PATH (collage.pc's rpath for a prefix the loader does not search); what install
# does for a prefix the loader searches (ldconfig; none under DESTDIR) as `make -n` shows it; and
# check-headers, which must pass on cli/ and fail on a planted private include. The Makefile writes this
# script into BUILD/tests with the build's settings.
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
lib="$tmp/prefix/lib"; ver=$(sed -n 's/^#define COLLAGE_VERSION_STRING "\(.*\)"/\1/p' include/collage.h)
so="libcollage.so.${ver%.*}"
soname=$(readelf -d "$lib/libcollage.so.$ver" 2>&1 | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
if [ -f "$lib/libcollage.so.$ver" ] && [ ! -L "$lib/libcollage.so.$ver" ] && [ "$(readlink "$lib/$so")" = "libcollage.so.$ver" ] &&
   [ "$(readlink "$lib/libcollage.so")" = "$so" ] && [ "$soname" = "$so" ]; then
  ok "the shared library: libcollage.so.$ver, SONAME $soname, links $so and libcollage.so"
else
  bad "the shared library's file and links: SONAME '$soname' (want $so): $(ls -l "$lib" 2>&1 | tr '\n' ' ')"
fi
if echo "$out" | grep -q "the loader does not search $lib: collage.pc links with -Wl,-rpath,$lib"; then
  ok "make install says how programs find the library in a prefix the loader does not search"
else
  bad "make install printed no note on finding $lib: $out"
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
elif ! out=$(env -u LD_LIBRARY_PATH "$tmp/example" 2>&1); then
  bad "the README's example, run without LD_LIBRARY_PATH, exited non-zero: $out"
elif ! env -u LD_LIBRARY_PATH ldd "$tmp/example" | grep -q "$so => $lib/$so "; then
  bad "the README's example does not load the installed $so: $(env -u LD_LIBRARY_PATH ldd "$tmp/example" | grep collage)"
else
  ok "the README's C example, built against the installed library, run without LD_LIBRARY_PATH: $(echo "$out" | tail -n 1)"
fi
# a prefix the loader searches: ldconfig, and no rpath in collage.pc; under DESTDIR (a package being
# built) no ldconfig. As make -n prints the recipe: nothing is installed there.
sys=/usr/local; ldir=$(ldconfig -v -N -X 2>/dev/null | grep -c "^$sys/lib:")
plan=$(make -n --no-print-directory install PREFIX=$sys BUILD="$BUILD" $MAKEVARS 2>&1)
staged=$(make -n --no-print-directory install PREFIX=$sys DESTDIR="$tmp/stage" BUILD="$BUILD" $MAKEVARS 2>&1)
if [ "$ldir" -eq 0 ]; then
  ok "skip the system prefix's plan: ldconfig does not list $sys/lib on this machine"
elif echo "$plan" | grep -q "ldconfig ||" && echo "$plan" | grep -qF -- "-e 's|@RPATH@||'" &&
     ! echo "$staged" | grep -q "ldconfig ||" && echo "$staged" | grep -q "run ldconfig once the files are in $sys/lib"; then
  ok "make install PREFIX=$sys runs ldconfig and writes no rpath; under DESTDIR it leaves ldconfig to the package"
else
  bad "make -n install PREFIX=$sys: $(echo "$plan" | tail -n 4); with DESTDIR: $(echo "$staged" | tail -n 2)"
fi
if out=$(bash scripts/check-headers.sh 2>&1); then ok "check-headers on cli/"; else bad "check-headers: $out"; fi
mkdir "$tmp/cli" && printf '#include "collage.h"\n#include "internal.h"\n' > "$tmp/cli/x.c"
if out=$(bash scripts/check-headers.sh "$tmp/cli" 2>&1); then bad "check-headers missed a private include"
elif echo "$out" | grep -q 'internal.h'; then ok "check-headers refuses a private include"
else bad "check-headers failed without naming the header: $out"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
