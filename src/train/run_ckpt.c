/* run_ckpt.c — a training run's checkpoint folder: train.state (every setting that shapes the run,
 * written last, so that it commits the checkpoint), one optimizer state per rank, the model file;
 * save, and resume with the same or another number of ranks (re-sharding). */
#include "run_internal.h"
#include <errno.h>
#include <stddef.h>
#include <sys/stat.h>

#define MANIFEST_MAGIC "collage-train 1"

void run_opt_path(char *out, size_t cap, const char *dir, int rank, int ranks) {
    if (ranks == 1) snprintf(out, cap, "%s/optimizer.state", dir);
    else snprintf(out, cap, "%s/optimizer.rank%d-of-%d.state", dir, rank, ranks);
}

void collage_checkpoint_model_path(const char *arg, char *out, size_t cap) {
    struct stat sb;
    if (stat(arg, &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(out, cap, "%s/model.bin", arg);
    else snprintf(out, cap, "%s", arg);
}

/* ---------------------------------------------------------------- train.state */
static collage_status write_manifest(collage_run *r, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/train.state", dir);
    const collage_run_config *c = &r->cfg;
    collage_atomic_file af;
    if (collage_atomic_open(&af, path, r->err, sizeof r->err)) return COLLAGE_ERR_IO;
    fprintf(af.f, "%s\nstep %d\nprecision %s\ntokenizer %s\nvocab %d\npadded_vocab %d\nmax_seq %d\nlayers %d\nheads %d\n"
                  "dim %d\nbatch %d\nseq %d\nsteps %d\nwarmup %d\nlr %.17g\nbeta1 %.17g\nbeta2 %.17g\neps %.17g\n"
                  "wd %.17g\nclip %.17g\nseed %llu\ndata_fingerprint %llu\nranks %d\naccum %d\nfamily %s\n"
                  "kv_heads %d\nhidden %d\n",
            MANIFEST_MAGIC, r->step, collage_strategy_name(c->strategy), c->tokenizer, r->mc.vocab_size,
            r->mc.padded_vocab_size, r->mc.max_seq_len, c->layers, c->heads, c->dim, c->batch, c->seq, c->steps,
            c->warmup, c->lr, c->beta1, c->beta2, c->eps, c->weight_decay, c->clip, (unsigned long long)c->seed,
            (unsigned long long)r->fingerprint, r->P, r->A, collage_family_name(r->mc.family), c->kv_heads, c->hidden);
    return collage_atomic_commit(&af, r->err, sizeof r->err);
}

typedef struct { char key[32]; char val[256]; } kv;
static const char *kv_get(const kv *items, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (!strcmp(items[i].key, key)) return items[i].val;
    return NULL;
}

static int read_kv(const char *path, kv *items, int cap, char *err, size_t ecap, collage_status *st) {
    char line[512];
    FILE *f = fopen(path, "r");
    if (!f) {
        *st = collage__fail(err, ecap, COLLAGE_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
        return -1;
    }
    int n = 0;
    if (!fgets(line, sizeof line, f) || strncmp(line, MANIFEST_MAGIC, strlen(MANIFEST_MAGIC)) != 0) {
        fclose(f);
        *st = collage__fail(err, ecap, COLLAGE_ERR_FORMAT, "'%s' is not a collage training state (wrong first line)", path);
        return -1;
    }
    while (n < cap && fgets(line, sizeof line, f))
        if (sscanf(line, "%31s %255[^\n]", items[n].key, items[n].val) == 2) n++;
    fclose(f);
    return n;
}

/* The numeric settings of train.state: key, the flag that sets it, its COLLAGE_RUN_* bit (0: may
 * differ on resume), its kind and place in collage_run_config, and whether a train.state may lack it
 * (written since the LLaMA family: 0 there). Read and compared through this table. */
enum { F_INT, F_DBL, F_U64 };
typedef struct { const char *key, *flag; unsigned bit; int kind; size_t off; int optional; } run_field;
#define F(key, flag, bit, kind, field) {key, flag, bit, kind, offsetof(collage_run_config, field), 0}
#define FO(key, flag, bit, kind, field) {key, flag, bit, kind, offsetof(collage_run_config, field), 1}
static const run_field FIELDS[] = {
    F("layers", "--layers", COLLAGE_RUN_LAYERS, F_INT, layers), F("heads", "--heads", COLLAGE_RUN_HEADS, F_INT, heads),
    F("dim", "--dim", COLLAGE_RUN_DIM, F_INT, dim),             F("max_seq", NULL, 0, F_INT, context),
    F("batch", "--batch", COLLAGE_RUN_BATCH, F_INT, batch),     F("seq", "--seq", COLLAGE_RUN_SEQ, F_INT, seq),
    F("steps", NULL, 0, F_INT, steps),                          F("warmup", "--warmup", COLLAGE_RUN_WARMUP, F_INT, warmup),
    F("lr", "--lr", COLLAGE_RUN_LR, F_DBL, lr),                 F("beta1", "--beta1", COLLAGE_RUN_BETA1, F_DBL, beta1),
    F("beta2", "--beta2", COLLAGE_RUN_BETA2, F_DBL, beta2),     F("eps", "--eps", COLLAGE_RUN_EPS, F_DBL, eps),
    F("wd", "--wd", COLLAGE_RUN_WD, F_DBL, weight_decay),       F("clip", "--clip", COLLAGE_RUN_CLIP, F_DBL, clip),
    F("seed", "--seed", COLLAGE_RUN_SEED, F_U64, seed),
    FO("kv_heads", "--kv-heads", COLLAGE_RUN_KV_HEADS, F_INT, kv_heads), FO("hidden", "--hidden", COLLAGE_RUN_HIDDEN, F_INT, hidden),
};
#undef F
#undef FO
#define NFIELDS (sizeof FIELDS / sizeof *FIELDS)

static void field_read(const run_field *f, collage_run_config *c, const char *v) {
    void *p = (char *)c + f->off;
    if (f->kind == F_INT) *(int *)p = atoi(v);
    else if (f->kind == F_DBL) *(double *)p = strtod(v, NULL);
    else *(uint64_t *)p = strtoull(v, NULL, 10);
}
static int field_differs(const run_field *f, const collage_run_config *a, const collage_run_config *b) {
    const void *x = (const char *)a + f->off, *y = (const char *)b + f->off;
    if (f->kind == F_INT) return *(const int *)x != *(const int *)y;
    if (f->kind == F_DBL) return *(const double *)x != *(const double *)y;
    return *(const uint64_t *)x != *(const uint64_t *)y;
}
/* "prefix value" of a field of c. */
static void field_print(const run_field *f, const collage_run_config *c, const char *prefix, char *out, size_t cap) {
    const void *p = (const char *)c + f->off;
    if (f->kind == F_INT) snprintf(out, cap, "%s %d", prefix, *(const int *)p);
    else if (f->kind == F_DBL) snprintf(out, cap, "%s %.17g", prefix, *(const double *)p);
    else snprintf(out, cap, "%s %llu", prefix, (unsigned long long)*(const uint64_t *)p);
}

static collage_status saved_from_kv(const kv *it, int n, const char *path, collage_run_saved *s, char *err, size_t cap) {
    static const char *const need[] = {"step", "precision", "tokenizer", "data_fingerprint"};
    for (size_t i = 0; i < sizeof need / sizeof *need + NFIELDS; i++) {
        const char *key = i < sizeof need / sizeof *need ? need[i] : FIELDS[i - sizeof need / sizeof *need].key;
        if (i >= sizeof need / sizeof *need && FIELDS[i - sizeof need / sizeof *need].optional) continue;
        if (!kv_get(it, n, key)) return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' lacks '%s'", path, key);
    }
    collage_run_config *c = &s->cfg;
    *c = collage_run_defaults();
    if (collage_strategy_parse(kv_get(it, n, "precision"), &c->strategy) != COLLAGE_OK)
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s': unknown precision '%s'", path, kv_get(it, n, "precision"));
    const char *tk = kv_get(it, n, "tokenizer"); /* there: checked above */
    snprintf(s->tokenizer, sizeof s->tokenizer, "%.63s", tk ? tk : "");
    snprintf(s->model, sizeof s->model, "%.63s", kv_get(it, n, "family") ? kv_get(it, n, "family") : "gpt2");
    c->tokenizer = s->tokenizer;
    c->model = NULL; /* the shape in layers, heads and dim, over the tiny preset */
    for (size_t i = 0; i < NFIELDS; i++)
        if (kv_get(it, n, FIELDS[i].key)) field_read(&FIELDS[i], c, kv_get(it, n, FIELDS[i].key));
    s->step = atoi(kv_get(it, n, "step"));
    s->data_fingerprint = strtoull(kv_get(it, n, "data_fingerprint"), NULL, 10);
    /* a run saved by one process has no ranks or accum lines */
    s->ranks = kv_get(it, n, "ranks") ? atoi(kv_get(it, n, "ranks")) : 1;
    s->accum = kv_get(it, n, "accum") ? atoi(kv_get(it, n, "accum")) : 1;
    c->accum = s->accum;
    if (s->ranks < 1 || s->accum < 1 || s->step < 0)
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' has step %d, ranks %d, accum %d", path, s->step, s->ranks,
                             s->accum);
    return COLLAGE_OK;
}

collage_status collage_run_read_saved(const char *dir, collage_run_saved *out, char *err, size_t cap) {
    if (!dir || !out) return collage__fail(err, cap, COLLAGE_ERR_NULL, "no checkpoint folder given");
    char path[4096];
    kv it[64];
    collage_status st = COLLAGE_OK;
    snprintf(path, sizeof path, "%s/train.state", dir);
    memset(out, 0, sizeof *out);
    int n = read_kv(path, it, 64, err, cap, &st);
    return n < 0 ? st : saved_from_kv(it, n, path, out, err, cap);
}

/* ---------------------------------------------------------------- conflicts on resume */
static int conflict_model(const collage_run_saved *s, const collage_run_config *a, unsigned given) {
    collage_model_config pc; /* the preset, with the sizes given over it as a new run would have it */
    int known = collage_model_preset(a->model ? a->model : "tiny", &pc) == COLLAGE_OK;
#define GIVEN(bit, v) (given & (bit) ? (v) : 0)
    collage_model_config_resize(&pc, GIVEN(COLLAGE_RUN_LAYERS, a->layers), GIVEN(COLLAGE_RUN_HEADS, a->heads),
                                GIVEN(COLLAGE_RUN_KV_HEADS, a->kv_heads), GIVEN(COLLAGE_RUN_DIM, a->dim),
                                GIVEN(COLLAGE_RUN_HIDDEN, a->hidden));
#undef GIVEN
    return !known || strcmp(collage_family_name(pc.family), s->model) || pc.num_layers != s->cfg.layers ||
           pc.num_heads != s->cfg.heads || pc.channels != s->cfg.dim || pc.num_kv_heads != s->cfg.kv_heads ||
           pc.hidden_dim != s->cfg.hidden;
}

int collage_run_conflict(const collage_run_saved *saved, const collage_run_config *asked, unsigned given, char *why,
                         char *was, size_t cap) {
    const collage_run_config *s = &saved->cfg, *a = asked;
    if ((given & COLLAGE_RUN_STRATEGY) && a->strategy != s->strategy) {
        snprintf(why, cap, "--precision %s", collage_strategy_name(a->strategy));
        snprintf(was, cap, "precision %s", collage_strategy_name(s->strategy));
        return 1;
    }
    for (size_t i = 0; i < NFIELDS; i++) {
        const run_field *f = &FIELDS[i];
        if (!(given & f->bit) || !field_differs(f, a, s)) continue;
        if (f->kind == F_DBL) snprintf(why, cap, "%s %g", f->flag, *(const double *)((const char *)a + f->off));
        else field_print(f, a, f->flag, why, cap);
        field_print(f, s, f->key, was, cap);
        return 1;
    }
    if ((given & COLLAGE_RUN_TOKENIZER) && strcmp(a->tokenizer ? a->tokenizer : "byte", saved->tokenizer)) {
        snprintf(why, cap, "--tokenizer %.200s", a->tokenizer ? a->tokenizer : "byte");
        snprintf(was, cap, "tokenizer %.200s", saved->tokenizer);
        return 1;
    }
    if ((given & COLLAGE_RUN_MODEL) && conflict_model(saved, a, given)) {
        snprintf(why, cap, "--model %.200s", a->model ? a->model : "tiny");
        snprintf(was, cap, "%.60s, %d layers, %d heads, dim %d", saved->model, s->layers, s->heads, s->dim);
        return 1;
    }
    return 0;
}

/* ---------------------------------------------------------------- save */
/* The model file (rank 0): bf16 weights widened exactly, so that llm.c's fp32 format loads anywhere. */
static collage_status save_model_file(collage_run *r, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.bin", dir);
    float *w32 = r->bf16 ? malloc(r->n * sizeof(float)) : (float *)r->params;
    if (!w32) return run_fail(r, COLLAGE_ERR_NOMEM, "out of memory writing '%s'", path);
    if (r->bf16) collage_bf16_to_f32_row(w32, r->params, r->n);
    collage_status st = collage_model_save_file(path, &r->mc, w32, 0, r->err, sizeof r->err);
    if (r->bf16) free(w32);
    return st;
}

collage_status collage_run_save(collage_run *r, const char *dir) {
    if (!r || !dir) return COLLAGE_ERR_NULL;
    collage_status st = COLLAGE_OK;
    char path[4096];
    if (r->R == 0 && collage__mkdir_p(dir) != 0)
        st = run_fail(r, COLLAGE_ERR_IO, "cannot create the checkpoint folder '%s': %s", dir, strerror(errno));
    if ((st = run_agree(r, st, "saving"))) return st;
    run_opt_path(path, sizeof path, dir, r->R, r->P);
    if (collage_adamw_save(r->opt, path) != COLLAGE_OK) st = run_fail(r, COLLAGE_ERR_IO, "%s", collage_adamw_error(r->opt));
    if ((st = run_agree(r, st, "saving"))) return st;
    if (r->R == 0) {
        st = save_model_file(r, dir);
        if (st == COLLAGE_OK) st = write_manifest(r, dir); /* last: it commits the checkpoint */
    }
    return run_agree(r, st, "saving");
}

/* ---------------------------------------------------------------- resume */
/* This rank's shard from the saved one (same rank count) or from the saved shards it overlaps. */
collage_status run_load_shards(collage_run *r, const char *dir, const collage_run_saved *saved) {
    char path[4096];
    if (saved->ranks == r->P) {
        run_opt_path(path, sizeof path, dir, r->R, r->P);
        if (collage_adamw_load(r->opt, path) != COLLAGE_OK)
            return run_fail(r, COLLAGE_ERR_FORMAT, "%s", collage_adamw_error(r->opt));
    } else {
        size_t got = 0;
        for (int k = 0; k < saved->ranks; k++) {
            size_t a, b, c = 0;
            collage_shard_bounds(r->n, saved->ranks, k, &a, &b);
            if (b <= r->lo || a >= r->hi) continue;
            run_opt_path(path, sizeof path, dir, k, saved->ranks);
            if (collage_adamw_load_part(r->opt, path, &c) != COLLAGE_OK)
                return run_fail(r, COLLAGE_ERR_FORMAT, "%s", collage_adamw_error(r->opt));
            got += c;
        }
        if (got != r->hi - r->lo)
            return run_fail(r, COLLAGE_ERR_FORMAT, "the %d saved shards in '%s' cover %zu of its %zu parameters",
                            saved->ranks, dir, got, r->hi - r->lo);
    }
    if (collage_adamw_steps(r->opt) != (uint64_t)saved->step)
        return run_fail(r, COLLAGE_ERR_FORMAT, "'%s' holds step %llu but train.state says %d", dir,
                        (unsigned long long)collage_adamw_steps(r->opt), saved->step);
    return COLLAGE_OK;
}
