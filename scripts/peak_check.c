/* peak_check.c — an independent check of `collage --version`'s core peak: the same instructions in
 * inline assembly (no compiler between the loop and the core), accumulators zeroed first, one thread.
 * Prints GFLOP/s of 512-bit FMA and of VDPBF16PS (zmm and ymm) with 16 independent accumulators, the
 * instruction's latency-bound rate with one, and VDPBF16PS interleaved with FMA and with a port-5 shuffle
 * (VPERMPS), which tells whether its issue rate is bound by the FMA ports or by port 5.
 * Build and run on a quiet machine, beside `collage --version`:
 *   cc -O2 -mavx512f -mavx512bf16 -mavx512vl scripts/peak_check.c -o /tmp/peak_check && /tmp/peak_check */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define Z(i) "vxorps %%xmm" #i ",%%xmm" #i ",%%xmm" #i "\n\t"
#define ZALL Z(0) Z(1) Z(2) Z(3) Z(4) Z(5) Z(6) Z(7) Z(8) Z(9) Z(10) Z(11) Z(12) Z(13) Z(14) Z(15)
#define CLOB "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9", "zmm10", "zmm11", \
             "zmm12", "zmm13", "zmm14", "zmm15", "zmm30", "zmm31", "cc"
#define D(i) "vdpbf16ps %%zmm30, %%zmm31, %%zmm" #i "\n\t"
#define Y(i) "vdpbf16ps %%ymm30, %%ymm31, %%ymm" #i "\n\t"
#define F(i) "vfmadd231ps %%zmm30, %%zmm31, %%zmm" #i "\n\t"
#define P(i) "vpermps %%zmm30, %%zmm31, %%zmm" #i "\n\t"
#define X16(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15)
/* NAME(iters): seconds for iters runs of BODY (operands 1.0 and 0.5 in zmm30/31: normal numbers only) */
#define LOOP(NAME, BODY)                                                                                 \
    static double NAME(long it) {                                                                       \
        const __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(0.5f);                                \
        const double t0 = now();                                                                        \
        __asm__ volatile(ZALL "vmovaps %1,%%zmm30\n\tvmovaps %2,%%zmm31\n\t1:\n\t" BODY "dec %0\n\tjnz 1b" \
                         : "+r"(it) : "v"(a), "v"(b) : CLOB);                                          \
        return now() - t0;                                                                              \
    }
LOOP(fma16, X16(F))
LOOP(dot16, X16(D))
LOOP(ymm16, X16(Y))
LOOP(dot1, D(0))
LOOP(fma1, F(0))
LOOP(dot_fma, D(0) F(8) D(1) F(9) D(2) F(10) D(3) F(11) D(4) F(12) D(5) F(13) D(6) F(14) D(7) F(15))
LOOP(dot_perm, D(0) P(8) D(1) P(9) D(2) P(10) D(3) P(11) D(4) P(12) D(5) P(13) D(6) P(14) D(7) P(15))

/* The best of 5 runs (after one untimed) of fn over n iterations. */
static double best(double (*fn)(long), long n) {
    double b = 1e30;
    fn(n / 2);
    for (int r = 0; r < 5; r++) {
        const double t = fn(n);
        if (t < b) b = t;
    }
    return b;
}

int main(void) {
    const long n = 4000000;
    const double f = best(fma16, n), d = best(dot16, n), y = best(ymm16, n), d1 = best(dot1, 4 * n),
                 f1 = best(fma1, 4 * n), df = best(dot_fma, n), dp = best(dot_perm, n);
    printf("512-bit FMA, 16 accumulators:       %6.1f GFLOP/s\n", n * 16 * 32 / f * 1e-9);
    printf("VDPBF16PS zmm, 16 accumulators:     %6.1f GFLOP/s\n", n * 16 * 64 / d * 1e-9);
    printf("VDPBF16PS ymm, 16 accumulators:     %6.1f GFLOP/s\n", n * 16 * 32 / y * 1e-9);
    printf("issue interval: FMA %.2f ns, VDPBF16PS %.2f ns (zmm), %.2f ns (ymm)\n", f / (n * 16) * 1e9,
           d / (n * 16) * 1e9, y / (n * 16) * 1e9);
    printf("latency (one accumulator): FMA %.2f ns, VDPBF16PS %.2f ns\n", f1 / (4 * n) * 1e9, d1 / (4 * n) * 1e9);
    printf("8 VDPBF16PS alone %.2f ns; with 8 FMA %.2f ns; with 8 VPERMPS (port 5) %.2f ns\n", d / (2 * n) * 1e9,
           df / n * 1e9, dp / n * 1e9);
    return 0;
}
