/* adamw_avx2.c — the fused AdamW step on 8 lanes (AVX2), from adamw_kernel.inc.
 * Built with -mavx2; entered only when the CPU has it (rows.c's ISA choice). */
#include "adamw_impl.h"
#include "optim.h"
#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>
#include <math.h>
#define VL 8
#define KERNEL_NAME collage__adamw_block_avx2
#define TIE_FREE_NAME collage__adamw_tie_free_avx2
#define Q8_NAME collage__adamw_q8_avx2
#define QQUANT_NAME collage__qblock_quantize_avx2
#define QDEQUANT_NAME collage__qblock_dequantize_avx2
#define OPTIM_NAME collage__optim_block_avx2
#define OPTIM_SPANS_NAME collage__optim_code_spans_avx2
#define VSQRT(x) ((vf)_mm256_sqrt_ps((__m256)(x)))
#include "adamw_kernel.inc"
#include "adamw_fp16.inc"
#include "adamw_q8.inc"
#include "optim_kernel.inc"
#else
void collage__optim_block_avx2(collage_strategy s, const adamw_slabs *S, size_t a, size_t b, const adamw_k *k,
                            adamw_acc *acc) { collage__optim_block_ref(s, S, a, b, k, acc); }
void collage__adamw_block_avx2(collage_strategy s, const adamw_slabs *S, size_t a, size_t b, const adamw_k *k,
                               adamw_acc *acc) { collage__adamw_block_ref(s, S, a, b, k, acc); }
int collage__adamw_code_spans_avx2(int *loops) { *loops = 0; return -1; }
int collage__optim_code_spans_avx2(int *loops) { *loops = 0; return -1; }
int collage__adamw_tie_free_avx2(int kind, float c) { (void)kind; (void)c; return 0; }
void collage__adamw_q8_avx2(collage_strategy s, const adamw_slabs *S, const adamw_piece *P, int np, const adamw_k *k) {
    collage__adamw_q8_ref(s, S, P, np, k);
}
void collage__qblock_quantize_avx2(collage_qcode c, const float *x, size_t n, uint8_t *q, float *scale, int sr,
                                   uint64_t key, uint64_t index0) {
    collage_qblock_quantize(c, x, n, q, scale, sr, key, index0);
}
void collage__qblock_dequantize_avx2(collage_qcode c, const uint8_t *q, float scale, size_t n, float *x) {
    collage_qblock_dequantize(c, q, scale, n, x);
}
#endif
