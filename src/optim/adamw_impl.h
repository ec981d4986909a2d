/* adamw_impl.h — what the optimizer's files share: the per-step constants, the state slabs, the EDQ
 * partial sums, and the block kernels (scalar reference and vectorised twins). */
#ifndef COLLAGE_ADAMW_IMPL_H
#define COLLAGE_ADAMW_IMPL_H

#include "internal.h"
#include "qcode.h"
#include "strategy.h"
#include "c8.h"

/* Per-step scalars, each converted to fp32 once (numerics.md §1-3). */
typedef struct {
    float b1, omb1;       /* fp32(β1), fp32(1 − β1) */
    float b2, omb2;       /* fp32(β2), fp32(1 − β2) */
    float eps;            /* fp32(eps) */
    float neg_step;       /* fp32(−lr·sqrt(1 − β2^t)/(1 − β1^t)) */
    float lrwd;           /* fp32(lr·wd) of the block's group */
    float eco;            /* ECO's feedback factor fp32((1/β1 − 1) / (−step)), β1 SGD's μ; 0 when the step is 0 */
    float coef;           /* gradient clipping factor (1 = none) */
    int clip;             /* coef != 1 */
    int nt;               /* the vector kernels may take their nt loops: every bf16 value gives no tie
                             on the lines with neg_step, lrwd, eps (and coef when clip), see tie_free;
                             2: nor on collage-plus's products with b2hi (the nt2 loops) */
    uint16_t b2hi, b2lo;  /* β2 split for collage-plus */
    uint16_t h2hi, h2lo;  /* β2 split in fp16, for fp16-collage-plus */
    uint64_t key;         /* SR key of this step */
    uint64_t index0;      /* the slab index of element 0 of the slabs (a shard's offset): bf16-sr's
                             random stream is keyed by the slab index, the same for any sharding */
    /* Lion and SGD (optim.h, numerics.md §14): neg_step is fp32(−lr); SGD's b1 is fp32(μ) and omb1
     * fp32(1 − dampening) */
    int opt;              /* collage_optimizer */
    float wd;             /* fp32(wd) of the block's group: SGD's L2 decay */
    int first;            /* the first step: SGD's buffer starts as g */
    int nesterov, decoupled;
} adamw_k;

/* The slabs of one step, filled from the optimizer's words by role (strategy.h); NULL where the
 * strategy has no such word. w: bf16, fp16 or float weights; g: gradients in the weights' format; m, v:
 * moments in their words' formats (fp32, bf16, fp16, or 8-bit codes with one fp32 scale per block of
 * COLLAGE_QBLOCK slab elements in mscale, vscale: element i's block is (index0 + i) / 256 − index0 / 256,
 * index0 a multiple of 256); comp: δθ (collage, bf16 or fp16), Kahan's c, or the 16-bit remainder;
 * dv: δv (bf16 or fp16); master: fp32; corr: bf16-c8's correction byte e (c8.h). */
typedef struct {
    void *w;
    const void *g;
    void *m, *v;
    uint16_t *comp, *dv;
    float *master;
    float *mscale, *vscale;
    int8_t *corr;
} adamw_slabs;

/* EDQ partial sums of one block (numerics.md §7), combined in block order. */
typedef struct {
    double dot;        /* Σ Δ_eff·Δ */
    double dot_state;  /* Σ Δ_state·Δ */
    double nn;         /* Σ Δ² */
    uint64_t lost;     /* #{Δ ≠ 0, w unchanged} */
    uint64_t nonzero;  /* #{Δ ≠ 0} */
    double gsq;        /* Σ g² (the gradient-norm pass uses the same slots) */
    int nonfinite;     /* the block's gradient holds a NaN or Inf */
    char pad[64 - 7 * 8]; /* one cache line per block: no false sharing between threads */
} adamw_acc;

/* The step of a strategy with an 8-bit moment goes by pieces: consecutive ranges [a, b) of one group
 * each (their own lr·wd and EDQ sums), together covering whole blocks of COLLAGE_QBLOCK slab elements
 * (the first piece starts a block, the last ends one or the shard), since a block's scale depends on all
 * its elements. acc NULL: no EDQ. */
typedef struct {
    size_t a, b;
    float lrwd;
    adamw_acc *acc;
    float wd;      /* fp32(wd) of the piece's group (SGD's L2 decay) */
} adamw_piece;
void collage__adamw_q8_ref(collage_strategy s, const adamw_slabs *S, const adamw_piece *P, int np, const adamw_k *k);
/* The reference's second half for element i, from its moments' new fp32 values *m and v: the update with
 * lr·wd, applied (ECO's feedback into *m), its EDQ terms into acc (the vector kernels' odd elements). */
void collage__adamw_q8_elem_ref(collage_strategy s, const adamw_slabs *S, size_t i, float *m, float v, float lrwd,
                                const adamw_k *k, adamw_acc *acc);
void collage__adamw_q8_avx512(collage_strategy s, const adamw_slabs *S, const adamw_piece *P, int np, const adamw_k *k);
void collage__adamw_q8_avx2(collage_strategy s, const adamw_slabs *S, const adamw_piece *P, int np, const adamw_k *k);

/* Kernels over elements [a, b) of one block. acc == NULL: no EDQ. collage__adamw_block_ref (adamw_ref.c)
 * is the reference of every strategy without 8-bit states: adamw_elem.h's element lines (ce_step), the
 * one definition the CUDA step also compiles. A composed strategy without 8-bit states goes through it
 * whatever the ISA; the presets have vector loops of their own (adamw_kernel.inc, adamw_fp16.inc). */
void collage__adamw_block_ref(collage_strategy s, const adamw_slabs *S, size_t a, size_t b, const adamw_k *k,
                              adamw_acc *acc);
void collage__adamw_block_avx512(collage_strategy s, const adamw_slabs *S, size_t a, size_t b, const adamw_k *k,
                                 adamw_acc *acc);
void collage__adamw_block_avx2(collage_strategy s, const adamw_slabs *S, size_t a, size_t b, const adamw_k *k,
                               adamw_acc *acc);
/* The number of a kernel's loop functions whose code span (adamw_kernel.inc, code_touch) is real, and
 * in *loops how many it has; −1 where the kernel is not compiled in (the compiler lacks the ISA). */
int collage__adamw_code_spans_avx512(int *loops);
int collage__adamw_code_spans_avx2(int *loops);
/* 1 when the scalar c makes no bf16 value a tie on its lines (adamw_kernel.inc, TIE_FREE_NAME): kind 0,
 * fp32(x·c); kind 1, fp32(RN(√x) + c). 0 where the kernel is not compiled in. */
int collage__adamw_tie_free_avx512(int kind, float c);
int collage__adamw_tie_free_avx2(int kind, float c);

/* The remainder strategy's master: θ's bits with a signed 16-bit difference. θ = the master rounded to
 * nearest with ties away from zero, so (θ, remainder) ↔ master is a bijection; ties to even would
 * need a 17th bit at exact ties. Contract: rem_join(rem_split(x)) == x for every bit pattern. */
static inline float rem_join(uint16_t th, uint16_t rem) {
    return bits_f32(((uint32_t)th << 16) + (uint32_t)(int32_t)(int16_t)rem);
}
static inline uint16_t rem_theta(float master) { return (uint16_t)((f32_bits(master) + 0x8000u) >> 16); }
static inline uint16_t rem_low(float master, uint16_t th) {
    return (uint16_t)(f32_bits(master) - ((uint32_t)th << 16));
}

#endif
