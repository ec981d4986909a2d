/* gpt2.c — the GPT-2 family: presets and shape checks, the parameter slab in llm.c's order, GPT-2
 * initialisation, the plan of the activations, the float and double graphs (the ops of src/nn in the
 * order of gpt2_graph.inc; gpt2_bf16.c for bf16 storage), and the family's row of the model table, whose
 * model object is graph_model.c's and whose checkpoints are llm.c's files (gpt2_ckpt.c). */
#include "internal.h"
#include "gpt2_plan.h"
#include "model.h"
#include <math.h>

/* ---------------------------------------------------------------- the activation slab (gpt2_plan.h) */
static const char *const ACT_NAMES[A_COUNT] = {
    "encoded", "ln1", "ln1_mean", "ln1_rstd", "qkv", "atty", "att", "residual2", "ln2", "ln2_mean", "ln2_rstd",
    "fch", "fch_gelu", "residual3", "lnf", "lnf_mean", "lnf_rstd", "logits", "losses",
    "d_residual", "d_ln", "d_atty", "d_qkv", "d_fch", "d_logits", "attn_scratch"};
/* 1: holds bf16 values in the bf16 models (2-byte storage in GM_BF16). logits hold the fp32 softmax after
 * a forward with targets. */
static const unsigned char ACT_BF16[A_COUNT] = {1, 1, 0, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0,
                                                1, 1, 1, 1, 1, 1, 0};

/* ---------------------------------------------------------------- the graph, twice */
#define GRAPH_INC "gpt2_graph.inc"
#include "graph_twice.h"

/* ---------------------------------------------------------------- configuration */
int gpt2_pad_vocab(int vocab_size) { return vocab_size <= 0 ? 0 : (vocab_size + 127) / 128 * 128; }

static const char *const GPT2_PRESETS[] = {"tiny", "small", "gpt2", NULL};

collage_status gpt2_preset(const char *name, collage_model_config *out) {
    static const struct { const char *name; int V, Vp, T, L, NH, C; } PRE[] = {
        {"tiny", 256, 256, 64, 2, 4, 128},
        {"small", 256, 256, 256, 6, 6, 384},
        {"gpt2", 50257, 50304, 1024, 12, 12, 768},
    };
    if (!name || !out) return COLLAGE_ERR_NULL;
    for (size_t i = 0; i < sizeof PRE / sizeof PRE[0]; i++)
        if (!strcmp(name, PRE[i].name)) {
            *out = (collage_model_config){.family = COLLAGE_FAMILY_GPT2, .vocab_size = PRE[i].V,
                                          .padded_vocab_size = PRE[i].Vp, .max_seq_len = PRE[i].T,
                                          .num_layers = PRE[i].L, .num_heads = PRE[i].NH, .channels = PRE[i].C};
            return COLLAGE_OK;
        }
    return COLLAGE_ERR_ARG;
}

collage_status gpt2_check(const collage_model_config *cfg, int maxB, int maxT, char *msg, size_t cap) {
    if (cfg && (cfg->num_kv_heads || cfg->hidden_dim || cfg->untied || cfg->norm_eps != 0 || cfg->rope_theta != 0)) {
        if (msg && cap)
            snprintf(msg, cap, "gpt2 has no kv_heads, hidden_dim, untied output, norm_eps or rope_theta (its attention "
                               "is multi-head, its MLP 4 x channels, its output the embedding)");
        return COLLAGE_ERR_ARG;
    }
    return collage__check_dims(cfg, 1, maxB, maxT, msg, cap);
}

static const char *const P_NAMES[GPT2_NTENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

int gpt2_tensors(const collage_model_config *cfg, collage_tensor_info *out, int cap) {
    if (gpt2_check(cfg, 0, 0, NULL, 0) != COLLAGE_OK) return 0;
    const size_t Vp = (size_t)cfg->padded_vocab_size, T = (size_t)cfg->max_seq_len, L = (size_t)cfg->num_layers,
                 C = (size_t)cfg->channels;
    /* shapes as in llm.c's fill_in_parameter_sizes; 0 ends a shape */
    const size_t sh[GPT2_NTENSORS][3] = {
        {Vp, C, 0}, {T, C, 0}, {L, C, 0}, {L, C, 0}, {L, 3 * C, C}, {L, 3 * C, 0}, {L, C, C}, {L, C, 0},
        {L, C, 0}, {L, C, 0}, {L, 4 * C, C}, {L, 4 * C, 0}, {L, C, 4 * C}, {L, C, 0}, {C, 0, 0}, {C, 0, 0}};
    size_t off = 0;
    for (int k = 0; k < GPT2_NTENSORS; k++) {
        collage_tensor_info t = {.name = P_NAMES[k], .offset = off, .count = 1};
        for (int d = 0; d < 3 && sh[k][d]; d++) { t.shape[t.ndim++] = sh[k][d]; t.count *= sh[k][d]; }
        t.decay = k == GPT2_WTE || k == GPT2_WPE || k == GPT2_QKVW || k == GPT2_ATTPROJW || k == GPT2_FCW ||
                  k == GPT2_FCPROJW;
        t.product = gpt_product_weight(k);
        if (out && k < cap) out[k] = t;
        off += t.count;
    }
    return GPT2_NTENSORS;
}

static size_t num_params(const collage_model_config *cfg) {
    collage_tensor_info t[GPT2_NTENSORS];
    return gpt2_tensors(cfg, t, GPT2_NTENSORS) ? t[GPT2_NTENSORS - 1].offset + t[GPT2_NTENSORS - 1].count : 0;
}

collage_status gpt2_init_weights(const collage_model_config *cfg, uint64_t seed, float *w, size_t n) {
    collage_tensor_info t[GPT2_NTENSORS];
    if (!cfg || !w) return COLLAGE_ERR_NULL;
    if (!gpt2_tensors(cfg, t, GPT2_NTENSORS) || n != num_params(cfg)) return COLLAGE_ERR_SIZE;
    const double resid_std = 0.02 / sqrt(2.0 * (double)cfg->num_layers);
    for (int k = 0; k < GPT2_NTENSORS; k++) {
        float *x = w + t[k].offset;
        if (!t[k].decay) {
            const float v = (k == GPT2_LN1W || k == GPT2_LN2W || k == GPT2_LNFW) ? 1.0f : 0.0f;
            for (size_t i = 0; i < t[k].count; i++) x[i] = v;
            continue;
        }
        const double sd = (k == GPT2_ATTPROJW || k == GPT2_FCPROJW) ? resid_std : 0.02;
        const size_t live = k == GPT2_WTE ? (size_t)cfg->vocab_size * (size_t)cfg->channels : t[k].count; /* pad rows: 0 */
        collage__fill_normal(x, t[k].count, live, sd, collage_rand_key(seed, (uint64_t)k));
    }
    return COLLAGE_OK;
}

/* ---------------------------------------------------------------- the plan */
/* Offsets of the activations: one slab, or in bf16 (split) a bf16 slab and a float slab. */
static void plan_acts(gpt_plan *P, int maxB, int maxT, int split, gm_sizes *sz) {
    const size_t N = (size_t)maxB * (size_t)maxT, C = (size_t)P->C, NH = (size_t)P->NH;
    const size_t TT = (size_t)maxB * NH * (size_t)maxT * (size_t)maxT, NV = N * (size_t)P->Vp;
    /* per layer size (al; the count is L·al) or, for al = 0, the whole count */
    const size_t per[A_COUNT] = {0, N * C, N, N, 3 * N * C, N * C, TT, N * C, N * C, N, N,
                                 4 * N * C, 4 * N * C, N * C, 0, 0, 0, 0, 0,
                                 0, 0, 0, 0, 0, 0, 0};
    const size_t whole[A_COUNT] = {N * C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, N * C, N, N, NV, N,
                                   N * C, N * C, N * C, 3 * N * C, 4 * N * C, split ? NV : 0,
                                   nn_attention_scratch(maxB, maxT, P->C, P->NH)};
    gm_lay_out_acts(A_COUNT, P->L, per, whole, ACT_BF16, split, P->a, P->al, P->an, sz);
}

/* 1: a tensor with a slice per layer (its first dimension L). */
static const unsigned char LAYERED[GPT2_NTENSORS] = {0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0};

static void gpt_plan_free(void *plan) { free(plan); }

static void *gpt_plan_new(const collage_model_config *c, int maxB, int maxT, int split, gm_sizes *sz) {
    gpt_plan *P = calloc(1, sizeof *P);
    if (!P) return NULL;
    collage_tensor_info t[GPT2_NTENSORS];
    gpt2_tensors(c, t, GPT2_NTENSORS);
    *P = (gpt_plan){.V = c->vocab_size, .Vp = c->padded_vocab_size, .maxT = c->max_seq_len, .L = c->num_layers,
                    .NH = c->num_heads, .C = c->channels, .loss_scale = 1.0f};
    P->ngs = gm_lay_out_params(t, GPT2_NTENSORS, P->L, LAYERED, P->p, P->pl, P->gs);
    P->nparams = t[GPT2_NTENSORS - 1].offset + t[GPT2_NTENSORS - 1].count;
    plan_acts(P, maxB, maxT, split, sz);
    sz->nparams = P->nparams;
    sz->ngs = P->ngs;
    sz->logits = P->a[A_LOGITS];
    return P;
}

static void gpt_set_loss_scale(void *plan, float scale) { ((gpt_plan *)plan)->loss_scale = scale; }

static int gpt_acts(const void *plan, gm_act_slot *out, int cap) {
    const gpt_plan *P = plan;
    for (int k = 0; k < A_COUNT && k < cap; k++)
        out[k] = (gm_act_slot){.name = ACT_NAMES[k], .offset = P->a[k], .count = P->an[k], .bf16 = ACT_BF16[k]};
    return A_COUNT;
}

const gm_graph collage__gpt2_graph = {
    .plan_new = gpt_plan_new, .plan_free = gpt_plan_free,
    .forward_f32 = gpt_forward_f32, .forward_f64 = gpt_forward_f64,
    .backward_f32 = gpt_backward_f32, .backward_f64 = gpt_backward_f64,
    .last_logits_f32 = gpt_last_logits_f32, .last_logits_f64 = gpt_last_logits_f64,
    .bf16 = {{gpt_bf16_reserve, gpt_forward_bf16, gpt_backward_bf16, gpt_last_logits_bf16},
             {gpt_bf16_reserve_avx512, gpt_forward_bf16_avx512, gpt_backward_bf16_avx512, gpt_last_logits_bf16_avx512}},
    .set_loss_scale = gpt_set_loss_scale, .acts = gpt_acts, .fp8_layers = gpt_fp8_layers};

/* ---------------------------------------------------------------- the family's row of the model table */
const collage_model_family collage__gpt2_family = {
    .name = "gpt2", .presets = GPT2_PRESETS, .preset = gpt2_preset, .pad_vocab = gpt2_pad_vocab,
    .check = gpt2_check, .tensors = gpt2_tensors, .init_weights = gpt2_init_weights,
    .graph = &collage__gpt2_graph,
    .ckpt_probe = gpt2_ckpt_probe, .ckpt_what = "llm.c GPT-2: int32 magic 20240326", .ckpt_save = gpt2_ckpt_save,
    .ckpt_read_header = gpt2_ckpt_read_header, .ckpt_load = gpt2_ckpt_load, .hf = &collage__gpt2_hf};
