/* fp4h.c — the 16×16 random Hadamard transform of the 4-bit recipes (fp4q.h, numerics.md §15): groups of 16
 * elements along a product's K multiplied by (1/4)·H16·D (D the seeded random signs) in a fixed order of
 * fp32 operations, down columns (a row of vectors at a time) or along rows. */
#include "fp4q.h"

uint16_t collage__fp4_rht_signs(uint64_t key) {
    uint16_t m = 0;
    for (int j = 0; j < COLLAGE_FP4_RHT; j++) m = (uint16_t)(m | ((collage_rand32(key, (uint64_t)j) >> 31) << j));
    return m;
}

/* One group of 16 values z[j·st] in place, as collage__fp4_rht's contract (st: the stride between them). */
static void rht16(uint16_t signs, int inverse, float *z, size_t st) {
    if (!inverse)
        for (int j = 0; j < 16; j++)
            if (signs >> j & 1) z[j * st] = -z[j * st];
    for (int h = 1; h < 16; h <<= 1)
        for (int i = 0; i < 16; i++)
            if (!(i & h)) {
                const float a = z[i * st], b = z[(i + h) * st];
                z[i * st] = a + b, z[(i + h) * st] = a - b;
            }
    for (int j = 0; j < 16; j++) z[j * st] = 0.25f * z[j * st];
    if (inverse)
        for (int j = 0; j < 16; j++)
            if (signs >> j & 1) z[j * st] = -z[j * st];
}

static inline float load(const float *xf, const uint16_t *xb, size_t i) { return xb ? bf16_f32(xb[i]) : xf[i]; }

/* Down columns: group g's 16 rows over columns [c0, c0 + n), the butterflies a vector of columns at a time. */
#define RHT_CHUNK 64
static void rht_cols(uint16_t signs, int inverse, const float *xf, const uint16_t *xb, int ld, int r0, int c0, int n,
                     float *y, int ldy) {
    float z[16][RHT_CHUNK];
    for (int j = 0; j < 16; j++) {
        const size_t o = (size_t)(r0 + j) * ld + c0;
        const float sg = !inverse && (signs >> j & 1) ? -1.0f : 1.0f;
        for (int c = 0; c < n; c++) z[j][c] = sg * load(xf, xb, o + c);
    }
    for (int h = 1; h < 16; h <<= 1)
        for (int i = 0; i < 16; i++)
            if (!(i & h)) {
                float *a = z[i], *b = z[i + h];
#pragma omp simd
                for (int c = 0; c < n; c++) {
                    const float s = a[c] + b[c], d = a[c] - b[c];
                    a[c] = s, b[c] = d;
                }
            }
    for (int j = 0; j < 16; j++) {
        const float sg = inverse && (signs >> j & 1) ? -1.0f : 1.0f;
        float *out = y + (size_t)(r0 + j) * ldy + c0;
#pragma omp simd
        for (int c = 0; c < n; c++) out[c] = sg * (0.25f * z[j][c]);
    }
}

void collage__fp4_rht(uint16_t signs, int inverse, const float *xf, const uint16_t *xb, int rows, int cols, int ld,
                      int k_axis, float *y, int ldy, int nt) {
    (void)nt; /* OpenMP off */
    if (k_axis == 0) {
        const int groups = rows / 16, chunks = (cols + RHT_CHUNK - 1) / RHT_CHUNK;
#pragma omp parallel for schedule(static) num_threads(nt) if ((size_t)rows * cols >= 32768)
        for (int t = 0; t < groups * chunks; t++) {
            const int g = t / chunks, c0 = (t % chunks) * RHT_CHUNK;
            rht_cols(signs, inverse, xf, xb, ld, 16 * g, c0, cols - c0 < RHT_CHUNK ? cols - c0 : RHT_CHUNK, y, ldy);
        }
        for (int r = 16 * groups; r < rows; r++)
            for (int c = 0; c < cols; c++) y[(size_t)r * ldy + c] = load(xf, xb, (size_t)r * ld + c);
        return;
    }
    const int whole = cols / 16 * 16;
#pragma omp parallel for schedule(static) num_threads(nt) if ((size_t)rows * cols >= 32768)
    for (int r = 0; r < rows; r++) {
        float *out = y + (size_t)r * ldy;
        for (int c = 0; c < cols; c++) out[c] = load(xf, xb, (size_t)r * ld + c);
        for (int c0 = 0; c0 < whole; c0 += 16) rht16(signs, inverse, out + c0, 1);
    }
}
