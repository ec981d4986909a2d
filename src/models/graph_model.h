/* graph_model.h — the model object of a family whose passes are graphs of src/nn's ops: it holds the
 * slabs (activations for maxB × maxT, gradients, the bf16 model's two activation slabs, float sums and
 * products' scratch), checks and copies each call's tokens, runs the family's graph in the precision
 * it was made for, and keeps the gradient contracts of collage_model.h. A family gives its plan (where
 * tensors and activations live) and its graphs: float and double (one source over `real`), bf16 in two
 * builds (baseline and AVX-512). A family that declares the masked-LM objective (gm_graph.mlm) gets
 * batches with padding, scored positions and hits, and the logits of chosen positions. LLaMA (llama.c)
 * and BERT (bert.c) run in it. Private to the library and its tests. */
#ifndef COLLAGE_GRAPH_MODEL_H
#define COLLAGE_GRAPH_MODEL_H

#include "collage_model.h"
#include "nn.h"

typedef enum {
    GM_FP32 = 0,      /* weights, activations, gradients float */
    GM_BF16,          /* bf16 weights, activations, activation and weight gradients; products on bf16
                         operands with fp32 sums; statistics, the loss's softmax and the sums of the
                         gradients no product writes float (docs/numerics.md §10) */
    GM_FP64,          /* double everywhere: the reference of gradient checks */
    GM_BF16_EMULATED, /* the float graph with bf = 1 on the bf16 weights widened into a float copy, its
                         gradients summed in a float slab and rounded into the bf16 one after each
                         backward: what GM_BF16 computes on the widening path, bit for bit */
    GM_FP16_EMULATED, /* the same with fp16 (IEEE half) storage: bf = 2, fp16 weights and gradients (the
                         CPU has no fp16 arithmetic: fp32 operations on fp16-rounded values) */
    GM_PRECISION_COUNT
} gm_precision;

/* The bf16 graph's environment: the products' scratch and path, the threads. */
typedef struct {
    nn_ws *ws;
    nn_bf16_path path;
    int nt;
} gm_env;

/* Slab sizes of a plan, in elements: parameters; the activation slab (float or double; in the bf16
 * model the float part); the bf16 activations (bf16 model only); the float gradient sums of the bf16
 * model; and where the logits (float, or double in fp64) start in the activation slab. */
typedef struct {
    size_t nparams, nacts, nacts16, ngs, logits;
} gm_sizes;

/* A family's bf16 graph (one build): reserve the products' scratch for N tokens (0, or -1: out of
 * memory); forward (the mean loss with tgt, else NaN: logits only); backward (the gradients of the last
 * forward: the products' weights rounded into g16, add: onto what is there; the others summed into gs,
 * which it zeroes, then rounded into g16 the same way); the logits of the last position of (1,T). */
typedef struct {
    int (*reserve)(const void *plan, int N, const gm_env *e);
    double (*forward)(const void *plan, const uint16_t *w, uint16_t *a16, float *a32, const int *tok, const int *tgt,
                      int B, int T, const gm_env *e);
    void (*backward)(const void *plan, const uint16_t *w, uint16_t *g16, float *gs, int add, uint16_t *a16, float *a32,
                     const int *tok, const int *tgt, int B, int T, const gm_env *e);
    void (*last_logits)(const void *plan, const uint16_t *w, uint16_t *a16, float *a32, const int *tok, int T,
                        const gm_env *e);
} gm_bf16_graph;

/* What one masked-LM call hands the graph: the tokens (padded positions read as id 0), the rows' lengths
 * (NULL: all T), and the K scored positions (row-major index n = b·T + t, increasing) with their targets
 * (NULL: none). The loss is Σ cross-entropy / divisor. */
typedef struct {
    const int *tok, *len, *rows, *tgt;
    int B, T, K;
    double divisor;
} gm_io;

/* A masked-LM family's passes on io (gm_graph.mlm): forward returns Σ losses of the K scored rows (0
 * without targets or scored rows) and leaves their logits, K rows of Vp, at sizes.logits (with targets:
 * the probabilities); without K the trunk alone. backward adds the gradients of Σ losses / divisor (bf16:
 * as gm_bf16_graph's backward). bf16[1] is the AVX-512 build of bf16[0]; reserve is gm_graph.bf16's. */
typedef struct {
    double (*forward_f32)(const void *plan, const float *w, float *a, const gm_io *io, int bf, int nt);
    double (*forward_f64)(const void *plan, const double *w, double *a, const gm_io *io, int bf, int nt);
    void (*backward_f32)(const void *plan, const float *w, float *g, float *a, const gm_io *io, int bf, int nt);
    void (*backward_f64)(const void *plan, const double *w, double *g, double *a, const gm_io *io, int bf, int nt);
    struct {
        double (*forward)(const void *plan, const uint16_t *w, uint16_t *a16, float *a32, const gm_io *io,
                          const gm_env *e);
        void (*backward)(const void *plan, const uint16_t *w, uint16_t *g16, float *gs, int add, uint16_t *a16,
                         float *a32, const gm_io *io, const gm_env *e);
    } bf16[2];
} gm_mlm_graph;

/* One stored activation of a plan (tests): its name, offset and count in its slab; bf16: held as bf16 in
 * the bf16 models (in the split plan: in the bf16 slab). */
typedef struct {
    const char *name;
    size_t offset, count;
    int bf16;
} gm_act_slot;

/* A family's graphs. plan_new: the plan of cfg for maxB × maxT (split: the bf16 model's two activation
 * slabs), its sizes into out; NULL when out of memory. The float and double passes take bf (1: round
 * where bf16 is stored) and the threads; backward adds into g; last_logits leaves the logits of the last
 * position of (1,T) at sizes.logits. bf16[1] is the AVX-512 build of bf16[0]. */
typedef struct {
    void *(*plan_new)(const collage_model_config *cfg, int maxB, int maxT, int split, gm_sizes *out);
    void (*plan_free)(void *plan);
    double (*forward_f32)(const void *plan, const float *w, float *a, const int *tok, const int *tgt, int B, int T,
                          int bf, int nt);
    double (*forward_f64)(const void *plan, const double *w, double *a, const int *tok, const int *tgt, int B, int T,
                          int bf, int nt);
    void (*backward_f32)(const void *plan, const float *w, float *g, float *a, const int *tok, const int *tgt, int B,
                         int T, int bf, int nt);
    void (*backward_f64)(const void *plan, const double *w, double *g, double *a, const int *tok, const int *tgt,
                         int B, int T, int bf, int nt);
    void (*last_logits_f32)(const void *plan, const float *w, float *a, const int *tok, int T, int bf, int nt);
    void (*last_logits_f64)(const void *plan, const double *w, double *a, const int *tok, int T, int bf, int nt);
    gm_bf16_graph bf16[2];
    /* The float and double backwards seed the loss's gradient with scale / N instead of 1 / N (loss
     * scaling for fp16 storage; 1 at plan_new). NULL: the family takes no loss scale. */
    void (*set_loss_scale)(void *plan, float scale);
    /* A masked-LM family's passes (its causal ones above NULL but bf16[].reserve); NULL: a causal LM. */
    const gm_mlm_graph *mlm;
    /* The plan's stored activations into out (up to cap); returns their number. NULL: none listed. */
    int (*acts)(const void *plan, gm_act_slot *out, int cap);
} gm_graph;

typedef struct gm_model gm_model;

/* The calls keep the contracts of collage_model.h (collage_model_create, _forward, …); each brackets its
 * work with nn_blas_begin / nn_blas_end. cfg must pass the family's check for maxB × maxT. */
collage_status gm_create(const gm_graph *g, const collage_model_config *cfg, gm_precision prec, int maxB, int maxT,
                         gm_model **out);
void           gm_free(gm_model *m);
size_t         gm_size(const gm_model *m);
const char    *gm_error(const gm_model *m);
collage_status gm_forward(gm_model *m, const void *params, const int *tokens, const int *targets, int B, int T,
                          double *loss);
collage_status gm_backward(gm_model *m);
void          *gm_grads(gm_model *m);
void           gm_zero_grad(gm_model *m);
collage_status gm_next_logits(gm_model *m, const void *params, const int *tokens, int T, float *logits);
/* The loss scale of the following backwards (collage_model_set_loss_scale): any finite scale > 0 except in
 * GM_BF16 (its graph has none: COLLAGE_ERR_UNSUPPORTED), nor where the family takes none. */
collage_status gm_set_loss_scale(gm_model *m, double scale);
collage_status gm_memory(const gm_model *m, collage_model_memory *out);
/* A masked-LM model (gm_graph.mlm): collage_model_forward_batch and collage_model_logits_at. gm_forward
 * on it runs full rows, every position with a target scored, the mean; gm_next_logits is refused. */
collage_status gm_forward_batch(gm_model *m, const void *params, const collage_batch *b, collage_forward_info *out);
collage_status gm_logits_at(gm_model *m, const void *params, const int *tokens, int T, const int *pos, int npos,
                            float *logits);
/* Stored activations by name (tests): where each lies now, its element size (2, 4 or 8) and whether it
 * holds bf16 (or fp16) values. Returns their number (0: the family lists none). */
typedef struct { const char *name; const void *data; size_t count, esize; int bf16; } gm_act;
int            gm_act_tensors(const gm_model *m, gm_act *out, int cap);
const char    *gm_precision_name(gm_precision p); /* "fp32", "bf16", "fp64", "bf16-emulated", "fp16-emulated" */

/* A family row's model calls over gm_model (model.h), for its designated initialiser; .create is the
 * family's own (it names its graph and maps collage_real to gm_precision with gm_precision_of). */
gm_precision gm_precision_of(collage_real r);
void           gm_row_free(void *m);
size_t         gm_row_size(const void *m);
const char    *gm_row_error(const void *m);
collage_status gm_row_forward(void *m, const void *params, const int *tokens, const int *targets, int B, int T,
                              double *loss);
collage_status gm_row_backward(void *m);
void          *gm_row_grads(void *m);
void           gm_row_zero_grad(void *m);
collage_status gm_row_next_logits(void *m, const void *params, const int *tokens, int T, float *logits);
collage_status gm_row_set_loss_scale(void *m, double scale);
collage_status gm_row_memory(const void *m, collage_model_memory *out);
collage_status gm_row_forward_batch(void *m, const void *params, const collage_batch *b, collage_forward_info *out);
collage_status gm_row_logits_at(void *m, const void *params, const int *tokens, int T, const int *pos, int npos,
                                float *logits);
#define GM_ROW_CALLS                                                                                          \
    .free = gm_row_free, .size = gm_row_size, .error = gm_row_error, .forward = gm_row_forward,                 \
    .backward = gm_row_backward, .grads = gm_row_grads, .zero_grad = gm_row_zero_grad,                          \
    .next_logits = gm_row_next_logits, .set_loss_scale = gm_row_set_loss_scale,    \
    .memory = gm_row_memory
/* A masked-LM family's row: GM_ROW_CALLS and the two calls of the objective. */
#define GM_MLM_ROW_CALLS GM_ROW_CALLS, .forward_batch = gm_row_forward_batch, .logits_at = gm_row_logits_at

/* x[0..n) = sd · N(0,1), deterministic in key and the same for any thread count: elements 2p and 2p+1
 * from the counter-based words 2p and 2p+1 of key (Box–Muller). */
void gm_init_normal(float *x, size_t n, double sd, uint64_t key);

#endif
