/* graph_model.h — the model object of every family (collage_model is this object on a family's graphs):
 * it holds the slabs (activations for maxB × maxT, gradients, the bf16 model's two activation slabs,
 * float sums and products' scratch), checks and copies each call's tokens, runs the family's graph in
 * the precision it was made for, and keeps the gradient contracts of collage_model.h. A family gives its
 * plan (where tensors and activations live) and its graphs: float and double (one source over `real`),
 * bf16 in two builds (baseline and AVX-512). A family that declares the masked-LM objective
 * (gm_graph.mlm) gets batches with padding, scored positions and hits, and the logits of chosen
 * positions. GPT-2 (gpt2.c), LLaMA (llama.c) and BERT (bert.c) run in it. Private to the library and its
 * tests. */
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
    GM_FP8,           /* the bf16 model with every matrix product on fp8 operands (numerics.md §13): the
                         family's bf16 graph with gm_env.fp8 set */
    GM_FP4,           /* the same with 4-bit products (NVFP4, MXFP4: numerics.md §15): gm_env.fp4 set */
    GM_PRECISION_COUNT
} gm_precision;

/* The fp8 products of a GM_FP8 model (numerics.md §13, "The model in fp8"): the recipe and formats, the
 * delayed-scaling state (3 slots per linear layer: its input, weight, incoming gradient; NULL for the
 * other recipes), the products' scratch, and the first status other than COLLAGE_OK an fp8 product of
 * the call under way returned (COLLAGE_ERR_NONFINITE: NaN or Inf in an operand; the call fails). */
typedef struct {
    collage_fp8_recipe recipe;
    int e4m3_all;
    collage__fp8_scaling *scaling;
    nn_fp8_ws ws;
    nn_fp8_wcopy *wc;       /* per linear layer, its weight's copy from the forward, allocated with the
                               recipe (NULL for MXFP8) */
    int nwc;
    collage_status st;
} gm_fp8;

/* The 4-bit products of a GM_FP4 model (numerics.md §15, "The model in fp4"): the recipe, the Hadamard
 * option and its signs, how many of the last linear layers keep bf16 products, the SR key of the
 * backward under way (collage_model_fp4_key), the number of linear layers, the products' scratch, and
 * the first status other than COLLAGE_OK a 4-bit product of the call under way returned. */
typedef struct {
    collage_fp4_recipe recipe;
    int hadamard, grad_rn, bf16_last, layers; /* grad_rn: the gradients' quantization rounds to nearest */
    uint16_t signs;
    uint64_t key;
    nn_fp4_ws ws;
    nn_fp4_wcopy *wc;       /* per linear layer with 4-bit products, its weight's copy from the forward
                               (nn_fp4_wcopy_serves: NVFP4; NULL for MXFP4) */
    int nwc;
    collage_status st;
} gm_fp4;

/* The bf16 graph's environment: the products' scratch and path, the threads; fp8: the fp8 products
 * (NULL: bf16 products). */
typedef struct {
    nn_ws *ws;
    nn_bf16_path path;
    int nt;
    gm_fp8 *fp8;
    gm_fp4 *fp4;
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
    /* The linear layers of the bf16 graph's fp8 build (gm_env.fp8): their number (the delayed state has 3
     * slots each); with in and out non-NULL (room for that number each), layer k's weight is
     * out[k] × in[k] (in[k] inputs to out[k] outputs). NULL: the family has no fp8 precision. */
    int (*fp8_layers)(const void *plan, int *in, int *out);
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
/* collage_model_forward_batch and collage_model_logits_at. A masked-LM model (gm_graph.mlm): padding,
 * scored positions, a divisor and hits; gm_forward on it runs full rows, every position with a target
 * scored, the mean; gm_next_logits is refused. A causal model: forward_batch takes full rows and the mean
 * only (no hits: correct = -1); logits_at is refused. */
collage_status gm_forward_batch(gm_model *m, const void *params, const collage_batch *b, collage_forward_info *out);
collage_status gm_logits_at(gm_model *m, const void *params, const int *tokens, int T, const int *pos, int npos,
                            float *logits);
/* Stored activations by name (tests): where each lies now, its element size (2, 4 or 8) and whether it
 * holds bf16 (or fp16) values. Returns their number (0: the family lists none). */
typedef struct { const char *name; const void *data; size_t count, esize; int bf16; } gm_act;
int            gm_act_tensors(const gm_model *m, gm_act *out, int cap);
const char    *gm_precision_name(gm_precision p); /* "fp32", "bf16", "fp64", "bf16-emulated", "fp16-emulated", "fp8" */

/* Helpers of the families' plan_new. gm_lay_out_params: for the nt parameter tensors t (slab order), the
 * offsets p[k], the stride of one layer's slice pl[k] (count / L where layered[k], else 0) and, for the
 * tensors no product writes (t[k].product 0), the offset gs[k] of their gradient's float sum in the bf16
 * model, one after the other; returns the sums' total (the plan's ngs). gm_lay_out_acts: n stored
 * activations, activation k per[k] elements in each of L layers (stride al[k] = per[k]) or, where
 * per[k] is 0, whole[k] elements; in one slab in order k, or with split (the bf16 model) those with
 * is16[k] in a bf16 slab of their own and the rest in a float slab; the offsets into a[k], the counts
 * into an[k], the two slabs' sizes into sz->nacts and sz->nacts16. */
size_t gm_lay_out_params(const collage_tensor_info *t, int nt, int L, const unsigned char *layered, size_t *p,
                         size_t *pl, size_t *gs);
void   gm_lay_out_acts(int n, int L, const size_t *per, const size_t *whole, const unsigned char *is16, int split,
                       size_t *a, size_t *al, size_t *an, gm_sizes *sz);

/* The precision collage_model_create makes for a collage_real (COLLAGE_REAL_FP16: GM_FP16_EMULATED), and
 * the collage_real whose product kernels a precision runs (GM_FP8: COLLAGE_REAL_BF16's). */
gm_precision gm_precision_of(collage_real r);
collage_real gm_products_real(gm_precision p);

/* The fp8 precision's controls (collage_model.h collage_model_fp8_*): COLLAGE_ERR_UNSUPPORTED on a model
 * of another precision. set: the recipe and formats (any time between steps; the delayed state starts
 * afresh: scales 1, empty histories), with the recipe's weight copies and products' scratch allocated
 * (COLLAGE_ERR_NOMEM: the model then holds no copies nor delayed state; set again before a step).
 * end_step: skipped 0, collage__fp8_scaling_step, else _discard (no state for the per-block recipes:
 * nothing to do). amaxes: the step's amaxes (NULL, *n = 0 without a
 * delayed state). state_*: the delayed state's bytes (0 bytes without one). */
collage_status gm_fp8_set(gm_model *m, collage_fp8_recipe recipe, int e4m3_all);
collage_status gm_fp8_end_step(gm_model *m, int skipped);
float         *gm_fp8_amaxes(gm_model *m, int *n);
double         gm_fp8_quant_seconds(const gm_model *m);
size_t         gm_fp8_state_bytes(const gm_model *m);
collage_status gm_fp8_state_save(const gm_model *m, void *buf, size_t cap);
collage_status gm_fp8_state_load(gm_model *m, const void *buf, size_t len);

/* The fp4 precision's controls (collage_model.h collage_model_fp4_*): COLLAGE_ERR_UNSUPPORTED on a model
 * of another precision; COLLAGE_ERR_ARG for an unknown recipe or bf16_last outside [0, layers]. set: the
 * recipe, the Hadamard option with its signs from seed, bf16_last. key: the SR key of the backwards that
 * follow. */
collage_status gm_fp4_set(gm_model *m, collage_fp4_recipe recipe, int hadamard, int grad_rn, int bf16_last, uint64_t seed);
collage_status gm_fp4_key(gm_model *m, uint64_t key);
int            gm_fp4_layers(const gm_model *m);
double         gm_fp4_quant_seconds(const gm_model *m);

#endif
