/* exhaustive.cu — test_cuda --exhaustive: the device's fast bf16 operations of adamw_elem.h against the
 * IEEE lines they stand for, on every input: the conversion instruction (ce_bf16_rn, and ce_round's fp32
 * form of it) against the integer rounding (ce_bf16_rn_bits) for all 2^32 fp32 patterns, the square root
 * (ce_sqrt_rn) for all 2^16 bf16 values and the quotient (ce_div_rn) for all 2^32 pairs of bf16 values,
 * each against the IEEE operation (__fsqrt_rn, __fdiv_rn) rounded by ce_bf16_rn_bits (a first difference
 * of the RN check with second input 1 is ce_round's). Equal means the same bits, or both NaN (a NaN's bits
 * are not kept on the device: docs/cuda.md). Built by nvcc with the library's numerics flags. */
#include "adamw_elem.h"

#include <cuda_runtime.h>
#include <stdio.h>

typedef struct {
    unsigned long long bad;
    unsigned int first_a, first_b, got, want;
} tally;

__device__ static int same(uint16_t got, uint16_t want) {
    const int gn = (got & 0x7fffu) > 0x7f80u, wn = (want & 0x7fffu) > 0x7f80u;
    return gn || wn ? gn && wn : got == want;
}
__device__ static void note(tally *t, unsigned a, unsigned b, uint16_t got, uint16_t want) {
    if (atomicAdd(&t->bad, 1ull) == 0) { t->first_a = a; t->first_b = b; t->got = got; t->want = want; }
}

__global__ static void rn_kernel(unsigned long long base, unsigned long long count, tally *t) {
    for (unsigned long long j = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; j < count;
         j += (unsigned long long)gridDim.x * blockDim.x) {
        const unsigned u = (unsigned)(base + j);
        const float x = __uint_as_float(u);
        const uint16_t got = ce_bf16_rn(x), want = ce_bf16_rn_bits(x);
        const uint32_t r = __float_as_uint(ce_round(COLLAGE_FMT_BF16, x));
        if (!same(got, want)) note(t, u, 0, got, want);
        else if ((r & 0xffffu) || !same((uint16_t)(r >> 16), want)) note(t, u, 1, (uint16_t)(r >> 16), want);
    }
}
__global__ static void sqrt_kernel(tally *t) {
    const unsigned a = blockIdx.x * blockDim.x + threadIdx.x;
    if (a > 0xffffu) return;
    const uint16_t got = ce_word16(COLLAGE_FMT_BF16, ce_sqrt_rn(COLLAGE_FMT_BF16, ce_bf16_f32((uint16_t)a)));
    const uint16_t want = ce_bf16_rn_bits(__fsqrt_rn(ce_bf16_f32((uint16_t)a)));
    if (!same(got, want)) note(t, a, 0, got, want);
}
__global__ static void div_kernel(unsigned a0, unsigned rows, tally *t) {
    for (unsigned long long j = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; j < (unsigned long long)rows << 16;
         j += (unsigned long long)gridDim.x * blockDim.x) {
        const uint16_t a = (uint16_t)(a0 + (unsigned)(j >> 16)), b = (uint16_t)(j & 0xffffu);
        const uint16_t got = ce_word16(COLLAGE_FMT_BF16, ce_div_rn(COLLAGE_FMT_BF16, ce_bf16_f32(a), ce_bf16_f32(b)));
        const uint16_t want = ce_bf16_rn_bits(__fdiv_rn(ce_bf16_f32(a), ce_bf16_f32(b)));
        if (!same(got, want)) note(t, a, b, got, want);
    }
}

/* Runs the three checks; each line of what it found into msg (one per check); returns the number of
 * inputs that differ, or -1 when the device could not run them. */
extern "C" long long exhaustive_check(char *msg, size_t size) {
    tally *t = NULL;
    if (cudaMalloc(&t, 3 * sizeof *t) != cudaSuccess) { snprintf(msg, size, "cudaMalloc failed"); return -1; }
    cudaMemset(t, 0, 3 * sizeof *t);
    for (unsigned long long base = 0; base < (1ull << 32); base += 1ull << 30) rn_kernel<<<4096, 256>>>(base, 1ull << 30, &t[0]);
    sqrt_kernel<<<256, 256>>>(&t[1]);
    for (unsigned a0 = 0; a0 < 0x10000u; a0 += 0x2000u) div_kernel<<<4096, 256>>>(a0, 0x2000u, &t[2]);
    tally h[3];
    const cudaError_t e = cudaMemcpy(h, t, sizeof h, cudaMemcpyDeviceToHost);
    cudaFree(t);
    if (e != cudaSuccess) { snprintf(msg, size, "%s", cudaGetErrorString(e)); return -1; }
    const char *what[3] = {"bf16 RN of 2^32 fp32 patterns", "bf16 sqrt of 2^16 bf16 values", "bf16 quotient of 2^32 bf16 pairs"};
    size_t at = 0;
    long long bad = 0;
    for (int i = 0; i < 3 && at < size; i++) {
        at += (size_t)snprintf(msg + at, size - at, "%s: %llu differ", what[i], h[i].bad);
        if (h[i].bad && at < size)
            at += (size_t)snprintf(msg + at, size - at, " (first: %#x, %#x: device %#06x, IEEE %#06x)", h[i].first_a, h[i].first_b,
                                   h[i].got, h[i].want);
        if (at < size) at += (size_t)snprintf(msg + at, size - at, "\n");
        bad += (long long)h[i].bad;
    }
    return bad;
}
