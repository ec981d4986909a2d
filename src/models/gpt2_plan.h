/* gpt2_plan.h — the GPT-2 family's slabs, shared by gpt2.c (config, tensors, the float and double graphs)
 * and gpt2_bf16.c (the bf16 graph): where each parameter tensor and each stored activation lives. Its
 * model object is graph_model.c's. Private. */
#ifndef COLLAGE_GPT2_PLAN_H
#define COLLAGE_GPT2_PLAN_H

#include "gpt2.h"
#include "graph_model.h"

/* Stored activations (llm.c's, less preatt/attproj/fcproj: the scores are softmaxed in place in att and
 * the projections are written straight into the residual they feed), then the backward's buffers.
 * dlogits exists in the bf16 model only (the float models turn the probabilities into it in place). */
enum {
    A_ENC = 0, A_LN1, A_LN1_MEAN, A_LN1_RSTD, A_QKV, A_ATTY, A_ATT, A_RES2, A_LN2, A_LN2_MEAN, A_LN2_RSTD,
    A_FCH, A_FCH_GELU, A_RES3, A_LNF, A_LNF_MEAN, A_LNF_RSTD, A_LOGITS, A_LOSSES,
    A_DRES, A_DLN, A_DATTY, A_DQKV, A_DFCH, A_DLOGITS, A_SCR, A_COUNT
};

typedef struct {
    int V, Vp, maxT, L, NH, C;
    size_t p[GPT2_NTENSORS], pl[GPT2_NTENSORS]; /* parameter offset, per-layer stride */
    /* activation k: offset in its slab, layer stride, count; in the bf16 model the bf16 ones are in a
     * slab of their own (a16) and the rest (statistics, logits, losses, scratch) in a float slab (a32) */
    size_t a[A_COUNT], al[A_COUNT], an[A_COUNT];
    size_t nparams;
    /* bf16 model: the float sums of the gradients that no product writes (biases, norms, wpe): offset of
     * tensor k in that slab (the products' matrices: wte, qkvw, attprojw, fcw, fcprojw have none) */
    size_t gs[GPT2_NTENSORS];
    size_t ngs;
    float loss_scale; /* the float and double backwards seed loss_scale / N (gm_graph's set_loss_scale) */
} gpt_plan;

/* 1: tensor k's gradient is written by a product's epilogue in the bf16 model. */
static inline int gpt_product_weight(int k) {
    return k == GPT2_WTE || k == GPT2_QKVW || k == GPT2_ATTPROJW || k == GPT2_FCW || k == GPT2_FCPROJW;
}

/* The bf16 graph (gpt2_bf16.c), baseline and _avx512 (gpt2_bf16_avx512.c), the same values: gm_bf16_graph's
 * calls. w: the bf16 weights; a16, a32: the activation slabs; g16: the bf16 gradient slab; gs: the float
 * sums of the other gradients (P->ngs). */
#define GPT_BF16_GRAPH(S)                                                                                      \
    int gpt_bf16_reserve##S(const void *plan, int N, const gm_env *e);                                         \
    double gpt_forward_bf16##S(const void *plan, const uint16_t *w, uint16_t *a16, float *a32, const int *tok,  \
                               const int *tgt, int B, int T, const gm_env *e);                                 \
    void gpt_backward_bf16##S(const void *plan, const uint16_t *w, uint16_t *g16, float *gs, int add,          \
                              uint16_t *a16, float *a32, const int *tok, const int *tgt, int B, int T,         \
                              const gm_env *e);                                                                \
    void gpt_last_logits_bf16##S(const void *plan, const uint16_t *w, uint16_t *a16, float *a32, const int *tok, \
                                 int T, const gm_env *e);                                                      \
    int gpt_fp8_layers##S(const void *plan, int *in, int *out);
GPT_BF16_GRAPH()
GPT_BF16_GRAPH(_avx512)

/* The family's graphs (gpt2.c), for graph_model.h's gm_create. */
extern const gm_graph collage__gpt2_graph;

#endif
