/* llama.c — the LLaMA family (llama2.c's architecture): presets and shape checks, the parameter slab,
 * initialisation, the plan of the activations and rotary tables, the float and double graphs (the ops
 * of src/nn in the order of llama_graph.inc), and the family's row of the model table, whose model
 * object is graph_model.c's and whose checkpoints are llama2.c's files (llama_ckpt.c). */
#include "internal.h"
#include "llama_plan.h"
#include "model.h"
#include <math.h>

/* ---------------------------------------------------------------- the graph, twice */
#define EPS (P->TW(eps))   /* the plan's ε and rotary table in real */
#define ROPE (P->TW(rope))
#define GRAPH_INC "llama_graph.inc"
#include "graph_twice.h"
#undef EPS
#undef ROPE

/* ---------------------------------------------------------------- configuration */
/* llama2.c's rule: 2/3 of 4·dim, rounded up to a multiple of 32. */
static int llama_hidden_of(int dim) {
    const int h = 2 * (4 * dim) / 3;
    return (h + 31) / 32 * 32;
}

/* Embedding rows to a multiple of 128, as llm.c pads GPT-2's: the logits' product runs on whole tiles
 * (the rows ≥ V are zero, their logits masked; llama2.c's file holds the V rows). */
static int llama_pad_vocab(int vocab_size) { return vocab_size <= 0 ? 0 : (vocab_size + 127) / 128 * 128; }

static const char *const LLAMA_PRESETS[] = {"llama-tiny", "llama-small", "llama-110m", NULL};

static collage_status llama_preset(const char *name, collage_model_config *out) {
    static const struct { const char *name; int V, T, L, NH, NKV, C; } PRE[] = {
        {"llama-tiny", 256, 64, 2, 4, 2, 128},
        {"llama-small", 256, 256, 6, 6, 6, 288},       /* llama2.c's stories15M shape */
        {"llama-110m", 50257, 1024, 12, 12, 12, 768},  /* llama2.c's 110M shape, GPT-2's BPE vocabulary */
    };
    for (size_t i = 0; i < sizeof PRE / sizeof PRE[0]; i++)
        if (!strcmp(name, PRE[i].name)) {
            *out = (collage_model_config){.family = COLLAGE_FAMILY_LLAMA, .vocab_size = PRE[i].V,
                                          .padded_vocab_size = llama_pad_vocab(PRE[i].V), .max_seq_len = PRE[i].T,
                                          .num_layers = PRE[i].L, .num_heads = PRE[i].NH, .num_kv_heads = PRE[i].NKV,
                                          .channels = PRE[i].C, .hidden_dim = llama_hidden_of(PRE[i].C),
                                          .norm_eps = 1e-5, .rope_theta = 10000.0};
            return COLLAGE_OK;
        }
    return COLLAGE_ERR_ARG;
}

/* The hidden size's limit keeps every int size of the kernels' loops and products far from overflow
 * (collage__check_dims holds the others). */
#define LLAMA_MAX_HIDDEN (1 << 17)

/* The shared sizes (collage__check_dims), then LLaMA's own: key/value heads, the feed-forward size, an
 * even head size for the rotary embedding, the norm's eps and the rotary base. */
static collage_status llama_check(const collage_model_config *cfg, int maxB, int maxT, char *msg, size_t cap) {
    char local[256];
    if (!msg) { msg = local; cap = sizeof local; }
    collage_status st = collage__check_dims(cfg, 1, maxB, maxT, msg, cap);
    if (st != COLLAGE_OK) return st;
    const collage_model_config c = *cfg;
    if (c.num_kv_heads <= 0 || c.hidden_dim <= 0) {
        snprintf(msg, cap, "sizes must be positive (num_kv_heads %d, hidden %d)", c.num_kv_heads, c.hidden_dim);
        return COLLAGE_ERR_SIZE;
    }
    if ((c.channels / c.num_heads) % 2) {
        snprintf(msg, cap, "head size %d (channels / num_heads) must be even for the rotary embedding",
                 c.channels / c.num_heads);
        return COLLAGE_ERR_SIZE;
    }
    if (c.num_heads % c.num_kv_heads) {
        snprintf(msg, cap, "num_heads %d not divisible by num_kv_heads %d", c.num_heads, c.num_kv_heads);
        return COLLAGE_ERR_SIZE;
    }
    if (c.hidden_dim > LLAMA_MAX_HIDDEN) {
        snprintf(msg, cap, "hidden size %d too large (at most %d)", c.hidden_dim, LLAMA_MAX_HIDDEN);
        return COLLAGE_ERR_SIZE;
    }
    if ((c.untied != 0 && c.untied != 1) || !(c.norm_eps > 0 && c.norm_eps < 1) || !(c.rope_theta > 1 && c.rope_theta < 1e30)) {
        snprintf(msg, cap, "untied %d must be 0 or 1, norm_eps %g in (0, 1), rope_theta %g above 1", c.untied, c.norm_eps,
                 c.rope_theta);
        return COLLAGE_ERR_ARG;
    }
    return COLLAGE_OK;
}

/* ---------------------------------------------------------------- the parameter slab */
static const char *const LT_NAMES[LT_COUNT] = {"tok_embeddings", "attention_norm", "wqkv", "wo", "ffn_norm",
                                               "w13", "w2", "norm", "output"};
static const unsigned char LT_LAYERED[LT_COUNT] = {0, 1, 1, 1, 1, 1, 1, 0, 0};

int llama_tensors(const collage_model_config *c, collage_tensor_info *out, int cap) {
    const size_t V = (size_t)c->padded_vocab_size, L = (size_t)c->num_layers, C = (size_t)c->channels;
    const size_t H = (size_t)c->hidden_dim, hs = C / (size_t)c->num_heads;
    const size_t QKV = ((size_t)c->num_heads + 2 * (size_t)c->num_kv_heads) * hs;
    /* 0 in a shape marks the end of its dimensions */
    const size_t sh[LT_COUNT][3] = {{V, C, 0}, {L, C, 0}, {L, QKV, C}, {L, C, C}, {L, C, 0},
                                    {L, 2 * H, C}, {L, C, H}, {C, 0, 0}, {V, C, 0}};
    const int n = c->untied ? LT_COUNT : LT_COUNT - 1;
    size_t off = 0;
    for (int k = 0; k < n; k++) {
        collage_tensor_info t = {.name = LT_NAMES[k], .offset = off, .count = 1,
                                 .decay = k != LT_ATTN_NORM && k != LT_FFN_NORM && k != LT_NORM,
                                 .product = k != LT_ATTN_NORM && k != LT_FFN_NORM && k != LT_NORM &&
                                            (k != LT_EMB || !c->untied)};
        for (int d = 0; d < 3 && sh[k][d]; d++) {
            t.shape[t.ndim++] = sh[k][d];
            t.count *= sh[k][d];
        }
        if (out && k < cap) out[k] = t;
        off += t.count;
    }
    return n;
}

static int fam_tensors(const collage_model_config *cfg, collage_tensor_info *out, int cap) {
    return llama_check(cfg, 0, 0, NULL, 0) == COLLAGE_OK ? llama_tensors(cfg, out, cap) : 0;
}

/* Matrices N(0, 0.02), the projections into the residual (wo, w2) N(0, 0.02/sqrt(2L)), RMSNorm weights 1,
 * the padding rows of the embedding and output 0; each tensor from its own counter-based stream, so the
 * slab is the same for any thread count. */
static collage_status llama_init(const collage_model_config *cfg, uint64_t seed, float *w, size_t n) {
    collage_tensor_info t[LT_COUNT];
    if (llama_check(cfg, 0, 0, NULL, 0) != COLLAGE_OK) return COLLAGE_ERR_SIZE;
    const int nt = llama_tensors(cfg, t, LT_COUNT);
    if (n != t[nt - 1].offset + t[nt - 1].count) return COLLAGE_ERR_SIZE;
    const double resid = 0.02 / sqrt(2.0 * (double)cfg->num_layers);
    for (int k = 0; k < nt; k++) {
        float *x = w + t[k].offset;
        if (!t[k].decay)
            for (size_t i = 0; i < t[k].count; i++) x[i] = 1.0f;
        else
            collage__fill_normal(x, t[k].count, t[k].count, k == LT_WO || k == LT_W2 ? resid : 0.02,
                                 collage_rand_key(seed, (uint64_t)k));
        if (k == LT_EMB || k == LT_OUT)
            memset(x + (size_t)cfg->vocab_size * cfg->channels, 0,
                   (size_t)(cfg->padded_vocab_size - cfg->vocab_size) * cfg->channels * sizeof *x);
    }
    return COLLAGE_OK;
}

/* ---------------------------------------------------------------- the plan */
/* 1: holds bf16 values in the bf16 model (its 2-byte slab); the rest is float there. */
static const unsigned char LA_BF16[LA_COUNT] = {1, 1, 0, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 0, 0, 0,
                                                1, 1, 1, 1, 1, 1, 1, 0};

static void plan_acts(llama_plan *P, int maxB, int maxT, int split, gm_sizes *sz) {
    const size_t N = (size_t)maxB * (size_t)maxT, C = (size_t)P->C, H = (size_t)P->H, QKV = (size_t)P->QKV;
    const size_t TT = (size_t)maxB * (size_t)P->NH * (size_t)maxT * (size_t)maxT, NV = N * (size_t)P->Vp;
    /* per layer (the count is L of them) or, where 0, the whole count */
    const size_t per[LA_COUNT] = {0, N * C, N, N * QKV, TT, N * C, N * C, N * C, N, 2 * N * H, N * H, N * C};
    const size_t whole[LA_COUNT] = {N * C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, N * C, N, NV, N,
                                    N * C, N * C, N * C, N * QKV, N * H, 2 * N * H, split ? NV : 0,
                                    nn_gqa_scratch(maxB, maxT, P->NH, P->hs)};
    gm_lay_out_acts(LA_COUNT, P->L, per, whole, LA_BF16, split, P->a, P->al, NULL, sz);
    sz->logits = P->a[LA_LOGITS];
}

static void llama_plan_free(void *plan) {
    llama_plan *P = plan;
    if (!P) return;
    free(P->rope32);
    free(P->rope64);
    free(P);
}

static void *llama_plan_new(const collage_model_config *c, int maxB, int maxT, int split, gm_sizes *sz) {
    llama_plan *P = calloc(1, sizeof *P);
    if (!P) return NULL;
    collage_tensor_info t[LT_COUNT];
    const int nt = llama_tensors(c, t, LT_COUNT), hs = c->channels / c->num_heads;
    *P = (llama_plan){.V = c->vocab_size, .Vp = c->padded_vocab_size, .L = c->num_layers, .NH = c->num_heads, .NKV = c->num_kv_heads, .hs = hs,
                      .C = c->channels, .H = c->hidden_dim, .QKV = (c->num_heads + 2 * c->num_kv_heads) * hs,
                      .tied = !c->untied, .eps32 = (float)c->norm_eps, .eps64 = c->norm_eps, .loss_scale = 1.0f};
    size_t ngs = 0;
    for (int k = 0; k < LT_COUNT; k++) {
        P->p[k] = k < nt ? t[k].offset : t[LT_EMB].offset; /* tied: the output is the embedding */
        P->pl[k] = k < nt && LT_LAYERED[k] ? t[k].count / (size_t)P->L : 0;
        P->n[k] = k < nt ? t[k].count : 0;
        P->gs[k] = ngs;
        if (k < nt && !llama_product_weight(P, k)) ngs += t[k].count;
    }
    sz->nparams = t[nt - 1].offset + t[nt - 1].count;
    sz->ngs = P->ngs = ngs;
    plan_acts(P, maxB, maxT, split, sz);
    P->rope32 = malloc((size_t)maxT * (size_t)hs * sizeof(float));
    P->rope64 = malloc((size_t)maxT * (size_t)hs * sizeof(double));
    if (!P->rope32 || !P->rope64) {
        llama_plan_free(P);
        return NULL;
    }
    nn_rope_table_f32(P->rope32, maxT, hs, c->rope_theta);
    nn_rope_table_f64(P->rope64, maxT, hs, c->rope_theta);
    return P;
}

static void llama_set_loss_scale(void *plan, float scale) { ((llama_plan *)plan)->loss_scale = scale; }

const gm_graph collage__llama_graph = {
    .plan_new = llama_plan_new, .plan_free = llama_plan_free,
    .forward_f32 = llama_forward_f32, .forward_f64 = llama_forward_f64,
    .backward_f32 = llama_backward_f32, .backward_f64 = llama_backward_f64,
    .last_logits_f32 = llama_last_logits_f32, .last_logits_f64 = llama_last_logits_f64,
    .bf16 = {{llama_bf16_reserve, llama_forward_bf16, llama_backward_bf16, llama_last_logits_bf16},
             {llama_bf16_reserve_avx512, llama_forward_bf16_avx512, llama_backward_bf16_avx512,
              llama_last_logits_bf16_avx512}},
    .set_loss_scale = llama_set_loss_scale, .fp8_layers = llama_fp8_layers};

/* ---------------------------------------------------------------- the family's row of the model table */
const collage_model_family collage__llama_family = {
    .name = "llama", .presets = LLAMA_PRESETS, .preset = llama_preset, .pad_vocab = llama_pad_vocab,
    .check = llama_check, .tensors = fam_tensors, .init_weights = llama_init, .hidden_of = llama_hidden_of,
    .graph = &collage__llama_graph,
    .ckpt_probe = llama_ckpt_probe,
    .ckpt_what = "llama2.c (legacy export): int32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len",
    .ckpt_save = llama_ckpt_save, .ckpt_read_header = llama_ckpt_read_header, .ckpt_load = llama_ckpt_load,
    .hf = &collage__llama_hf};
