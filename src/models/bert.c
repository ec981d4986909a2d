/* bert.c — the BERT family: presets and shape checks, the parameter slab, BERT initialisation, the plan
 * of the activations, the float and double graphs (the ops of src/nn in the order of bert_graph.inc;
 * bert_bf16.c for bf16 storage), and the family's row of the model table, whose model object is
 * graph_model.c's with the masked-LM objective (padding, scored positions, hits) and whose checkpoints
 * are collage's BERT files (bert_ckpt.c). */
#include "internal.h"
#include "bert_plan.h"
#include "model.h"
#include <math.h>

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

/* ---------------------------------------------------------------- the plan */
/* Offsets of the activations: one slab, or in bf16 (split) a bf16 slab and a float slab. */
static void plan_acts(bert_plan *P, int maxB, int maxT, int split, gm_sizes *sz) {
    const size_t N = (size_t)maxB * (size_t)maxT, C = (size_t)P->C, NH = (size_t)P->NH;
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
    gm_lay_out_acts(BA_COUNT, P->L, per, whole, ACT_BF16, split, P->a, P->al, P->an, sz);
}

/* 1: a tensor with a slice per layer (its first dimension L). */
static const unsigned char LAYERED[BERT_NTENSORS] = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0};

static void bert_plan_free(void *plan) { free(plan); }

static void *bert_plan_new(const collage_model_config *c, int maxB, int maxT, int split, gm_sizes *sz) {
    bert_plan *P = calloc(1, sizeof *P);
    if (!P) return NULL;
    collage_tensor_info t[BERT_NTENSORS];
    bert_tensors(c, t, BERT_NTENSORS);
    *P = (bert_plan){.V = c->vocab_size, .Vp = c->padded_vocab_size, .maxT = c->max_seq_len, .L = c->num_layers,
                     .NH = c->num_heads, .C = c->channels, .loss_scale = 1.0f};
    P->ngs = gm_lay_out_params(t, BERT_NTENSORS, P->L, LAYERED, P->p, P->pl, P->gs);
    P->nparams = t[BERT_NTENSORS - 1].offset + t[BERT_NTENSORS - 1].count;
    plan_acts(P, maxB, maxT, split, sz);
    sz->nparams = P->nparams;
    sz->ngs = P->ngs;
    sz->logits = P->a[BA_LOGITS];
    return P;
}

static void bert_set_loss_scale(void *plan, float scale) { ((bert_plan *)plan)->loss_scale = scale; }

static int bert_acts(const void *plan, gm_act_slot *out, int cap) {
    const bert_plan *P = plan;
    for (int k = 0; k < BA_COUNT && k < cap; k++)
        out[k] = (gm_act_slot){.name = ACT_NAMES[k], .offset = P->a[k], .count = P->an[k], .bf16 = ACT_BF16[k]};
    return BA_COUNT;
}

static const gm_mlm_graph BERT_MLM = {
    .forward_f32 = bert_forward_f32, .forward_f64 = bert_forward_f64,
    .backward_f32 = bert_backward_f32, .backward_f64 = bert_backward_f64,
    .bf16 = {{bert_forward_bf16, bert_backward_bf16}, {bert_forward_bf16_avx512, bert_backward_bf16_avx512}}};

const gm_graph collage__bert_graph = {
    .plan_new = bert_plan_new, .plan_free = bert_plan_free,
    .bf16 = {{.reserve = bert_bf16_reserve}, {.reserve = bert_bf16_reserve_avx512}},
    .set_loss_scale = bert_set_loss_scale, .mlm = &BERT_MLM, .acts = bert_acts, .fp8_layers = bert_fp8_layers};

/* ---------------------------------------------------------------- the family's row of the model table */
const collage_model_family collage__bert_family = {
    .name = "bert", .presets = BERT_PRESETS, .objective = COLLAGE_OBJECTIVE_MASKED_LM, .added_tokens = 1,
    .preset = bert_preset, .pad_vocab = bert_pad_vocab, .check = bert_check, .tensors = bert_tensors,
    .init_weights = bert_init_weights, .graph = &collage__bert_graph,
    .ckpt_probe = bert_ckpt_probe, .ckpt_what = "collage BERT: magic \"collbert\"", .ckpt_save = bert_ckpt_save,
    .ckpt_read_header = bert_ckpt_read_header, .ckpt_load = bert_ckpt_load, .hf = &collage__bert_hf};
