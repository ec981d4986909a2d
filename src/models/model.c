/* model.c — collage_model.h over the family table: one row per family (model.h), chosen by the config's
 * family (or, for a checkpoint, by probing the file's first bytes); the generic model object, which keeps
 * OpenBLAS single-threaded for the length of each call and restores the caller's setting; precisions,
 * parameter groups and sampling, which no family changes. */
#include "internal.h"
#include "model.h"
#include "nn.h"
#include <errno.h>
#include <math.h>
#include <pthread.h>

/* The family table, in collage_family order: adding a family is a row here and a file in src/models/. */
static const collage_model_family *const FAMILIES[COLLAGE_FAMILY_COUNT] = {
    [COLLAGE_FAMILY_GPT2] = &collage__gpt2_family,
    [COLLAGE_FAMILY_LLAMA] = &collage__llama_family,
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
    cfg->vocab_size = vocab_size;
    cfg->padded_vocab_size = fam ? fam->pad_vocab(vocab_size) : vocab_size;
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

/* ---------------------------------------------------------------- precisions */
static const char *const REAL_NAMES[COLLAGE_REAL_COUNT] = {"fp32", "bf16", "fp64"};
static const size_t REAL_SIZES[COLLAGE_REAL_COUNT] = {4, 2, 8};

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
struct collage_model {
    const collage_model_family *fam;
    collage_model_config cfg;
    collage_real prec;
    void *impl;  /* the family's own object */
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
    collage_status st = fam->create(cfg, prec, maxB, maxT, &m->impl);
    if (st != COLLAGE_OK) { free(m); return st; }
    *out = m;
    return COLLAGE_OK;
}

void collage_model_free(collage_model *m) {
    if (!m) return;
    m->fam->free(m->impl);
    free(m);
}

const collage_model_config *collage_model_get_config(const collage_model *m) { return m ? &m->cfg : NULL; }
collage_real collage_model_precision(const collage_model *m) { return m ? m->prec : COLLAGE_REAL_FP32; }
size_t collage_model_size(const collage_model *m) { return m ? m->fam->size(m->impl) : 0; }
const char *collage_model_error(const collage_model *m) { return m ? m->fam->error(m->impl) : "no model"; }

/* Forward, backward and next_logits bracket the family's call with nn_blas_begin / nn_blas_end, so every
 * family leaves the caller's OpenBLAS thread count as it found it. */
collage_status collage_model_forward(collage_model *m, const void *params, const int *tokens, const int *targets,
                                     int B, int T, double *loss) {
    if (!m) return COLLAGE_ERR_NULL;
    nn_blas_begin();
    collage_status st = m->fam->forward(m->impl, params, tokens, targets, B, T, loss);
    nn_blas_end();
    return st;
}

collage_status collage_model_backward(collage_model *m) {
    if (!m) return COLLAGE_ERR_NULL;
    nn_blas_begin();
    collage_status st = m->fam->backward(m->impl);
    nn_blas_end();
    return st;
}

void *collage_model_grads(collage_model *m) { return m ? m->fam->grads(m->impl) : NULL; }
const char *collage_model_products(const collage_model *m) { return m ? m->fam->products(m->impl) : "none"; }

collage_status collage_model_memory_get(const collage_model *m, collage_model_memory *out) {
    if (!m || !out) return COLLAGE_ERR_NULL;
    return m->fam->memory(m->impl, out);
}

const char *collage_bf16_products(void) { return nn_bf16_path_name(nn_bf16_path_chosen()); }

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
    const nn_bf16_path path = nn_bf16_path_chosen();
    const int nt = collage__threads();
    pthread_mutex_lock(&lock);
    collage_status st = COLLAGE_ERR_NOMEM;
    if (nn_gemm_bf16_reserve(&ws, M, N, K, nt, path) == 0) {
        copy_ctx c = {.C = C, .ldc = ldc};
        nn_blas_begin();
        nn_gemm_bf16(ta, tb, M, N, K, (const uint16_t *)A, lda, (const uint16_t *)B, ldb, copy_tile, &c, &ws, path, nt);
        nn_blas_end();
        st = COLLAGE_OK;
    }
    pthread_mutex_unlock(&lock);
    return st;
}

void collage_model_zero_grad(collage_model *m) {
    if (m) m->fam->zero_grad(m->impl);
}

collage_status collage_model_next_logits(collage_model *m, const void *params, const int *tokens, int T,
                                         float *logits) {
    if (!m) return COLLAGE_ERR_NULL;
    nn_blas_begin();
    collage_status st = m->fam->next_logits(m->impl, params, tokens, T, logits);
    nn_blas_end();
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
    const collage_model_family *fam = NULL;
    collage_status st = probe_file(path, &fam, err, cap);
    if (st != COLLAGE_OK) return st;
    return fam->ckpt_read_header(path, cfg, bf16, err, cap);
}

collage_status collage_model_load_file(const char *path, const collage_model_config *cfg, void *params, int want_bf16,
                                       char *err, size_t cap) {
    if (!path || !cfg || !params) return collage__fail(err, cap, COLLAGE_ERR_NULL, "no path, config or parameters");
    const collage_model_family *fam = NULL;
    collage_status st = probe_file(path, &fam, err, cap);
    if (st != COLLAGE_OK) return st;
    if (fam != family_of(cfg))
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' holds a %s model; expected %s", path, fam->name,
                             collage_family_name(cfg->family) ? collage_family_name(cfg->family) : "an unknown family");
    return fam->ckpt_load(path, cfg, params, want_bf16, err, cap);
}
