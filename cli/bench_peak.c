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

__attribute__((target("avx512f,fma"))) static double fma512(long iters) {
    __m512 acc[PEAK_ACC];
    for (int i = 0; i < PEAK_ACC; i++) acc[i] = _mm512_set1_ps((float)i);
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    const double t0 = cli_now();
    for (long k = 0; k < iters; k++)
        for (int i = 0; i < PEAK_ACC; i++) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    const double t = cli_now() - t0;
    float sink = 0;
    for (int i = 0; i < PEAK_ACC; i++) sink += _mm512_reduce_add_ps(acc[i]);
    __asm__ volatile("" ::"x"(sink));
    return (double)iters * PEAK_ACC * 32 / t;
}

__attribute__((target("avx2,fma"))) static double fma256(long iters) {
    __m256 acc[PEAK_ACC];
    for (int i = 0; i < PEAK_ACC; i++) acc[i] = _mm256_set1_ps((float)i);
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    const double t0 = cli_now();
    for (long k = 0; k < iters; k++)
        for (int i = 0; i < PEAK_ACC; i++) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
    const double t = cli_now() - t0;
    float sink = 0, v[8];
    for (int i = 0; i < PEAK_ACC; i++) {
        _mm256_storeu_ps(v, acc[i]);
        for (int j = 0; j < 8; j++) sink += v[j];
    }
    __asm__ volatile("" ::"x"(sink));
    return (double)iters * PEAK_ACC * 16 / t;
}

__attribute__((target("avx512f,avx512bf16"))) static double dpbf16(long iters) {
    __m512 acc[PEAK_ACC];
    for (int i = 0; i < PEAK_ACC; i++) acc[i] = _mm512_set1_ps((float)i);
    const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);
    const double t0 = cli_now();
    for (long k = 0; k < iters; k++)
        for (int i = 0; i < PEAK_ACC; i++) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    const double t = cli_now() - t0;
    float sink = 0;
    for (int i = 0; i < PEAK_ACC; i++) sink += _mm512_reduce_add_ps(acc[i]);
    __asm__ volatile("" ::"x"(sink));
    return (double)iters * PEAK_ACC * 64 / t;
}

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
