/* lowp_x86.c — AVX2 and AVX-512 row kernels for the hot conversions (fp32 ↔ bf16, fp32 ↔ fp16,
 * RN and SR). Each computes exactly what the scalar reference in lowp.c computes, bit for bit (tested
 * on all 2^32 fp32 inputs); lanes the vector formula does not cover fall back to the scalar code.
 * Compiled with per-function target attributes, chosen at run time by rows.c. */
#include "internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>

#define T_AVX2 __attribute__((target("avx2,fma,f16c")))
#define T_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

/* F16C from CPUID (leaf 1, ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c". */
static int cpu_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1u);
}
int collage__cpu_has_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && cpu_has_f16c() && __builtin_cpu_supports("fma");
}
int collage__cpu_has_avx512(void) {
    __builtin_cpu_init();
    return collage__cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}

/* ------------------------------------------------------------------ AVX2 */
/* lowbias32 on 8 lanes; identical to the scalar one (mullo keeps the low 32 bits). */
T_AVX2 static inline __m256i lowbias32_8(__m256i x) {
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7feb352d));
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32((int)0x846ca68bu));
    return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}
T_AVX2 static inline __m256i rand_8(uint32_t k1, uint32_t k2, uint32_t lo) {
    __m256i idx = _mm256_add_epi32(_mm256_set1_epi32((int)lo), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i x = _mm256_xor_si256(idx, _mm256_set1_epi32((int)k1));
    return lowbias32_8(_mm256_add_epi32(x, _mm256_set1_epi32((int)k2)));
}
/* 8 fp32 bit patterns → 8 bf16 in the low halves of 32-bit lanes. sr: add (r >> 16) instead of RN. */
T_AVX2 static inline __m256i bf16_8(__m256i u, __m256i add) {
    __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    __m256i isnan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
    __m256i special = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f7fffff));
    __m256i hi = _mm256_srli_epi32(u, 16);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, add), 16);
    __m256i sp = _mm256_or_si256(hi, _mm256_and_si256(isnan, _mm256_set1_epi32(0x40)));
    return _mm256_blendv_epi8(r, sp, special);
}
T_AVX2 static inline __m256i rn_add_8(__m256i u) {
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    return _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff));
}
T_AVX2 static inline void store_pack16(uint16_t *dst, __m256i a, __m256i b) {
    __m256i p = _mm256_packus_epi32(a, b); /* lanes: a0-3 b0-3 a4-7 b4-7 */
    _mm256_storeu_si256((__m256i *)dst, _mm256_permute4x64_epi64(p, 0xd8));
}

T_AVX2 void collage__bf16_from_f32_avx2(uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(src + i + 8));
        store_pack16(dst + i, bf16_8(a, rn_add_8(a)), bf16_8(b, rn_add_8(b)));
    }
    for (; i < n; i++) dst[i] = bf16_rn_bits(src[i]);
}

T_AVX2 void collage__bf16_from_f32_sr_avx2(uint16_t *dst, const float *src, size_t n, uint64_t key, uint64_t i0) {
    uint32_t k1 = rand_k1(key, (uint32_t)(i0 >> 32)), k2 = rand_k2(key), lo = (uint32_t)i0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(src + i + 8));
        __m256i ra = _mm256_srli_epi32(rand_8(k1, k2, lo + (uint32_t)i), 16);
        __m256i rb = _mm256_srli_epi32(rand_8(k1, k2, lo + (uint32_t)i + 8), 16);
        store_pack16(dst + i, bf16_8(a, ra), bf16_8(b, rb));
    }
    for (; i < n; i++) dst[i] = bf16_sr_bits(src[i], rand_bits(k1, k2, lo + (uint32_t)i));
}

T_AVX2 void collage__bf16_to_f32_avx2(float *dst, const uint16_t *src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i h = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i a = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(h)), 16);
        __m256i b = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1)), 16);
        _mm256_storeu_si256((__m256i *)(dst + i), a);
        _mm256_storeu_si256((__m256i *)(dst + i + 8), b);
    }
    for (; i < n; i++) dst[i] = bf16_f32(src[i]);
}

T_AVX2 void collage__fp16_from_f32_avx2(uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) dst[i] = collage__lp_enc_f32(COLLAGE_FMT_FP16, src[i], LP_RN, 0);
}

/* SR for fp16 in the vector unit covers ±0 and fp16's normal range [2^-14, 65504], where exactly 13
 * fp32 fraction bits are dropped: add the top 13 bits of r, then convert toward zero. */
T_AVX2 void collage__fp16_from_f32_sr_avx2(uint16_t *dst, const float *src, size_t n, uint64_t key, uint64_t i0) {
    uint32_t k1 = rand_k1(key, (uint32_t)(i0 >> 32)), k2 = rand_k2(key), lo = (uint32_t)i0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
        __m256i lo_ok = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x387fffff));
        __m256i hi_ok = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x477fe001), abs);
        __m256i zero = _mm256_cmpeq_epi32(abs, _mm256_setzero_si256());
        __m256i ok = _mm256_or_si256(_mm256_and_si256(lo_ok, hi_ok), zero);
        if (_mm256_movemask_epi8(ok) != -1) {
            for (size_t j = i; j < i + 8; j++)
                dst[j] = collage__lp_enc_f32(COLLAGE_FMT_FP16, src[j], LP_SR, rand_bits(k1, k2, lo + (uint32_t)j));
            continue;
        }
        __m256i r = _mm256_srli_epi32(rand_8(k1, k2, lo + (uint32_t)i), 19);
        __m256 y = _mm256_castsi256_ps(_mm256_add_epi32(u, r));
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(y, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC));
    }
    for (; i < n; i++)
        dst[i] = collage__lp_enc_f32(COLLAGE_FMT_FP16, src[i], LP_SR, rand_bits(k1, k2, lo + (uint32_t)i));
}

T_AVX2 void collage__fp16_to_f32_avx2(float *dst, const uint16_t *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = collage__lp_dec(COLLAGE_FMT_FP16, src[i]);
}

/* ------------------------------------------------------------------ AVX-512 */
T_AVX512 static inline __m512i lowbias32_16(__m512i x) {
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32(0x7feb352d));
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32((int)0x846ca68bu));
    return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
}
T_AVX512 static inline __m512i rand_16(uint32_t k1, uint32_t k2, uint32_t lo) {
    __m512i idx = _mm512_add_epi32(_mm512_set1_epi32((int)lo),
                                   _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    __m512i x = _mm512_xor_si512(idx, _mm512_set1_epi32((int)k1));
    return lowbias32_16(_mm512_add_epi32(x, _mm512_set1_epi32((int)k2)));
}
T_AVX512 static inline __m256i bf16_16(__m512i u, __m512i add) {
    __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    __mmask16 isnan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
    __mmask16 special = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f7fffff));
    __m512i hi = _mm512_srli_epi32(u, 16);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, add), 16);
    r = _mm512_mask_mov_epi32(r, special, hi);
    r = _mm512_mask_or_epi32(r, isnan, r, _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(r);
}
T_AVX512 static inline __m512i rn_add_16(__m512i u) {
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    return _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff));
}

T_AVX512 void collage__bf16_from_f32_avx512(uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512i a = _mm512_loadu_si512(src + i), b = _mm512_loadu_si512(src + i + 16);
        _mm256_storeu_si256((__m256i *)(dst + i), bf16_16(a, rn_add_16(a)));
        _mm256_storeu_si256((__m256i *)(dst + i + 16), bf16_16(b, rn_add_16(b)));
    }
    for (; i < n; i += 16) {
        __mmask16 k = (n - i >= 16) ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
        __m512i a = _mm512_maskz_loadu_epi32(k, src + i);
        _mm256_mask_storeu_epi16(dst + i, k, bf16_16(a, rn_add_16(a)));
    }
}

T_AVX512 void collage__bf16_from_f32_sr_avx512(uint16_t *dst, const float *src, size_t n, uint64_t key, uint64_t i0) {
    uint32_t k1 = rand_k1(key, (uint32_t)(i0 >> 32)), k2 = rand_k2(key), lo = (uint32_t)i0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) { /* unmasked: masked stores are slow on some cores */
        __m512i a = _mm512_loadu_si512(src + i);
        __m512i r = _mm512_srli_epi32(rand_16(k1, k2, lo + (uint32_t)i), 16);
        _mm256_storeu_si256((__m256i *)(dst + i), bf16_16(a, r));
    }
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
        __m512i a = _mm512_maskz_loadu_epi32(k, src + i);
        __m512i r = _mm512_srli_epi32(rand_16(k1, k2, lo + (uint32_t)i), 16);
        _mm256_mask_storeu_epi16(dst + i, k, bf16_16(a, r));
    }
}

T_AVX512 void collage__bf16_to_f32_avx512(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = (n - i >= 16) ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
        __m256i h = _mm256_maskz_loadu_epi16(k, src + i);
        _mm512_mask_storeu_epi32(dst + i, k, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
}

T_AVX512 void collage__fp16_from_f32_avx512(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = (n - i >= 16) ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
        __m512 a = _mm512_maskz_loadu_ps(k, src + i);
        _mm256_mask_storeu_epi16(dst + i, k, _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
}

T_AVX512 void collage__fp16_from_f32_sr_avx512(uint16_t *dst, const float *src, size_t n, uint64_t key, uint64_t i0) {
    uint32_t k1 = rand_k1(key, (uint32_t)(i0 >> 32)), k2 = rand_k2(key), lo = (uint32_t)i0;
    for (size_t i = 0; i < n; i += 16) {
        size_t m = n - i >= 16 ? 16 : n - i;
        __mmask16 k = (__mmask16)(m == 16 ? 0xffffu : (1u << m) - 1u);
        __m512i u = m == 16 ? _mm512_loadu_si512(src + i) : _mm512_maskz_loadu_epi32(k, src + i);
        __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
        __mmask16 ok = (__mmask16)((_mm512_cmpge_epu32_mask(abs, _mm512_set1_epi32(0x38800000)) &
                                    _mm512_cmple_epu32_mask(abs, _mm512_set1_epi32(0x477fe000))) |
                                   _mm512_cmpeq_epi32_mask(abs, _mm512_setzero_si512()));
        if ((ok & k) != k) {
            for (size_t j = i; j < i + m; j++)
                dst[j] = collage__lp_enc_f32(COLLAGE_FMT_FP16, src[j], LP_SR, rand_bits(k1, k2, lo + (uint32_t)j));
            continue;
        }
        __m512i r = _mm512_srli_epi32(rand_16(k1, k2, lo + (uint32_t)i), 19);
        __m512 y = _mm512_castsi512_ps(_mm512_add_epi32(u, r));
        __m256i h = _mm512_cvtps_ph(y, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        if (m == 16) _mm256_storeu_si256((__m256i *)(dst + i), h);
        else _mm256_mask_storeu_epi16(dst + i, k, h);
    }
}

T_AVX512 void collage__fp16_to_f32_avx512(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = (n - i >= 16) ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
        __m256i h = _mm256_maskz_loadu_epi16(k, src + i);
        _mm512_mask_storeu_ps(dst + i, k, _mm512_cvtph_ps(h));
    }
}

/* ------------------------------------------------------------------ Σ x², 16 lanes */
/* Elements ahead of the one being summed that the loops ask the cache for: the sum's two dependent
 * chains leave a core's loads too few in flight to stream a gradient from memory at full speed (the
 * prefetch doubles it on a 124M-element slab; a prefetch never faults, past the end included). */
#define SUMSQ_AHEAD 2048
static inline const char *sumsq_ahead(const void *x, size_t i, size_t es) {
    return (const char *)((uintptr_t)x + (i + SUMSQ_AHEAD) * es);
}

/* l[j] += Σ_k x[a + 16k + j]² for k < groups, j < 16: the lanes of collage__sumsq_ref (adamw.c), each
 * square exact in double, so the lanes hold the same bits as the scalar loop's. */
T_AVX2 void collage__sumsq16_avx2(const void *x, int kind, size_t a, size_t groups, double l[16]) {
    __m256d acc[4];
    for (int q = 0; q < 4; q++) acc[q] = _mm256_loadu_pd(l + 4 * q);
    const size_t es = kind ? 2 : 4;
    for (size_t k = 0; k < groups; k++) {
        const size_t i = a + 16 * k;
        _mm_prefetch(sumsq_ahead(x, i, es), _MM_HINT_T0);
        __m256 f[2];
        if (kind == 2) { /* fp16: F16C widens exactly */
            const uint16_t *h = x;
            for (int p = 0; p < 2; p++) f[p] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i + 8 * p)));
        } else if (kind) {
            const uint16_t *h = x;
            for (int p = 0; p < 2; p++) {
                __m128i w = _mm_loadu_si128((const __m128i *)(h + i + 8 * p));
                f[p] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(w), 16));
            }
        } else {
            f[0] = _mm256_loadu_ps((const float *)x + i);
            f[1] = _mm256_loadu_ps((const float *)x + i + 8);
        }
        for (int q = 0; q < 4; q++) {
            __m256d d = _mm256_cvtps_pd(q & 1 ? _mm256_extractf128_ps(f[q >> 1], 1) : _mm256_castps256_ps128(f[q >> 1]));
            acc[q] = _mm256_add_pd(acc[q], _mm256_mul_pd(d, d));
        }
    }
    for (int q = 0; q < 4; q++) _mm256_storeu_pd(l + 4 * q, acc[q]);
}

T_AVX512 void collage__sumsq16_avx512(const void *x, int kind, size_t a, size_t groups, double l[16]) {
    __m512d lo = _mm512_loadu_pd(l), hi = _mm512_loadu_pd(l + 8);
    const size_t es = kind ? 2 : 4;
    for (size_t k = 0; k < groups; k++) {
        const size_t i = a + 16 * k;
        _mm_prefetch(sumsq_ahead(x, i, es), _MM_HINT_T0);
        const __m256i *h = (const __m256i *)((const uint16_t *)x + i);
        __m512 f = kind == 2 ? _mm512_cvtph_ps(_mm256_loadu_si256(h)) /* fp16: F16C widens exactly */
                   : kind ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(h)), 16))
                          : _mm512_loadu_ps((const float *)x + i);
        __m512d d0 = _mm512_cvtps_pd(_mm512_castps512_ps256(f));
        __m512d d1 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1)));
        lo = _mm512_add_pd(lo, _mm512_mul_pd(d0, d0));
        hi = _mm512_add_pd(hi, _mm512_mul_pd(d1, d1));
    }
    _mm512_storeu_pd(l, lo);
    _mm512_storeu_pd(l + 8, hi);
}

#else /* not x86-64: only the scalar kernels exist; rows.c never selects these */
int collage__cpu_has_avx2(void) { return 0; }
int collage__cpu_has_avx512(void) { return 0; }
#define NO_SIMD(name, ...) void name(__VA_ARGS__) { COLLAGE_ASSERT(!"no SIMD on this target"); }
NO_SIMD(collage__bf16_from_f32_avx2, uint16_t *d, const float *s, size_t n)
NO_SIMD(collage__bf16_from_f32_avx512, uint16_t *d, const float *s, size_t n)
NO_SIMD(collage__bf16_from_f32_sr_avx2, uint16_t *d, const float *s, size_t n, uint64_t k, uint64_t i)
NO_SIMD(collage__bf16_from_f32_sr_avx512, uint16_t *d, const float *s, size_t n, uint64_t k, uint64_t i)
NO_SIMD(collage__bf16_to_f32_avx2, float *d, const uint16_t *s, size_t n)
NO_SIMD(collage__bf16_to_f32_avx512, float *d, const uint16_t *s, size_t n)
NO_SIMD(collage__fp16_from_f32_avx2, uint16_t *d, const float *s, size_t n)
NO_SIMD(collage__fp16_from_f32_avx512, uint16_t *d, const float *s, size_t n)
NO_SIMD(collage__fp16_from_f32_sr_avx2, uint16_t *d, const float *s, size_t n, uint64_t k, uint64_t i)
NO_SIMD(collage__fp16_from_f32_sr_avx512, uint16_t *d, const float *s, size_t n, uint64_t k, uint64_t i)
NO_SIMD(collage__fp16_to_f32_avx2, float *d, const uint16_t *s, size_t n)
NO_SIMD(collage__fp16_to_f32_avx512, float *d, const uint16_t *s, size_t n)
NO_SIMD(collage__sumsq16_avx2, const void *x, int b, size_t a, size_t g, double l[16])
NO_SIMD(collage__sumsq16_avx512, const void *x, int b, size_t a, size_t g, double l[16])
#endif
