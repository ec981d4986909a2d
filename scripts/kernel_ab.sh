#!/usr/bin/env bash
# kernel_ab.sh REV STRATEGY N [ROUNDS STEPS] — the AVX-512 AdamW kernel of git revision REV ("base")
# against the working tree's src/optim/adamw_kernel.inc ("var"), in one process (scripts/kernel_ab.c):
# states and EDQ sums compared, then EDQ-off and EDQ-on ns/param of each and their ratios.
# N = 65536 keeps one thread's state in L2; 32000000 streams it from memory. OMP_NUM_THREADS sets the
# threads, B2 the β2, NT=1 the var kernel's nt loops (where it proves the scalars tie-free: a base
# revision without them ignores it), ISA=avx2 the AVX2 kernel (8 lanes) instead of the AVX-512 one
# (its object named like AVX-512's: the library's AVX-512 kernel is left out either way), VAR_CFLAGS extra compiler flags for the working tree's kernel
# only (to compare options, e.g. VAR_CFLAGS=-mtune=znver3), PROBE=half-up a timing probe: every rn() of the var kernel
# rounds half up (2 instructions; inexact, so its states differ: the ceiling for any cheaper rounding, docs/optimizer-kernel.md).
# Needs a built library (make) for the rest of collage. Example:
#   scripts/kernel_ab.sh HEAD~1 collage-light 65536 21 40
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,12p' "$0"; exit 2; }
rev=$1; strategy=$2; n=$3; rounds=${4:-21}; steps=${5:-20}
case $strategy in
  fp32|bf16-fp32-states|bf16-master|bf16|collage-light|collage-plus|bf16-kahan|bf16-sr|bf16-remainder|collage-plus-v1) ;;
  *) echo "kernel_ab: $strategy: not a strategy (fp32, bf16-fp32-states, bf16-master, bf16, collage-light," \
          "collage-plus, bf16-kahan, bf16-sr, bf16-remainder, collage-plus-v1)" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$root/build/libcollage.a" ] || { echo "kernel_ab: build/libcollage.a not found: run make first" >&2; exit 1; }
grep -qw avx512bw /proc/cpuinfo || { echo "kernel_ab: this CPU has no AVX-512" >&2; exit 1; }
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
{ git -C "$root" show "$rev:src/optim/adamw_kernel.inc" 2>/dev/null || git -C "$root" show "$rev:src/adamw_kernel.inc"; } > "$w/base.inc" \
  || { echo "kernel_ab: no src/adamw_kernel.inc at revision $rev" >&2; exit 1; }
if [ "${ISA:-avx512}" = avx2 ]; then # the AVX2 kernel (8 lanes) instead, on this AVX-512 machine
  isa_f="-mavx2 -mfma -mf16c"; vl=8; vsqrt='((vf)_mm256_sqrt_ps((__m256)(x)))'
  # base.o stands in for the AVX-512 object left out below (its code-span function too); var's is renamed
  sed -i 's/^#define KTAG avx2$/#define KTAG avx512/' "$w/base.inc"
  sed 's/^#define KTAG avx2$/#define KTAG avx2v/' "$root/src/optim/adamw_kernel.inc" > "$w/var.inc"
else
  isa_f="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c"; vl=16; vsqrt='((vf)_mm512_sqrt_ps((__m512)(x)))'
  sed 's/^#define KTAG avx512$/#define KTAG avx512v/' "$root/src/optim/adamw_kernel.inc" > "$w/var.inc"
fi
case ${PROBE:-} in
  '') ;;
  half-up) sed -i '/^INL vf rn(vf x) {$/a\    return (vf)(((vu)x + 0x8000u) \& 0xffff0000u); /* PROBE=half-up */' "$w/var.inc" ;;
  *) echo "kernel_ab: PROBE=$PROBE: not a probe (half-up)" >&2; exit 2 ;;
esac
F="-std=c11 -O2 -g -ffp-contract=off -fno-fast-math -fno-math-errno -D_GNU_SOURCE -I$root/include -I$root/src/core -I$root/src/numerics -I$root/src/optim -fopenmp
   $isa_f -fschedule-insns -fsched-pressure --param=sched-pressure-algorithm=2"
for v in base var; do
  name=$([ $v = base ] && echo collage__adamw_block_avx512 || echo collage__adamw_block_var)
  tie=$([ $v = base ] && echo collage__adamw_tie_free_avx512 || echo collage__adamw_block_var_tie_free)
  printf '#include "adamw_impl.h"\n#include <immintrin.h>\n#define VL %s\n#define KERNEL_NAME %s\n#define TIE_FREE_NAME %s\n#define VSQRT(x) %s\n#include "%s"\n' \
    "$vl" "$name" "$tie" "$vsqrt" "$w/$v.inc" > "$w/$v.c"
  # a revision from before the nt loops: the library's call finds every scalar "not tie-free"
  grep -q TIE_FREE_NAME "$w/$v.inc" || echo "int $tie(int kind, float c) { (void)kind; (void)c; return 0; }" >> "$w/$v.c"
  extra=; [ $v = var ] && extra=${VAR_CFLAGS:-}
  cc $F $extra -c "$w/$v.c" -o "$w/$v.o" &
done
wait
# the library's own AVX-512 kernel object is left out: base.o defines it
objs=$(ar t "$root/build/libcollage.a" | grep -v '^adamw_avx512.o$')
(cd "$w" && ar x "$root/build/libcollage.a" $objs)
cc -O2 -fopenmp -I"$root/include" -I"$root/src/core" -I"$root/src/optim" "$root/scripts/kernel_ab.c" "$w/base.o" "$w/var.o" \
  $(for o in $objs; do echo "$w/$o"; done) -lopenblas -lm -o "$w/kernel_ab"
"$w/kernel_ab" "$strategy" "$n" "$rounds" "$steps"
