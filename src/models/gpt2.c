/* gpt2.c — the GPT-2 family: configuration, presets and shape checks, the parameter slab in llm.c's order,
 * GPT-2 initialisation, the activation slab, forward/backward in fp32, bf16 and fp64 (the layer ops of
 * src/nn in the order of gpt2_graph.inc, instantiated for float and double), next-token logits, and the
 * family's row of the model table (collage_model_config ↔ collage_gpt_config). */
#include "internal.h"
#include "gpt2.h"
#include "gpt2_ckpt.h"
#include "gpt2_plan.h"
#include "model.h"
#include "nn.h"
#include <math.h>
#include <stdarg.h>

/* ---------------------------------------------------------------- the activation slab (gpt2_plan.h) */
static const char *const ACT_NAMES[A_COUNT] = {
    "encoded", "ln1", "ln1_mean", "ln1_rstd", "qkv", "atty", "att", "residual2", "ln2", "ln2_mean", "ln2_rstd",
    "fch", "fch_gelu", "residual3", "lnf", "lnf_mean", "lnf_rstd", "logits", "losses",
    "d_residual", "d_ln", "d_atty", "d_qkv", "d_fch", "d_logits", "attn_scratch"};
/* 1: holds bf16 values in the bf16 models (2-byte storage in COLLAGE_GPT_BF16). logits hold the fp32
 * softmax after a forward with targets. */
static const unsigned char ACT_BF16[A_COUNT] = {1, 1, 0, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0,
                                                1, 1, 1, 1, 1, 1, 0};

/* ---------------------------------------------------------------- the graph, twice */
float collage__gpt_exp_f32(float x) { return nn_exp_f32(x); }

#define GRAPH_INC "gpt2_graph.inc"
#include "graph_twice.h"

/* ---------------------------------------------------------------- configuration */
const char *collage_gpt_precision_name(collage_gpt_precision p) {
    switch (p) {
    case COLLAGE_GPT_FP32: return "fp32";
    case COLLAGE_GPT_BF16: return "bf16";
    case COLLAGE_GPT_FP64: return "fp64";
    case COLLAGE_GPT_BF16_EMULATED: return "bf16-emulated";
    case COLLAGE_GPT_FP16_EMULATED: return "fp16-emulated";
    default: return "unknown";
    }
}

collage_status collage_gpt_precision_parse(const char *name, collage_gpt_precision *out) {
    if (!name || !out) return COLLAGE_ERR_NULL;
    for (int p = 0; p < COLLAGE_GPT_PRECISION_COUNT; p++)
        if (strcmp(name, collage_gpt_precision_name((collage_gpt_precision)p)) == 0) {
            *out = (collage_gpt_precision)p;
            return COLLAGE_OK;
        }
    return COLLAGE_ERR_ARG;
}

int collage_gpt_pad_vocab(int vocab_size) { return vocab_size <= 0 ? 0 : (vocab_size + 127) / 128 * 128; }

collage_status collage_gpt_preset(const char *name, collage_gpt_config *out) {
    if (!name || !out) return COLLAGE_ERR_NULL;
    if (strcmp(name, "tiny") == 0)
        *out = (collage_gpt_config){.vocab_size = 256, .padded_vocab_size = 256, .max_seq_len = 64,
                                    .num_layers = 2, .num_heads = 4, .channels = 128};
    else if (strcmp(name, "small") == 0)
        *out = (collage_gpt_config){.vocab_size = 256, .padded_vocab_size = 256, .max_seq_len = 256,
                                    .num_layers = 6, .num_heads = 6, .channels = 384};
    else if (strcmp(name, "gpt2") == 0)
        *out = (collage_gpt_config){.vocab_size = 50257, .padded_vocab_size = 50304, .max_seq_len = 1024,
                                    .num_layers = 12, .num_heads = 12, .channels = 768};
    else return COLLAGE_ERR_ARG;
    return COLLAGE_OK;
}

collage_status collage_gpt_check(const collage_gpt_config *cfg, int maxB, int maxT, char *msg, size_t cap) {
    if (!cfg) return collage__check_dims(NULL, 1, maxB, maxT, msg, cap);
    const collage_model_config c = {.family = COLLAGE_FAMILY_GPT2, .vocab_size = cfg->vocab_size,
                                    .padded_vocab_size = cfg->padded_vocab_size, .max_seq_len = cfg->max_seq_len,
                                    .num_layers = cfg->num_layers, .num_heads = cfg->num_heads, .channels = cfg->channels};
    return collage__check_dims(&c, 1, maxB, maxT, msg, cap);
}

static const char *const P_NAMES[COLLAGE_GPT_NTENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

int collage_gpt_tensors(const collage_gpt_config *cfg, collage_gpt_tensor out[COLLAGE_GPT_NTENSORS]) {
    if (!out || collage_gpt_check(cfg, 0, 0, NULL, 0) != COLLAGE_OK) return 0;
    const size_t Vp = (size_t)cfg->padded_vocab_size, T = (size_t)cfg->max_seq_len, L = (size_t)cfg->num_layers,
                 C = (size_t)cfg->channels;
    /* shapes as in llm.c's fill_in_parameter_sizes; 0 in shape[0] marks "no layer dimension" */
    const size_t sh[COLLAGE_GPT_NTENSORS][3] = {
        {Vp, C, 0}, {T, C, 0}, {L, C, 0}, {L, C, 0}, {L, 3 * C, C}, {L, 3 * C, 0}, {L, C, C}, {L, C, 0},
        {L, C, 0}, {L, C, 0}, {L, 4 * C, C}, {L, 4 * C, 0}, {L, C, 4 * C}, {L, C, 0}, {C, 0, 0}, {C, 0, 0}};
    size_t off = 0;
    for (int k = 0; k < COLLAGE_GPT_NTENSORS; k++) {
        collage_gpt_tensor *t = &out[k];
        t->name = P_NAMES[k];
        t->offset = off;
        t->ndim = 0;
        t->count = 1;
        for (int d = 0; d < 3; d++) {
            t->shape[d] = sh[k][d];
            if (sh[k][d]) { t->ndim++; t->count *= sh[k][d]; }
        }
        t->decay = k == COLLAGE_GPT_WTE || k == COLLAGE_GPT_WPE || k == COLLAGE_GPT_QKVW ||
                   k == COLLAGE_GPT_ATTPROJW || k == COLLAGE_GPT_FCW || k == COLLAGE_GPT_FCPROJW;
        off += t->count;
    }
    return COLLAGE_GPT_NTENSORS;
}

size_t collage_gpt_num_params(const collage_gpt_config *cfg) {
    collage_gpt_tensor t[COLLAGE_GPT_NTENSORS];
    if (!collage_gpt_tensors(cfg, t)) return 0;
    return t[COLLAGE_GPT_NTENSORS - 1].offset + t[COLLAGE_GPT_NTENSORS - 1].count;
}

int collage_gpt_param_groups(const collage_gpt_config *cfg, double weight_decay,
                             collage_param_group out[COLLAGE_GPT_NTENSORS]) {
    collage_gpt_tensor t[COLLAGE_GPT_NTENSORS];
    if (!out || !collage_gpt_tensors(cfg, t)) return 0;
    for (int k = 0; k < COLLAGE_GPT_NTENSORS; k++)
        out[k] = (collage_param_group){.name = t[k].name, .offset = t[k].offset, .count = t[k].count,
                                       .weight_decay = t[k].decay ? weight_decay : 0.0};
    return COLLAGE_GPT_NTENSORS;
}

collage_status collage_gpt_init_weights(const collage_gpt_config *cfg, uint64_t seed, float *w, size_t n) {
    collage_gpt_tensor t[COLLAGE_GPT_NTENSORS];
    if (!cfg || !w) return COLLAGE_ERR_NULL;
    if (!collage_gpt_tensors(cfg, t)) return COLLAGE_ERR_SIZE;
    if (n != collage_gpt_num_params(cfg)) return COLLAGE_ERR_SIZE;
    const double resid_std = 0.02 / sqrt(2.0 * (double)cfg->num_layers);
    for (int k = 0; k < COLLAGE_GPT_NTENSORS; k++) {
        float *x = w + t[k].offset;
        const long cnt = (long)t[k].count;
        if (!t[k].decay) {
            const float v = (k == COLLAGE_GPT_LN1W || k == COLLAGE_GPT_LN2W || k == COLLAGE_GPT_LNFW) ? 1.0f : 0.0f;
            for (long i = 0; i < cnt; i++) x[i] = v;
            continue;
        }
        const double sd = (k == COLLAGE_GPT_ATTPROJW || k == COLLAGE_GPT_FCPROJW) ? resid_std : 0.02;
        const long live = k == COLLAGE_GPT_WTE ? (long)cfg->vocab_size * cfg->channels : cnt; /* pad rows: 0 */
        collage__fill_normal(x, (size_t)cnt, (size_t)live, sd, collage_rand_key(seed, (uint64_t)k));
    }
    return COLLAGE_OK;
}

/* ---------------------------------------------------------------- the model */
struct collage_gpt {
    collage_gpt_config cfg;
    collage_gpt_precision prec;
    int maxB, maxT;
    gpt_plan P;
    size_t esize;           /* bytes per element of acts and grads: 4 (fp32, bf16-emulated) or 8 (fp64) */
    void *acts;             /* float or double; in bf16 the float part (statistics, logits, scratch) */
    void *grads;            /* float or double: the gradient slab (bf16-emulated: its fp32 accumulator) */
    /* bf16 and bf16-emulated */
    collage_bf16 *grads16;  /* the gradient slab handed out */
    int grads16_zero;       /* zero_grad ran since the last backward: grads16 reads as zero */
    float *w32;             /* bf16-emulated: the weights widened to fp32 at each forward */
    /* bf16 */
    uint16_t *acts16;       /* the bf16 activations */
    float *gsums;           /* the float sums of the bias and norm gradients (P.ngs) */
    nn_ws ws;               /* the products' tile scratch */
    collage__products pp;   /* the kernels of its products, chosen at create */
    const struct bf16_graph *graph; /* the bf16 graph of the last call: baseline or AVX-512 */
    const void *w_used;     /* the weights of the last forward (caller's slab or w32) */
    int *tok, *tgt;         /* copies of the last forward's input */
    int B, T, ready;        /* ready: a forward with targets awaits its backward */
    char err[200];
};

/* The float ops' rounding of an emulated 16-bit model (nn.h nn_rnd_f32's bf): 1 bf16, 2 fp16, 0 none. */
/* The library's precision of a GPT-2 precision, for the choice of kernels. */
static collage_real real_of(collage_gpt_precision p) {
    return p == COLLAGE_GPT_BF16 ? COLLAGE_REAL_BF16 : p == COLLAGE_GPT_FP64 ? COLLAGE_REAL_FP64 : COLLAGE_REAL_FP32;
}

static int emulated(const collage_gpt *m) {
    return m->prec == COLLAGE_GPT_BF16_EMULATED ? 1 : m->prec == COLLAGE_GPT_FP16_EMULATED ? 2 : 0;
}

/* Offsets of the activations: one slab, or in bf16 (split) a bf16 slab and a float slab. */
static void plan_acts(gpt_plan *P, int maxB, int maxT, int split) {
    const size_t N = (size_t)maxB * (size_t)maxT, C = (size_t)P->C, L = (size_t)P->L, NH = (size_t)P->NH;
    const size_t TT = (size_t)maxB * NH * (size_t)maxT * (size_t)maxT, NV = N * (size_t)P->Vp;
    /* per layer size (al; the count is L·al) or, for al = 0, the whole count */
    const size_t per[A_COUNT] = {0, N * C, N, N, 3 * N * C, N * C, TT, N * C, N * C, N, N,
                                 4 * N * C, 4 * N * C, N * C, 0, 0, 0, 0, 0,
                                 0, 0, 0, 0, 0, 0, 0};
    const size_t whole[A_COUNT] = {N * C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, N * C, N, N, NV, N,
                                   N * C, N * C, N * C, 3 * N * C, 4 * N * C, split ? NV : 0,
                                   nn_attention_scratch(maxB, maxT, P->C, P->NH)};
    size_t off[2] = {0, 0};
    for (int k = 0; k < A_COUNT; k++) {
        const int s16 = split && ACT_BF16[k];
        P->a[k] = off[s16];
        P->al[k] = per[k];
        P->an[k] = per[k] ? L * per[k] : whole[k];
        off[s16] += P->an[k];
    }
    P->nacts = off[0];
    P->nacts16 = off[1];
}

static void plan_build(gpt_plan *P, const collage_gpt_config *c, int maxB, int maxT, int split) {
    collage_gpt_tensor t[COLLAGE_GPT_NTENSORS];
    collage_gpt_tensors(c, t);
    *P = (gpt_plan){.V = c->vocab_size, .Vp = c->padded_vocab_size, .maxT = c->max_seq_len,
                    .L = c->num_layers, .NH = c->num_heads, .C = c->channels, .loss_scale = 1.0f};
    for (int k = 0; k < COLLAGE_GPT_NTENSORS; k++) {
        P->p[k] = t[k].offset;
        P->pl[k] = (t[k].ndim > 1 && k != COLLAGE_GPT_WTE && k != COLLAGE_GPT_WPE) ? t[k].count / (size_t)P->L : 0;
        P->gs[k] = P->ngs;
        if (!gpt_product_weight(k)) P->ngs += t[k].count;
    }
    P->nparams = t[COLLAGE_GPT_NTENSORS - 1].offset + t[COLLAGE_GPT_NTENSORS - 1].count;
    plan_acts(P, maxB, maxT, split);
}

/* The slabs of each precision; 0 or COLLAGE_ERR_NOMEM. */
static collage_status model_alloc(collage_gpt *m) {
    const size_t n = m->P.nparams, bt = (size_t)m->maxB * (size_t)m->maxT;
    const collage_model_config mc = {.family = COLLAGE_FAMILY_GPT2, .vocab_size = m->cfg.vocab_size,
                                     .padded_vocab_size = m->cfg.padded_vocab_size, .max_seq_len = m->cfg.max_seq_len,
                                     .num_layers = m->cfg.num_layers, .num_heads = m->cfg.num_heads,
                                     .channels = m->cfg.channels};
    collage__products_for(&mc, real_of(m->prec), (int)bt, &m->pp);
    m->tok = calloc(bt, sizeof(int));
    m->tgt = calloc(bt, sizeof(int));
    m->acts = calloc(m->P.nacts, m->esize);
    int ok = m->tok && m->tgt && m->acts;
    if (m->prec != COLLAGE_GPT_BF16) {
        m->grads = calloc(n, m->esize);
        ok = ok && m->grads;
    }
    if (m->prec == COLLAGE_GPT_BF16 || emulated(m)) {
        m->grads16 = calloc(n, sizeof(collage_bf16));
        ok = ok && m->grads16;
    }
    if (emulated(m)) {
        m->w32 = calloc(n, sizeof(float));
        ok = ok && m->w32;
    }
    if (m->prec == COLLAGE_GPT_BF16) {
        m->acts16 = calloc(m->P.nacts16, sizeof(uint16_t));
        m->gsums = calloc(m->P.ngs, sizeof(float));
        const gpt_bf16_env e = {.ws = &m->ws, .path = m->pp.prod.bf16, .nt = collage__threads()};
        ok = ok && m->acts16 && m->gsums && gpt_bf16_reserve(&m->P, (int)bt, &e) == 0;
    }
    return ok ? COLLAGE_OK : COLLAGE_ERR_NOMEM;
}

collage_status collage_gpt_create(const collage_gpt_config *cfg, collage_gpt_precision prec, int maxB, int maxT,
                                  collage_gpt **out) {
    if (!out) return COLLAGE_ERR_NULL;
    *out = NULL;
    if (!cfg) return COLLAGE_ERR_NULL;
    if ((unsigned)prec >= COLLAGE_GPT_PRECISION_COUNT) return COLLAGE_ERR_ARG;
    collage_status st = collage_gpt_check(cfg, maxB, maxT, NULL, 0);
    if (st != COLLAGE_OK) return st;
    if (maxB < 1 || maxT < 1) return COLLAGE_ERR_SIZE;
    collage_gpt *m = calloc(1, sizeof *m);
    if (!m) return COLLAGE_ERR_NOMEM;
    m->cfg = *cfg;
    m->prec = prec;
    m->maxB = maxB;
    m->maxT = maxT;
    plan_build(&m->P, cfg, maxB, maxT, prec == COLLAGE_GPT_BF16);
    m->esize = prec == COLLAGE_GPT_FP64 ? sizeof(double) : sizeof(float);
    if (model_alloc(m) != COLLAGE_OK) { collage_gpt_free(m); return COLLAGE_ERR_NOMEM; }
    *out = m;
    return COLLAGE_OK;
}

void collage_gpt_free(collage_gpt *m) {
    if (!m) return;
    free(m->acts); free(m->grads); free(m->grads16); free(m->w32); free(m->tok); free(m->tgt);
    free(m->acts16); free(m->gsums); nn_ws_free(&m->ws);
    free(m);
}

const collage_gpt_config *collage_gpt_get_config(const collage_gpt *m) { return m ? &m->cfg : NULL; }
collage_gpt_precision collage_gpt_get_precision(const collage_gpt *m) { return m ? m->prec : COLLAGE_GPT_FP32; }
size_t collage_gpt_size(const collage_gpt *m) { return m ? m->P.nparams : 0; }
const char *collage_gpt_error(const collage_gpt *m) { return m ? m->err : "no model"; }

collage_status collage_gpt_memory(const collage_gpt *m, collage_gpt_mem *out) {
    if (!m || !out) return COLLAGE_ERR_NULL;
    const size_t n = m->P.nparams;
    *out = (collage_gpt_mem){
        .gradients = (m->grads ? n * m->esize : 0) + (m->grads16 ? n * sizeof(collage_bf16) : 0) +
                     m->P.ngs * (m->gsums ? sizeof(float) : 0),
        .activations = m->P.nacts * m->esize + m->P.nacts16 * sizeof(uint16_t) +
                       2 * (size_t)m->maxB * (size_t)m->maxT * sizeof(int),
        .scratch = m->ws.cap * sizeof(float) + (m->w32 ? n * sizeof(float) : 0)};
    return COLLAGE_OK;
}

__attribute__((format(printf, 3, 4)))
static collage_status fail(collage_gpt *m, collage_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->err, sizeof m->err, fmt, ap);
    va_end(ap);
    return st;
}

/* Sizes and token ids of one call; copies the ids into the model. */
static collage_status take_input(collage_gpt *m, const void *params, const int *tokens, const int *targets,
                                 int B, int T) {
    return collage__take_batch(params, tokens, targets, B, T, m->maxB, m->maxT, m->cfg.vocab_size, m->tok, m->tgt,
                               m->err, sizeof m->err);
}

/* The bf16 graph in two builds with the same values: the loops 4 or 16 lanes wide (collage_get_isa). */
typedef struct bf16_graph {
    int (*reserve)(const gpt_plan *P, int N, const gpt_bf16_env *e);
    double (*forward)(const gpt_plan *P, const uint16_t *w, uint16_t *a16, float *a32, const int *tok,
                      const int *tgt, int B, int T, const gpt_bf16_env *e);
    void (*backward)(const gpt_plan *P, const uint16_t *w, uint16_t *g16, float *gs, int add, uint16_t *a16,
                     float *a32, const int *tok, const int *tgt, int B, int T, const gpt_bf16_env *e);
    void (*last_logits)(const gpt_plan *P, const uint16_t *w, uint16_t *a16, float *a32, const int *tok, int T,
                        const gpt_bf16_env *e);
} bf16_graph;
static const bf16_graph BF16_GRAPHS[2] = {
    {gpt_bf16_reserve, gpt_forward_bf16, gpt_backward_bf16, gpt_last_logits_bf16},
    {gpt_bf16_reserve_avx512, gpt_forward_bf16_avx512, gpt_backward_bf16_avx512, gpt_last_logits_bf16_avx512}};

/* The bf16 graph's environment for this call, its scratch grown for the current thread count. */
static collage_status bf16_env(collage_gpt *m, gpt_bf16_env *e) {
    *e = (gpt_bf16_env){.ws = &m->ws, .path = m->pp.prod.bf16, .nt = collage__threads()};
    m->graph = &BF16_GRAPHS[collage_get_isa() == COLLAGE_ISA_AVX512];
    if (m->graph->reserve(&m->P, m->maxB * m->maxT, e))
        return fail(m, COLLAGE_ERR_NOMEM, "out of memory for the products' scratch (%d threads)", e->nt);
    return COLLAGE_OK;
}

/* The float weights the float kernels read: the caller's slab, or in the emulated models the slab widened. */
static const void *weights(collage_gpt *m, const void *params) {
    if (!emulated(m)) return params;
    collage__widen16(m->w32, params, m->P.nparams, emulated(m));
    return m->w32;
}

static double forward_any(collage_gpt *m, const void *w, const int *tgt, int B, int T, const gpt_bf16_env *e) {
    const int nt = collage__threads();
    switch (m->prec) {
    case COLLAGE_GPT_BF16: return m->graph->forward(&m->P, w, m->acts16, m->acts, m->tok, tgt, B, T, e);
    case COLLAGE_GPT_FP64: return gpt_forward_f64(&m->P, w, m->acts, m->tok, tgt, B, T, 0, nt);
    default:
        return gpt_forward_f32(&m->P, w, m->acts, m->tok, tgt, B, T, emulated(m), nt);
    }
}

collage_status collage_gpt_forward(collage_gpt *m, const void *params, const int *tokens, const int *targets,
                                   int B, int T, double *loss) {
    if (!m) return COLLAGE_ERR_NULL;
    m->ready = 0;
    collage_status st = take_input(m, params, tokens, targets, B, T);
    gpt_bf16_env e = {0};
    if (st == COLLAGE_OK && m->prec == COLLAGE_GPT_BF16) st = bf16_env(m, &e);
    if (st != COLLAGE_OK) return st;
    const void *w = weights(m, params);
    const int btok = nn_blas_begin(m->pp.prod.f32);
    double L = forward_any(m, w, targets ? m->tgt : NULL, B, T, &e);
    nn_blas_end(btok);
    m->w_used = w;
    m->B = B;
    m->T = T;
    m->ready = targets != NULL;
    if (loss) *loss = L;
    return COLLAGE_OK;
}

collage_status collage_gpt_backward(collage_gpt *m) {
    if (!m) return COLLAGE_ERR_NULL;
    if (!m->ready) {
        return fail(m, COLLAGE_ERR_ARG, "backward needs a forward with targets before it (one backward each)");
    }
    gpt_bf16_env e = {0};
    if (m->prec == COLLAGE_GPT_BF16 && bf16_env(m, &e) != COLLAGE_OK) return COLLAGE_ERR_NOMEM;
    m->ready = 0;
    const int nt = collage__threads();
    const int btok = nn_blas_begin(m->pp.prod.f32);
    if (m->prec == COLLAGE_GPT_BF16)
        m->graph->backward(&m->P, m->w_used, (uint16_t *)m->grads16, m->gsums, !m->grads16_zero, m->acts16,
                           m->acts, m->tok, m->tgt, m->B, m->T, &e);
    else if (m->prec == COLLAGE_GPT_FP64)
        gpt_backward_f64(&m->P, m->w_used, m->grads, m->acts, m->tok, m->tgt, m->B, m->T, 0, nt);
    else
        gpt_backward_f32(&m->P, m->w_used, m->grads, m->acts, m->tok, m->tgt, m->B, m->T, emulated(m), nt);
    nn_blas_end(btok);
    if (emulated(m)) collage__round16(m->grads16, m->grads, m->P.nparams, emulated(m));
    m->grads16_zero = 0;
    return COLLAGE_OK;
}

void *collage_gpt_grads(collage_gpt *m) {
    if (!m) return NULL;
    if (!m->grads16) return m->grads;
    if (m->grads16_zero) /* cleared only when read before a backward: a backward after zero_grad writes it */
        collage__zero_par(m->grads16, m->P.nparams * sizeof(collage_bf16));
    return m->grads16;
}

collage_status collage_gpt_set_loss_scale(collage_gpt *m, double scale) {
    if (!m) return COLLAGE_ERR_NULL;
    if (!(scale > 0) || !isfinite(scale)) return COLLAGE_ERR_ARG;
    if (m->prec == COLLAGE_GPT_BF16) return COLLAGE_ERR_UNSUPPORTED;
    m->P.loss_scale = (float)scale;
    return COLLAGE_OK;
}

void collage_gpt_zero_grad(collage_gpt *m) {
    if (!m) return;
    if (m->grads) collage__zero_par(m->grads, m->P.nparams * m->esize);
    if (m->grads16) m->grads16_zero = 1;
}

int collage_gpt_act_tensors(const collage_gpt *m, collage_gpt_act *out, int cap) {
    if (!m) return 0;
    for (int k = 0; k < A_COUNT && k < cap && out; k++) {
        const int s16 = m->acts16 && ACT_BF16[k];
        const size_t es = s16 ? sizeof(uint16_t) : m->esize;
        const char *base = s16 ? (const char *)m->acts16 : (const char *)m->acts;
        out[k] = (collage_gpt_act){.name = ACT_NAMES[k], .data = base + m->P.a[k] * es, .count = m->P.an[k],
                                   .esize = es, .bf16 = (m->prec == COLLAGE_GPT_BF16 || emulated(m) == 1) &&
                                                        ACT_BF16[k]};
    }
    return A_COUNT;
}

/* ---------------------------------------------------------------- inference */
collage_status collage_gpt_next_logits(collage_gpt *m, const void *params, const int *tokens, int T, float *logits) {
    if (!m) return COLLAGE_ERR_NULL;
    m->ready = 0;
    if (!logits) return fail(m, COLLAGE_ERR_NULL, "logits is NULL");
    collage_status st = take_input(m, params, tokens, NULL, 1, T);
    gpt_bf16_env e = {0};
    if (st == COLLAGE_OK && m->prec == COLLAGE_GPT_BF16) st = bf16_env(m, &e);
    if (st != COLLAGE_OK) return st;
    const int nt = collage__threads(), V = m->cfg.vocab_size;
    const void *w = weights(m, params);
    const int btok = nn_blas_begin(m->pp.prod.f32);
    if (m->prec == COLLAGE_GPT_FP64) {
        gpt_last_logits_f64(&m->P, w, m->acts, m->tok, T, 0, nt);
        const double *x = (const double *)m->acts + m->P.a[A_LOGITS];
        for (int i = 0; i < V; i++) logits[i] = (float)x[i];
    } else {
        if (m->prec == COLLAGE_GPT_BF16) m->graph->last_logits(&m->P, w, m->acts16, m->acts, m->tok, T, &e);
        else gpt_last_logits_f32(&m->P, w, m->acts, m->tok, T, emulated(m), nt);
        memcpy(logits, (const float *)m->acts + m->P.a[A_LOGITS], (size_t)V * sizeof(float));
    }
    nn_blas_end(btok);
    return COLLAGE_OK;
}

int collage_gpt_sample(const float *logits, int V, float temperature, uint64_t key, uint64_t index) {
    return collage_sample_logits(logits, V, temperature, key, index);
}

/* ---------------------------------------------------------------- the family's row of the model table */
static collage_gpt_config to_gpt(const collage_model_config *c) {
    return (collage_gpt_config){.vocab_size = c->vocab_size, .padded_vocab_size = c->padded_vocab_size,
                                .max_seq_len = c->max_seq_len, .num_layers = c->num_layers,
                                .num_heads = c->num_heads, .channels = c->channels};
}

static collage_model_config from_gpt(const collage_gpt_config *g) {
    return (collage_model_config){.family = COLLAGE_FAMILY_GPT2, .vocab_size = g->vocab_size,
                                  .padded_vocab_size = g->padded_vocab_size, .max_seq_len = g->max_seq_len,
                                  .num_layers = g->num_layers, .num_heads = g->num_heads, .channels = g->channels};
}

static const char *const GPT2_PRESETS[] = {"tiny", "small", "gpt2", NULL};

static collage_status fam_preset(const char *name, collage_model_config *out) {
    collage_gpt_config g;
    collage_status st = collage_gpt_preset(name, &g);
    if (st == COLLAGE_OK) *out = from_gpt(&g);
    return st;
}

static collage_status fam_check(const collage_model_config *cfg, int maxB, int maxT, char *msg, size_t cap) {
    const collage_gpt_config g = to_gpt(cfg);
    if (cfg && (cfg->num_kv_heads || cfg->hidden_dim || cfg->untied || cfg->norm_eps != 0 || cfg->rope_theta != 0)) {
        if (msg && cap)
            snprintf(msg, cap, "gpt2 has no kv_heads, hidden_dim, untied output, norm_eps or rope_theta (its attention "
                               "is multi-head, its MLP 4 x channels, its output the embedding)");
        return COLLAGE_ERR_ARG;
    }
    return collage_gpt_check(&g, maxB, maxT, msg, cap);
}

static int fam_tensors(const collage_model_config *cfg, collage_tensor_info *out, int cap) {
    const collage_gpt_config g = to_gpt(cfg);
    collage_gpt_tensor t[COLLAGE_GPT_NTENSORS];
    if (!collage_gpt_tensors(&g, t)) return 0;
    for (int k = 0; k < COLLAGE_GPT_NTENSORS && k < cap && out; k++)
        out[k] = (collage_tensor_info){.name = t[k].name, .offset = t[k].offset, .count = t[k].count,
                                       .ndim = t[k].ndim, .shape = {t[k].shape[0], t[k].shape[1], t[k].shape[2], 0},
                                       .decay = t[k].decay, .product = t[k].decay && k != COLLAGE_GPT_WPE};
    return COLLAGE_GPT_NTENSORS;
}

static collage_status fam_init(const collage_model_config *cfg, uint64_t seed, float *w, size_t n) {
    const collage_gpt_config g = to_gpt(cfg);
    return collage_gpt_init_weights(&g, seed, w, n);
}

static collage_status fam_create(const collage_model_config *cfg, collage_real prec, int maxB, int maxT, void **impl) {
    static const collage_gpt_precision P[COLLAGE_REAL_COUNT] = {
        [COLLAGE_REAL_FP32] = COLLAGE_GPT_FP32, [COLLAGE_REAL_BF16] = COLLAGE_GPT_BF16,
        [COLLAGE_REAL_FP64] = COLLAGE_GPT_FP64, [COLLAGE_REAL_FP16] = COLLAGE_GPT_FP16_EMULATED};
    if ((unsigned)prec >= COLLAGE_REAL_COUNT) return COLLAGE_ERR_ARG;
    const collage_gpt_config g = to_gpt(cfg);
    collage_gpt *m = NULL;
    collage_status st = collage_gpt_create(&g, P[prec], maxB, maxT, &m);
    *impl = m;
    return st;
}

static void fam_free(void *m) { collage_gpt_free(m); }
static size_t fam_size(const void *m) { return collage_gpt_size(m); }
static const char *fam_error(const void *m) { return collage_gpt_error(m); }
static collage_status fam_forward(void *m, const void *params, const int *tokens, const int *targets, int B, int T,
                                  double *loss) {
    return collage_gpt_forward(m, params, tokens, targets, B, T, loss);
}
static collage_status fam_backward(void *m) { return collage_gpt_backward(m); }
static void *fam_grads(void *m) { return collage_gpt_grads(m); }
static void fam_zero_grad(void *m) { collage_gpt_zero_grad(m); }
static collage_status fam_set_loss_scale(void *m, double scale) { return collage_gpt_set_loss_scale(m, scale); }
static collage_status fam_next_logits(void *m, const void *params, const int *tokens, int T, float *logits) {
    return collage_gpt_next_logits(m, params, tokens, T, logits);
}
static collage_status fam_memory(const void *m, collage_model_memory *out) {
    collage_gpt_mem g;
    collage_status st = collage_gpt_memory(m, &g);
    if (st == COLLAGE_OK)
        *out = (collage_model_memory){.gradients = g.gradients, .activations = g.activations, .scratch = g.scratch};
    return st;
}

/* llm.c's header starts with the int32 magic 20240326 (little-endian, as every int of the format). */
static int fam_ckpt_probe(const unsigned char *head, size_t len) {
    int32_t magic;
    if (len < sizeof magic) return 0;
    memcpy(&magic, head, sizeof magic);
    return magic == COLLAGE_LLMC_MAGIC;
}

static collage_status fam_ckpt_save(const char *path, const collage_model_config *cfg, const void *params, int bf16,
                                    char *err, size_t cap) {
    const collage_gpt_config g = to_gpt(cfg);
    return collage_ckpt_save_model(path, &g, params, bf16, err, cap);
}

static collage_status fam_ckpt_read_header(const char *path, collage_model_config *cfg, int *bf16, char *err,
                                           size_t cap) {
    collage_gpt_config g;
    collage_status st = collage_ckpt_read_header(path, &g, bf16, err, cap);
    if (st == COLLAGE_OK && cfg) *cfg = from_gpt(&g);
    return st;
}

static collage_status fam_ckpt_load(const char *path, const collage_model_config *cfg, void *params, int want_bf16,
                                    char *err, size_t cap) {
    const collage_gpt_config g = to_gpt(cfg);
    return collage_ckpt_load_model(path, &g, params, want_bf16, err, cap);
}

const collage_model_family collage__gpt2_family = {
    .name = "gpt2", .presets = GPT2_PRESETS, .preset = fam_preset, .pad_vocab = collage_gpt_pad_vocab,
    .check = fam_check, .tensors = fam_tensors, .init_weights = fam_init,
    .create = fam_create, .free = fam_free, .size = fam_size, .error = fam_error, .forward = fam_forward,
    .backward = fam_backward, .grads = fam_grads, .zero_grad = fam_zero_grad, .set_loss_scale = fam_set_loss_scale, .next_logits = fam_next_logits,
    .memory = fam_memory,
    .ckpt_probe = fam_ckpt_probe, .ckpt_what = "llm.c GPT-2: int32 magic 20240326", .ckpt_save = fam_ckpt_save,
    .ckpt_read_header = fam_ckpt_read_header, .ckpt_load = fam_ckpt_load, .hf = &collage__gpt2_hf};
