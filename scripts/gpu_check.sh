#!/usr/bin/env bash
# gpu_check.sh — the device check of the CUDA step (docs/cuda.md), one command on a machine with an NVIDIA GPU
# (H100 / H200: sm_90), in under 8 minutes, results as JSON:
#   1. builds libcollage (no MPI, no oneDNN) and `make CUDA=1` (libcollage_cuda, tests/gpu/test_cuda);
#   2. test_cuda: every preset and a set of compositions, 100 steps of 3 tensors with their own lr and weight
#      decay, clipping that triggers, EDQ, a NaN gradient skipped, against libcollage's scalar reference on
#      the CPU, every word bit for bit;
#   3. compute-sanitizer memcheck on one quick run of test_cuda;
#   4. the benchmark: the step on 1B parameters in one tensor and on GPT-2 124M's 148 tensors, in GB/s
#      against the device-to-device copy's (bf16, collage-light, bf16-sr, collage-plus, bf16-master);
#   5. python/bench/device_check.py: collage.torch.AdamW on CUDA tensors (libcollage_cuda through ctypes)
#      against the C step on CPU tensors for every strategy, a GPU state resumed on the CPU, and the step's
#      time on GPT-2 124M beside torch.optim.AdamW (fused and foreach, bf16) and the torch lines;
#   6. python/bench/e2e_gpt2.py: a GPT-2-small-sized model, 200 steps with collage-light and with
#      torch.optim.AdamW on bf16 parameters, the losses.
# Everything goes to OUT_DIR (default $OUT, else gpu-check-out): gpu_check.json (each part's status, time
# and figures) and one log per part.
#
#   bash scripts/gpu_check.sh [OUT_DIR]
#   bash scripts/gpu_check.sh --fetch-debs    (on a Debian 12 machine with apt: OpenBLAS's .debs into .gpu/,
#                                              for a device image without OpenBLAS; the check unpacks them)
set -u
cd "$(dirname "$0")/.." || exit 1
if [ "${1:-}" = "--fetch-debs" ]; then
  mkdir -p .gpu && cd .gpu && apt-get download libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libquadmath0
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

# OpenBLAS: the system's, else the carried .debs unpacked under /tmp (no install: nothing of / changes)
CFLAGS_X="" LDLIBS_X=""
if ! printf '#include <cblas.h>\n' | cc -E -x c - >/dev/null 2>&1 && \
   ! printf '#include <cblas.h>\n' | cc -E -x c -I/usr/include/x86_64-linux-gnu/openblas-pthread - >/dev/null 2>&1; then
  if ls .gpu/*.deb >/dev/null 2>&1; then
    root=/tmp/gpu-check-root; mkdir -p "$root"
    for d in .gpu/*.deb; do dpkg -x "$d" "$root"; done
    inc=$(dirname "$(find "$root" -name cblas.h | head -n 1)")
    lib=$(dirname "$(find "$root" -name 'libopenblas.so*' | head -n 1)")
    CFLAGS_X="-I$inc"; LDLIBS_X="-L$lib"
    export LD_LIBRARY_PATH="$lib:$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    say "OpenBLAS from .gpu/*.deb: $inc, $lib"
  else
    say "no cblas.h: run 'bash scripts/gpu_check.sh --fetch-debs' on a machine with apt, and carry .gpu"
  fi
elif ! printf '#include <cblas.h>\n' | cc -E -x c - >/dev/null 2>&1; then
  CFLAGS_X="-I/usr/include/x86_64-linux-gnu/openblas-pthread"
fi

B=${GPU_CHECK_BUILD:-build-gpu}
MK=(make -j"$(nproc)" BUILD=$B MPI=0 DNNL=0 CFLAGS="$CFLAGS_X" LDLIBS="$LDLIBS_X" CUDA=1 CUDA_ARCH=-arch=sm_90)
part build 300 "${MK[@]}" lib cuda
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$out/gpu.txt" 2>&1
if [ "${status[build]}" = 0 ]; then
  part test_cuda 150 $B/gpu/test_cuda
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  part memcheck 120 "$cs" --tool memcheck --error-exitcode 1 $B/gpu/test_cuda --quick
  part bench 120 $B/gpu/test_cuda --bench "$out/bench.json"
  export COLLAGE_LIB=$PWD/$B/libcollage.so COLLAGE_CUDA_LIB=$PWD/$B/libcollage_cuda.so PYTHONUNBUFFERED=1
  part device_check 150 python3 python/bench/device_check.py --backend auto --json "$out/device_check.json"
  part e2e 150 python3 python/bench/e2e_gpt2.py --steps 200 --json "$out/e2e.json"
fi

# one JSON: each part's exit status and seconds, and the figures the parts wrote
{
  echo "{"
  echo "  \"date\": \"$(date -u +%FT%TZ)\", \"commit\": \"$(git rev-parse HEAD 2>/dev/null)\","
  echo "  \"gpu\": \"$(tr -d '"\n' <"$out/gpu.txt")\", \"seconds\": $((SECONDS - t0)),"
  echo "  \"parts\": {"
  sep=""
  for p in build test_cuda memcheck bench device_check e2e; do
    [ -n "${status[$p]:-}" ] || continue
    last=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out/$p.log" | tail -n 1)
    printf '%s    "%s": {"exit": %s, "seconds": %s, "result": "%s"}' "$sep" "$p" "${status[$p]}" "${secs[$p]}" "$last"
    sep=$',\n'
  done
  echo ""
  echo "  },"
  for f in bench device_check e2e; do
    printf '  "%s": ' "$f"
    if [ -s "$out/$f.json" ]; then cat "$out/$f.json"; else echo "null"; fi
    [ "$f" = e2e ] || echo ","
  done
  echo "}"
} >"$out/gpu_check.json"
say "wrote $out/gpu_check.json"
fail=0
for p in build test_cuda memcheck bench device_check e2e; do [ "${status[$p]:-1}" = 0 ] || fail=1; done
exit $fail
