/* rn_cost.c — what one bf16 rounding costs on this CPU, the emulated way the kernel does it and with
 * the AVX512_BF16 conversion, and whether that conversion is the kernel's rounding
 * (its figures: docs/benchmarks.md, roundings on Zen 4; docs/optimizer-kernel.md).
 *
 *   cc -O2 -ffp-contract=off -o /tmp/rn_cost scripts/rn_cost.c && /tmp/rn_cost
 *
 * (-ffp-contract=off as for the library: contracted, γ − x becomes one fused x·(2^16 + 1) − x, and the split
 * is no longer a rounding: part 3 then reports differences at nearly every normal pattern.)
 *
 * 1. Exhaustive check (AVX512_BF16 only): VCVTNE2PS2BF16 against the kernel's integer rounding
 *    (round to nearest even on the bit pattern, adamw_kernel.inc rn()) on all 2^32 fp32 patterns,
 *    counting the patterns where they differ by class. The instruction treats denormal inputs as
 *    zero and quiets signalling NaNs, and rn() is not meant for NaNs with nonzero low 16 bits (its
 *    inputs in the kernel never are: see adamw_kernel.inc); everywhere else they should agree.
 * 2. Throughput, in core cycles per rounding: each loop iteration rounds 16 independent vectors, each
 *    after one fp32 multiply or add (as in the kernel, where every rounding follows one operation);
 *    the cost of the multiplies and adds alone is measured and subtracted. Core cycles come from the
 *    time-stamp counter scaled by a calibration loop of dependent scalar adds (one cycle each).
 *    Variants: the kernel's rn() (add, test-mask, masked add, and: 4 instructions), rn_nt() (round
 *    half up, 2 instructions: valid only where no tie can occur), and the hardware conversion of two
 *    vectors at once (VCVTNE2PS2BF16) expanded back to fp32 lanes by two word permutes (VPERMW), bare
 *    and with the denormal test (VFPCLASSPS + KORW) that would make it exact; the one-vector
 *    conversion (VCVTNEPS2BF16) expanded by one VPERMW; the pair conversion unpacked by a shift and an
 *    AND into permuted lanes (no permute); and Veltkamp's split: γ = x·(2^16 + 1),
 *    hi = γ − (γ − x), three fp32 operations, which equals round-to-nearest-even to bf16 on normal x
 *    below 2^111 (part 3) but not on denormals or near overflow, so the kernel could use it only
 *    behind a range guard.
 * 3. Exhaustive check of Veltkamp's split against rn() on every non-negative finite fp32 pattern,
 *    the differences counted by exponent (rounding to nearest even is symmetric in the sign).
 * Figures vary from run to run on a shared machine by a few percent; compare within one run. */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <x86intrin.h>

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#define TGT_BF __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define ITERS 4000000L

TGT static inline __m512 rn_emul(__m512 x) {
    __m512i u = (__m512i)x;
    __m512i t = _mm512_add_epi32(u, _mm512_set1_epi32(0x7fff));
    __mmask16 odd = _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x10000));
    t = _mm512_mask_add_epi32(t, odd, u, _mm512_set1_epi32(0x8000));
    return (__m512)_mm512_and_si512(t, _mm512_set1_epi32((int)0xffff0000u));
}
TGT static inline __m512 rn_half_up(__m512 x) {
    __m512i t = _mm512_add_epi32((__m512i)x, _mm512_set1_epi32(0x8000));
    return (__m512)_mm512_and_si512(t, _mm512_set1_epi32((int)0xffff0000u));
}

/* Veltkamp's split: the high part of x on 24 − 16 = 8 significant bits. */
TGT static inline __m512 rn_veltkamp(__m512 x) {
    __m512 g = _mm512_mul_ps(x, _mm512_set1_ps(65537.0f));
    return _mm512_sub_ps(g, _mm512_sub_ps(g, x));
}

static double core_per_tsc(void) {
    uint64_t x = 0, t = __rdtsc();
    for (long i = 0; i < 20000000L; i++)
        __asm__ volatile("add $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\t"
                         "add $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0" : "+r"(x));
    return 10.0 * 20000000.0 / (double)(__rdtsc() - t);
}

/* run_emul mode 0: operations only; 1: rn_emul; 2: rn_half_up; 3: rn_veltkamp */
#define BODY(ROUND_PAIR)                                                                      \
    for (long it = 0; it < ITERS; it++) {                                                     \
        _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) {                                 \
            __m512 x = _mm512_mul_ps(a[j], c), y = _mm512_add_ps(b[j], d);                    \
            ROUND_PAIR;                                                                       \
        }                                                                                     \
    }
#define SETUP                                                                                 \
    __m512 a[8], b[8];                                                                        \
    for (int j = 0; j < 8; j++) { a[j] = _mm512_set1_ps(1.0f + 0.37f * (float)j); b[j] = _mm512_set1_ps(1.5f + 0.11f * (float)j); } \
    const __m512 c = _mm512_set1_ps(1.0001f), d = _mm512_set1_ps(0.0001f);                   \
    uint64_t t0 = __rdtsc();
#define FINISH                                                                                \
    uint64_t t1 = __rdtsc();                                                                  \
    __m512 s = _mm512_setzero_ps();                                                           \
    for (int j = 0; j < 8; j++) s = _mm512_add_ps(s, _mm512_add_ps(a[j], b[j]));             \
    volatile float sink = _mm512_reduce_add_ps(s); (void)sink;                                \
    return (double)(t1 - t0) / (double)(ITERS * 16);

TGT static double run_emul(int mode) {
    SETUP
    if (mode == 0) BODY(a[j] = x; b[j] = y)
    else if (mode == 1) BODY(a[j] = rn_emul(x); b[j] = rn_emul(y))
    else if (mode == 2) BODY(a[j] = rn_half_up(x); b[j] = rn_half_up(y))
    else BODY(a[j] = rn_veltkamp(x); b[j] = rn_veltkamp(y))
    FINISH
}
/* check 0: the pair conversion bare; 1: with the denormal test; 2: one vector at a time, one VPERMW each;
 * 3: the pair conversion unpacked by a shift and an AND: the words come back in fp32 lanes
 * but permuted (lane k of the first output holds element 2k of the pair, of the second 2k + 1), so a
 * kernel would have to track each value's lane order through its chain */
TGT_BF static double run_hw(int check, int *bad_out) {
    const __m512i ia = _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0, 7, 0, 6, 0, 5, 0, 4, 0,
                                        3, 0, 2, 0, 1, 0, 0, 0);
    const __m512i ib = _mm512_add_epi16(ia, _mm512_set1_epi16(16));
    __mmask16 bad = 0;
    SETUP
    if (!check)
        BODY(__m512i r = (__m512i)_mm512_cvtne2ps_pbh(y, x);
             a[j] = (__m512)_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, ia, r);
             b[j] = (__m512)_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, ib, r))
    else if (check == 3)
        BODY(__m512i r = (__m512i)_mm512_cvtne2ps_pbh(y, x);
             a[j] = (__m512)_mm512_slli_epi32(r, 16);
             b[j] = (__m512)_mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u)))
    else if (check == 2)
        BODY(__m512i ra = _mm512_castsi256_si512((__m256i)_mm512_cvtneps_pbh(x));
             __m512i rb = _mm512_castsi256_si512((__m256i)_mm512_cvtneps_pbh(y));
             a[j] = (__m512)_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, ia, ra);
             b[j] = (__m512)_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, ia, rb))
    else
        BODY(__m512i r = (__m512i)_mm512_cvtne2ps_pbh(y, x);
             bad |= _mm512_fpclass_ps_mask(x, 0x20) | _mm512_fpclass_ps_mask(y, 0x20);
             a[j] = (__m512)_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, ia, r);
             b[j] = (__m512)_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, ib, r))
    *bad_out = bad;
    FINISH
}

/* All 2^32 patterns: the hardware conversion against the emulation, differences by class. */
TGT_BF static void exhaustive(void) {
    uint64_t diff_denorm = 0, diff_snan = 0, diff_qnan = 0, diff_other = 0, denorm = 0;
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    for (uint64_t b = 0; b < (1ull << 32); b += 32) {
        __m512i u0 = _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)b), lane);
        __m512i u1 = _mm512_add_epi32(u0, _mm512_set1_epi32(16));
        __m512i hw = (__m512i)_mm512_cvtne2ps_pbh((__m512)u1, (__m512)u0); /* words: u0's, then u1's */
        __m512i em = _mm512_or_si512(_mm512_srli_epi32((__m512i)rn_emul((__m512)u0), 16),
                                     _mm512_and_si512((__m512i)rn_emul((__m512)u1), _mm512_set1_epi32((int)0xffff0000u)));
        /* em holds u0's words in the low halves and u1's in the high halves of each dword: reorder hw */
        const __m512i perm = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                              21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
        __m512i hwi = _mm512_permutexvar_epi16(perm, hw);
        __mmask32 ne = _mm512_cmpneq_epi16_mask(hwi, em);
        if (!ne) continue;
        uint16_t hv[32], ev[32];
        _mm512_storeu_si512(hv, hwi);
        _mm512_storeu_si512(ev, em);
        for (int w = 0; w < 32; w++) {
            if (!(ne >> w & 1)) continue;
            uint32_t x = (uint32_t)b + (uint32_t)(w & 1 ? 16 + w / 2 : w / 2);
            uint32_t e = x >> 23 & 0xff, f = x & 0x7fffff;
            if (e == 0 && f) diff_denorm++;
            else if (e == 0xff && f && !(f & 0x400000)) diff_snan++;
            else if (e == 0xff && f && (x & 0xffff)) diff_qnan++; /* outside rn()'s contract */
            else diff_other++;
        }
    }
    for (uint64_t x = 0; x < (1ull << 32); x++) denorm += ((x >> 23 & 0xff) == 0 && (x & 0x7fffff));
    printf("exhaustive: VCVTNE2PS2BF16 vs the kernel's rn() on all 2^32 patterns: %llu differ at denormal inputs "
           "(of %llu denormals), %llu at signalling NaNs, %llu at quiet NaNs with nonzero low 16 bits (which rn() "
           "does not take), %llu elsewhere\n",
           (unsigned long long)diff_denorm, (unsigned long long)denorm, (unsigned long long)diff_snan,
           (unsigned long long)diff_qnan, (unsigned long long)diff_other);
}

/* Every non-negative finite pattern below +Inf: Veltkamp's split against rn(), differences by exponent. */
TGT static void exhaustive_veltkamp(void) {
    uint64_t diff[256] = {0}, ties[256] = {0};
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    for (uint32_t b = 0; b < 0x7f800000u; b += 16) {
        __m512i u = _mm512_add_epi32(_mm512_set1_epi32((int)b), lane);
        __mmask16 ne = _mm512_cmpneq_epi32_mask((__m512i)rn_veltkamp((__m512)u), (__m512i)rn_emul((__m512)u));
        for (int l = 0; ne; l++, ne >>= 1)
            if (ne & 1) {
                uint32_t x = b + (uint32_t)l;
                diff[x >> 23]++;
                ties[x >> 23] += (x & 0xffffu) == 0x8000u;
            }
    }
    uint64_t normal = 0, ties_all = 0;
    int lo = 256, hi = -1;
    for (int e = 1; e < 255; e++)
        if (diff[e]) { normal += diff[e]; lo = e < lo ? e : lo; hi = e > hi ? e : hi; }
    for (int e = 0; e < 256; e++) ties_all += ties[e];
    printf("exhaustive: Veltkamp's split vs rn() on the 2^31 - 2^23 non-negative finite patterns: %llu differ among the "
           "denormals (of 2^23 - 1), %llu among the normals",
           (unsigned long long)diff[0], (unsigned long long)normal);
    if (normal)
        printf(", at biased exponents %d to %d (x >= 2^%d), %llu of all the differences at ties", lo, hi, lo - 127,
               (unsigned long long)ties_all);
    printf("\n");
}

int main(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512bw")) { fprintf(stderr, "rn_cost: this CPU has no AVX-512\n"); return 1; }
    int bf = __builtin_cpu_supports("avx512bf16");
    double k = core_per_tsc();
    printf("core cycles per TSC tick: %.3f; AVX512_BF16: %s\n", k, bf ? "yes" : "no");
    if (bf) exhaustive();
    exhaustive_veltkamp();
    double base = run_emul(0) * k;
    printf("one fp32 op alone:                          %.2f cycles per vector\n", base);
    printf("kernel rn() (4 instructions):               %.2f cycles per rounding\n", run_emul(1) * k - base);
    printf("round half up (2 instructions, no ties):    %.2f cycles per rounding\n", run_emul(2) * k - base);
    printf("Veltkamp's split (3 fp32 ops, normal x):    %.2f cycles per rounding\n", run_emul(3) * k - base);
    if (bf) {
        int bad;
        printf("VCVTNE2PS2BF16 + 2 VPERMW (DAZ, not exact): %.2f cycles per rounding\n", run_hw(0, &bad) * k - base);
        printf("  the same + denormal test (exact):         %.2f cycles per rounding\n", run_hw(1, &bad) * k - base);
        printf("VCVTNEPS2BF16 + 1 VPERMW (one vector, DAZ): %.2f cycles per rounding\n", run_hw(2, &bad) * k - base);
        printf("VCVTNE2PS2BF16 + shift + and (permuted): %.2f cycles per rounding\n", run_hw(3, &bad) * k - base);
    }
    return 0;
}
