#!/usr/bin/env bash
# loop_icount.sh STRATEGY LOOP [BUILD] — instructions per iteration of one fused-AdamW loop function,
# counted by single-stepping it under gdb (deterministic, unlike time on a shared machine).
#   STRATEGY  a strategy name for `collage bench optimizer --strategy` (e.g. collage-light)
#   LOOP      the loop function in adamw_kernel.inc, named <loop>_<edq><clip>: llig_10 is collage-light
#             with EDQ and no clipping (lf32 lfst lmas lb16 llig lplu lplu1 lkah lsr lrem lpv1 lpv11)
#   BUILD     the build folder (default build)
# The nt loops (<loop>_n<edq><clip>, e.g. lplu_n00) run from 2^20 parameters on: PARAMS=1048576.
# ISA=avx2 counts the AVX2 kernel's loop (run with COLLAGE_ISA=avx2; an iteration is 2 pairs of
# 8-lane vectors, 32 elements); by default the AVX-512 kernel's, which the CPU must take.
# Prints the instruction count of each iteration seen (one iteration = 4 pairs = 128 elements with
# AVX-512) and, for one iteration, the count by mnemonic with stack traffic marked (<-stk, ->stk).
# Its counts are in docs/benchmarks.md (instruction counts) and docs/optimizer-kernel.md.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,12p' "$0"; exit 2; }
strategy=$1; loop=$2; build=${3:-build}
command -v gdb >/dev/null || { echo "loop_icount: gdb not found (apt-get install gdb)" >&2; exit 1; }
[ -x "$build/collage" ] || { echo "loop_icount: $build/collage not found: run make first" >&2; exit 1; }
out=$(mktemp); trap 'rm -f "$out"' EXIT
# the first call is a warm-up round's; skip a few calls so that the state has settled
COLLAGE_ISA=${ISA:-avx512} OMP_NUM_THREADS=1 gdb -q -batch -nx \
  -ex "set pagination off" -ex "break adamw_${ISA:-avx512}.c:$loop" -ex "ignore 1 ${SKIP:-8}" -ex "run" -ex "delete" \
  -ex "python
import gdb
f = open('$out', 'w')
for _ in range(${STEPS:-6000}):
    f.write(gdb.execute('x/i \$pc', to_string=True).replace('=>', '').strip() + '\n')
    gdb.execute('stepi', to_string=True)
f.close()" \
  --args "$build/collage" bench optimizer --params "${PARAMS:-262144}" --threads 1 --reps 3 --strategy "$strategy" >/dev/null 2>&1 || true
python3 - "$out" "$loop" <<'PY'
import collections, re, sys
lines = [l for l in open(sys.argv[1]) if l.strip()]
if not lines:
    sys.exit("loop_icount: gdb recorded nothing (is %s called for this strategy, and is the AVX-512 kernel in use?)" % sys.argv[2])
pcs = [l.split()[0] for l in lines]
count = collections.Counter(pcs)
head = next(p for p in pcs if count[p] == max(count.values()))   # the loop's most-visited address
at = [i for i, p in enumerate(pcs) if p == head]
if len(at) < 3:
    sys.exit("loop_icount: fewer than two whole iterations recorded; raise STEPS")
print("%s: instructions per iteration %s" % (sys.argv[2], [at[i + 1] - at[i] for i in range(len(at) - 1)]))
kinds = collections.Counter()
for l in lines[at[1]:at[2]]:
    m = re.search(r':\s+(\S+)\s*(.*)', l)
    op, args = m.group(1), m.group(2)
    if '(%rsp)' in args:
        op += ' ->stk' if args.rstrip().endswith('(%rsp)') else ' <-stk'
    kinds[op] += 1
print("  " + ", ".join("%s %d" % kv for kv in sorted(kinds.items(), key=lambda kv: -kv[1])))
PY
