/* ops_f32.c — the layer ops of nn.h in float: the model's precision (fp32, and bf16 mode, where bf = 1
 * rounds every stored activation to bf16). e^x is nn_exp_f32 (no libm call: the same bits everywhere). */
#include "nn.h"
#include <math.h>

#define real float
#define act float
#define LD(x) (x)
#define LDV(v, p) memcpy(&(v), (p), sizeof(v))
#define ST(bf, v) nn_rnd_f32(bf, v)
#define OPS_REAL_GEMM
#define SUF(name) nn_##name##_f32
#define R_EXP nn_exp_f32
#define R_MIN nn_min_f32
#define R_LOG logf
#define R_SQRT sqrtf
#include "ops.inc"
#include "ops_bert.inc"
#include "ops_llama.inc"
