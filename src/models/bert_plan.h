/* bert_plan.h — the BERT family's slabs, shared by bert.c (config, tensors, the float and double graphs)
 * and bert_bf16.c (the bf16 graph): where each parameter tensor and each stored activation lives. Its
 * model object is graph_model.c's, which hands each call's gm_io to the graphs. Private. */
#ifndef COLLAGE_BERT_PLAN_H
#define COLLAGE_BERT_PLAN_H

#include "bert.h"
#include "graph_model.h"
#include "nn_bert.h"

/* Stored activations: the embedding, then per layer the post-norm block (r1 = x + attention, h = LN1(r1),
 * r2 = h + MLP(h), x' = LN2(r2)), then the head on the K scored rows (hx gathered from the last x, hu =
 * dense, hg = GELU, hln = LayerNorm, the logits and losses), then the backward's buffers. dlogits exists in
 * the bf16 model only (the float models turn the probabilities into it in place); dtmp in the float models
 * only (the product whose rounded result is added to the residual's gradient). */
enum {
    BA_EMB = 0, BA_X0, BA_X0_MEAN, BA_X0_RSTD,
    BA_QKV, BA_ATTY, BA_ATT, BA_R1, BA_H, BA_H_MEAN, BA_H_RSTD, BA_FCH, BA_FCH_GELU, BA_R2, BA_X, BA_X_MEAN,
    BA_X_RSTD,
    BA_HX, BA_HU, BA_HG, BA_HLN, BA_HLN_MEAN, BA_HLN_RSTD, BA_LOGITS, BA_LOSSES,
    BA_DRES, BA_DLN, BA_DATTY, BA_DQKV, BA_DFCH, BA_DH1, BA_DH2, BA_DLOGITS, BA_DTMP, BA_SCR, BA_COUNT
};
#define BA_FIRST_LAYER BA_QKV /* BA_QKV … BA_X_RSTD have a copy per layer */
#define BA_LAST_LAYER BA_X_RSTD

typedef struct {
    int V, Vp, maxT, L, NH, C;
    size_t p[BERT_NTENSORS], pl[BERT_NTENSORS]; /* parameter offset, per-layer stride */
    /* activation k: offset in its slab, layer stride, count; in the bf16 model the bf16 ones are in a slab
     * of their own (a16) and the rest in a float slab (a32) */
    size_t a[BA_COUNT], al[BA_COUNT], an[BA_COUNT];
    size_t nparams;
    /* bf16 model: the float sums of the gradients no product writes (biases, norms, wpe, wtt), per tensor */
    size_t gs[BERT_NTENSORS];
    size_t ngs;
    float loss_scale; /* the float and double backwards seed loss_scale / divisor (gm_graph's set_loss_scale) */
} bert_plan;

/* 1: tensor k's gradient is written by a product's epilogue in the bf16 model. */
static inline int bert_product_weight(int k) {
    return k == BERT_WTE || k == BERT_QKVW || k == BERT_ATTPROJW || k == BERT_FCW || k == BERT_FCPROJW ||
           k == BERT_HEADW;
}

/* The bf16 graph (bert_bf16.c), baseline and _avx512 (bert_bf16_avx512.c), the same values.
 * forward: the trunk, and with io->K > 0 the head and its logits (probabilities and losses with tgt);
 * returns Σ losses (0 without targets). backward: matrices rounded into g16 (add: onto what is there),
 * the others summed into gs (zeroed here) and then rounded into g16 the same way. fp8_layers: the linear
 * layers of its fp8 build (gm_env.fp8): 4 per block, the head's dense layer, the logits'. */
#define BERT_BF16_GRAPH(S)                                                                                     \
    int bert_bf16_reserve##S(const void *plan, int N, const gm_env *e);                                \
    double bert_forward_bf16##S(const void *plan, const uint16_t *w, uint16_t *a16, float *a32,                \
                                const gm_io *io, const gm_env *e);                                    \
    void bert_backward_bf16##S(const void *plan, const uint16_t *w, uint16_t *g16, float *gs, int add,         \
                               uint16_t *a16, float *a32, const gm_io *io, const gm_env *e);         \
    int bert_fp8_layers##S(const void *plan, int *in, int *out);
BERT_BF16_GRAPH()
BERT_BF16_GRAPH(_avx512)

/* The family's graphs (bert.c), for graph_model.h's gm_create: a masked-LM family (gm_graph.mlm). */
extern const gm_graph collage__bert_graph;

#endif
