/* ops_f64.c — the layer ops of nn.h in double: the reference the float model's gradients are checked
 * against (bf is ignored: nn_rnd_f64 rounds nothing). */
#include "nn.h"
#include <math.h>

#define real double
#define act double
#define LD(x) (x)
#define LDV(v, p) memcpy(&(v), (p), sizeof(v))
#define ST(bf, v) ((void)(bf), (v))
#define OPS_REAL_GEMM
#define SUF(name) nn_##name##_f64
#define R_EXP exp
#define R_MIN nn_min_f64
#define R_LOG log
#define R_SQRT sqrt
#include "ops.inc"
#include "ops_bert.inc"
#include "ops_llama.inc"
