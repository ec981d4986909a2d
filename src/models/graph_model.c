/* graph_model.c — the model object of graph_model.h: slabs allocated at create, each call's input checked
 * and copied, the family's float, double or bf16 graph run in the model's precision, gradients kept by
 * the contracts of collage_model.h (+= in fp32 and fp64; one rounding per element in bf16), the
 * masked-LM objective for a family that declares it (padding, scored positions, hits); collage_model
 * (model.c) is this object on a family's graphs. */
#include "internal.h"
#include "graph_model.h"
#include "model.h"
#include "nn_bert.h" /* nn_argmax_hits: the masked LM's hits */
#include <math.h>
#include <stdarg.h>

struct gm_model {
    const gm_graph *g;
    collage_model_config cfg;
    gm_precision prec;
    int maxB, maxT;
    void *plan;
    gm_sizes sz;
    size_t esize;           /* bytes per element of acts and grads: 4 (fp32, bf16- and fp16-emulated) or 8 (fp64) */
    void *acts;             /* float or double; in bf16 the float part */
    void *grads;            /* float or double (emulated: its fp32 accumulator); NULL in bf16 */
    collage_bf16 *grads16;  /* bf16 and emulated: the gradient slab handed out (fp16 bits in fp16-emulated) */
    int grads16_zero;       /* zero_grad ran since the last backward: grads16 reads as zero */
    float *w32;             /* emulated: the weights widened at each forward */
    uint16_t *acts16;       /* bf16: the bf16 activations */
    float *gsums;           /* bf16: the float sums of the gradients no product writes */
    nn_ws ws;               /* bf16: the products' tile scratch */
    collage__products pp;   /* the kernels of its products, chosen at create */
    const gm_bf16_graph *graph; /* the bf16 build of the last call */
    gm_fp8 fp8;             /* fp8: the products' recipe, scaling state and scratch */
    gm_fp4 fp4;             /* fp4: the products' recipe, options and scratch */
    const void *w_used;     /* the weights of the last forward (the caller's slab or w32) */
    int *tok, *tgt;         /* masked LM: tgt holds the K scored rows' targets */
    int *len, *rows;        /* masked LM: the rows' lengths, the scored positions */
    gm_io io;               /* masked LM: the last call's input */
    int B, T, ready;        /* ready: a forward with targets awaits its backward */
    char err[200];
};

__attribute__((format(printf, 3, 4)))
static collage_status fail(gm_model *m, collage_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->err, sizeof m->err, fmt, ap);
    va_end(ap);
    return st;
}

/* The bf16 build for this call (collage_get_isa) and its scratch grown for the current thread count. */
static collage_status bf16_env(gm_model *m, gm_env *e) {
    *e = (gm_env){.ws = &m->ws, .path = m->pp.prod.bf16, .nt = collage__threads(),
                  .fp8 = m->prec == GM_FP8 ? &m->fp8 : NULL, .fp4 = m->prec == GM_FP4 ? &m->fp4 : NULL};
    m->fp8.st = COLLAGE_OK, m->fp4.st = COLLAGE_OK;
    m->graph = &m->g->bf16[collage_get_isa() == COLLAGE_ISA_AVX512];
    if (m->graph->reserve(m->plan, m->maxB * m->maxT, e))
        return fail(m, COLLAGE_ERR_NOMEM, "out of memory for the products' scratch (%d threads)", e->nt);
    return COLLAGE_OK;
}

/* ---------------------------------------------------------------- the precisions */
/* Which of the family's graphs a precision runs. */
typedef enum { RUN_F32, RUN_F64, RUN_BF16 } gm_run;

/* One row per precision: everything the object asks of one (adding a precision is a row here, its value
 * in gm_precision and, for a new 16-bit storage, its case in widen16 / round16). real: the collage_real
 * that collage_model_create runs as this precision (-1: none, made by gm_create only); products: the
 * precision whose kernels its products take (collage__products_for); emulated: the float graph's
 * rounding and the storage of the weights and gradients (nn.h nn_rnd_f32's bf: 1 bf16, 2 fp16; 0 none). */
static const struct {
    const char *name;
    int real;
    collage_real products;
    gm_run run;
    int emulated;
} PRECISIONS[GM_PRECISION_COUNT] = {
    [GM_FP32] = {"fp32", COLLAGE_REAL_FP32, COLLAGE_REAL_FP32, RUN_F32, 0},
    [GM_BF16] = {"bf16", COLLAGE_REAL_BF16, COLLAGE_REAL_BF16, RUN_BF16, 0},
    [GM_FP64] = {"fp64", COLLAGE_REAL_FP64, COLLAGE_REAL_FP64, RUN_F64, 0},
    [GM_BF16_EMULATED] = {"bf16-emulated", -1, COLLAGE_REAL_FP32, RUN_F32, 1},
    [GM_FP16_EMULATED] = {"fp16-emulated", COLLAGE_REAL_FP16, COLLAGE_REAL_FP32, RUN_F32, 2},
    [GM_FP8] = {"fp8", COLLAGE_REAL_FP8, COLLAGE_REAL_BF16, RUN_BF16, 0},
    [GM_FP4] = {"fp4", COLLAGE_REAL_FP4, COLLAGE_REAL_BF16, RUN_BF16, 0},
};

static gm_run run_of(const gm_model *m) { return PRECISIONS[m->prec].run; }
static int emulated(const gm_model *m) { return PRECISIONS[m->prec].emulated; }

/* An emulated model's slabs, by its kind (1 bf16, 2 fp16): the weights widened exactly into w32; the
 * float gradient sums rounded to nearest into g16. */
static void widen16(float *w32, const void *w16, size_t n, int kind) {
    if (kind == 2) collage_fp16_to_f32_row(w32, w16, n);
    else collage_bf16_to_f32_row(w32, w16, n);
}
static void round16(void *g16, const float *g32, size_t n, int kind) {
    if (kind == 2) collage_fp16_from_f32_row(g16, g32, n);
    else collage_bf16_from_f32_row(g16, g32, n);
}

const char *gm_precision_name(gm_precision p) {
    return (unsigned)p < GM_PRECISION_COUNT ? PRECISIONS[p].name : "unknown";
}

gm_precision gm_precision_of(collage_real r) {
    for (int p = 0; p < GM_PRECISION_COUNT; p++)
        if (PRECISIONS[p].real == (int)r) return (gm_precision)p;
    return GM_FP32;
}

collage_real gm_products_real(gm_precision p) {
    return (unsigned)p < GM_PRECISION_COUNT ? PRECISIONS[p].products : COLLAGE_REAL_FP32;
}

/* ---------------------------------------------------------------- the fp8 precision */
static void fp8_wcopies_free(gm_fp8 *f) {
    for (int k = 0; k < f->nwc; k++) nn_fp8_wcopy_free(&f->wc[k]);
    free(f->wc);
    f->wc = NULL, f->nwc = 0;
}

/* The linear layers' weight copies of fp8's recipe (numerics.md §13: the forward's quantization of W
 * serves dX; none for MXFP8, whose blocks follow K), each allocated for its layer's weight. */
static collage_status fp8_copies_new(gm_model *m, int layers) {
    if (m->fp8.recipe == COLLAGE_FP8_MXFP8) return COLLAGE_OK;
    int *io = malloc(2 * (size_t)layers * sizeof *io);
    if (!io || !(m->fp8.wc = calloc((size_t)layers, sizeof *m->fp8.wc))) {
        free(io);
        return COLLAGE_ERR_NOMEM;
    }
    m->fp8.nwc = layers;
    m->g->fp8_layers(m->plan, io, io + layers);
    const nn_fp8_layer L = {.recipe = m->fp8.recipe, .e4m3_all = m->fp8.e4m3_all};
    int bad = 0;
    for (int k = 0; k < layers && !bad; k++) bad = nn_fp8_wcopy_alloc(&m->fp8.wc[k], &L, io[k], io[layers + k]);
    free(io);
    return bad ? COLLAGE_ERR_NOMEM : COLLAGE_OK;
}

/* The state of fp8's recipe: the weight copies, and the delayed state (delayed: 3 slots per linear layer,
 * Transformer Engine's history of 1024 steps and margin 0; other recipes: none). COLLAGE_ERR_NOMEM: neither
 * left. */
static collage_status fp8_state_new(gm_model *m) {
    collage__fp8_scaling_free(m->fp8.scaling);
    m->fp8.scaling = NULL;
    fp8_wcopies_free(&m->fp8);
    const int layers = m->g->fp8_layers(m->plan, NULL, NULL);
    collage_status st = fp8_copies_new(m, layers);
    if (st == COLLAGE_OK && m->fp8.recipe == COLLAGE_FP8_DELAYED) {
        collage_format *fmts = malloc((size_t)layers * 3 * sizeof *fmts);
        if (fmts) {
            nn_fp8_slot_formats(fmts, layers, m->fp8.e4m3_all);
            m->fp8.scaling = collage__fp8_scaling_create(fmts, 3 * layers, 1024, 0);
        }
        free(fmts);
        if (!m->fp8.scaling) st = COLLAGE_ERR_NOMEM;
    }
    if (st != COLLAGE_OK) fp8_wcopies_free(&m->fp8);
    return st;
}

collage_status gm_fp8_set(gm_model *m, collage_fp8_recipe recipe, int e4m3_all) {
    if (!m) return COLLAGE_ERR_NULL;
    if (m->prec != GM_FP8) return fail(m, COLLAGE_ERR_UNSUPPORTED, "fp8 settings on a %s model", PRECISIONS[m->prec].name);
    if ((unsigned)recipe >= COLLAGE_FP8_RECIPE_COUNT) return fail(m, COLLAGE_ERR_ARG, "unknown fp8 recipe %d", (int)recipe);
    m->fp8.recipe = recipe;
    m->fp8.e4m3_all = e4m3_all != 0;
    gm_env e;
    if (fp8_state_new(m) != COLLAGE_OK)
        return fail(m, COLLAGE_ERR_NOMEM, "out of memory for the fp8 weight copies or delayed state");
    return bf16_env(m, &e);
}

collage_status gm_fp8_end_step(gm_model *m, int skipped) {
    if (!m) return COLLAGE_ERR_NULL;
    if (m->prec != GM_FP8) return fail(m, COLLAGE_ERR_UNSUPPORTED, "fp8 step on a %s model", PRECISIONS[m->prec].name);
    if (m->fp8.scaling) {
        if (skipped) collage__fp8_scaling_discard(m->fp8.scaling);
        else collage__fp8_scaling_step(m->fp8.scaling);
    }
    return COLLAGE_OK;
}

float *gm_fp8_amaxes(gm_model *m, int *n) {
    *n = m && m->fp8.scaling ? collage__fp8_scaling_slots(m->fp8.scaling) : 0;
    return *n ? collage__fp8_scaling_current(m->fp8.scaling) : NULL;
}

double gm_fp8_quant_seconds(const gm_model *m) { return m && m->prec == GM_FP8 ? m->fp8.ws.quant_s : 0.0; }

size_t gm_fp8_state_bytes(const gm_model *m) {
    return m && m->fp8.scaling ? collage__fp8_scaling_bytes(m->fp8.scaling) : 0;
}

collage_status gm_fp8_state_save(const gm_model *m, void *buf, size_t cap) {
    if (!m) return COLLAGE_ERR_NULL;
    return m->fp8.scaling ? collage__fp8_scaling_save(m->fp8.scaling, buf, cap) : COLLAGE_OK;
}

collage_status gm_fp8_state_load(gm_model *m, const void *buf, size_t len) {
    if (!m) return COLLAGE_ERR_NULL;
    if (!m->fp8.scaling)
        return len ? fail(m, COLLAGE_ERR_FORMAT, "%zu bytes of fp8 scaling state for a model without one", len) : COLLAGE_OK;
    return collage__fp8_scaling_load(m->fp8.scaling, buf, len, m->err, sizeof m->err);
}

/* ---------------------------------------------------------------- the fp4 precision */
static void fp4_wcopies_free(gm_fp4 *f) {
    for (int k = 0; k < f->nwc; k++) nn_fp4_wcopy_free(&f->wc[k]);
    free(f->wc);
    f->wc = NULL, f->nwc = 0;
}

/* The weight copies of the layers with 4-bit products (numerics.md §15: NVFP4's forward quantization of W
 * serves dX; none for MXFP4, whose blocks follow K), each allocated for its layer's weight. */
static collage_status fp4_copies_new(gm_model *m) {
    fp4_wcopies_free(&m->fp4);
    const nn_fp4_layer L = {.recipe = m->fp4.recipe};
    const int layers = m->fp4.layers, n = layers - m->fp4.bf16_last;
    if (n < 1 || !nn_fp4_wcopy_serves(&L)) return COLLAGE_OK;
    int *io = malloc(2 * (size_t)layers * sizeof *io);
    if (!io || !(m->fp4.wc = calloc((size_t)n, sizeof *m->fp4.wc))) {
        free(io);
        return COLLAGE_ERR_NOMEM;
    }
    m->fp4.nwc = n;
    m->g->fp8_layers(m->plan, io, io + layers);
    int bad = 0;
    for (int k = 0; k < n && !bad; k++) bad = nn_fp4_wcopy_alloc(&m->fp4.wc[k], io[k], io[layers + k]);
    free(io);
    if (bad) fp4_wcopies_free(&m->fp4);
    return bad ? COLLAGE_ERR_NOMEM : COLLAGE_OK;
}

collage_status gm_fp4_set(gm_model *m, collage_fp4_recipe recipe, int hadamard, int grad_rn, int bf16_last, uint64_t seed) {
    if (!m) return COLLAGE_ERR_NULL;
    if (m->prec != GM_FP4) return fail(m, COLLAGE_ERR_UNSUPPORTED, "fp4 settings on a %s model", PRECISIONS[m->prec].name);
    if ((unsigned)recipe >= COLLAGE_FP4_RECIPE_COUNT) return fail(m, COLLAGE_ERR_ARG, "unknown fp4 recipe %d", (int)recipe);
    if (bf16_last < 0 || bf16_last > m->fp4.layers)
        return fail(m, COLLAGE_ERR_ARG, "bf16 last layers %d outside 0..%d (the model's linear layers)", bf16_last,
                    m->fp4.layers);
    m->fp4.recipe = recipe, m->fp4.hadamard = hadamard != 0, m->fp4.grad_rn = grad_rn != 0, m->fp4.bf16_last = bf16_last;
    m->fp4.signs = collage__fp4_rht_signs(collage_rand_key(seed, COLLAGE_FP4_RHT_STREAM));
    if (fp4_copies_new(m) != COLLAGE_OK) return fail(m, COLLAGE_ERR_NOMEM, "out of memory for the fp4 weight copies");
    gm_env e; /* the products' scratch for the new settings (the Hadamard inputs), now rather than in a step */
    return bf16_env(m, &e);
}

collage_status gm_fp4_key(gm_model *m, uint64_t key) {
    if (!m) return COLLAGE_ERR_NULL;
    if (m->prec != GM_FP4) return fail(m, COLLAGE_ERR_UNSUPPORTED, "fp4 key on a %s model", PRECISIONS[m->prec].name);
    m->fp4.key = key;
    return COLLAGE_OK;
}

int gm_fp4_layers(const gm_model *m) { return m && m->prec == GM_FP4 ? m->fp4.layers : 0; }
double gm_fp4_quant_seconds(const gm_model *m) { return m && m->prec == GM_FP4 ? m->fp4.ws.quant_s : 0.0; }

/* The 8- or 4-bit products' status of the call just run: COLLAGE_ERR_NONFINITE with the message, or
 * COLLAGE_OK. */
static collage_status fp8_status(gm_model *m) {
    if (m->prec == GM_FP4 && m->fp4.st != COLLAGE_OK)
        return fail(m, m->fp4.st, "a 4-bit product's operand holds NaN or Inf (%s): skip this step",
                    collage_status_str(m->fp4.st));
    if (m->prec != GM_FP8 || m->fp8.st == COLLAGE_OK) return COLLAGE_OK;
    return fail(m, m->fp8.st, "an fp8 product's operand holds NaN or Inf (%s): skip this step",
                collage_status_str(m->fp8.st));
}

static collage_status alloc_slabs(gm_model *m) {
    const size_t n = m->sz.nparams, bt = (size_t)m->maxB * (size_t)m->maxT;
    collage__products_for(&m->cfg, PRECISIONS[m->prec].products, (int)bt, &m->pp);
    const int bf16 = run_of(m) == RUN_BF16, emu = emulated(m) != 0;
    m->tok = calloc(bt, sizeof(int));
    m->tgt = calloc(bt, sizeof(int));
    m->acts = calloc(m->sz.nacts, m->esize);
    int ok = m->tok && m->tgt && m->acts;
    if (!bf16) ok = ok && (m->grads = calloc(n, m->esize));
    if (bf16 || emu) ok = ok && (m->grads16 = calloc(n, sizeof(collage_bf16)));
    if (emu) ok = ok && (m->w32 = calloc(n, sizeof(float)));
    if (m->g->mlm) ok = ok && (m->len = calloc((size_t)m->maxB, sizeof(int))) && (m->rows = calloc(bt, sizeof(int)));
    if (bf16) {
        m->acts16 = calloc(m->sz.nacts16, sizeof(uint16_t));
        m->gsums = calloc(m->sz.ngs ? m->sz.ngs : 1, sizeof(float));
        gm_env e;
        ok = ok && m->acts16 && m->gsums && bf16_env(m, &e) == COLLAGE_OK;
    }
    return ok ? COLLAGE_OK : COLLAGE_ERR_NOMEM;
}

collage_status gm_create(const gm_graph *g, const collage_model_config *cfg, gm_precision prec, int maxB, int maxT,
                         gm_model **out) {
    if (!out) return COLLAGE_ERR_NULL;
    *out = NULL;
    if (!g || !cfg) return COLLAGE_ERR_NULL;
    if ((unsigned)prec >= GM_PRECISION_COUNT) return COLLAGE_ERR_ARG;
    if (maxB < 1 || maxT < 1) return COLLAGE_ERR_SIZE;
    if ((prec == GM_FP8 || prec == GM_FP4) && !g->fp8_layers) return COLLAGE_ERR_UNSUPPORTED;
    gm_model *m = calloc(1, sizeof *m);
    if (!m) return COLLAGE_ERR_NOMEM;
    *m = (gm_model){.g = g, .cfg = *cfg, .prec = prec, .maxB = maxB, .maxT = maxT,
                    .esize = PRECISIONS[prec].run == RUN_F64 ? sizeof(double) : sizeof(float)};
    m->plan = g->plan_new(cfg, maxB, maxT, PRECISIONS[prec].run == RUN_BF16, &m->sz);
    if (m->plan && prec == GM_FP4) m->fp4.layers = g->fp8_layers(m->plan, NULL, NULL);
    if (!m->plan || (prec == GM_FP8 && fp8_state_new(m) != COLLAGE_OK) ||
        (prec == GM_FP4 && fp4_copies_new(m) != COLLAGE_OK) || alloc_slabs(m) != COLLAGE_OK) {
        gm_free(m);
        return COLLAGE_ERR_NOMEM;
    }
    *out = m;
    return COLLAGE_OK;
}

void gm_free(gm_model *m) {
    if (!m) return;
    if (m->plan) m->g->plan_free(m->plan);
    free(m->acts); free(m->grads); free(m->grads16); free(m->w32); free(m->tok); free(m->tgt);
    free(m->acts16); free(m->gsums); free(m->len); free(m->rows); nn_ws_free(&m->ws);
    collage__fp8_scaling_free(m->fp8.scaling); nn_fp8_ws_free(&m->fp8.ws); fp8_wcopies_free(&m->fp8);
    nn_fp4_ws_free(&m->fp4.ws); fp4_wcopies_free(&m->fp4);
    free(m);
}

size_t gm_size(const gm_model *m) { return m ? m->sz.nparams : 0; }
const char *gm_error(const gm_model *m) { return m ? m->err : "no model"; }


/* The fp8 products' scratch (operands' values, their blocks' scales and factors, tiles), the weights'
 * copies and the delayed state, in bytes. */
static size_t fp8_scratch(const gm_fp8 *f) {
    size_t b = f->ws.tiles.cap * sizeof(float) + (f->scaling ? collage__fp8_scaling_bytes(f->scaling) : 0);
    for (int w = 0; w < 2; w++) b += f->ws.cap_v[w] * sizeof(uint16_t) + 2 * f->ws.cap_s[w] * sizeof(float);
    for (int k = 0; k < f->nwc; k++) b += f->wc[k].cap_v * sizeof(uint16_t) + 2 * f->wc[k].cap_s * sizeof(float);
    return b;
}

/* The 4-bit products' scratch: per operand its values (bf16), Hadamard inputs (fp32), block scale bytes
 * and two floats per block (element factor, scale value), the tiles, and the weights' copies (bf16
 * values), in bytes. */
static size_t fp4_scratch(const gm_fp4 *f) {
    size_t b = f->ws.tiles.cap * sizeof(float);
    for (int w = 0; w < 2; w++)
        b += f->ws.cap_v[w] * sizeof(uint16_t) + f->ws.cap_h[w] * sizeof(float) + f->ws.cap_s[w] * (1 + 2 * sizeof(float));
    for (int k = 0; k < f->nwc; k++) b += f->wc[k].cap * sizeof(uint16_t);
    return b;
}

collage_status gm_memory(const gm_model *m, collage_model_memory *out) {
    if (!m || !out) return COLLAGE_ERR_NULL;
    const size_t n = m->sz.nparams;
    *out = (collage_model_memory){
        .gradients = (m->grads ? n * m->esize : 0) + (m->grads16 ? n * sizeof(collage_bf16) : 0) +
                     (m->gsums ? m->sz.ngs * sizeof(float) : 0),
        .activations = m->sz.nacts * m->esize + (m->acts16 ? m->sz.nacts16 * sizeof(uint16_t) : 0) +
                       2 * (size_t)m->maxB * (size_t)m->maxT * sizeof(int) +
                       (m->rows ? ((size_t)m->maxB * (size_t)m->maxT + (size_t)m->maxB) * sizeof(int) : 0),
        .scratch = m->ws.cap * sizeof(float) + (m->w32 ? n * sizeof(float) : 0) + fp8_scratch(&m->fp8) +
                   fp4_scratch(&m->fp4)};
    return COLLAGE_OK;
}

/* Sizes and token ids of one call: params and tokens given, B × T within maxB × maxT, every token and
 * target id in [0, V); the ids copied into the model (targets may be NULL). Otherwise a status and the
 * message, nothing copied. */
static collage_status take_input(gm_model *m, const void *params, const int *tokens, const int *targets, int B, int T) {
    const int V = m->cfg.vocab_size;
    m->err[0] = 0;
    if (!params || !tokens) return fail(m, COLLAGE_ERR_NULL, "params or tokens is NULL");
    if (B < 1 || B > m->maxB || T < 1 || T > m->maxT)
        return fail(m, COLLAGE_ERR_SIZE, "batch %d x %d outside 1..%d x 1..%d (maxB x maxT of create)", B, T, m->maxB,
                    m->maxT);
    for (int n = 0; n < B * T; n++) {
        if (tokens[n] < 0 || tokens[n] >= V)
            return fail(m, COLLAGE_ERR_ARG, "token %d at (b %d, t %d) outside [0, vocab_size %d)", tokens[n], n / T,
                        n % T, V);
        if (targets && (targets[n] < 0 || targets[n] >= V))
            return fail(m, COLLAGE_ERR_ARG, "target %d at (b %d, t %d) outside [0, vocab_size %d)", targets[n], n / T,
                        n % T, V);
    }
    memcpy(m->tok, tokens, (size_t)B * T * sizeof(int));
    if (targets) memcpy(m->tgt, targets, (size_t)B * T * sizeof(int));
    return COLLAGE_OK;
}

/* The input checked, the bf16 build chosen, and the weights the graph reads (emulated: widened). */
static collage_status begin_call(gm_model *m, const void *params, const int *tokens, const int *targets, int B, int T,
                                 gm_env *e, const void **w) {
    m->ready = 0;
    collage_status st = take_input(m, params, tokens, targets, B, T);
    *e = (gm_env){0};
    if (st == COLLAGE_OK && run_of(m) == RUN_BF16) st = bf16_env(m, e);
    if (st != COLLAGE_OK) return st;
    *w = params;
    if (emulated(m)) {
        widen16(m->w32, params, m->sz.nparams, emulated(m));
        *w = m->w32;
    }
    return COLLAGE_OK;
}

collage_status gm_forward(gm_model *m, const void *params, const int *tokens, const int *targets, int B, int T,
                          double *loss) {
    if (!m) return COLLAGE_ERR_NULL;
    if (m->g->mlm) {
        const collage_batch b = {.tokens = tokens, .targets = targets, .B = B, .T = T};
        collage_forward_info fi;
        collage_status st = gm_forward_batch(m, params, &b, &fi);
        if ((st == COLLAGE_OK || st == COLLAGE_ERR_NONFINITE) && loss) *loss = fi.loss; /* refused fp8 operand: NaN */
        return st;
    }
    gm_env e;
    const void *w;
    collage_status st = begin_call(m, params, tokens, targets, B, T, &e, &w);
    if (st != COLLAGE_OK) return st;
    const int nt = collage__threads(), *tgt = targets ? m->tgt : NULL;
    const int btok = nn_blas_begin(m->pp.prod.f32);
    double L;
    if (run_of(m) == RUN_BF16) L = m->graph->forward(m->plan, w, m->acts16, m->acts, m->tok, tgt, B, T, &e);
    else if (run_of(m) == RUN_F64) L = m->g->forward_f64(m->plan, w, m->acts, m->tok, tgt, B, T, 0, nt);
    else L = m->g->forward_f32(m->plan, w, m->acts, m->tok, tgt, B, T, emulated(m), nt);
    nn_blas_end(btok);
    m->w_used = w;
    m->B = B;
    m->T = T;
    if (loss) *loss = L;
    if ((st = fp8_status(m)) != COLLAGE_OK) {
        if (loss) *loss = (double)NAN;
        return st;
    }
    m->ready = targets != NULL;
    return COLLAGE_OK;
}

/* The masked-LM graph's backward of the model's precision on the last call's input. */
static void mlm_backward(gm_model *m, const gm_env *e, int nt) {
    const gm_mlm_graph *g = m->g->mlm;
    if (run_of(m) == RUN_BF16)
        g->bf16[m->graph - m->g->bf16].backward(m->plan, m->w_used, (uint16_t *)m->grads16, m->gsums,
                                                     !m->grads16_zero, m->acts16, m->acts, &m->io, e);
    else if (run_of(m) == RUN_F64) g->backward_f64(m->plan, m->w_used, m->grads, m->acts, &m->io, 0, nt);
    else g->backward_f32(m->plan, m->w_used, m->grads, m->acts, &m->io, emulated(m), nt);
}

collage_status gm_backward(gm_model *m) {
    if (!m) return COLLAGE_ERR_NULL;
    if (!m->ready) return fail(m, COLLAGE_ERR_ARG, "backward needs a forward with targets before it (one backward each)");
    gm_env e = {0};
    if (run_of(m) == RUN_BF16 && bf16_env(m, &e) != COLLAGE_OK) return COLLAGE_ERR_NOMEM;
    m->ready = 0;
    const int nt = collage__threads();
    const int btok = nn_blas_begin(m->pp.prod.f32);
    if (m->g->mlm) mlm_backward(m, &e, nt);
    else if (run_of(m) == RUN_BF16)
        m->graph->backward(m->plan, m->w_used, (uint16_t *)m->grads16, m->gsums, !m->grads16_zero, m->acts16, m->acts,
                           m->tok, m->tgt, m->B, m->T, &e);
    else if (run_of(m) == RUN_F64)
        m->g->backward_f64(m->plan, m->w_used, m->grads, m->acts, m->tok, m->tgt, m->B, m->T, 0, nt);
    else
        m->g->backward_f32(m->plan, m->w_used, m->grads, m->acts, m->tok, m->tgt, m->B, m->T, emulated(m), nt);
    nn_blas_end(btok);
    if (emulated(m)) round16(m->grads16, m->grads, m->sz.nparams, emulated(m));
    m->grads16_zero = 0;
    return fp8_status(m);
}

void *gm_grads(gm_model *m) {
    if (!m) return NULL;
    if (!m->grads16) return m->grads;
    if (m->grads16_zero) collage__zero_par(m->grads16, m->sz.nparams * sizeof(collage_bf16)); /* a backward would write it */
    return m->grads16;
}

void gm_zero_grad(gm_model *m) {
    if (!m) return;
    if (m->grads) collage__zero_par(m->grads, m->sz.nparams * m->esize);
    if (m->grads16) m->grads16_zero = 1;
}

collage_status gm_next_logits(gm_model *m, const void *params, const int *tokens, int T, float *logits) {
    if (!m) return COLLAGE_ERR_NULL;
    if (m->g->mlm)
        return fail(m, COLLAGE_ERR_UNSUPPORTED, "a masked-LM model is an encoder: it predicts masked tokens and does "
                                                "not generate text (collage_model_logits_at)");
    if (!logits) {
        m->ready = 0;
        return fail(m, COLLAGE_ERR_NULL, "logits is NULL");
    }
    gm_env e;
    const void *w;
    collage_status st = begin_call(m, params, tokens, NULL, 1, T, &e, &w);
    if (st != COLLAGE_OK) return st;
    const int nt = collage__threads(), V = m->cfg.vocab_size;
    const int btok = nn_blas_begin(m->pp.prod.f32);
    if (run_of(m) == RUN_F64) {
        m->g->last_logits_f64(m->plan, w, m->acts, m->tok, T, 0, nt);
        const double *x = (const double *)m->acts + m->sz.logits;
        for (int i = 0; i < V; i++) logits[i] = (float)x[i];
    } else {
        if (run_of(m) == RUN_BF16) m->graph->last_logits(m->plan, w, m->acts16, m->acts, m->tok, T, &e);
        else m->g->last_logits_f32(m->plan, w, m->acts, m->tok, T, emulated(m), nt);
        memcpy(logits, (const float *)m->acts + m->sz.logits, (size_t)V * sizeof(float));
    }
    nn_blas_end(btok);
    return fp8_status(m);
}

collage_status gm_set_loss_scale(gm_model *m, double scale) {
    if (!m) return COLLAGE_ERR_NULL;
    if (!(scale > 0) || !isfinite(scale)) return fail(m, COLLAGE_ERR_ARG, "loss scale %g is not finite and positive", scale);
    if (run_of(m) == RUN_BF16 || !m->g->set_loss_scale)
        return fail(m, COLLAGE_ERR_UNSUPPORTED, "this model takes no loss scale");
    m->g->set_loss_scale(m->plan, (float)scale);
    return COLLAGE_OK;
}

/* ---------------------------------------------------------------- the masked-LM objective */
/* Lengths of one batch's rows, checked into m->len. */
static collage_status take_lengths(gm_model *m, const collage_batch *b) {
    for (int r = 0; r < b->B; r++) {
        m->len[r] = b->lengths ? b->lengths[r] : b->T;
        if (m->len[r] < 1 || m->len[r] > b->T)
            return fail(m, COLLAGE_ERR_ARG, "row %d has length %d, outside 1..%d", r, m->len[r], b->T);
    }
    return COLLAGE_OK;
}

/* Token ids and targets of one batch, checked: padding reads as id 0 and takes no target; the scored
 * positions and their targets into m->rows, m->tgt; returns their number in *K. */
static collage_status take_tokens(gm_model *m, const collage_batch *b, int *K) {
    const int T = b->T, V = m->cfg.vocab_size;
    *K = 0;
    for (int n = 0; n < b->B * T; n++) {
        const int t = n % T, r = n / T, y = b->targets ? b->targets[n] : COLLAGE_TARGET_NONE;
        if (t >= m->len[r]) { /* padding: not read, not scored */
            if (y != COLLAGE_TARGET_NONE)
                return fail(m, COLLAGE_ERR_ARG, "target %d at (b %d, t %d), padding beyond the row's length %d", y, r,
                            t, m->len[r]);
            m->tok[n] = 0;
            continue;
        }
        if (b->tokens[n] < 0 || b->tokens[n] >= V)
            return fail(m, COLLAGE_ERR_ARG, "token %d at (b %d, t %d) outside [0, vocab_size %d)", b->tokens[n], r, t, V);
        if (y != COLLAGE_TARGET_NONE && (y < 0 || y >= V))
            return fail(m, COLLAGE_ERR_ARG, "target %d at (b %d, t %d) outside [0, vocab_size %d)", y, r, t, V);
        m->tok[n] = b->tokens[n];
        if (y != COLLAGE_TARGET_NONE) { m->rows[*K] = n; m->tgt[*K] = y; ++*K; }
    }
    return COLLAGE_OK;
}

/* Sizes, lengths, token ids and targets of one batch, checked; copied into the model as m->io. */
static collage_status take_batch(gm_model *m, const void *params, const collage_batch *b) {
    m->err[0] = 0;
    if (!params || !b || !b->tokens) return fail(m, COLLAGE_ERR_NULL, "params, batch or tokens is NULL");
    const int B = b->B, T = b->T;
    if (B < 1 || B > m->maxB || T < 1 || T > m->maxT)
        return fail(m, COLLAGE_ERR_SIZE, "batch %d x %d outside 1..%d x 1..%d (maxB x maxT of create)", B, T, m->maxB,
                    m->maxT);
    if (!(b->loss_divisor >= 0) || !isfinite(b->loss_divisor))
        return fail(m, COLLAGE_ERR_ARG, "loss divisor %g: 0 (the mean) or positive", b->loss_divisor);
    int K = 0;
    collage_status st = take_lengths(m, b);
    if (st == COLLAGE_OK) st = take_tokens(m, b, &K);
    if (st != COLLAGE_OK) return st;
    m->io = (gm_io){.tok = m->tok, .len = b->lengths ? m->len : NULL, .rows = m->rows, .tgt = b->targets ? m->tgt : NULL,
                    .B = B, .T = T, .K = K, .divisor = b->loss_divisor > 0 ? b->loss_divisor : K > 0 ? K : 1};
    return COLLAGE_OK;
}

/* The weights the graph reads: the caller's slab, or in an emulated model the slab widened. */
static const void *weights(gm_model *m, const void *params) {
    if (!emulated(m)) return params;
    widen16(m->w32, params, m->sz.nparams, emulated(m));
    return m->w32;
}

/* The masked-LM graph of the model's precision on m->io: Σ losses; *hits: the scored rows predicted right. */
static double mlm_run(gm_model *m, const void *w, const gm_env *e, long *hits) {
    const gm_mlm_graph *g = m->g->mlm;
    const int nt = collage__threads(), K = m->io.K, V = m->cfg.vocab_size, Vp = m->cfg.padded_vocab_size;
    const int scored = K > 0 && m->io.tgt;
    double sum;
    if (run_of(m) == RUN_F64) {
        sum = g->forward_f64(m->plan, w, m->acts, &m->io, 0, nt);
        *hits = scored ? nn_argmax_hits_f64((const double *)m->acts + m->sz.logits, m->tgt, K, V, Vp, nt) : 0;
        return sum;
    }
    if (run_of(m) == RUN_BF16) sum = g->bf16[m->graph - m->g->bf16].forward(m->plan, w, m->acts16, m->acts, &m->io, e);
    else sum = g->forward_f32(m->plan, w, m->acts, &m->io, emulated(m), nt);
    *hits = scored ? nn_argmax_hits_f32((const float *)m->acts + m->sz.logits, m->tgt, K, V, Vp, nt) : 0;
    return sum;
}

/* A causal model's batch: full rows, every position scored, the mean; no count of hits. */
static collage_status forward_full_rows(gm_model *m, const void *params, const collage_batch *b,
                                        collage_forward_info *out) {
    const char *fam = collage_family_name(m->cfg.family);
    if (!b) return fail(m, COLLAGE_ERR_NULL, "batch is NULL");
    for (int r = 0; b->lengths && r < b->B; r++)
        if (b->lengths[r] != b->T)
            return fail(m, COLLAGE_ERR_UNSUPPORTED, "row %d is %d of %d tokens long: a %s model takes no padding", r,
                        b->lengths[r], b->T, fam);
    if (b->loss_divisor != 0)
        return fail(m, COLLAGE_ERR_UNSUPPORTED, "a %s model's loss is the mean over every position (no divisor)", fam);
    double loss = (double)NAN;
    collage_status st = gm_forward(m, params, b->tokens, b->targets, b->B, b->T, &loss);
    if (st == COLLAGE_OK && out)
        *out = (collage_forward_info){.loss = loss, .scored = b->targets ? (long long)b->B * b->T : 0, .correct = -1};
    return st;
}

collage_status gm_forward_batch(gm_model *m, const void *params, const collage_batch *b, collage_forward_info *out) {
    if (!m) return COLLAGE_ERR_NULL;
    if (!m->g->mlm) return forward_full_rows(m, params, b, out);
    m->ready = 0;
    collage_status st = take_batch(m, params, b);
    gm_env e = {0};
    if (st == COLLAGE_OK && run_of(m) == RUN_BF16) st = bf16_env(m, &e);
    if (st != COLLAGE_OK) return st;
    const void *w = weights(m, params);
    long hits = 0;
    const int btok = nn_blas_begin(m->pp.prod.f32);
    const double sum = mlm_run(m, w, &e, &hits);
    nn_blas_end(btok);
    m->w_used = w;
    if ((st = fp8_status(m)) != COLLAGE_OK) {
        if (out) *out = (collage_forward_info){.loss = (double)NAN, .correct = -1};
        return st;
    }
    m->ready = b->targets != NULL;
    if (out)
        *out = (collage_forward_info){.loss = b->targets ? sum / m->io.divisor : (double)NAN,
                                      .scored = b->targets ? m->io.K : 0, .correct = hits};
    return COLLAGE_OK;
}

/* Copies the K rows of logits the last forward left (V of each row's Vp) into logits as float. */
static void copy_logits(const gm_model *m, int K, float *logits) {
    const int V = m->cfg.vocab_size, Vp = m->cfg.padded_vocab_size;
    for (int k = 0; k < K; k++)
        for (int i = 0; i < V; i++) {
            const size_t at = m->sz.logits + (size_t)k * Vp + (size_t)i;
            logits[(size_t)k * V + i] = run_of(m) == RUN_F64 ? (float)((const double *)m->acts)[at] : ((const float *)m->acts)[at];
        }
}

/* The logits of the positions pos of one sequence, on the model's kernels (its own nn_blas_begin, as every
 * call of the object that runs a graph). */
collage_status gm_logits_at(gm_model *m, const void *params, const int *tokens, int T, const int *pos, int npos,
                            float *logits) {
    if (!m) return COLLAGE_ERR_NULL;
    if (!m->g->mlm)
        return fail(m, COLLAGE_ERR_UNSUPPORTED, "a %s model predicts the next token, not masked positions",
                    collage_family_name(m->cfg.family));
    m->ready = 0;
    if (!logits || !pos) return fail(m, COLLAGE_ERR_NULL, "positions or logits is NULL");
    if (npos < 1 || npos > T) return fail(m, COLLAGE_ERR_SIZE, "%d positions of a %d-token sequence", npos, T);
    const collage_batch b = {.tokens = tokens, .B = 1, .T = T};
    collage_status st = take_batch(m, params, &b);
    for (int k = 0; st == COLLAGE_OK && k < npos; k++) {
        if (pos[k] < 0 || pos[k] >= T) st = fail(m, COLLAGE_ERR_ARG, "position %d outside 0..%d", pos[k], T - 1);
        m->rows[k] = pos[k];
    }
    gm_env e = {0};
    if (st == COLLAGE_OK && run_of(m) == RUN_BF16) st = bf16_env(m, &e);
    if (st != COLLAGE_OK) return st;
    m->io.K = npos;
    long hits;
    const int btok = nn_blas_begin(m->pp.prod.f32);
    mlm_run(m, weights(m, params), &e, &hits);
    nn_blas_end(btok);
    copy_logits(m, npos, logits);
    return fp8_status(m);
}

/* ---------------------------------------------------------------- stored activations (tests) */
int gm_act_tensors(const gm_model *m, gm_act *out, int cap) {
    if (!m || !m->g->acts) return 0;
    gm_act_slot slot[64];
    const int n = m->g->acts(m->plan, slot, 64);
    for (int k = 0; k < n && k < 64 && k < cap && out; k++) {
        const int s16 = m->acts16 && slot[k].bf16;
        const size_t es = s16 ? sizeof(uint16_t) : m->esize;
        const char *base = s16 ? (const char *)m->acts16 : (const char *)m->acts;
        out[k] = (gm_act){.name = slot[k].name, .data = base + slot[k].offset * es, .count = slot[k].count,
                          .esize = es, .bf16 = (run_of(m) == RUN_BF16 || emulated(m)) && slot[k].bf16};
    }
    return n;
}

/* ---------------------------------------------------------------- the families' plans */
size_t gm_lay_out_params(const collage_tensor_info *t, int nt, int L, const unsigned char *layered, size_t *p,
                         size_t *pl, size_t *gs) {
    size_t ngs = 0;
    for (int k = 0; k < nt; k++) {
        p[k] = t[k].offset;
        pl[k] = layered[k] ? t[k].count / (size_t)L : 0;
        gs[k] = ngs;
        if (!t[k].product) ngs += t[k].count;
    }
    return ngs;
}

void gm_lay_out_acts(int n, int L, const size_t *per, const size_t *whole, const unsigned char *is16, int split,
                     size_t *a, size_t *al, size_t *an, gm_sizes *sz) {
    size_t off[2] = {0, 0};
    for (int k = 0; k < n; k++) {
        const int s16 = split && is16[k];
        const size_t count = per[k] ? (size_t)L * per[k] : whole[k];
        a[k] = off[s16];
        al[k] = per[k];
        if (an) an[k] = count;
        off[s16] += count;
    }
    sz->nacts = off[0];
    sz->nacts16 = off[1];
}
