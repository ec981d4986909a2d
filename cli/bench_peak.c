/* bench_peak.c — the core's arithmetic peak for the instructions collage's products use, measured with
 * register-only loops (no memory traffic): fp32 FMA (VFMADD231PS, 512-bit where the CPU has AVX-512,
 * else 256-bit) and the bf16 dot product (VDPBF16PS: per fp32 lane two bf16 products added to the sum,
 * 4 FLOPs). Each loop keeps 12 independent accumulators, more than the instruction's latency times its
 * issue rate on current cores, so the rate is the issue rate. One thread: the peak of one core. */
#include "bench.h"
#include "cli.h"
#include <cpuid.h>
#include <immintrin.h>
#include <stdio.h>

#define PEAK_ACC 12
#define PEAK_ITERS 20000000L
/* The 12 accumulators as named variables (an array indexed in a loop may live in memory, and the store
 * and reload would then bound the loop instead of the instruction). */
#define PEAK_STEP(op) \
    c0 = op(c0), c1 = op(c1), c2 = op(c2), c3 = op(c3), c4 = op(c4), c5 = op(c5), c6 = op(c6), c7 = op(c7), \
    c8 = op(c8), c9 = op(c9), c10 = op(c10), c11 = op(c11)
#define PEAK_SUM(red) \
    (red(c0) + red(c1) + red(c2) + red(c3) + red(c4) + red(c5) + red(c6) + red(c7) + red(c8) + red(c9) + red(c10) + red(c11))

/* One peak loop: NAME(iters) in target TGT on vectors of type V made by SET1 (the 12 accumulators
 * distinct: identical chains would be computed once), each step OP(c) on each, summed by RED; FLOPS
 * per instruction. */
#define PEAK_LOOP(NAME, TGT, V, SET1, OP, RED, FLOPS)                                                            \
    __attribute__((target(TGT))) static double NAME(long iters) {                                             \
        V c0 = SET1(0), c1 = SET1(1), c2 = SET1(2), c3 = SET1(3), c4 = SET1(4), c5 = SET1(5), c6 = SET1(6),   \
          c7 = SET1(7), c8 = SET1(8), c9 = SET1(9), c10 = SET1(10), c11 = SET1(11);                           \
        const double t0 = cli_now();                                                                          \
        for (long k = 0; k < iters; k++) PEAK_STEP(OP);                                                       \
        const double t = cli_now() - t0;                                                                      \
        const float sink = PEAK_SUM(RED);                                                                     \
        __asm__ volatile("" ::"x"(sink));                                                                     \
        return (double)iters * PEAK_ACC * (FLOPS) / t;                                                        \
    }

#define S512(k) _mm512_set1_ps((float)(k))
#define S256(k) _mm256_set1_ps((float)(k))
#define FMA512(c) _mm512_fmadd_ps(c, _mm512_set1_ps(0.999999f), _mm512_set1_ps(1e-7f))
#define FMA256(c) _mm256_fmadd_ps(c, _mm256_set1_ps(0.999999f), _mm256_set1_ps(1e-7f))
#define DOT(c) _mm512_dpbf16_ps(c, (__m512bh)_mm512_set1_epi16(0x3f80), (__m512bh)_mm512_set1_epi16(0x3380))

__attribute__((target("avx2,fma"))) static float sum256(__m256 v) {
    float x[8];
    _mm256_storeu_ps(x, v);
    return x[0] + x[1] + x[2] + x[3] + x[4] + x[5] + x[6] + x[7];
}

PEAK_LOOP(fma512, "avx512f,fma", __m512, S512, FMA512, _mm512_reduce_add_ps, 32)
PEAK_LOOP(fma256, "avx2,fma", __m256, S256, FMA256, sum256, 16)
PEAK_LOOP(dpbf16, "avx512f,avx512bf16", __m512, S512, DOT, _mm512_reduce_add_ps, 64)

/* The best of three runs of each (the first also wakes the core's wide units). */
static double best_of(double (*fn)(long)) {
    double best = 0;
    for (int r = 0; r < 3; r++) {
        const double g = fn(PEAK_ITERS / 4);
        if (g > best) best = g;
    }
    return best;
}

bench_peak bench_core_peak(void) {
    bench_peak p = {0};
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) p.fma = best_of(fma512), p.fma_name = "FMA, 512-bit";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) p.fma = best_of(fma256), p.fma_name = "FMA, 256-bit";
    else p.fma_name = "no FMA";
    unsigned a = 0, b = 0, c = 0, d = 0, a1 = 0, b1 = 0, c1 = 0, d1 = 0; /* leaf 7: AMX-BF16 (EDX 22); 7.1: AVX512_BF16 (EAX 5) */
    __get_cpuid_count(7, 0, &a, &b, &c, &d);
    __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1);
    if (__builtin_cpu_supports("avx512f") && (a1 >> 5 & 1)) p.bf16 = best_of(dpbf16);
    p.amx = (int)(d >> 22 & 1);
    return p;
}

void bench_peak_line(const bench_peak *p, char *out, size_t cap) {
    char b[80] = "no bf16 dot product";
    if (p->bf16 > 0) snprintf(b, sizeof b, "bf16 dot (VDPBF16PS) %.0f GFLOP/s", p->bf16 * 1e-9);
    snprintf(out, cap, "core peak (one core, register-only loops): fp32 %s %.0f GFLOP/s, %s%s", p->fma_name, p->fma * 1e-9, b,
             p->amx ? "; AMX present (its tile rate is not measured: the bf16 products are held to the dot product's)" : "");
}
