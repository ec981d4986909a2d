/* llama_plan.h — the LLaMA family's slabs, shared by llama.c (config, tensors, the float and double
 * graphs), llama_bf16.c (the bf16 graph) and llama_ckpt.c (llama2.c's file): the tensors in slab order,
 * where each stored activation lives, the rotary tables. Private. */
#ifndef COLLAGE_LLAMA_PLAN_H
#define COLLAGE_LLAMA_PLAN_H

#include "graph_model.h"
#include "nn_llama.h"

/* The parameter tensors in slab order. Per layer, wqkv holds the rows of wq, wk, wv (one product for
 * the three) and w13 those of w1 and w3; out exists when untied (tied: the logits use emb). */
enum { LT_EMB = 0, LT_ATTN_NORM, LT_WQKV, LT_WO, LT_FFN_NORM, LT_W13, LT_W2, LT_NORM, LT_OUT, LT_COUNT };

/* Stored activations (per layer where a layer has one), then the backward's buffers. qkv holds q and k
 * after the rotation; the projections are written into the residual they feed. dlogits: bf16 model only
 * (the float graphs turn the probabilities into it in place). */
enum {
    LA_ENC = 0, LA_LN1, LA_RSTD1, LA_QKV, LA_ATT, LA_ATTY, LA_RES1, LA_LN2, LA_RSTD2, LA_H13, LA_HG, LA_RES2,
    LA_LNF, LA_RSTDF, LA_LOGITS, LA_LOSSES, LA_DRES, LA_DLN, LA_DATTY, LA_DQKV, LA_DHG, LA_DH13, LA_DLOGITS, LA_SCR,
    LA_COUNT
};

typedef struct {
    int V, Vp, L, NH, NKV, hs, C, H, QKV, tied; /* C = NH·hs, QKV = (NH + 2·NKV)·hs; Vp: embedding rows */
    float eps32;
    double eps64;
    float loss_scale;                       /* the float and double backwards seed loss_scale / N (gm_graph) */
    size_t p[LT_COUNT], pl[LT_COUNT];       /* parameter offset, per-layer stride (tied: out = emb) */
    size_t n[LT_COUNT];                     /* elements of each tensor (tied: out 0) */
    size_t a[LA_COUNT], al[LA_COUNT];       /* activation offset in its slab, per-layer stride */
    size_t gs[LT_COUNT], ngs;               /* bf16 model: offset of a tensor's float gradient sum; total */
    float *rope32;                          /* nn_rope_table_f32 for maxT */
    double *rope64;
} llama_plan;

/* 1: tensor k's gradient is written by a product's epilogue in the bf16 model (the embedding when tied,
 * where the logits' product and the token rows meet in one sum). */
static inline int llama_product_weight(const llama_plan *P, int k) {
    return k == LT_WQKV || k == LT_WO || k == LT_W13 || k == LT_W2 || k == LT_OUT || (k == LT_EMB && P->tied);
}

/* The tensors of a valid config in slab order (out only when untied); returns their number. */
int llama_tensors(const collage_model_config *cfg, collage_tensor_info *out, int cap);

#define LLAMA_BF16_GRAPH(S)                                                                                    \
    int llama_bf16_reserve##S(const void *plan, int N, const gm_env *e);                                      \
    double llama_forward_bf16##S(const void *plan, const uint16_t *w, uint16_t *a16, float *a32, const int *tok, \
                                 const int *tgt, int B, int T, const gm_env *e);                              \
    void llama_backward_bf16##S(const void *plan, const uint16_t *w, uint16_t *g16, float *gs, int add,        \
                                uint16_t *a16, float *a32, const int *tok, const int *tgt, int B, int T,       \
                                const gm_env *e);                                                             \
    void llama_last_logits_bf16##S(const void *plan, const uint16_t *w, uint16_t *a16, float *a32, const int *tok, \
                                   int T, const gm_env *e);                                                    \
    int llama_fp8_layers##S(const void *plan, int *in, int *out);
LLAMA_BF16_GRAPH()
LLAMA_BF16_GRAPH(_avx512)

/* The family's graphs (llama.c), for graph_model.h's gm_create. */
extern const gm_graph collage__llama_graph;

/* llama2.c's legacy model file (llama_ckpt.c, docs/llama.md): the family row's checkpoint calls. */
int            llama_ckpt_probe(const unsigned char *head, size_t len);
collage_status llama_ckpt_save(const char *path, const collage_model_config *cfg, const void *params, int bf16,
                               char *err, size_t cap);
collage_status llama_ckpt_read_header(const char *path, collage_model_config *cfg, int *bf16, char *err, size_t cap);
collage_status llama_ckpt_load(const char *path, const collage_model_config *cfg, void *params, int want_bf16,
                               char *err, size_t cap);

#endif
