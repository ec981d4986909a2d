#!/usr/bin/env bash
# gpu_check.sh — the device check of the CUDA step (docs/cuda.md), one command on a machine with an NVIDIA GPU
# (H100 / H200: sm_90), in under 8 minutes, results as JSON:
#   1. builds libcollage (no MPI, no oneDNN) and `make CUDA=1` (libcollage_cuda, tests/gpu/test_cuda);
#   2. test_cuda: every preset and a set of compositions, 100 steps of 3 tensors with their own lr and weight
#      decay, clipping that triggers, EDQ, a NaN gradient skipped, against libcollage's scalar reference on
#      the CPU, every word bit for bit;
#   3. test_cuda --exhaustive: the device's fast bf16 operations (the conversion instruction, the square root
#      and the quotient) against the IEEE lines on every input (2^32 patterns, 2^16 values, 2^32 pairs);
#      compute-sanitizer memcheck on one quick run of test_cuda;
#   4. the benchmark: the step on 1B parameters in one tensor and on GPT-2 124M's 148 tensors, with clipping
#      and without, on data of training's sizes, in GB/s against the device-to-device copy's (bf16,
#      collage-light, bf16-sr, collage-plus, bf16-master);
#   4b. ncu on the GPT-2 step of bf16 and collage-light (and the baseline's, below): the kernels' instructions
#      and how busy the issue slots, the ALU, FMA and XU (conversion) pipes and DRAM are (ncu.json; skipped
#      where ncu is missing);
#   5. python/bench/device_check.py: collage.torch.AdamW on CUDA tensors (libcollage_cuda through ctypes)
#      against the C step on CPU tensors for every strategy, a GPU state resumed on the CPU, and the step's
#      time on GPT-2 124M beside torch.optim.AdamW (fused and foreach, bf16) and the torch lines;
#   6. python/bench/e2e_gpt2.py: a GPT-2-small-sized model, 200 steps with collage-light and with
#      torch.optim.AdamW on bf16 parameters, the losses;
#   7. python/bench/dist_check.py: collage.torch.AdamW across ranks: under DistributedDataParallel and on
#      FullyShardedDataParallel's flat-parameter shards with NCCL (one rank per GPU, up to two), and
#      shards ending inside the Σg² chunks through libcollage_cuda on two gloo ranks, each against one
#      unsharded optimizer bit for bit.
# Everything goes to OUT_DIR (default $OUT, else gpu-check-out): gpu_check.json (each part's status, time
# and figures) and one log per part.
#
#   bash scripts/gpu_check.sh [OUT_DIR]
#   bash scripts/gpu_check.sh --fetch-debs    (on a Debian 12 machine with apt: OpenBLAS's .debs into .gpu/,
#                                              for a device image without OpenBLAS; the check unpacks them)
#   bash scripts/gpu_check.sh --prebuild      (on a machine with nvcc 13: the build into .gpu/prebuilt; then
#                                              GPU_CHECK_PREBUILT=.gpu/prebuilt on the device skips the build)
#   GPU_CHECK_BASELINE=DIR: another build's prebuilt folder (an earlier commit's --prebuild); its benchmark
#   runs right after this build's, on the same device (bench_baseline in the JSON), for before/after ratios
set -u
cd "$(dirname "$0")/.." || exit 1
if [ "${1:-}" = "--fetch-debs" ]; then
  mkdir -p .gpu && cd .gpu && apt-get download libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libquadmath0 libgomp1
  exit $?
fi
# The check's build: libcollage (no MPI, no oneDNN), libcollage_cuda and test_cuda for sm_90 (H100, H200)
B=${GPU_CHECK_BUILD:-build-gpu}
MK=(make -j"$(nproc)" BUILD=$B MPI=0 DNNL=0 CUDA=1 CUDA_ARCH=-arch=sm_90)
if [ "${1:-}" = "--prebuild" ]; then # here, with nvcc: that build, stripped, into .gpu/prebuilt
  "${MK[@]}" lib cuda || exit 1
  rm -rf .gpu/prebuilt && mkdir -p .gpu/prebuilt/gpu || exit 1
  strip --strip-debug -o .gpu/prebuilt/libcollage.so $B/libcollage.so &&
    strip --strip-debug -o .gpu/prebuilt/libcollage_cuda.so $B/libcollage_cuda.so &&
    cp $B/gpu/test_cuda .gpu/prebuilt/gpu/ && ln -s libcollage.so .gpu/prebuilt/libcollage.so.0.1
  exit $?
fi
out=${1:-${OUT:-gpu-check-out}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
t0=$SECONDS
say() { echo "[gpu_check $((SECONDS - t0)) s] $*"; }
declare -A status secs
part() { # name, limit in seconds, command...: runs it under timeout, its output in $out/NAME.log
  local name=$1 limit=$2; shift 2
  local t=$SECONDS
  say "$name: $*"
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  status[$name]=$rc; secs[$name]=$((SECONDS - t))
  tail -n 15 "$out/$name.log"
  say "$name: exit $rc (${secs[$name]} s)"
}

# OpenBLAS: the system's, else the carried .debs unpacked under /tmp (no install: nothing of / changes). Only
# OpenBLAS's own folder and the runtime libraries the system lacks go on LD_LIBRARY_PATH, so that no older
# copy of a library the system has (libgomp, libgfortran) shadows it for PyTorch.
CFLAGS_X="" LDLIBS_X=""
need_blas=1
printf '#include <cblas.h>\n' | cc -E -x c - >/dev/null 2>&1 && need_blas=0
printf '#include <cblas.h>\n' | cc -E -x c -I/usr/include/x86_64-linux-gnu/openblas-pthread - >/dev/null 2>&1 && need_blas=0
ldconfig -p 2>/dev/null | grep -q 'libopenblas\.so\.0 ' || need_blas=1
[ "${GPU_CHECK_DEBS:-0}" = 1 ] && need_blas=1 # the .debs' path even where the system has OpenBLAS (to try it)
if [ $need_blas = 1 ]; then
  if ls .gpu/*.deb >/dev/null 2>&1; then
    root=/tmp/gpu-check-root; mkdir -p "$root/extra"
    for d in .gpu/*.deb; do dpkg -x "$d" "$root"; done
    inc=$(dirname "$(find "$root" -name cblas.h | head -n 1)")
    lib=$(dirname "$(find "$root" -name 'libopenblas.so*' | head -n 1)")
    for so in libgfortran.so.5 libquadmath.so.0 libgomp.so.1; do
      ldconfig -p 2>/dev/null | grep -q "$so " || find "$root" -name "$so*" -exec cp -P {} "$root/extra/" \;
    done
    CFLAGS_X="-I$inc"; LDLIBS_X="-L$lib"
    export LD_LIBRARY_PATH="$lib:$root/extra${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    say "OpenBLAS from .gpu/*.deb: $inc, $lib; added: $(ls "$root/extra" | tr '\n' ' ')"
  else
    say "no OpenBLAS: run 'bash scripts/gpu_check.sh --fetch-debs' on a machine with apt, and carry .gpu"
  fi
elif ! printf '#include <cblas.h>\n' | cc -E -x c - >/dev/null 2>&1; then
  CFLAGS_X="-I/usr/include/x86_64-linux-gnu/openblas-pthread"
fi

# CUDA's runtime library for test_cuda and libcollage_cuda, where the loader's cache lacks it
if ! ldconfig -p 2>/dev/null | grep -q 'libcudart\.so\.13 '; then
  nv=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  for d in "$(dirname "$nv")/../lib64" /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    if ls "$d"/libcudart.so.13* >/dev/null 2>&1; then
      export LD_LIBRARY_PATH="$(cd "$d" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; say "libcudart from $d"; break
    fi
  done
fi

MK+=(CFLAGS="$CFLAGS_X" LDLIBS="$LDLIBS_X")
if [ -n "${GPU_CHECK_PREBUILT:-}" ]; then # a build made elsewhere (same nvcc, sm_90): the device's time goes to the checks
  B=$GPU_CHECK_PREBUILT
  [ -e "$B/libcollage.so.0.1" ] || ln -s libcollage.so "$B/libcollage.so.0.1"
  part build 30 sh -c "ls -l $B $B/gpu && ldd $B/gpu/test_cuda"
else
  part build 300 "${MK[@]}" lib cuda
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$out/gpu.txt" 2>&1
if [ "${status[build]}" = 0 ]; then
  part test_cuda 150 $B/gpu/test_cuda
  part exhaustive 120 $B/gpu/test_cuda --exhaustive
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  part memcheck 120 "$cs" --tool memcheck --error-exitcode 1 $B/gpu/test_cuda --quick
  part bench 120 $B/gpu/test_cuda --bench "$out/bench.json"
  if [ -n "${GPU_CHECK_BASELINE:-}" ]; then
    [ -e "$GPU_CHECK_BASELINE/libcollage.so.0.1" ] || ln -s libcollage.so "$GPU_CHECK_BASELINE/libcollage.so.0.1"
    part bench_baseline 120 "$GPU_CHECK_BASELINE/gpu/test_cuda" --bench "$out/bench_baseline.json"
  fi
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
  if [ -n "$ncu" ]; then # this build's steps, then the baseline's: ncu-BUILD-STRATEGY.csv, then ncu.json
    metrics=gpu__time_duration.sum,smsp__inst_executed.sum,sm__instruction_throughput.avg.pct_of_peak_sustained_active
    metrics+=,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active
    metrics+=,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed
    builds="this:$B${GPU_CHECK_BASELINE:+ baseline:$GPU_CHECK_BASELINE}"
    part ncu 90 sh -c "for b in $builds; do for s in bf16 collage-light; do '$ncu' --csv --kernel-name regex:step_kernel \
      --launch-skip 2 --launch-count 1 --metrics $metrics \${b#*:}/gpu/test_cuda --profile \$s > '$out'/ncu-\${b%%:*}-\$s.csv || exit 1
      done; done"
    python3 - "$out" >"$out/ncu.json" <<'PY' || rm -f "$out/ncu.json"
import csv, glob, json, os, sys
res = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "ncu-*-*.csv"))):
    build, strategy = os.path.basename(path)[4:-4].split("-", 1)
    rows = [r for r in csv.reader(open(path)) if len(r) == 15 and r[0] != "ID"]
    res.setdefault(build, {})[strategy] = {r[12]: r[14] for r in rows}
print(json.dumps(res))
PY
  fi
  export COLLAGE_LIB=$PWD/$B/libcollage.so COLLAGE_CUDA_LIB=$PWD/$B/libcollage_cuda.so PYTHONUNBUFFERED=1
  part device_check 150 python3 python/bench/device_check.py --backend auto --json "$out/device_check.json"
  part e2e 150 python3 python/bench/e2e_gpt2.py --steps 200 --json "$out/e2e.json"
  part dist 200 python3 python/bench/dist_check.py --json "$out/dist.json"
fi

# one JSON: each part's exit status and seconds, and the figures the parts wrote
{
  echo "{"
  echo "  \"date\": \"$(date -u +%FT%TZ)\", \"commit\": \"$(git rev-parse HEAD 2>/dev/null)\","
  echo "  \"gpu\": \"$(tr -d '"\n' <"$out/gpu.txt")\", \"seconds\": $((SECONDS - t0)),"
  echo "  \"parts\": {"
  sep=""
  for p in build test_cuda exhaustive memcheck bench bench_baseline ncu device_check e2e dist; do
    [ -n "${status[$p]:-}" ] || continue
    last=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out/$p.log" | tail -n 1)
    printf '%s    "%s": {"exit": %s, "seconds": %s, "result": "%s"}' "$sep" "$p" "${status[$p]}" "${secs[$p]}" "$last"
    sep=$',\n'
  done
  echo ""
  echo "  },"
  for f in bench bench_baseline ncu device_check e2e dist; do
    printf '  "%s": ' "$f"
    if [ -s "$out/$f.json" ]; then cat "$out/$f.json"; else echo "null"; fi
    [ "$f" = dist ] || echo ","
  done
  echo "}"
} >"$out/gpu_check.json"
say "wrote $out/gpu_check.json"
fail=0
for p in build test_cuda memcheck bench device_check e2e dist; do [ "${status[$p]:-1}" = 0 ] || fail=1; done
exit $fail
