/* ops_bf16.c — the layer ops of nn.h over bf16 storage: activations, their gradients and the weights
 * are bf16 (2 bytes, uint16_t bits), every value is computed in float from the exact widening and
 * rounded once to the nearest bf16 where it is stored (the arithmetic of ops_f32.c with bf = 1, on
 * half the bytes). Statistics, scratch and the sums of weight gradients stay float. The matrix products
 * are matmul_bf16.c's. */
#include "nn.h"
#include <math.h>

static inline float NN_BF16_NAME(nn_rnd_bf16)(int bf, float v) { (void)bf; return nn_rnd_f32(1, v); }

#define real float
#define act uint16_t
#define LD(x) bf16_f32(x)
/* LDV(v, p): v = OPS_LANES bf16 values at p widened to float (exact: the bits moved to the high half) */
typedef uint16_t NN_BF16_NAME(u16v) __attribute__((vector_size(32)));
typedef uint32_t NN_BF16_NAME(u32v) __attribute__((vector_size(64)));
typedef float NN_BF16_NAME(f32v) __attribute__((vector_size(64)));
#ifdef __AVX512F__
#include <immintrin.h> /* one vpmovzxwd from memory (GCC 12 splits the generic conversion in halves) */
#define LDV(v, p) \
    ((v) = (NN_BF16_NAME(f32v))_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(p))), 16))
#else
#define LDV(v, p)                                                                    \
    do {                                                                             \
        NN_BF16_NAME(u16v) h_;                                                       \
        memcpy(&h_, (p), sizeof h_);                                                 \
        (v) = (NN_BF16_NAME(f32v))(__builtin_convertvector(h_, NN_BF16_NAME(u32v)) << 16); \
    } while (0)
#endif
#define ST(bf, v) ((void)(bf), (uint16_t)(f32_bits(nn_rnd_f32(1, v)) >> 16)) /* bf16_rn_bits, branch-free */
#define SUF(name) NN_BF16_NAME(nn_##name##_bf16)
#define R_EXP nn_exp_f32
#define R_MIN nn_min_f32
#define R_LOG logf
#define R_SQRT sqrtf
#include "ops.inc"
#include "ops_bert.inc"
#include "ops_llama.inc"
