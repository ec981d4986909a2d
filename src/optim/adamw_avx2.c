/* adamw_avx2.c — the fused AdamW step on 8 lanes (AVX2), from adamw_kernel.inc.
 * Built with -mavx2; entered only when the CPU has it (rows.c's ISA choice). */
#include "adamw_impl.h"
#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>
#define VL 8
#define KERNEL_NAME collage__adamw_block_avx2
#define TIE_FREE_NAME collage__adamw_tie_free_avx2
#define VSQRT(x) ((vf)_mm256_sqrt_ps((__m256)(x)))
#include "adamw_kernel.inc"
#else
void collage__adamw_block_avx2(collage_strategy s, const adamw_slabs *S, size_t a, size_t b, const adamw_k *k,
                               adamw_acc *acc) { collage__adamw_block_ref(s, S, a, b, k, acc); }
int collage__adamw_code_spans_avx2(int *loops) { *loops = 0; return -1; }
int collage__adamw_tie_free_avx2(int kind, float c) { (void)kind; (void)c; return 0; }
#endif
