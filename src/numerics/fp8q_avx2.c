/* fp8q_avx2.c — the fp8 quantizer's loops (fp8q_kernel.inc) 8 lanes wide. Built with -mavx2; entered only
 * when the CPU has them (collage_get_isa). Without them (another target) the names run the reference. */
#include "fp8q.h"
#if defined(__x86_64__) && defined(__AVX2__)
#define FP8Q_NAME(x) x##_avx2
#include "fp8q_kernel.inc"
#else
unsigned collage__fp8q_amax_avx2(const uint16_t *x, int ld, int r0, int r1, int c0, int c1) {
    return collage__fp8q_amax_ref(x, ld, r0, r1, c0, c1);
}
void collage__fp8q_colmax_avx2(const uint16_t *x, int ld, int r0, int r1, int c0, int c1, uint16_t *m) {
    collage__fp8q_colmax_ref(x, ld, r0, r1, c0, c1, m);
}
void collage__fp8q_run_avx2(int e5m2, const uint16_t *x, int n, float s, float inv, uint8_t *codes, uint16_t *vals,
                            int dequant) {
    collage__fp8q_run_ref(e5m2, x, n, s, inv, codes, vals, dequant);
}
void collage__fp8q_run_cols_avx2(int e5m2, const uint16_t *x, int n, const float *s, const float *inv, uint8_t *codes,
                                 uint16_t *vals, int dequant) {
    collage__fp8q_run_cols_ref(e5m2, x, n, s, inv, codes, vals, dequant);
}
void collage__fp8q_sat_row_avx2(int e5m2, const float *y, int n, uint8_t *codes) {
    collage__fp8q_sat_row_ref(e5m2, y, n, codes);
}
#endif
