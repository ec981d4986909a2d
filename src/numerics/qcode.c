/* qcode.c — the 8-bit block codes (collage.h collage_qcode, numerics.md §11): the dynamic code's values
 * as the fp32 nearest to their decimal definition, its thresholds, the magnitude buckets its vector
 * quantizer reads, the block's scale, rounding a value to a code, and the public block and row calls
 * (the rows' vector twins are in the optimizer's kernel units, adamw_q8.inc). */
#include "qcode.h"
#include <math.h>
#include <pthread.h>

static q_tables g_qt;
static pthread_once_t g_qt_once = PTHREAD_ONCE_INIT;

/* The dynamic code's magnitudes in increasing order: for decades e = 0..6, n = 2^e intervals of [0.1, 1]
 * (2^(e+1) unsigned) and the midpoint of each, times 10^(e−6): (2n + 18j + 9) / (20n·10^(6−e)), j < n.
 * Each is the fp32 nearest to that rational: the quotient in 64-bit precision is never on the wrong side
 * of an fp32 midpoint (a nonzero distance to one is ≥ 2^-57 relative for a denominator < 2^32), so its
 * rounding to fp32 is the correct one (test_mpfr checks every value). Returns the count. */
static int dyn_magnitudes(int unsigned_code, float *out) {
    int k = 0;
    long double pow10 = 1e6L;
    for (int e = 0; e <= 6; e++, pow10 /= 10.0L) {
        const long n = 1L << (e + unsigned_code);
        for (long j = 0; j < n; j++)
            out[k++] = (float)((long double)(2 * n + 18 * j + 9) / ((long double)(20 * n) * pow10));
    }
    return k;
}

static void build_buckets(const float *P, int np, int32_t *below, float *bthr) {
    for (uint32_t b = 0; b < Q_NB; b++) {
        const float lo = b == 0 ? 0.0f : bits_f32((b - 1u + Q_B0) << 16);
        const float hi = b == Q_NB - 1u ? (float)INFINITY : bits_f32((b + Q_B0) << 16);
        int n_below = 0, inside = 0;
        bthr[b] = (float)INFINITY;
        for (int i = 0; i < np; i++) {
            if (P[i] < lo) n_below++;
            else if (P[i] < hi) { bthr[b] = P[i]; inside++; }
        }
        COLLAGE_ASSERT(inside <= 1);
        below[b] = n_below;
    }
}

static void build_tables(void) {
    float mag[254];
    for (int u = 0; u < 2; u++) {
        float *V = g_qt.value[u ? COLLAGE_QCODE_DYN_UNSIGNED : COLLAGE_QCODE_DYN_SIGNED];
        const int nm = dyn_magnitudes(u, mag);
        if (u) { /* 0, the 254 magnitudes, 1 */
            V[0] = 0.0f;
            for (int i = 0; i < nm; i++) V[1 + i] = mag[i];
        } else { /* −magnitudes (largest first), 0, +magnitudes, 1 */
            for (int i = 0; i < nm; i++) { V[126 - i] = -mag[i]; V[128 + i] = mag[i]; }
            V[127] = 0.0f;
        }
        V[255] = 1.0f;
        for (int k = 0; k < 255; k++) g_qt.thr[u][k] = (float)(((double)V[k] + (double)V[k + 1]) * 0.5);
        /* the positive thresholds the buckets count: the signed code's upper 128, all 255 unsigned */
        build_buckets(u ? g_qt.thr[1] : g_qt.thr[0] + 127, u ? 255 : 128, g_qt.below[u], g_qt.bthr[u]);
        /* and the positive values the stochastic rounding's search counts */
        build_buckets(u ? V + 1 : V + 128, u ? 255 : 128, g_qt.vbelow[u], g_qt.vbthr[u]);
    }
    for (int q = 0; q < 256; q++) g_qt.value[COLLAGE_QCODE_E4M3][q] = collage_lp_to_f32(COLLAGE_FMT_E4M3, (uint16_t)q);
}

const q_tables *collage__q_tables(void) {
    pthread_once(&g_qt_once, build_tables);
    return &g_qt;
}

const char *collage_qcode_name(collage_qcode c) {
    static const char *const names[COLLAGE_QCODE_COUNT] = {"int8", "uint8", "e4m3"};
    return (unsigned)c < COLLAGE_QCODE_COUNT ? names[c] : "unknown";
}
float collage_qcode_value(collage_qcode c, uint8_t q) {
    return (unsigned)c < COLLAGE_QCODE_COUNT ? collage__q_tables()->value[c][q] : (float)NAN;
}
uint8_t collage_qcode_zero(collage_qcode c) { return c == COLLAGE_QCODE_DYN_SIGNED ? 127 : 0; }

int collage__q_scale(collage_qcode c, float absmax, int has_nan, float *scale, float *recip) {
    *recip = 0.0f;
    if (has_nan) { *scale = bits_f32(0x7fc00000u); return 0; }
    if (absmax == (float)INFINITY) { *scale = absmax; return 0; }
    if (absmax < 0x1p-100f) { *scale = 0.0f; return 0; }
    if (c == COLLAGE_QCODE_E4M3) { *scale = absmax / 448.0f; *recip = 448.0f / absmax; }
    else { *scale = absmax; *recip = 1.0f / absmax; }
    return 1;
}

/* #{k : thr[k] < y} over the 255 sorted thresholds: the code to nearest, a value on a threshold taking
 * the lower code (NaN: 0). A binary search without branches on the data (the count grows by 128, 64,
 * …, 1 where the threshold just below it is below y): a data-dependent branch would be mispredicted
 * half of the time. */
static uint8_t dyn_count_below(const float *thr, float y) {
    int lo = 0;
    for (int step = 128; step; step >>= 1) lo += (thr[lo + step - 1] < y) ? step : 0;
    return (uint8_t)lo;
}

uint8_t collage__q_code_rn(const q_tables *T, collage_qcode c, float y) {
    if (c == COLLAGE_QCODE_E4M3) return (uint8_t)collage_lp_from_f32_sat(COLLAGE_FMT_E4M3, fminf(fmaxf(y, -448.0f), 448.0f));
    return dyn_count_below(T->thr[c == COLLAGE_QCODE_DYN_UNSIGNED], fminf(fmaxf(y, -1.0f), 1.0f));
}

uint8_t collage__q_code_sr(const q_tables *T, collage_qcode c, float y, uint32_t r) {
    if (c == COLLAGE_QCODE_E4M3) return (uint8_t)collage_lp_from_f32_sr(COLLAGE_FMT_E4M3, fminf(fmaxf(y, -448.0f), 448.0f), r);
    const float *V = T->value[c];
    y = fminf(fmaxf(y, V[0]), 1.0f);
    int lo = 0; /* the last code whose value is ≤ y (V increasing, V[0] ≤ y): branch-free as above */
    for (int step = 128; step; step >>= 1) lo += (V[lo + step] <= y) ? step : 0;
    if (lo == 255 || V[lo] == y) return (uint8_t)lo;
    const float p = (y - V[lo]) / (V[lo + 1] - V[lo]); /* in (0, 1) */
    return (uint8_t)(lo + ((double)r < (double)p * 4294967296.0));
}

collage_status collage_qblock_quantize(collage_qcode c, const float *x, size_t n, uint8_t *q, float *scale, int sr,
                                       uint64_t key, uint64_t index0) {
    if (!x || !q || !scale) return COLLAGE_ERR_NULL;
    if ((unsigned)c >= COLLAGE_QCODE_COUNT || (sr != 0 && sr != 1)) return COLLAGE_ERR_ARG;
    if (n == 0 || n > COLLAGE_QBLOCK) return COLLAGE_ERR_SIZE;
    const q_tables *T = collage__q_tables();
    float amax = 0.0f, recip;
    int has_nan = 0;
    for (size_t i = 0; i < n; i++) {
        const float a = fabsf(x[i]);
        has_nan |= a != a;
        amax = a > amax ? a : amax;
    }
    if (!collage__q_scale(c, amax, has_nan, scale, &recip)) {
        memset(q, collage_qcode_zero(c), n);
        return COLLAGE_OK;
    }
    for (size_t i = 0; i < n; i++) {
        const float y = x[i] * recip;
        q[i] = sr ? collage__q_code_sr(T, c, y, collage_rand32(key, index0 + i)) : collage__q_code_rn(T, c, y);
    }
    return COLLAGE_OK;
}

collage_status collage_qblock_dequantize(collage_qcode c, const uint8_t *q, float scale, size_t n, float *x) {
    if (!q || !x) return COLLAGE_ERR_NULL;
    if ((unsigned)c >= COLLAGE_QCODE_COUNT) return COLLAGE_ERR_ARG;
    if (n == 0 || n > COLLAGE_QBLOCK) return COLLAGE_ERR_SIZE;
    const float *V = collage__q_tables()->value[c];
    for (size_t i = 0; i < n; i++) x[i] = V[q[i]] * scale;
    return COLLAGE_OK;
}

/* ------------------------------------------------------------------ rows */
static collage_status row_check(collage_qcode c, const void *a, const void *b, const float *s, size_t n, int sr) {
    if (n == 0) return COLLAGE_OK;
    if (!a || !b || !s) return COLLAGE_ERR_NULL;
    if ((unsigned)c >= COLLAGE_QCODE_COUNT || (sr != 0 && sr != 1)) return COLLAGE_ERR_ARG;
    return COLLAGE_OK;
}

collage_status collage_qrow_quantize_ref(collage_qcode c, const float *x, size_t n, uint8_t *q, float *scales, int sr,
                                         uint64_t key, uint64_t index0) {
    collage_status st = row_check(c, x, q, scales, n, sr);
    for (size_t b = 0; st == COLLAGE_OK && b * COLLAGE_QBLOCK < n; b++) {
        const size_t a = b * COLLAGE_QBLOCK, len = n - a < COLLAGE_QBLOCK ? n - a : COLLAGE_QBLOCK;
        st = collage_qblock_quantize(c, x + a, len, q + a, &scales[b], sr, key, index0 + a);
    }
    return st;
}

collage_status collage_qrow_dequantize_ref(collage_qcode c, const uint8_t *q, const float *scales, size_t n, float *x) {
    collage_status st = row_check(c, q, x, scales, n, 0);
    for (size_t b = 0; st == COLLAGE_OK && b * COLLAGE_QBLOCK < n; b++) {
        const size_t a = b * COLLAGE_QBLOCK, len = n - a < COLLAGE_QBLOCK ? n - a : COLLAGE_QBLOCK;
        st = collage_qblock_dequantize(c, q + a, scales[b], len, x + a);
    }
    return st;
}

/* The vector rows: whole blocks per call, threaded over blocks, to nearest or stochastically (the
 * vector twins in the kernel units; the scalar steps without AVX2). */
collage_status collage_qrow_quantize(collage_qcode c, const float *x, size_t n, uint8_t *q, float *scales, int sr,
                                     uint64_t key, uint64_t index0) {
    collage_status st = row_check(c, x, q, scales, n, sr);
    if (st != COLLAGE_OK || n == 0) return st;
    const collage_isa isa = collage_get_isa();
    const long nb = (long)((n + COLLAGE_QBLOCK - 1) / COLLAGE_QBLOCK);
    const int nt = collage__threads();
    (void)nt; /* unused without OpenMP */
#pragma omp parallel for schedule(static) num_threads(nt) if (nb >= 64)
    for (long b = 0; b < nb; b++) {
        const size_t a = (size_t)b * COLLAGE_QBLOCK, len = n - a < COLLAGE_QBLOCK ? n - a : COLLAGE_QBLOCK;
        if (isa == COLLAGE_ISA_AVX512) collage__qblock_quantize_avx512(c, x + a, len, q + a, &scales[b], sr, key, index0 + a);
        else if (isa == COLLAGE_ISA_AVX2) collage__qblock_quantize_avx2(c, x + a, len, q + a, &scales[b], sr, key, index0 + a);
        else collage_qblock_quantize(c, x + a, len, q + a, &scales[b], sr, key, index0 + a);
    }
    return COLLAGE_OK;
}

collage_status collage_qrow_dequantize(collage_qcode c, const uint8_t *q, const float *scales, size_t n, float *x) {
    collage_status st = row_check(c, q, x, scales, n, 0);
    if (st != COLLAGE_OK || n == 0) return st;
    const collage_isa isa = collage_get_isa();
    const long nb = (long)((n + COLLAGE_QBLOCK - 1) / COLLAGE_QBLOCK);
    const int nt = collage__threads();
    (void)nt;
#pragma omp parallel for schedule(static) num_threads(nt) if (nb >= 64)
    for (long b = 0; b < nb; b++) {
        const size_t a = (size_t)b * COLLAGE_QBLOCK, len = n - a < COLLAGE_QBLOCK ? n - a : COLLAGE_QBLOCK;
        if (isa == COLLAGE_ISA_AVX512) collage__qblock_dequantize_avx512(c, q + a, scales[b], len, x + a);
        else if (isa == COLLAGE_ISA_AVX2) collage__qblock_dequantize_avx2(c, q + a, scales[b], len, x + a);
        else collage_qblock_dequantize(c, q + a, scales[b], len, x + a);
    }
    return COLLAGE_OK;
}
