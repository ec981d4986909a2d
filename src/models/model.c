/* model.c — collage_model.h over the family table: one row per family (model.h), chosen by the config's
 * family (or, for a checkpoint, by probing the file's first bytes); collage_model, graph_model.c's object
 * on the family's graphs, which keeps OpenBLAS single-threaded for the length of each call and restores
 * the caller's setting, and profiles its calls when asked (nn.h, prof.c); precisions, parameter groups and
 * sampling, which no family changes. */
#include "internal.h"
#include "model.h"
#include "nn.h"
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>

/* The family table, in collage_family order: adding a family is a row here and a file in src/models/. */
static const collage_model_family *const FAMILIES[COLLAGE_FAMILY_COUNT] = {
    [COLLAGE_FAMILY_GPT2] = &collage__gpt2_family,
    [COLLAGE_FAMILY_LLAMA] = &collage__llama_family,
    [COLLAGE_FAMILY_BERT] = &collage__bert_family,
};

const collage_model_family *collage__model_family(collage_family f) {
    return (unsigned)f < COLLAGE_FAMILY_COUNT ? FAMILIES[f] : NULL;
}

static const collage_model_family *family_of(const collage_model_config *cfg) {
    return cfg ? collage__model_family(cfg->family) : NULL;
}

/* ---------------------------------------------------------------- families and configs */
const char *collage_family_name(collage_family f) {
    const collage_model_family *fam = collage__model_family(f);
    return fam ? fam->name : NULL;
}

collage_status collage_family_parse(const char *name, collage_family *out) {
    if (!name || !out) return COLLAGE_ERR_NULL;
    for (int f = 0; f < COLLAGE_FAMILY_COUNT; f++)
        if (strcmp(name, FAMILIES[f]->name) == 0) {
            *out = (collage_family)f;
            return COLLAGE_OK;
        }
    return COLLAGE_ERR_ARG;
}

collage_objective collage_family_objective(collage_family f) {
    const collage_model_family *fam = collage__model_family(f);
    return fam ? fam->objective : COLLAGE_OBJECTIVE_NEXT_TOKEN;
}

int collage_family_generates(collage_family f) {
    const collage_model_family *fam = collage__model_family(f);
    return fam && fam->objective == COLLAGE_OBJECTIVE_NEXT_TOKEN;
}

/* Preset names are unique over all families: the first family that knows the name gives the config. */
collage_status collage_model_preset(const char *name, collage_model_config *out) {
    if (!name || !out) return COLLAGE_ERR_NULL;
    for (int f = 0; f < COLLAGE_FAMILY_COUNT; f++)
        if (FAMILIES[f]->preset(name, out) == COLLAGE_OK) return COLLAGE_OK;
    return COLLAGE_ERR_ARG;
}

/* Every family's presets in table order, gathered once. */
#define MAX_PRESETS 64
static const char *g_presets[MAX_PRESETS + 1];
static pthread_once_t g_presets_once = PTHREAD_ONCE_INIT;

static void gather_presets(void) {
    int n = 0;
    for (int f = 0; f < COLLAGE_FAMILY_COUNT; f++)
        for (const char *const *p = FAMILIES[f]->presets; *p; p++) {
            COLLAGE_ASSERT(n < MAX_PRESETS);
            g_presets[n++] = *p;
        }
    g_presets[n] = NULL;
}

const char *const *collage_model_preset_names(void) {
    pthread_once(&g_presets_once, gather_presets);
    return g_presets;
}

void collage_model_config_set_vocab(collage_model_config *cfg, int vocab_size) {
    const collage_model_family *fam = family_of(cfg);
    if (!cfg) return;
    cfg->vocab_size = vocab_size + (fam ? fam->added_tokens : 0);
    cfg->padded_vocab_size = fam ? fam->pad_vocab(cfg->vocab_size) : cfg->vocab_size;
}

int collage_model_text_vocab(const collage_model_config *cfg) {
    const collage_model_family *fam = family_of(cfg);
    return cfg ? cfg->vocab_size - (fam ? fam->added_tokens : 0) : 0;
}

int collage_model_mask_token(const collage_model_config *cfg) {
    const collage_model_family *fam = family_of(cfg);
    return fam && fam->objective == COLLAGE_OBJECTIVE_MASKED_LM ? collage_model_text_vocab(cfg) : -1;
}

void collage_model_config_resize(collage_model_config *cfg, int layers, int heads, int kv_heads, int dim, int hidden) {
    const collage_model_family *fam = family_of(cfg);
    if (!cfg) return;
    const int mha = cfg->num_kv_heads && cfg->num_kv_heads == cfg->num_heads;
    if (layers) cfg->num_layers = layers;
    if (heads) cfg->num_heads = heads;
    if (dim) cfg->channels = dim;
    if (kv_heads) cfg->num_kv_heads = kv_heads;
    else if (mha) cfg->num_kv_heads = cfg->num_heads;
    if (hidden) cfg->hidden_dim = hidden;
    else if (dim && fam && fam->hidden_of) cfg->hidden_dim = fam->hidden_of(dim);
}

collage_status collage_model_check(const collage_model_config *cfg, int maxB, int maxT, char *msg, size_t cap) {
    char local[8];
    if (!msg) { msg = local; cap = sizeof local; }
    if (cap) msg[0] = 0;
    if (!cfg) { snprintf(msg, cap, "no configuration"); return COLLAGE_ERR_NULL; }
    const collage_model_family *fam = family_of(cfg);
    if (!fam) { snprintf(msg, cap, "unknown model family %d", (int)cfg->family); return COLLAGE_ERR_ARG; }
    return fam->check(cfg, maxB, maxT, msg, cap);
}

int collage_model_tensors(const collage_model_config *cfg, collage_tensor_info *out, int cap) {
    const collage_model_family *fam = family_of(cfg);
    if (!fam || fam->check(cfg, 0, 0, NULL, 0) != COLLAGE_OK) return 0;
    if (!out) cap = 0;
    return fam->tensors(cfg, out, cap);
}

size_t collage_model_num_params(const collage_model_config *cfg) {
    collage_tensor_info t[COLLAGE_MODEL_MAX_TENSORS];
    const int n = collage_model_tensors(cfg, t, COLLAGE_MODEL_MAX_TENSORS);
    COLLAGE_ASSERT(n <= COLLAGE_MODEL_MAX_TENSORS);
    return n ? t[n - 1].offset + t[n - 1].count : 0;
}

int collage_model_param_groups(const collage_model_config *cfg, double weight_decay, collage_param_group *out,
                               int cap) {
    collage_tensor_info t[COLLAGE_MODEL_MAX_TENSORS];
    const int n = collage_model_tensors(cfg, t, COLLAGE_MODEL_MAX_TENSORS);
    COLLAGE_ASSERT(n <= COLLAGE_MODEL_MAX_TENSORS);
    for (int k = 0; k < n && k < cap && out; k++)
        out[k] = (collage_param_group){.name = t[k].name, .offset = t[k].offset, .count = t[k].count,
                                       .weight_decay = t[k].decay ? weight_decay : 0.0};
    return n;
}

collage_status collage_model_init_weights(const collage_model_config *cfg, uint64_t seed, float *w, size_t n) {
    if (!cfg || !w) return COLLAGE_ERR_NULL;
    const collage_model_family *fam = family_of(cfg);
    if (!fam) return COLLAGE_ERR_ARG;
    return fam->init_weights(cfg, seed, w, n);
}

size_t collage__read_elements(FILE *f, void *dst, size_t count, size_t es, int want_bf16, void *buf, size_t chunk) {
    for (size_t at = 0; at < count; at += chunk) {
        const size_t k = count - at < chunk ? count - at : chunk;
        void *d = want_bf16 ? (void *)((uint16_t *)dst + at) : (void *)((float *)dst + at);
        const int convert = (es == 2) != (want_bf16 != 0);
        if (fread(convert ? buf : d, es, k, f) != k) return at;
        if (convert && want_bf16) collage_bf16_from_f32_row(d, buf, k);
        else if (convert) collage_bf16_to_f32_row(d, buf, k);
    }
    return count;
}

#define MAX_DIM (1 << 20)
#define MAX_C (1 << 15)
#define MAX_TOKENS (1 << 22) /* maxB · maxT */

collage_status collage__check_dims(const collage_model_config *cfg, int min_vocab, int maxB, int maxT, char *msg,
                                   size_t cap) {
    char local[8];
    if (!msg) { msg = local; cap = sizeof local; }
    if (cap) msg[0] = 0;
    if (!cfg) { snprintf(msg, cap, "no configuration"); return COLLAGE_ERR_NULL; }
    const collage_model_config c = *cfg;
    if (c.vocab_size <= 0 || c.padded_vocab_size <= 0 || c.max_seq_len <= 0 || c.num_layers <= 0 ||
        c.num_heads <= 0 || c.channels <= 0 || c.vocab_size < min_vocab) {
        snprintf(msg, cap, "sizes must be positive, vocab_size at least %d (V %d, Vp %d, maxT %d, L %d, NH %d, C %d)",
                 min_vocab, c.vocab_size, c.padded_vocab_size, c.max_seq_len, c.num_layers, c.num_heads, c.channels);
        return COLLAGE_ERR_SIZE;
    }
    if (c.padded_vocab_size < c.vocab_size) {
        snprintf(msg, cap, "padded_vocab_size %d < vocab_size %d", c.padded_vocab_size, c.vocab_size);
        return COLLAGE_ERR_SIZE;
    }
    if (c.channels % c.num_heads) {
        snprintf(msg, cap, "channels %d not divisible by num_heads %d", c.channels, c.num_heads);
        return COLLAGE_ERR_SIZE;
    }
    if (c.padded_vocab_size > MAX_DIM || c.max_seq_len > MAX_DIM || c.num_layers > 4096 || c.channels > MAX_C) {
        snprintf(msg, cap, "sizes too large (Vp %d, maxT %d, L %d, C %d)", c.padded_vocab_size, c.max_seq_len,
                 c.num_layers, c.channels);
        return COLLAGE_ERR_SIZE;
    }
    if (maxB < 0 || maxT < 0 || (maxT > 0 && maxT > c.max_seq_len)) {
        snprintf(msg, cap, "batch %d x %d: need B >= 1 and 1 <= T <= max_seq_len %d", maxB, maxT, c.max_seq_len);
        return COLLAGE_ERR_SIZE;
    }
    if ((size_t)maxB * (size_t)maxT > MAX_TOKENS) {
        snprintf(msg, cap, "batch %d x %d exceeds %d tokens", maxB, maxT, MAX_TOKENS);
        return COLLAGE_ERR_SIZE;
    }
    return COLLAGE_OK;
}

collage_status collage__ckpt_same_shape(const char *path, const collage_model_config *h, const collage_model_config *w,
                                        char *err, size_t cap) {
    if (h->vocab_size == w->vocab_size && h->padded_vocab_size == w->padded_vocab_size &&
        h->max_seq_len == w->max_seq_len && h->num_layers == w->num_layers && h->num_heads == w->num_heads &&
        h->channels == w->channels)
        return COLLAGE_OK;
    const char *fam = collage_family_name(h->family);
    return collage__fail(err, cap, COLLAGE_ERR_FORMAT,
                         "'%s' holds a %s model of V %d (padded %d), maxT %d, L %d, NH %d, C %d; expected V %d "
                         "(padded %d), maxT %d, L %d, NH %d, C %d", path, fam ? fam : "model", h->vocab_size,
                         h->padded_vocab_size, h->max_seq_len, h->num_layers, h->num_heads, h->channels, w->vocab_size,
                         w->padded_vocab_size, w->max_seq_len, w->num_layers, w->num_heads, w->channels);
}

/* Two standard normals from two counter-based words (Box–Muller). */
static void gauss_pair(uint64_t key, uint64_t p, double *z0, double *z1) {
    const double u1 = ((double)collage_rand32(key, 2 * p) + 1.0) * (1.0 / 4294967296.0); /* (0, 1] */
    const double u2 = (double)collage_rand32(key, 2 * p + 1) * (1.0 / 4294967296.0);
    const double r = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
    *z0 = r * cos(th);
    *z1 = r * sin(th);
}

void collage__fill_normal(float *x, size_t count, size_t live, double sd, uint64_t key) {
    const long cnt = (long)count, pairs = (cnt + 1) / 2;
    const int nt = collage__threads();
    (void)nt; /* unused without OpenMP */
#pragma omp parallel for schedule(static) num_threads(nt) if (cnt >= 65536)
    for (long p = 0; p < pairs; p++) {
        double z[2];
        gauss_pair(key, (uint64_t)p, &z[0], &z[1]);
        for (long i = 2 * p; i < 2 * p + 2 && i < cnt; i++) x[i] = (size_t)i < live ? (float)(sd * z[i - 2 * p]) : 0.0f;
    }
}

/* ---------------------------------------------------------------- precisions */
static const char *const REAL_NAMES[COLLAGE_REAL_COUNT] = {"fp32", "bf16", "fp64", "fp16", "fp8", "fp4"};
static const size_t REAL_SIZES[COLLAGE_REAL_COUNT] = {4, 2, 8, 2, 2, 2};

const char *collage_real_name(collage_real r) { return (unsigned)r < COLLAGE_REAL_COUNT ? REAL_NAMES[r] : "unknown"; }
size_t collage_real_size(collage_real r) { return (unsigned)r < COLLAGE_REAL_COUNT ? REAL_SIZES[r] : 0; }

collage_status collage_real_parse(const char *name, collage_real *out) {
    if (!name || !out) return COLLAGE_ERR_NULL;
    for (int r = 0; r < COLLAGE_REAL_COUNT; r++)
        if (strcmp(name, REAL_NAMES[r]) == 0) {
            *out = (collage_real)r;
            return COLLAGE_OK;
        }
    return COLLAGE_ERR_ARG;
}

/* ---------------------------------------------------------------- the model */
collage_status collage__model_object(const collage_model_config *cfg, gm_precision prec, int maxB, int maxT,
                                     gm_model **out) {
    *out = NULL;
    if (!cfg) return COLLAGE_ERR_NULL;
    const collage_model_family *fam = family_of(cfg);
    if (!fam) return COLLAGE_ERR_ARG;
    const collage_status st = fam->check(cfg, maxB, maxT, NULL, 0);
    return st != COLLAGE_OK ? st : gm_create(fam->graph, cfg, prec, maxB, maxT, out);
}

/* The object is graph_model.c's, made on the family's graphs; model.c adds the kernels' description and
 * the profile, and brackets every call with nn_blas_begin / nn_blas_end (call_begin), so that every call
 * leaves the caller's OpenBLAS thread count as it found it. */
struct collage_model {
    const collage_model_family *fam;
    collage_model_config cfg;
    collage_real prec;
    gm_model *impl;
    collage__products pp; /* the kernels of its products (the object chose the same) */
    char products[160], spec[48];
    int prof_on;          /* collage_model_profile_set */
    nn_prof prof;         /* the products' and attention's time, while prof_on */
    double prof_s;        /* the profiled calls' time */
};

collage_status collage_model_create(const collage_model_config *cfg, collage_real prec, int maxB, int maxT,
                                    collage_model **out) {
    if (!out) return COLLAGE_ERR_NULL;
    *out = NULL;
    if (!cfg) return COLLAGE_ERR_NULL;
    const collage_model_family *fam = family_of(cfg);
    if (!fam || (unsigned)prec >= COLLAGE_REAL_COUNT) return COLLAGE_ERR_ARG;
    collage_model *m = calloc(1, sizeof *m);
    if (!m) return COLLAGE_ERR_NOMEM;
    *m = (collage_model){.fam = fam, .cfg = *cfg, .prec = prec};
    collage_status st = collage__model_object(cfg, gm_precision_of(prec), maxB, maxT, &m->impl);
    const collage_real kp = gm_products_real(gm_precision_of(prec)); /* fp8: the bf16 kernels */
    if (st == COLLAGE_OK) st = collage__products_for(cfg, kp, maxB * maxT, &m->pp);
    if (st != COLLAGE_OK) {
        gm_free(m->impl);
        free(m);
        return st;
    }
    collage__products_describe(&m->pp, kp, m->products, sizeof m->products);
    collage__products_spec(&m->pp, kp, m->spec, sizeof m->spec);
    *out = m;
    return COLLAGE_OK;
}

/* Around every call that runs a graph: OpenBLAS at one thread (nn_blas_begin), and while profiling, m's
 * profile this thread's for the call's length and the call timed whole. */
typedef struct { int tok; nn_prof *prev; double t0; } call_guard;

static call_guard call_begin(collage_model *m) {
    call_guard g = {.tok = nn_blas_begin(m->pp.prod.f32)};
    if (m->prof_on) g.prev = nn_prof_swap(&m->prof), g.t0 = nn_now();
    return g;
}

static void call_end(collage_model *m, call_guard g) {
    if (m->prof_on) m->prof_s += nn_now() - g.t0, nn_prof_swap(g.prev);
    nn_blas_end(g.tok);
}

void collage_model_free(collage_model *m) {
    if (!m) return;
    gm_free(m->impl);
    free(m);
}

const collage_model_config *collage_model_get_config(const collage_model *m) { return m ? &m->cfg : NULL; }
collage_real collage_model_precision(const collage_model *m) { return m ? m->prec : COLLAGE_REAL_FP32; }
size_t collage_model_size(const collage_model *m) { return m ? gm_size(m->impl) : 0; }
const char *collage_model_error(const collage_model *m) { return m ? gm_error(m->impl) : "no model"; }

collage_status collage_model_forward(collage_model *m, const void *params, const int *tokens, const int *targets,
                                     int B, int T, double *loss) {
    if (!m) return COLLAGE_ERR_NULL;
    const call_guard g = call_begin(m);
    collage_status st = gm_forward(m->impl, params, tokens, targets, B, T, loss);
    call_end(m, g);
    return st;
}

collage_status collage_model_forward_batch(collage_model *m, const void *params, const collage_batch *b,
                                           collage_forward_info *out) {
    if (!m || !b) return COLLAGE_ERR_NULL;
    const call_guard g = call_begin(m);
    collage_status st = gm_forward_batch(m->impl, params, b, out);
    call_end(m, g);
    return st;
}

collage_status collage_model_backward(collage_model *m) {
    if (!m) return COLLAGE_ERR_NULL;
    const call_guard g = call_begin(m);
    collage_status st = gm_backward(m->impl);
    call_end(m, g);
    return st;
}

void *collage_model_grads(collage_model *m) { return m ? gm_grads(m->impl) : NULL; }
const char *collage_model_products(const collage_model *m) { return m ? m->products : "none"; }
const char *collage_model_products_spec(const collage_model *m) { return m ? m->spec : ""; }

collage_status collage_model_memory_get(const collage_model *m, collage_model_memory *out) {
    if (!m || !out) return COLLAGE_ERR_NULL;
    return gm_memory(m->impl, out);
}

/* The kernels in force where no model chose: the pinned ones, else oneDNN's bf16 path where the CPU has
 * it and OpenBLAS's sgemm. */
static nn_products default_products(void) {
    int f32, bf16;
    nn_products_pinned(&f32, &bf16);
    return (nn_products){.f32 = f32 >= 0 ? (nn_sgemm)f32 : NN_SGEMM_OPENBLAS,
                         .bf16 = bf16 >= 0 ? (nn_bf16_path)bf16 : nn_bf16_available(NN_BF16_ONEDNN) ? NN_BF16_ONEDNN : NN_BF16_WIDEN};
}

const char *collage_bf16_products(void) {
    const nn_products p = default_products();
    return p.bf16 != NN_BF16_WIDEN ? nn_bf16_label(p.bf16) : "bf16 widened to fp32 sgemm";
}

const char *collage_openblas_core(void) { return nn_openblas_core(); }
const char *collage_openblas_coretype_wanted(void) {
    const char *want = NULL;
    return nn_openblas_below(&want) ? want : NULL;
}

void collage_products_machine(char *out, size_t cap) {
    const char *want = NULL;
    const int below = nn_openblas_below(&want);
    int f32, bf16;
    nn_products_pinned(&f32, &bf16);
    const char *picked = getenv("COLLAGE_OPENBLAS_PICKED"); /* the CLI set OPENBLAS_CORETYPE (cli/main.c) */
    char note[128] = "";
    if (picked) snprintf(note, sizeof note, "; OPENBLAS_CORETYPE set by collage: this OpenBLAS picked %.32s here", picked);
    snprintf(out, cap,
             "fp32 kernels: OpenBLAS sgemm (%s kernels%s%s%s%s), oneDNN sgemm%s, collage's reference sgemm\n"
             "bf16 paths: %s, %s, widened to the fp32 kernel\n"
             "chosen per model: %s%s%s%s%s",
             nn_openblas_core(), below ? "; below this CPU's " : "", below ? want : "", below ? ": set OPENBLAS_CORETYPE" : "", note,
             nn_sgemm_available(NN_SGEMM_ONEDNN) ? "" : " (not in this build)",
             nn_bf16_available(NN_BF16_ONEDNN) ? nn_bf16_label(NN_BF16_ONEDNN) : "oneDNN bf16 GEMM (not on this CPU or build)",
             nn_bf16_available(NN_BF16_FMA) ? nn_bf16_label(NN_BF16_FMA) : "collage's bf16 GEMM (needs AVX-512)",
             f32 >= 0 || bf16 >= 0 ? "pinned" : "the fastest measured on its shapes",
             f32 >= 0 ? " fp32=" : "", f32 >= 0 ? nn_sgemm_name((nn_sgemm)f32) : "",
             bf16 >= 0 ? " bf16=" : "", bf16 >= 0 ? nn_bf16_name((nn_bf16_path)bf16) : "");
    char rem[2048];
    const size_t len = strlen(out);
    if (collage__products_remembered(rem, sizeof rem) > 0 && len < cap)
        snprintf(out + len, cap - len, "\nremembered for this machine (products file):\n%s", rem);
}

typedef struct { float *C; int ldc; } copy_ctx;

static void copy_tile(void *p, const float *t, int ldt, int i0, int i1, int j0, int j1) {
    const copy_ctx *c = p;
    if (!c->C) return; /* the products alone: each tile computed and left in its scratch */
    for (int i = i0; i < i1; i++) memcpy(c->C + (size_t)i * c->ldc + j0, t + (size_t)(i - i0) * ldt, (size_t)(j1 - j0) * 4);
}

collage_status collage_bf16_matmul(int ta, int tb, int M, int N, int K, const collage_bf16 *A, int lda,
                                   const collage_bf16 *B, int ldb, float *C, int ldc) {
    if (!A || !B) return COLLAGE_ERR_NULL;
    if (M < 1 || N < 1 || K < 1 || lda < (ta ? M : K) || ldb < (tb ? K : N) || (C && ldc < N)) return COLLAGE_ERR_SIZE;
    /* one scratch for every call, kept (as a model keeps its own), so repeated calls time the products */
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static nn_ws ws;
    const nn_products p = default_products();
    const nn_bf16_path path = p.bf16;
    const int nt = collage__threads();
    pthread_mutex_lock(&lock);
    collage_status st = COLLAGE_ERR_NOMEM;
    if (nn_gemm_bf16_reserve(&ws, M, N, K, nt, path) == 0) {
        copy_ctx c = {.C = C, .ldc = ldc};
        const int tok = nn_blas_begin(p.f32);
        nn_gemm_bf16(ta, tb, M, N, K, (const uint16_t *)A, lda, (const uint16_t *)B, ldb, copy_tile, &c, &ws, path, nt);
        nn_blas_end(tok);
        st = COLLAGE_OK;
    }
    pthread_mutex_unlock(&lock);
    return st;
}

collage_status collage_model_set_loss_scale(collage_model *m, double scale) {
    if (!m) return COLLAGE_ERR_NULL;
    return gm_set_loss_scale(m->impl, scale);
}

collage_status collage_model_fp8_set(collage_model *m, const char *recipe, int e4m3_all) {
    if (!m || !recipe) return COLLAGE_ERR_NULL;
    collage_fp8_recipe r;
    if (collage__fp8_recipe_parse(recipe, &r) != COLLAGE_OK) return COLLAGE_ERR_ARG;
    return gm_fp8_set(m->impl, r, e4m3_all);
}
/* An fp4 recipe's options after its name, in this order: ",hadamard" (the transform), ",rn" (the gradients
 * rounded to nearest instead of stochastically); 0, or -1 for anything else. */
static int fp4_options(const char *o, int *hadamard, int *rn) {
    *hadamard = *rn = 0;
    if (!strncmp(o, ",hadamard", 9)) *hadamard = 1, o += 9;
    if (!strcmp(o, ",rn")) *rn = 1, o += 3;
    return *o ? -1 : 0;
}
collage_status collage_model_fp4_set(collage_model *m, const char *recipe, int bf16_last, uint64_t seed) {
    if (!m || !recipe) return COLLAGE_ERR_NULL;
    char name[16];
    const size_t n = strcspn(recipe, ",");
    int hadamard, rn;
    if (n >= sizeof name || fp4_options(recipe + n, &hadamard, &rn)) return COLLAGE_ERR_ARG;
    memcpy(name, recipe, n), name[n] = 0;
    collage_fp4_recipe r;
    if (collage__fp4_recipe_parse(name, &r) != COLLAGE_OK) return COLLAGE_ERR_ARG;
    return gm_fp4_set(m->impl, r, hadamard, rn, bf16_last, seed);
}
collage_status collage_model_fp4_key(collage_model *m, uint64_t key) { return m ? gm_fp4_key(m->impl, key) : COLLAGE_ERR_NULL; }
int collage_model_fp4_layers(const collage_model *m) { return m ? gm_fp4_layers(m->impl) : 0; }
double collage_model_fp4_quant_seconds(const collage_model *m) { return m ? gm_fp4_quant_seconds(m->impl) : 0.0; }
collage_status collage_model_fp8_end_step(collage_model *m, int skipped) {
    return m ? gm_fp8_end_step(m->impl, skipped) : COLLAGE_ERR_NULL;
}
float *collage_model_fp8_amaxes(collage_model *m, int *n) {
    if (!n) return NULL;
    *n = 0;
    return m ? gm_fp8_amaxes(m->impl, n) : NULL;
}
double collage_model_fp8_quant_seconds(const collage_model *m) { return m ? gm_fp8_quant_seconds(m->impl) : 0.0; }
size_t collage_model_fp8_state_bytes(const collage_model *m) { return m ? gm_fp8_state_bytes(m->impl) : 0; }
collage_status collage_model_fp8_state_save(const collage_model *m, void *buf, size_t cap) {
    return m ? gm_fp8_state_save(m->impl, buf, cap) : COLLAGE_ERR_NULL;
}
collage_status collage_model_fp8_state_load(collage_model *m, const void *buf, size_t len) {
    return m ? gm_fp8_state_load(m->impl, buf, len) : COLLAGE_ERR_NULL;
}

void collage_model_profile_set(collage_model *m, int on) {
    if (!m) return;
    if (on) m->prof = (nn_prof){0}, m->prof_s = 0;
    m->prof_on = on != 0;
}

collage_status collage_model_profile_get(const collage_model *m, collage_model_profile *out) {
    if (!m || !out) return COLLAGE_ERR_NULL;
    const nn_prof *p = &m->prof;
    *out = (collage_model_profile){.seconds = m->prof_s, .products_seconds = p->s[NN_PROF_PRODUCTS],
                                   .products_flops = p->flops[NN_PROF_PRODUCTS], .products = p->calls[NN_PROF_PRODUCTS],
                                   .attention_seconds = p->s[NN_PROF_ATTENTION],
                                   .attention_ops = p->calls[NN_PROF_ATTENTION]};
    return COLLAGE_OK;
}

void collage_model_zero_grad(collage_model *m) {
    if (m) gm_zero_grad(m->impl);
}

collage_status collage_model_next_logits(collage_model *m, const void *params, const int *tokens, int T,
                                         float *logits) {
    if (!m) return COLLAGE_ERR_NULL;
    const call_guard g = call_begin(m);
    collage_status st = gm_next_logits(m->impl, params, tokens, T, logits);
    call_end(m, g);
    return st;
}

collage_status collage_model_logits_at(collage_model *m, const void *params, const int *tokens, int T,
                                       const int *pos, int npos, float *logits) {
    if (!m) return COLLAGE_ERR_NULL;
    const call_guard g = call_begin(m);
    collage_status st = gm_logits_at(m->impl, params, tokens, T, pos, npos, logits);
    call_end(m, g);
    return st;
}

/* ---------------------------------------------------------------- sampling */
int collage_sample_logits(const float *logits, int V, float temperature, uint64_t key, uint64_t index) {
    if (!logits || V <= 0) return -1;
    int best = 0;
    for (int i = 0; i < V; i++) {
        if (!isfinite(logits[i])) return -1;
        if (logits[i] > logits[best]) best = i;
    }
    if (!(temperature > 0.0f)) return best;
    const double mx = (double)logits[best], inv_t = 1.0 / (double)temperature;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp(((double)logits[i] - mx) * inv_t);
    const double u = ((double)collage_rand32(key, index) + 0.5) * (1.0 / 4294967296.0) * sum;
    double acc = 0;
    int last = best;
    for (int i = 0; i < V; i++) {
        const double p = exp(((double)logits[i] - mx) * inv_t);
        if (p > 0) last = i;
        acc += p;
        if (u < acc) return i;
    }
    return last; /* u within rounding of sum: the last token that has any probability */
}

/* ---------------------------------------------------------------- checkpoints */
collage_status collage_model_save_file(const char *path, const collage_model_config *cfg, const void *params, int bf16,
                                       char *err, size_t cap) {
    if (!path || !cfg || !params) return collage__fail(err, cap, COLLAGE_ERR_NULL, "no path, config or parameters");
    const collage_model_family *fam = family_of(cfg);
    if (!fam)
        return collage__fail(err, cap, COLLAGE_ERR_ARG, "cannot write '%s': unknown model family %d", path,
                             (int)cfg->family);
    return fam->ckpt_save(path, cfg, params, bf16, err, cap);
}

/* The family whose checkpoint format starts the file at path (its first COLLAGE_CKPT_PROBE_BYTES). */
static collage_status probe_file(const char *path, const collage_model_family **out, char *err, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return collage__fail(err, cap, COLLAGE_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    unsigned char head[COLLAGE_CKPT_PROBE_BYTES];
    errno = 0;
    const size_t len = fread(head, 1, sizeof head, f);
    const int bad = ferror(f), e = errno;
    fclose(f);
    if (bad) return collage__fail(err, cap, COLLAGE_ERR_IO, "cannot read '%s': %s", path, strerror(e));
    for (int k = 0; k < COLLAGE_FAMILY_COUNT; k++)
        if (FAMILIES[k]->ckpt_probe(head, len)) {
            *out = FAMILIES[k];
            return COLLAGE_OK;
        }
    char known[256] = "";
    for (int k = 0; k < COLLAGE_FAMILY_COUNT; k++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", k ? "; " : "", FAMILIES[k]->ckpt_what);
    return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' is not a model checkpoint (known formats: %s)", path,
                         known);
}

collage_status collage_model_read_header(const char *path, collage_model_config *cfg, int *bf16, char *err,
                                         size_t cap) {
    if (!path) return collage__fail(err, cap, COLLAGE_ERR_NULL, "no checkpoint path");
    if (collage_model_is_hf_folder(path)) return collage_model_import_config(path, cfg, bf16, err, cap);
    const collage_model_family *fam = NULL;
    collage_status st = collage__checkpoint_check_file(path, err, cap);
    if (st == COLLAGE_OK) st = probe_file(path, &fam, err, cap);
    if (st != COLLAGE_OK) return st;
    return fam->ckpt_read_header(path, cfg, bf16, err, cap);
}

collage_status collage_model_load_file(const char *path, const collage_model_config *cfg, void *params, int want_bf16,
                                       char *err, size_t cap) {
    if (!path || !cfg || !params) return collage__fail(err, cap, COLLAGE_ERR_NULL, "no path, config or parameters");
    if (collage_model_is_hf_folder(path)) return collage_model_import_safetensors(path, cfg, params, want_bf16, err, cap);
    const collage_model_family *fam = NULL;
    collage_status st = collage__checkpoint_check_file(path, err, cap);
    if (st == COLLAGE_OK) st = probe_file(path, &fam, err, cap);
    if (st != COLLAGE_OK) return st;
    if (fam != family_of(cfg))
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' holds a %s model; expected %s", path, fam->name,
                             collage_family_name(cfg->family) ? collage_family_name(cfg->family) : "an unknown family");
    return fam->ckpt_load(path, cfg, params, want_bf16, err, cap);
}
