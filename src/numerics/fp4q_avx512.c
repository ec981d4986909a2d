/* fp4q_avx512.c — the 4-bit quantizer's loops (fp4q_kernel.inc) 16 lanes wide. Built with -mavx512f/bw/vl/dq; entered only when the CPU has
 * them (collage_get_isa). Without them (another target) the names run the reference. */
#include "fp4q.h"
#if defined(__x86_64__) && defined(__AVX512F__)
#define FP4Q_NAME(x) x##_avx512
#include "fp4q_kernel.inc"
#else
#define FP4Q_FWD_T(SUF, T)                                                                                     \
    uint32_t collage__fp4q_amax##SUF##_avx512(const T *x, int ld, int r0, int r1, int c0, int c1) {              \
        return collage__fp4q_amax##SUF##_ref(x, ld, r0, r1, c0, c1);                                         \
    }                                                                                                        \
    void collage__fp4q_blockmax##SUF##_avx512(const T *x, int n, int bc, uint32_t *m) {                          \
        collage__fp4q_blockmax##SUF##_ref(x, n, bc, m);                                                      \
    }                                                                                                        \
    void collage__fp4q_colmax##SUF##_avx512(const T *x, int ld, int r0, int r1, int c0, int c1, uint32_t *m) {   \
        collage__fp4q_colmax##SUF##_ref(x, ld, r0, r1, c0, c1, m);                                           \
    }                                                                                                        \
    void collage__fp4q_run##SUF##_avx512(int sr, const T *x, int n, float enc, float d, uint32_t k1, uint32_t k2, \
                                     uint32_t lo0, uint8_t *codes, uint16_t *vals) {                         \
        collage__fp4q_run##SUF##_ref(sr, x, n, enc, d, k1, k2, lo0, codes, vals);                            \
    }                                                                                                        \
    void collage__fp4q_run_blocks##SUF##_avx512(int sr, const T *x, int n, int bc, const float *enc, const float *d, \
                                            uint32_t k1, uint32_t k2, uint32_t lo0, uint8_t *codes, uint16_t *vals) { \
        collage__fp4q_run_blocks##SUF##_ref(sr, x, n, bc, enc, d, k1, k2, lo0, codes, vals);                     \
    }                                                                                                        \
    void collage__fp4q_run_cols##SUF##_avx512(int sr, const T *x, int n, const float *enc, const float *d,       \
                                          uint32_t k1, uint32_t k2, uint32_t lo0, uint8_t *codes,            \
                                          uint16_t *vals) {                                                  \
        collage__fp4q_run_cols##SUF##_ref(sr, x, n, enc, d, k1, k2, lo0, codes, vals);                       \
    }
FP4Q_FWD_T(_f32, float)
FP4Q_FWD_T(_bf16, uint16_t)
void collage__fp4q_round_row_avx512(int sr, const float *y, const uint32_t *r, int n, uint8_t *codes,
                                uint32_t *bits) {
    collage__fp4q_round_row_ref(sr, y, r, n, codes, bits);
}
#endif
