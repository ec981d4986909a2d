/* peak.c — the core's arithmetic peak for the instructions the products use, measured with register-only
 * loops: fp32 FMA (VFMADD231PS, 512-bit where the CPU has AVX-512, else 256-bit), the bf16 dot product
 * (VDPBF16PS: per fp32 lane two bf16 products added to the sum, 4 FLOPs) and AMX's bf16 tile product
 * (TDPBF16PS: a 16×16 fp32 tile += 16×32 bf16 · 32×16 bf16, 16384 FLOPs) where the OS grants AMX:
 * collage_core_peak_measure (collage_model.h). */
#include "collage_model.h"
#include "nn.h"
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Each loop keeps 16 independent accumulators: the issue rate times the latency is at most 8 for FMA
 * (2 a cycle, 4 cycles) and for VDPBF16PS (measured: 1 every 2 cycles, 8 cycles, on an Intel family 6
 * model 207; 1 a cycle on AMD Zen 4), so 16 leave every core issue-bound with room to spare. The
 * accumulators are named variables (an array indexed in a loop may live in memory, and the store and
 * reload would then bound the loop), their operands registers, their values normal numbers that stay
 * far from overflow (no assist slows an instruction), and the loop is timed after an untimed run. */
#define PEAK_ITERS 4000000L /* per timed run: 64M instructions, 20-60 ms on current cores */
#define PEAK_RUNS 5
#define PEAK_STEP(op)                                                                                            \
    c0 = op(c0), c1 = op(c1), c2 = op(c2), c3 = op(c3), c4 = op(c4), c5 = op(c5), c6 = op(c6), c7 = op(c7),     \
    c8 = op(c8), c9 = op(c9), c10 = op(c10), c11 = op(c11), c12 = op(c12), c13 = op(c13), c14 = op(c14),        \
    c15 = op(c15)
#define PEAK_SUM(red)                                                                                            \
    (red(c0) + red(c1) + red(c2) + red(c3) + red(c4) + red(c5) + red(c6) + red(c7) + red(c8) + red(c9) +        \
     red(c10) + red(c11) + red(c12) + red(c13) + red(c14) + red(c15))

/* One loop: NAME(iters) in target TGT on vectors V made by SET1 (distinct accumulators: identical chains
 * would be computed once), each step OP(c) on each, summed by RED into a sink; returns its FLOPs at FLOPS
 * per instruction. */
#define PEAK_LOOP(NAME, TGT, V, SET1, OP, RED, FLOPS)                                                          \
    __attribute__((target(TGT))) static double NAME(long iters) {                                           \
        V c0 = SET1(1), c1 = SET1(2), c2 = SET1(3), c3 = SET1(4), c4 = SET1(5), c5 = SET1(6), c6 = SET1(7), \
          c7 = SET1(8), c8 = SET1(9), c9 = SET1(10), c10 = SET1(11), c11 = SET1(12), c12 = SET1(13),         \
          c13 = SET1(14), c14 = SET1(15), c15 = SET1(16);                                                    \
        for (long k = 0; k < iters; k++) PEAK_STEP(OP);                                                     \
        const float sink = PEAK_SUM(RED);                                                                   \
        __asm__ volatile("" ::"x"(sink));                                                                   \
        return (double)iters * 16 * (FLOPS);                                                                \
    }

#define S512(k) _mm512_set1_ps((float)(k))
#define S256(k) _mm256_set1_ps((float)(k))
/* c·(1 - 2⁻²⁰) + 2⁻²⁰: the sums stay near their start */
#define FMA512(c) _mm512_fmadd_ps(c, _mm512_set1_ps(0.99999905f), _mm512_set1_ps(9.5367432e-7f))
#define FMA256(c) _mm256_fmadd_ps(c, _mm256_set1_ps(0.99999905f), _mm256_set1_ps(9.5367432e-7f))
/* each lane += 1·2⁻²⁴ + 1·2⁻²⁴ (bf16 0x3F80 and 0x3380): 4M steps add 0.5 */
#define DOT(c) _mm512_dpbf16_ps(c, (__m512bh)_mm512_set1_epi16(0x3f80), (__m512bh)_mm512_set1_epi16(0x3380))

__attribute__((target("avx2,fma"))) static float sum256(__m256 v) {
    float x[8];
    _mm256_storeu_ps(x, v);
    return x[0] + x[1] + x[2] + x[3] + x[4] + x[5] + x[6] + x[7];
}

PEAK_LOOP(fma512, "avx512f,fma", __m512, S512, FMA512, _mm512_reduce_add_ps, 32)
PEAK_LOOP(fma256, "avx2,fma", __m256, S256, FMA256, sum256, 16)
PEAK_LOOP(dpbf16, "avx512f,avx512bf16", __m512, S512, DOT, _mm512_reduce_add_ps, 64)

/* ---------------------------------------------------------------- AMX */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* Whether this process may use AMX's tiles: the CPU has AMX-BF16 and the kernel grants the tile state. */
static int amx_usable(void) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 22 & 1) || !(d >> 24 & 1)) return 0;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

/* The tile configuration: palette 1, every tile 16 rows of 64 bytes. */
typedef struct __attribute__((aligned(64))) {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

/* Six accumulator tiles (0-5) += tile 6 · tile 7, TDPBF16PS after TDPBF16PS: no memory operand in the
 * loop. Each accumulator's chain is one instruction long per step; six chains cover the instruction's
 * latency at its issue rate (one every 16 cycles on Sapphire Rapids). */
__attribute__((target("amx-tile,amx-bf16"))) static double amx_loop(long iters) {
    amx_config cfg = {.palette = 1};
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
    static uint16_t src[16 * 32] __attribute__((aligned(64)));
    for (int i = 0; i < 16 * 32; i++) src[i] = 0x3380; /* 2⁻²⁴: the sums grow by 2⁻⁴³ a step */
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_zero(4);
    _tile_zero(5);
    _tile_loadd(6, src, 64);
    _tile_loadd(7, src, 64);
    for (long k = 0; k < iters; k++) {
        _tile_dpbf16ps(0, 6, 7);
        _tile_dpbf16ps(1, 6, 7);
        _tile_dpbf16ps(2, 6, 7);
        _tile_dpbf16ps(3, 6, 7);
        _tile_dpbf16ps(4, 6, 7);
        _tile_dpbf16ps(5, 6, 7);
    }
    float sink[16 * 16] __attribute__((aligned(64)));
    _tile_stored(0, sink, 64);
    _tile_release();
    __asm__ volatile("" ::"r"(sink) : "memory");
    return (double)iters * 6 * 16384.0;
}

/* The peak of fn per core with `threads` cores running it at once (a core's rate can depend on what the
 * others do: AMX's halves on a machine measured here when the other core is busy): the best of PEAK_RUNS
 * rounds, each timed between two barriers, after an untimed one (which also wakes the wide units). */
static double best_of(double (*fn)(long), long iters, int threads) {
    double best = 0, flops = 0, t0 = 0;
    (void)threads; /* without OpenMP: one thread */
#pragma omp parallel num_threads(threads) if (threads > 1)
    for (int r = 0; r <= PEAK_RUNS; r++) {
#pragma omp barrier
#pragma omp master
        t0 = nn_now();
        const double f = fn(r ? iters : iters / 2);
#pragma omp barrier
#pragma omp master
        {
            flops = f;
            const double g = flops / (nn_now() - t0);
            if (r && g > best) best = g;
        }
    }
    return best;
}

void collage_core_peak_measure(int threads, collage_core_peak *p) {
    *p = (collage_core_peak){0};
#ifdef _OPENMP
    if (threads > omp_get_num_procs()) threads = omp_get_num_procs();
#else
    threads = 1;
#endif
    if (threads < 1) threads = 1;
    __builtin_cpu_init();
    unsigned a = 0, b = 0, c = 0, d = 0; /* leaf 7.1: AVX512_BF16 (EAX 5) */
    __get_cpuid_count(7, 1, &a, &b, &c, &d);
    if (__builtin_cpu_supports("avx512f")) p->fma = best_of(fma512, PEAK_ITERS, threads), p->fma_bits = 512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        p->fma = best_of(fma256, PEAK_ITERS, threads), p->fma_bits = 256;
    if (__builtin_cpu_supports("avx512f") && (a >> 5 & 1)) p->bf16_dot = best_of(dpbf16, PEAK_ITERS, threads);
    if (amx_usable()) p->amx_bf16 = best_of(amx_loop, PEAK_ITERS / 16, threads);
    p->threads = threads;
}
