/* bert.c — the BERT family: presets and shape checks, the parameter slab, BERT initialisation, the
 * activation slab, forward (padding, masked positions) and backward in fp32, bf16 and fp64 (the ops of
 * src/nn in the order of bert_graph.inc, instantiated for float and double; bert_bf16.c for bf16 storage),
 * the logits of chosen positions, and the family's row of the model table. */
#include "internal.h"
#include "bert_plan.h"
#include "model.h"
#include <math.h>
#include <stdarg.h>

/* ---------------------------------------------------------------- the activation slab (bert_plan.h) */
static const char *const ACT_NAMES[BA_COUNT] = {
    "emb", "x0", "x0_mean", "x0_rstd", "qkv", "atty", "att", "r1", "h", "h_mean", "h_rstd", "fch", "fch_gelu", "r2",
    "x", "x_mean", "x_rstd", "head_x", "head_u", "head_gelu", "head_ln", "head_ln_mean", "head_ln_rstd", "logits",
    "losses", "d_residual", "d_ln", "d_atty", "d_qkv", "d_fch", "d_head1", "d_head2", "d_logits", "d_tmp",
    "attn_scratch"};
/* 1: holds bf16 values in the bf16 models (2-byte storage in BERT_BF16). */
static const unsigned char ACT_BF16[BA_COUNT] = {1, 1, 0, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0,
                                                 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0};

/* ---------------------------------------------------------------- the graph, twice */
#define GRAPH_INC "bert_graph.inc"
#include "graph_twice.h"

/* ---------------------------------------------------------------- configuration */
const char *bert_precision_name(bert_precision p) {
    static const char *const names[BERT_PRECISION_COUNT] = {"fp32", "bf16", "fp64", "bf16-emulated", "fp16-emulated"};
    return (unsigned)p < BERT_PRECISION_COUNT ? names[p] : "unknown";
}

int bert_pad_vocab(int vocab_size) { return vocab_size <= 0 ? 0 : (vocab_size + 63) / 64 * 64; }

static const char *const BERT_PRESETS[] = {"bert-tiny", "bert-base", NULL};

collage_status bert_preset(const char *name, collage_model_config *out) {
    if (!name || !out) return COLLAGE_ERR_NULL;
    collage_model_config c;
    if (strcmp(name, "bert-tiny") == 0) {
        c = (collage_model_config){.family = COLLAGE_FAMILY_BERT, .vocab_size = BERT_BYTE_VOCAB, .max_seq_len = 128,
                                   .num_layers = 2, .num_heads = 2, .channels = 128};
    } else if (strcmp(name, "bert-base") == 0) {
        c = (collage_model_config){.family = COLLAGE_FAMILY_BERT, .vocab_size = BERT_BPE_VOCAB, .max_seq_len = 512,
                                   .num_layers = 12, .num_heads = 12, .channels = 768};
    } else return COLLAGE_ERR_ARG;
    c.padded_vocab_size = bert_pad_vocab(c.vocab_size);
    *out = c;
    return COLLAGE_OK;
}

/* A token and the mask at least. */
collage_status bert_check(const collage_model_config *cfg, int maxB, int maxT, char *msg, size_t cap) {
    return collage__check_dims(cfg, 2, maxB, maxT, msg, cap);
}

static const char *const P_NAMES[BERT_NTENSORS] = {
    "wte", "wpe", "wtt", "ln_embw", "ln_embb", "qkvw", "qkvb", "attprojw", "attprojb", "ln1w", "ln1b",
    "fcw", "fcb", "fcprojw", "fcprojb", "ln2w", "ln2b", "headw", "headb", "head_lnw", "head_lnb", "outb"};

int bert_tensors(const collage_model_config *cfg, collage_tensor_info *out, int cap) {
    if (bert_check(cfg, 0, 0, NULL, 0) != COLLAGE_OK) return 0;
    const size_t Vp = (size_t)cfg->padded_vocab_size, T = (size_t)cfg->max_seq_len, L = (size_t)cfg->num_layers,
                 C = (size_t)cfg->channels;
    /* shapes; 0 ends a shape */
    const size_t sh[BERT_NTENSORS][3] = {
        {Vp, C, 0}, {T, C, 0}, {1, C, 0}, {C, 0, 0}, {C, 0, 0},
        {L, 3 * C, C}, {L, 3 * C, 0}, {L, C, C}, {L, C, 0}, {L, C, 0}, {L, C, 0},
        {L, 4 * C, C}, {L, 4 * C, 0}, {L, C, 4 * C}, {L, C, 0}, {L, C, 0}, {L, C, 0},
        {C, C, 0}, {C, 0, 0}, {C, 0, 0}, {C, 0, 0}, {Vp, 0, 0}};
    size_t off = 0;
    for (int k = 0; k < BERT_NTENSORS; k++) {
        collage_tensor_info t = {.name = P_NAMES[k], .offset = off, .count = 1};
        for (int d = 0; d < 3 && sh[k][d]; d++) { t.shape[t.ndim++] = sh[k][d]; t.count *= sh[k][d]; }
        t.decay = k == BERT_WTE || k == BERT_WPE || k == BERT_WTT || k == BERT_QKVW || k == BERT_ATTPROJW ||
                  k == BERT_FCW || k == BERT_FCPROJW || k == BERT_HEADW;
        t.product = k == BERT_WTE || k == BERT_HEADW ? 2 : bert_product_weight(k);
        if (out && k < cap) out[k] = t;
        off += t.count;
    }
    return BERT_NTENSORS;
}

static size_t num_params(const collage_model_config *cfg) {
    collage_tensor_info t[BERT_NTENSORS];
    return bert_tensors(cfg, t, BERT_NTENSORS) ? t[BERT_NTENSORS - 1].offset + t[BERT_NTENSORS - 1].count : 0;
}

collage_status bert_init_weights(const collage_model_config *cfg, uint64_t seed, float *w, size_t n) {
    collage_tensor_info t[BERT_NTENSORS];
    if (!cfg || !w) return COLLAGE_ERR_NULL;
    if (!bert_tensors(cfg, t, BERT_NTENSORS) || n != num_params(cfg)) return COLLAGE_ERR_SIZE;
    for (int k = 0; k < BERT_NTENSORS; k++) {
        float *x = w + t[k].offset;
        if (!t[k].decay) {
            const float v = (k == BERT_LNEW || k == BERT_LN1W || k == BERT_LN2W || k == BERT_HEADLNW) ? 1.0f : 0.0f;
            for (size_t i = 0; i < t[k].count; i++) x[i] = v;
            continue;
        }
        const size_t live = k == BERT_WTE ? (size_t)cfg->vocab_size * (size_t)cfg->channels : t[k].count;
        collage__fill_normal(x, t[k].count, live, 0.02, collage_rand_key(seed, (uint64_t)k));
    }
    return COLLAGE_OK;
}

/* ---------------------------------------------------------------- the model */
struct bert_model {
    collage_model_config cfg;
    bert_precision prec;
    int maxB, maxT;
    bert_plan P;
    size_t esize;           /* bytes per element of acts and grads: 4 (fp32, emulated) or 8 (fp64) */
    void *acts;             /* float or double; in bf16 the float part (statistics, logits, scratch) */
    void *grads;            /* float or double: the gradient slab (emulated: its fp32 accumulator) */
    collage_bf16 *grads16;  /* bf16 and emulated: the gradient slab handed out (fp16 bits in fp16-emulated) */
    int grads16_zero;       /* zero_grad ran since the last backward: grads16 reads as zero */
    float *w32;             /* emulated: the weights widened to fp32 at each forward */
    uint16_t *acts16;       /* bf16: the bf16 activations */
    float *gsums;           /* bf16: the float sums of the gradients no product writes (P.ngs) */
    nn_ws ws;               /* bf16: the products' tile scratch */
    collage__products pp;   /* the kernels of its products, chosen at create */
    const struct bert_graph16 *graph; /* the bf16 graph of the last call: baseline or AVX-512 */
    const void *w_used;     /* the weights of the last forward (caller's slab or w32) */
    int *tok, *len, *rows, *tgt; /* the last forward's tokens (padding as 0), lengths, scored rows, targets */
    bert_io io;
    int ready;              /* a forward with targets awaits its backward */
    char err[200];
};

/* Offsets of the activations: one slab, or in bf16 (split) a bf16 slab and a float slab. */
static void plan_acts(bert_plan *P, int maxB, int maxT, int split) {
    const size_t N = (size_t)maxB * (size_t)maxT, C = (size_t)P->C, L = (size_t)P->L, NH = (size_t)P->NH;
    const size_t TT = (size_t)maxB * NH * (size_t)maxT * (size_t)maxT, NV = N * (size_t)P->Vp;
    size_t per[BA_COUNT] = {0}, whole[BA_COUNT] = {0};
    const size_t layer[] = {3 * N * C, N * C, TT, N * C, N * C, N, N, 4 * N * C, 4 * N * C, N * C, N * C, N, N};
    memcpy(per + BA_FIRST_LAYER, layer, sizeof layer);
    const size_t rest[BA_COUNT] = {
        [BA_EMB] = N * C, [BA_X0] = N * C, [BA_X0_MEAN] = N, [BA_X0_RSTD] = N, [BA_HX] = N * C, [BA_HU] = N * C,
        [BA_HG] = N * C, [BA_HLN] = N * C, [BA_HLN_MEAN] = N, [BA_HLN_RSTD] = N, [BA_LOGITS] = NV, [BA_LOSSES] = N,
        [BA_DRES] = N * C, [BA_DLN] = N * C, [BA_DATTY] = N * C, [BA_DQKV] = 3 * N * C, [BA_DFCH] = 4 * N * C,
        [BA_DH1] = N * C, [BA_DH2] = N * C, [BA_DLOGITS] = split ? NV : 0, [BA_DTMP] = split ? 0 : N * C,
        [BA_SCR] = nn_attention_scratch(maxB, maxT, P->C, P->NH)};
    memcpy(whole, rest, sizeof whole);
    size_t off[2] = {0, 0};
    for (int k = 0; k < BA_COUNT; k++) {
        const int s16 = split && ACT_BF16[k];
        P->a[k] = off[s16];
        P->al[k] = per[k];
        P->an[k] = per[k] ? L * per[k] : whole[k];
        off[s16] += P->an[k];
    }
    P->nacts = off[0];
    P->nacts16 = off[1];
}

static void plan_build(bert_plan *P, const collage_model_config *c, int maxB, int maxT, int split) {
    collage_tensor_info t[BERT_NTENSORS];
    bert_tensors(c, t, BERT_NTENSORS);
    *P = (bert_plan){.V = c->vocab_size, .Vp = c->padded_vocab_size, .maxT = c->max_seq_len, .L = c->num_layers,
                     .NH = c->num_heads, .C = c->channels, .loss_scale = 1.0f};
    for (int k = 0; k < BERT_NTENSORS; k++) {
        P->p[k] = t[k].offset;
        P->pl[k] = k >= BERT_QKVW && k <= BERT_LN2B ? t[k].count / (size_t)P->L : 0;
        P->gs[k] = P->ngs;
        if (!bert_product_weight(k)) P->ngs += t[k].count;
    }
    P->nparams = t[BERT_NTENSORS - 1].offset + t[BERT_NTENSORS - 1].count;
    plan_acts(P, maxB, maxT, split);
}

/* The bf16 graph in two builds with the same values: the loops 4 or 16 lanes wide (collage_get_isa). */
typedef struct bert_graph16 {
    int (*reserve)(const bert_plan *P, int N, const bert_bf16_env *e);
    double (*forward)(const bert_plan *P, const uint16_t *w, uint16_t *a16, float *a32, const bert_io *io,
                      const bert_bf16_env *e);
    void (*backward)(const bert_plan *P, const uint16_t *w, uint16_t *g16, float *gs, int add, uint16_t *a16,
                     float *a32, const bert_io *io, const bert_bf16_env *e);
} bert_graph16;
static const bert_graph16 BF16_GRAPHS[2] = {{bert_bf16_reserve, bert_forward_bf16, bert_backward_bf16},
                                            {bert_bf16_reserve_avx512, bert_forward_bf16_avx512,
                                             bert_backward_bf16_avx512}};

/* The float graphs' rounding (nn.h nn_rnd_f32's bf): 1 in bf16-emulated, 2 in fp16-emulated, 0 otherwise. */
/* The library's precision of a BERT precision, for the choice of kernels. */
static collage_real real_of(bert_precision p) {
    return p == BERT_BF16 ? COLLAGE_REAL_BF16 : p == BERT_FP64 ? COLLAGE_REAL_FP64 : COLLAGE_REAL_FP32;
}

static int emulated(const bert_model *m) {
    return m->prec == BERT_BF16_EMULATED ? 1 : m->prec == BERT_FP16_EMULATED ? 2 : 0;
}

/* The slabs of each precision; 0 or COLLAGE_ERR_NOMEM. */
static collage_status model_alloc(bert_model *m) {
    const size_t n = m->P.nparams, bt = (size_t)m->maxB * (size_t)m->maxT;
    collage__products_for(&m->cfg, real_of(m->prec), (int)bt, &m->pp);
    m->tok = calloc(bt, sizeof(int));
    m->rows = calloc(bt, sizeof(int));
    m->tgt = calloc(bt, sizeof(int));
    m->len = calloc((size_t)m->maxB, sizeof(int));
    m->acts = calloc(m->P.nacts, m->esize);
    int ok = m->tok && m->rows && m->tgt && m->len && m->acts;
    if (m->prec != BERT_BF16) ok = ok && (m->grads = calloc(n, m->esize));
    if (m->prec == BERT_BF16 || emulated(m)) ok = ok && (m->grads16 = calloc(n, sizeof(collage_bf16)));
    if (emulated(m)) ok = ok && (m->w32 = calloc(n, sizeof(float)));
    if (m->prec == BERT_BF16) {
        m->acts16 = calloc(m->P.nacts16, sizeof(uint16_t));
        m->gsums = calloc(m->P.ngs, sizeof(float));
        const bert_bf16_env e = {.ws = &m->ws, .path = m->pp.prod.bf16, .nt = collage__threads()};
        ok = ok && m->acts16 && m->gsums && bert_bf16_reserve(&m->P, (int)bt, &e) == 0;
    }
    return ok ? COLLAGE_OK : COLLAGE_ERR_NOMEM;
}

collage_status bert_create(const collage_model_config *cfg, bert_precision prec, int maxB, int maxT, bert_model **out) {
    if (!out) return COLLAGE_ERR_NULL;
    *out = NULL;
    if (!cfg) return COLLAGE_ERR_NULL;
    if ((unsigned)prec >= BERT_PRECISION_COUNT) return COLLAGE_ERR_ARG;
    collage_status st = bert_check(cfg, maxB, maxT, NULL, 0);
    if (st != COLLAGE_OK) return st;
    if (maxB < 1 || maxT < 1) return COLLAGE_ERR_SIZE;
    bert_model *m = calloc(1, sizeof *m);
    if (!m) return COLLAGE_ERR_NOMEM;
    *m = (bert_model){.cfg = *cfg, .prec = prec, .maxB = maxB, .maxT = maxT,
                      .esize = prec == BERT_FP64 ? sizeof(double) : sizeof(float)};
    plan_build(&m->P, cfg, maxB, maxT, prec == BERT_BF16);
    if (model_alloc(m) != COLLAGE_OK) { bert_free(m); return COLLAGE_ERR_NOMEM; }
    *out = m;
    return COLLAGE_OK;
}

void bert_free(bert_model *m) {
    if (!m) return;
    free(m->acts); free(m->grads); free(m->grads16); free(m->w32); free(m->tok); free(m->len); free(m->rows);
    free(m->tgt); free(m->acts16); free(m->gsums); nn_ws_free(&m->ws);
    free(m);
}

size_t bert_size(const bert_model *m) { return m ? m->P.nparams : 0; }
const char *bert_error(const bert_model *m) { return m ? m->err : "no model"; }
const char *bert_products(const bert_model *m) {
    if (!m) return "none";
    static _Thread_local char s[160];
    collage__products_describe(&m->pp, real_of(m->prec), s, sizeof s);
    return s;
}

collage_status bert_memory(const bert_model *m, collage_model_memory *out) {
    if (!m || !out) return COLLAGE_ERR_NULL;
    const size_t n = m->P.nparams, bt = (size_t)m->maxB * (size_t)m->maxT;
    *out = (collage_model_memory){
        .gradients = (m->grads ? n * m->esize : 0) + (m->grads16 ? n * sizeof(collage_bf16) : 0) +
                     (m->gsums ? m->P.ngs * sizeof(float) : 0),
        .activations = m->P.nacts * m->esize + m->P.nacts16 * sizeof(uint16_t) + (3 * bt + (size_t)m->maxB) * sizeof(int),
        .scratch = m->ws.cap * sizeof(float) + (m->w32 ? n * sizeof(float) : 0)};
    return COLLAGE_OK;
}

__attribute__((format(printf, 3, 4)))
static collage_status fail(bert_model *m, collage_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->err, sizeof m->err, fmt, ap);
    va_end(ap);
    return st;
}

/* Sizes, lengths, token ids and targets of one batch, checked; copied into the model as bert_io. */
static collage_status take_batch(bert_model *m, const void *params, const collage_batch *b) {
    m->err[0] = 0;
    if (!params || !b || !b->tokens) return fail(m, COLLAGE_ERR_NULL, "params, batch or tokens is NULL");
    const int B = b->B, T = b->T, V = m->cfg.vocab_size;
    if (B < 1 || B > m->maxB || T < 1 || T > m->maxT)
        return fail(m, COLLAGE_ERR_SIZE, "batch %d x %d outside 1..%d x 1..%d (maxB x maxT of create)", B, T, m->maxB,
                    m->maxT);
    if (!(b->loss_divisor >= 0) || !isfinite(b->loss_divisor))
        return fail(m, COLLAGE_ERR_ARG, "loss divisor %g: 0 (the mean) or positive", b->loss_divisor);
    for (int r = 0; r < B; r++) {
        m->len[r] = b->lengths ? b->lengths[r] : T;
        if (m->len[r] < 1 || m->len[r] > T)
            return fail(m, COLLAGE_ERR_ARG, "row %d has length %d, outside 1..%d", r, m->len[r], T);
    }
    int K = 0;
    for (int n = 0; n < B * T; n++) {
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
        if (y != COLLAGE_TARGET_NONE) { m->rows[K] = n; m->tgt[K] = y; K++; }
    }
    m->io = (bert_io){.tok = m->tok, .len = b->lengths ? m->len : NULL, .rows = m->rows, .tgt = b->targets ? m->tgt : NULL,
                      .B = B, .T = T, .K = K, .divisor = b->loss_divisor > 0 ? b->loss_divisor : K > 0 ? K : 1};
    return COLLAGE_OK;
}

/* The bf16 graph's environment for this call, its scratch grown for the current thread count. */
static collage_status bf16_env(bert_model *m, bert_bf16_env *e) {
    *e = (bert_bf16_env){.ws = &m->ws, .path = m->pp.prod.bf16, .nt = collage__threads()};
    m->graph = &BF16_GRAPHS[collage_get_isa() == COLLAGE_ISA_AVX512];
    if (m->graph->reserve(&m->P, m->maxB * m->maxT, e))
        return fail(m, COLLAGE_ERR_NOMEM, "out of memory for the products' scratch (%d threads)", e->nt);
    return COLLAGE_OK;
}

/* The float weights the float kernels read: the caller's slab, or in an emulated model the slab widened. */
static const void *weights(bert_model *m, const void *params) {
    if (!emulated(m)) return params;
    collage__widen16(m->w32, params, m->P.nparams, emulated(m));
    return m->w32;
}

/* The graph of the model's precision on m->io: Σ losses; *hits: the scored rows predicted right. Its
 * products on the model's kernels (nn_blas_begin). */
static double forward_graph(bert_model *m, const void *w, const bert_bf16_env *e, long *hits);

static double forward_any(bert_model *m, const void *w, const bert_bf16_env *e, long *hits) {
    const int btok = nn_blas_begin(m->pp.prod.f32);
    const double sum = forward_graph(m, w, e, hits);
    nn_blas_end(btok);
    return sum;
}

static double forward_graph(bert_model *m, const void *w, const bert_bf16_env *e, long *hits) {
    const int nt = collage__threads(), K = m->io.K, V = m->P.V, Vp = m->P.Vp, bf = emulated(m);
    const int scored = K > 0 && m->io.tgt;
    double sum;
    switch (m->prec) {
    case BERT_BF16:
        sum = m->graph->forward(&m->P, w, m->acts16, m->acts, &m->io, e);
        *hits = scored ? nn_argmax_hits_f32((const float *)m->acts + m->P.a[BA_LOGITS], m->tgt, K, V, Vp, nt) : 0;
        return sum;
    case BERT_FP64:
        sum = bert_forward_f64(&m->P, w, m->acts, &m->io, 0, nt);
        *hits = scored ? nn_argmax_hits_f64((const double *)m->acts + m->P.a[BA_LOGITS], m->tgt, K, V, Vp, nt) : 0;
        return sum;
    default:
        sum = bert_forward_f32(&m->P, w, m->acts, &m->io, bf, nt);
        *hits = scored ? nn_argmax_hits_f32((const float *)m->acts + m->P.a[BA_LOGITS], m->tgt, K, V, Vp, nt) : 0;
        return sum;
    }
}

collage_status bert_forward(bert_model *m, const void *params, const collage_batch *b, collage_forward_info *out) {
    if (!m) return COLLAGE_ERR_NULL;
    m->ready = 0;
    collage_status st = take_batch(m, params, b);
    bert_bf16_env e = {0};
    if (st == COLLAGE_OK && m->prec == BERT_BF16) st = bf16_env(m, &e);
    if (st != COLLAGE_OK) return st;
    const void *w = weights(m, params);
    long hits = 0;
    const double sum = forward_any(m, w, &e, &hits);
    m->w_used = w;
    m->ready = b->targets != NULL;
    if (out)
        *out = (collage_forward_info){.loss = b->targets ? sum / m->io.divisor : (double)NAN,
                                      .scored = b->targets ? m->io.K : 0, .correct = hits};
    return COLLAGE_OK;
}

collage_status bert_backward(bert_model *m) {
    if (!m) return COLLAGE_ERR_NULL;
    if (!m->ready) return fail(m, COLLAGE_ERR_ARG, "backward needs a forward with targets before it (one backward each)");
    bert_bf16_env e = {0};
    if (m->prec == BERT_BF16 && bf16_env(m, &e) != COLLAGE_OK) return COLLAGE_ERR_NOMEM;
    m->ready = 0;
    const int nt = collage__threads(), btok = nn_blas_begin(m->pp.prod.f32);
    if (m->prec == BERT_BF16)
        m->graph->backward(&m->P, m->w_used, (uint16_t *)m->grads16, m->gsums, !m->grads16_zero, m->acts16, m->acts,
                           &m->io, &e);
    else if (m->prec == BERT_FP64) bert_backward_f64(&m->P, m->w_used, m->grads, m->acts, &m->io, 0, nt);
    else bert_backward_f32(&m->P, m->w_used, m->grads, m->acts, &m->io, emulated(m), nt);
    nn_blas_end(btok);
    if (emulated(m)) collage__round16(m->grads16, m->grads, m->P.nparams, emulated(m));
    m->grads16_zero = 0;
    return COLLAGE_OK;
}

collage_status bert_set_loss_scale(bert_model *m, double scale) {
    if (!m) return COLLAGE_ERR_NULL;
    if (!(scale > 0) || !isfinite(scale)) return fail(m, COLLAGE_ERR_ARG, "loss scale %g is not finite and positive", scale);
    if (m->prec == BERT_BF16) return fail(m, COLLAGE_ERR_UNSUPPORTED, "the bf16 model takes no loss scale");
    m->P.loss_scale = (float)scale;
    return COLLAGE_OK;
}

void *bert_grads(bert_model *m) {
    if (!m) return NULL;
    if (!m->grads16) return m->grads;
    if (m->grads16_zero) /* cleared only when read before a backward: a backward after zero_grad writes it */
        collage__zero_par(m->grads16, m->P.nparams * sizeof(collage_bf16));
    return m->grads16;
}

void bert_zero_grad(bert_model *m) {
    if (!m) return;
    if (m->grads) collage__zero_par(m->grads, m->P.nparams * m->esize);
    if (m->grads16) m->grads16_zero = 1;
}

int bert_act_tensors(const bert_model *m, bert_act *out, int cap) {
    if (!m) return 0;
    for (int k = 0; k < BA_COUNT && k < cap && out; k++) {
        const int s16 = m->acts16 && ACT_BF16[k];
        const size_t es = s16 ? sizeof(uint16_t) : m->esize;
        const char *base = s16 ? (const char *)m->acts16 : (const char *)m->acts;
        out[k] = (bert_act){.name = ACT_NAMES[k], .data = base + m->P.a[k] * es, .count = m->P.an[k], .esize = es,
                            .bf16 = m->prec != BERT_FP32 && m->prec != BERT_FP64 && ACT_BF16[k]};
    }
    return BA_COUNT;
}

/* ---------------------------------------------------------------- the logits of chosen positions */
collage_status bert_logits_at(bert_model *m, const void *params, const int *tokens, int T, const int *pos, int npos,
                              float *logits) {
    if (!m) return COLLAGE_ERR_NULL;
    m->ready = 0;
    if (!logits || !pos) return fail(m, COLLAGE_ERR_NULL, "positions or logits is NULL");
    if (npos < 1 || npos > T) return fail(m, COLLAGE_ERR_SIZE, "%d positions of a %d-token sequence", npos, T);
    const collage_batch b = {.tokens = tokens, .B = 1, .T = T};
    collage_status st = take_batch(m, params, &b);
    for (int k = 0; st == COLLAGE_OK && k < npos; k++) {
        if (pos[k] < 0 || pos[k] >= T) st = fail(m, COLLAGE_ERR_ARG, "position %d outside 0..%d", pos[k], T - 1);
        m->rows[k] = pos[k];
    }
    bert_bf16_env e = {0};
    if (st == COLLAGE_OK && m->prec == BERT_BF16) st = bf16_env(m, &e);
    if (st != COLLAGE_OK) return st;
    m->io.K = npos;
    long hits;
    forward_any(m, weights(m, params), &e, &hits);
    const int V = m->cfg.vocab_size, Vp = m->P.Vp;
    for (int k = 0; k < npos; k++)
        for (int i = 0; i < V; i++) {
            const size_t at = m->P.a[BA_LOGITS] + (size_t)k * Vp + (size_t)i;
            logits[(size_t)k * V + i] = m->prec == BERT_FP64 ? (float)((const double *)m->acts)[at] : ((const float *)m->acts)[at];
        }
    return COLLAGE_OK;
}

/* ---------------------------------------------------------------- the family's row of the model table */
static collage_status fam_create(const collage_model_config *cfg, collage_real prec, int maxB, int maxT, void **impl) {
    static const bert_precision P[COLLAGE_REAL_COUNT] = {[COLLAGE_REAL_FP32] = BERT_FP32, [COLLAGE_REAL_BF16] = BERT_BF16,
                                                         [COLLAGE_REAL_FP64] = BERT_FP64,
                                                         [COLLAGE_REAL_FP16] = BERT_FP16_EMULATED};
    if ((unsigned)prec >= COLLAGE_REAL_COUNT) return COLLAGE_ERR_ARG;
    bert_model *m = NULL;
    collage_status st = bert_create(cfg, P[prec], maxB, maxT, &m);
    *impl = m;
    return st;
}

static void fam_free(void *m) { bert_free(m); }
static collage_status fam_set_loss_scale(void *m, double scale) { return bert_set_loss_scale(m, scale); }
static size_t fam_size(const void *m) { return bert_size(m); }
static const char *fam_error(const void *m) { return bert_error(m); }
static collage_status fam_forward(void *m, const void *params, const int *tokens, const int *targets, int B, int T,
                                  double *loss) {
    const collage_batch b = {.tokens = tokens, .targets = targets, .B = B, .T = T};
    collage_forward_info fi;
    collage_status st = bert_forward(m, params, &b, &fi);
    if (st == COLLAGE_OK && loss) *loss = fi.loss;
    return st;
}
static collage_status fam_forward_batch(void *m, const void *params, const collage_batch *b, collage_forward_info *out) {
    return bert_forward(m, params, b, out);
}
static collage_status fam_backward(void *m) { return bert_backward(m); }
static void *fam_grads(void *m) { return bert_grads(m); }
static void fam_zero_grad(void *m) { bert_zero_grad(m); }
static collage_status fam_next_logits(void *m, const void *params, const int *tokens, int T, float *logits) {
    (void)params; (void)tokens; (void)T; (void)logits;
    return fail(m, COLLAGE_ERR_UNSUPPORTED, "a bert model is an encoder: it predicts masked tokens and does not "
                                            "generate text (collage_model_logits_at)");
}
static collage_status fam_logits_at(void *m, const void *params, const int *tokens, int T, const int *pos, int npos,
                                    float *logits) {
    return bert_logits_at(m, params, tokens, T, pos, npos, logits);
}
static const char *fam_products(const void *m) { return bert_products(m); }
static collage_status fam_memory(const void *m, collage_model_memory *out) { return bert_memory(m, out); }

const collage_model_family collage__bert_family = {
    .name = "bert", .presets = BERT_PRESETS, .objective = COLLAGE_OBJECTIVE_MASKED_LM, .added_tokens = 1,
    .preset = bert_preset, .pad_vocab = bert_pad_vocab, .check = bert_check, .tensors = bert_tensors,
    .init_weights = bert_init_weights, .create = fam_create, .free = fam_free, .size = fam_size, .error = fam_error,
    .forward = fam_forward, .backward = fam_backward, .grads = fam_grads, .zero_grad = fam_zero_grad,
    .set_loss_scale = fam_set_loss_scale,
    .next_logits = fam_next_logits, .products = fam_products, .memory = fam_memory,
    .forward_batch = fam_forward_batch, .logits_at = fam_logits_at,
    .ckpt_probe = bert_ckpt_probe, .ckpt_what = "collage BERT: magic \"collbert\"", .ckpt_save = bert_ckpt_save,
    .ckpt_read_header = bert_ckpt_read_header, .ckpt_load = bert_ckpt_load, .hf = &collage__bert_hf};
