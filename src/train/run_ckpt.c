/* run_ckpt.c — the files of one checkpoint: train.state (every setting that shapes the run, the
 * size and checksum of every other file, its own checksum), one optimizer state per rank, the model
 * file; save into a run folder (its layout: ckpt.c), and resume with the same or another number of
 * ranks (re-sharding), each file checked before it is read. */
#include "run_internal.h"
#include <errno.h>
#include <stddef.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

void run_opt_path(char *out, size_t cap, const char *dir, int rank, int ranks) {
    if (ranks == 1) snprintf(out, cap, "%s/optimizer.state", dir);
    else snprintf(out, cap, "%s/optimizer.rank%d-of-%d.state", dir, rank, ranks);
}

/* ---------------------------------------------------------------- train.state */
/* Version 2: "collage-train 2", a "key value" line per setting, a "file NAME SIZE SUM" line per other
 * file of the checkpoint, and last "checksum SUM" over every byte before that line (SUM: 16 hex
 * digits of collage__sum64). Version 1 (the older layout) has neither file nor checksum lines. */
#define MANIFEST_V1 "collage-train 1"
#define MANIFEST_V2 "collage-train 2"
#define MAX_ITEMS 64

typedef struct { char key[32]; char val[256]; } kv;
typedef struct { char name[64]; uint64_t size, sum; } mfile;
typedef struct {
    char path[4096];
    kv it[MAX_ITEMS];
    int n, nfiles, version;
    mfile *files;
} manifest;

static const char *kv_get(const manifest *m, const char *key) {
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->it[i].key, key)) return m->it[i].val;
    return NULL;
}

/* Version 2: the checksum line must close the file and match the bytes before it; len then ends
 * the text to parse. */
static collage_status check_sum(const manifest *m, const char *buf, size_t *len, char *err, size_t cap) {
    const char *last = NULL;
    for (const char *p = strstr(buf, "\nchecksum "); p; p = strstr(p + 1, "\nchecksum ")) last = p;
    char hex[17] = "", rest[8] = "";
    if (!last || sscanf(last + 10, "%16[0-9a-f]%7s", hex, rest) != 1 || strlen(hex) != 16)
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' lacks its checksum line (truncated or edited)", m->path);
    if (strtoull(hex, NULL, 16) != collage__sum64(buf, (size_t)(last + 1 - buf)))
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' is damaged or was edited: its checksum does not match "
                             "its content", m->path);
    *len = (size_t)(last + 1 - buf);
    return COLLAGE_OK;
}

static collage_status parse_lines(manifest *m, char *text, char *err, size_t cap) {
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        mfile f;
        unsigned long long size, sum;
        if (!strncmp(line, "file ", 5)) {
            if (sscanf(line + 5, "%63s %llu %llx", f.name, &size, &sum) != 3 || strchr(f.name, '/'))
                return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s': bad line '%.80s'", m->path, line);
            mfile *nf = realloc(m->files, (size_t)(m->nfiles + 1) * sizeof *nf);
            if (!nf) return collage__fail(err, cap, COLLAGE_ERR_NOMEM, "out of memory reading '%s'", m->path);
            f.size = size; f.sum = sum;
            (m->files = nf)[m->nfiles++] = f;
        } else if (m->n < MAX_ITEMS && sscanf(line, "%31s %255[^\n]", m->it[m->n].key, m->it[m->n].val) == 2) m->n++;
    }
    return COLLAGE_OK;
}

/* ckdir/train.state into m (free m->files after). */
static collage_status manifest_read(const char *ckdir, manifest *m, char *err, size_t cap) {
    memset(m, 0, sizeof *m);
    snprintf(m->path, sizeof m->path, "%s/train.state", ckdir);
    char *buf;
    size_t len;
    collage_status st = collage__read_file(m->path, &buf, &len, err, cap);
    if (st) return st;
    size_t head = strcspn(buf, "\n");
    if (head == strlen(MANIFEST_V2) && !strncmp(buf, MANIFEST_V2, head)) m->version = 2;
    else if (head == strlen(MANIFEST_V1) && !strncmp(buf, MANIFEST_V1, head)) m->version = 1;
    else st = collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' is not a collage training state (wrong first line)", m->path);
    if (!st && m->version == 2) st = check_sum(m, buf, &len, err, cap);
    if (!st) {
        buf[len] = 0;
        st = parse_lines(m, buf + head, err, cap);
    }
    free(buf);
    if (st) { free(m->files); m->files = NULL; }
    return st;
}

/* The manifest's text of this run at its current step, with the files' sizes and checksums. */
static char *manifest_text(const collage_run *r, const mfile *files, int nfiles) {
    const collage_run_config *c = &r->cfg;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    fprintf(f, "%s\nstep %d\nskipped %d\nrun_id %016llx\nprecision %s\ntokenizer %s\nvocab %d\npadded_vocab %d\n"
               "max_seq %d\nlayers %d\nheads %d\ndim %d\nbatch %d\nseq %d\nsteps %d\nwarmup %d\nlr %.17g\nbeta1 %.17g\n"
               "beta2 %.17g\neps %.17g\nwd %.17g\nclip %.17g\nseed %llu\ndata_fingerprint %llu\nranks %d\naccum %d\n"
               "family %s\nkv_heads %d\nhidden %d\n",
            MANIFEST_V2, r->step, r->skipped, (unsigned long long)r->run_id, collage_strategy_name(c->strategy), c->tokenizer,
            r->mc.vocab_size, r->mc.padded_vocab_size, r->mc.max_seq_len, c->layers, c->heads, c->dim, c->batch, c->seq,
            c->steps, c->warmup, c->lr, c->beta1, c->beta2, c->eps, c->weight_decay, c->clip, (unsigned long long)c->seed,
            (unsigned long long)r->fingerprint, r->P, r->A, collage_family_name(r->mc.family), c->kv_heads, c->hidden);
    if (r->bf16 == 2) fprintf(f, "loss_scale %.17g\nloss_scale_good %d\n", r->loss_scale, r->scale_good); /* fp16 */
    if (c->optimizer != COLLAGE_OPTIM_ADAMW) /* absent: AdamW, as every run before the others */
        fprintf(f, "optimizer %s\nmomentum %.17g\nnesterov %d\n", collage_optimizer_name(c->optimizer), c->momentum,
                c->nesterov);
    if (c->fp4)
        fprintf(f, "compute fp4\nfp4_recipe %s\nfp4_bf16_last %d\n", c->fp4_recipe ? c->fp4_recipe : "nvfp4",
                c->fp4_bf16_last);
    if (c->fp8) /* absent: bf16 compute */
        fprintf(f, "compute fp8\nfp8_recipe %s\nfp8_e4m3_all %d\n", c->fp8_recipe ? c->fp8_recipe : "delayed",
                c->fp8_e4m3_all);
    fprintf(f, "products %s\n", collage_model_products_spec(r->m));
    for (int i = 0; i < nfiles; i++)
        fprintf(f, "file %s %llu %016llx\n", files[i].name, (unsigned long long)files[i].size,
                (unsigned long long)files[i].sum);
    if (fclose(f) != 0) { free(text); return NULL; }
    return text;
}

static collage_status write_manifest(collage_run *r, const char *dir, const mfile *files, int nfiles) {
    char path[4096];
    snprintf(path, sizeof path, "%.4000s/train.state", dir);
    char *text = manifest_text(r, files, nfiles);
    if (!text) return run_fail(r, COLLAGE_ERR_NOMEM, "out of memory writing '%s'", path);
    collage_atomic_file af;
    collage_status st = collage_atomic_open(&af, path, r->err, sizeof r->err);
    if (!st) {
        fprintf(af.f, "%schecksum %016llx\n", text, (unsigned long long)collage__sum64(text, strlen(text)));
        st = collage_atomic_commit(&af, r->err, sizeof r->err);
    }
    free(text);
    return st;
}

/* Check the listed file `name` of ckdir (NULL: all) against its size and checksum. */
static collage_status verify_files(const manifest *m, const char *ckdir, const char *name, char *err, size_t cap) {
    int found = 0;
    for (int i = 0; i < m->nfiles; i++) {
        const mfile *f = &m->files[i];
        if (name && strcmp(name, f->name)) continue;
        char path[4096], e2[1024];
        uint64_t sum, size;
        snprintf(path, sizeof path, "%s/%s", ckdir, f->name);
        found = 1;
        if (collage__sum64_file(path, &sum, &size, e2, sizeof e2) != COLLAGE_OK)
            return collage__fail(err, cap, COLLAGE_ERR_IO, "%s (listed in '%s')", e2, m->path);
        if (size != f->size)
            return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' has %llu bytes but '%s' records %llu (truncated or "
                                 "replaced)", path, (unsigned long long)size, m->path, (unsigned long long)f->size);
        if (sum != f->sum)
            return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' is damaged or was replaced: its checksum does not match "
                                 "the one '%s' records", path, m->path);
    }
    if (name && !found && m->version >= 2)
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' does not list '%s'", m->path, name);
    return COLLAGE_OK;
}

collage_status collage_checkpoint_verify(const char *path, const char *name, char *err, size_t cap) {
    collage_checkpoint ck;
    manifest m;
    collage_status st = collage_checkpoint_find(path, &ck, err, cap);
    if (!st) st = manifest_read(ck.dir, &m, err, cap);
    if (st) return st;
    st = verify_files(&m, ck.dir, name, err, cap);
    free(m.files);
    return st;
}

collage_status collage__checkpoint_check_file(const char *path, char *err, size_t cap) {
    char dir[4096], state[4200];
    const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path;
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path < 4095 ? slash - path : 4095), path);
    snprintf(state, sizeof state, "%s/train.state", dir);
    struct stat sb;
    if (stat(state, &sb) != 0 && errno == ENOENT) return COLLAGE_OK; /* not in a checkpoint folder */
    manifest m;
    char e2[1024];
    collage_status st = manifest_read(dir, &m, e2, sizeof e2);
    if (st) return collage__fail(err, cap, st, "cannot check '%s' against its checkpoint's manifest: %s", path, e2);
    int listed = 0;
    for (int i = 0; i < m.nfiles; i++) listed |= !strcmp(m.files[i].name, name);
    st = listed ? verify_files(&m, dir, name, err, cap) : COLLAGE_OK;
    free(m.files);
    return st;
}

/* The numeric settings of train.state: key, the flag that sets it, its COLLAGE_RUN_* bit, whether a
 * resumed run may change it (1: the schedule and the optimizer's scalars; 0: it shapes the run), its
 * kind and place in collage_run_config, and whether a train.state may lack it (written since the
 * LLaMA family: 0 there). Read and compared through this table. */
enum { F_INT, F_DBL, F_U64 };
typedef struct { const char *key, *flag; unsigned bit; int change, kind; size_t off; int optional; } run_field;
#define F(key, flag, bit, change, kind, field) {key, flag, bit, change, kind, offsetof(collage_run_config, field), 0}
#define FO(key, flag, bit, change, kind, field) {key, flag, bit, change, kind, offsetof(collage_run_config, field), 1}
static const run_field FIELDS[] = {
    F("layers", "--layers", COLLAGE_RUN_LAYERS, 0, F_INT, layers), F("heads", "--heads", COLLAGE_RUN_HEADS, 0, F_INT, heads),
    F("dim", "--dim", COLLAGE_RUN_DIM, 0, F_INT, dim),             F("max_seq", NULL, 0, 0, F_INT, context),
    F("batch", "--batch", COLLAGE_RUN_BATCH, 0, F_INT, batch),     F("seq", "--seq", COLLAGE_RUN_SEQ, 0, F_INT, seq),
    F("steps", "--steps", COLLAGE_RUN_STEPS, 1, F_INT, steps),     F("warmup", "--warmup", COLLAGE_RUN_WARMUP, 1, F_INT, warmup),
    F("lr", "--lr", COLLAGE_RUN_LR, 1, F_DBL, lr),                 F("beta1", "--beta1", COLLAGE_RUN_BETA1, 0, F_DBL, beta1),
    F("beta2", "--beta2", COLLAGE_RUN_BETA2, 0, F_DBL, beta2),     F("eps", "--eps", COLLAGE_RUN_EPS, 1, F_DBL, eps),
    F("wd", "--wd", COLLAGE_RUN_WD, 1, F_DBL, weight_decay),       F("clip", "--clip", COLLAGE_RUN_CLIP, 1, F_DBL, clip),
    F("seed", "--seed", COLLAGE_RUN_SEED, 0, F_U64, seed),
    FO("kv_heads", "--kv-heads", COLLAGE_RUN_KV_HEADS, 0, F_INT, kv_heads),
    FO("hidden", "--hidden", COLLAGE_RUN_HIDDEN, 0, F_INT, hidden),
    FO("momentum", "--momentum", COLLAGE_RUN_MOMENTUM, 0, F_DBL, momentum),
    FO("nesterov", "--nesterov", COLLAGE_RUN_NESTEROV, 0, F_INT, nesterov),
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
/* "prefix value" of a field of c (doubles as %g when short, else every digit). */
static void field_print(const run_field *f, const collage_run_config *c, const char *prefix, int shortg, char *out,
                        size_t cap) {
    const void *p = (const char *)c + f->off;
    if (f->kind == F_INT) snprintf(out, cap, "%s %d", prefix, *(const int *)p);
    else if (f->kind == F_DBL) snprintf(out, cap, shortg ? "%s %g" : "%s %.17g", prefix, *(const double *)p);
    else snprintf(out, cap, "%s %llu", prefix, (unsigned long long)*(const uint64_t *)p);
}

/* The first preset of the family named `family`: a saved run's shape is its layers, heads and dim over it. */
static const char *family_preset(const char *family) {
    collage_family f;
    if (collage_family_parse(family, &f) != COLLAGE_OK) return NULL;
    for (const char *const *p = collage_model_preset_names(); *p; p++) {
        collage_model_config c;
        if (collage_model_preset(*p, &c) == COLLAGE_OK && c.family == f) return *p;
    }
    return NULL;
}

/* A checkpoint of the older layout has no run id: one derived from its seed and data stands for it,
 * the same for every reader. */
static uint64_t legacy_run_id(const collage_run_saved *s) {
    uint64_t x[2] = {s->cfg.seed, s->data_fingerprint};
    return collage__sum64(x, sizeof x);
}

static collage_status saved_from(const manifest *m, collage_run_saved *s, char *err, size_t cap) {
    static const char *const need[] = {"step", "precision", "tokenizer", "data_fingerprint"};
    const char *path = m->path;
    for (size_t i = 0; i < sizeof need / sizeof *need + NFIELDS; i++) {
        const char *key = i < sizeof need / sizeof *need ? need[i] : FIELDS[i - sizeof need / sizeof *need].key;
        if (i >= sizeof need / sizeof *need && FIELDS[i - sizeof need / sizeof *need].optional) continue;
        if (!kv_get(m, key)) return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' lacks '%s'", path, key);
    }
    collage_run_config *c = &s->cfg;
    *c = collage_run_defaults();
    if (collage_strategy_parse(kv_get(m, "precision"), &c->strategy) != COLLAGE_OK)
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s': unknown precision '%s'", path, kv_get(m, "precision"));
    const char *opt = kv_get(m, "optimizer"); /* absent: AdamW */
    if (opt && collage_optimizer_parse(opt, &c->optimizer) != COLLAGE_OK)
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s': unknown optimizer '%s'", path, opt);
    const char *compute = kv_get(m, "compute"), *recipe = kv_get(m, "fp8_recipe"); /* absent: bf16 compute */
    const char *recipe4 = kv_get(m, "fp4_recipe"), *last4 = kv_get(m, "fp4_bf16_last");
    if (compute && !strcmp(compute, "fp4")) {
        if (!recipe4 || strlen(recipe4) >= sizeof s->fp4_recipe || !last4 || atoi(last4) < 0)
            return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s': compute fp4 with fp4_recipe '%s', fp4_bf16_last '%s'",
                                 path, recipe4 ? recipe4 : "(none)", last4 ? last4 : "(none)");
        snprintf(s->fp4_recipe, sizeof s->fp4_recipe, "%s", recipe4);
        c->fp4 = 1, c->fp4_recipe = s->fp4_recipe, c->fp4_bf16_last = atoi(last4);
        compute = NULL;
    }
    if (compute && (strcmp(compute, "fp8") || !recipe || strlen(recipe) >= sizeof s->fp8_recipe))
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s': compute '%s' with fp8_recipe '%s'", path, compute,
                             recipe ? recipe : "(none)");
    if (compute) {
        snprintf(s->fp8_recipe, sizeof s->fp8_recipe, "%s", recipe);
        c->fp8 = 1;
        c->fp8_recipe = s->fp8_recipe;
        c->fp8_e4m3_all = kv_get(m, "fp8_e4m3_all") && !strcmp(kv_get(m, "fp8_e4m3_all"), "1");
    }
    snprintf(s->tokenizer, sizeof s->tokenizer, "%.63s", kv_get(m, "tokenizer"));
    snprintf(s->model, sizeof s->model, "%.63s", kv_get(m, "family") ? kv_get(m, "family") : "gpt2");
    c->tokenizer = s->tokenizer;
    c->model = family_preset(s->model); /* the family; the shape comes from the model file on resume */
    if (!c->model)
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s': unknown model family '%s'", path, s->model);
    for (size_t i = 0; i < NFIELDS; i++)
        if (kv_get(m, FIELDS[i].key)) field_read(&FIELDS[i], c, kv_get(m, FIELDS[i].key));
    s->step = atoi(kv_get(m, "step"));
    s->data_fingerprint = strtoull(kv_get(m, "data_fingerprint"), NULL, 10);
    /* a run saved by one process has no ranks or accum lines, one of the older layout no skipped or run_id */
    s->ranks = kv_get(m, "ranks") ? atoi(kv_get(m, "ranks")) : 1;
    s->accum = kv_get(m, "accum") ? atoi(kv_get(m, "accum")) : 1;
    s->skipped = kv_get(m, "skipped") ? atoi(kv_get(m, "skipped")) : 0;
    s->run_id = kv_get(m, "run_id") ? strtoull(kv_get(m, "run_id"), NULL, 16) : legacy_run_id(s);
    s->version = m->version;
    /* the fp16 strategies' loss scaler (absent for the others: 0 = the initial scale) */
    s->loss_scale = kv_get(m, "loss_scale") ? strtod(kv_get(m, "loss_scale"), NULL) : 0.0;
    s->loss_scale_good = kv_get(m, "loss_scale_good") ? atoi(kv_get(m, "loss_scale_good")) : 0;
    /* the kernels of its products (absent before they were chosen by measurement) */
    snprintf(s->products, sizeof s->products, "%.47s", kv_get(m, "products") ? kv_get(m, "products") : "");
    char perr[160];
    if (s->products[0] && collage_products_check(s->products, perr, sizeof perr) != COLLAGE_OK)
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s': products '%s': %s", path, s->products, perr);
    c->accum = s->accum;
    if (s->ranks < 1 || s->accum < 1 || s->step < 0 || s->skipped < 0 || s->skipped > s->step)
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' has step %d, skipped %d, ranks %d, accum %d", path, s->step,
                             s->skipped, s->ranks, s->accum);
    return COLLAGE_OK;
}

collage_status run_manifest_read(const char *ckdir, collage_run_saved *s, char *err, size_t cap) {
    manifest m;
    memset(s, 0, sizeof *s);
    collage_status st = manifest_read(ckdir, &m, err, cap);
    if (st) return st;
    st = saved_from(&m, s, err, cap);
    free(m.files);
    return st;
}

collage_status collage_run_read_saved(const char *path, collage_run_saved *out, char *err, size_t cap) {
    if (!path || !out) return collage__fail(err, cap, COLLAGE_ERR_NULL, "no checkpoint folder given");
    collage_checkpoint ck;
    memset(out, 0, sizeof *out);
    collage_status st = collage_checkpoint_find(path, &ck, err, cap);
    return st ? st : run_manifest_read(ck.dir, out, err, cap);
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
    if ((given & COLLAGE_RUN_OPTIMIZER) && a->optimizer != s->optimizer) {
        snprintf(why, cap, "--optimizer %s", collage_optimizer_name(a->optimizer));
        snprintf(was, cap, "optimizer %s", collage_optimizer_name(s->optimizer));
        return 1;
    }
    const int fp8_differs = a->fp8 != s->fp8 || (a->fp8 && (a->fp8_e4m3_all != s->fp8_e4m3_all ||
                                                            strcmp(a->fp8_recipe ? a->fp8_recipe : "delayed", s->fp8_recipe)));
    const int fp4_differs = a->fp4 != s->fp4 || (a->fp4 && (a->fp4_bf16_last != s->fp4_bf16_last ||
                                                            strcmp(a->fp4_recipe ? a->fp4_recipe : "nvfp4", s->fp4_recipe)));
    if ((given & COLLAGE_RUN_COMPUTE) && (a->fp4 || s->fp4) && fp4_differs) { /* fp4 compute: another run's products */
        char last[32] = "";
        if (a->fp4) snprintf(last, sizeof last, " --fp4-bf16-last %d", a->fp4_bf16_last);
        snprintf(why, cap, "--compute %s%s%s", a->fp4 ? "fp4 --fp4-recipe " : a->fp8 ? "fp8" : "bf16",
                 a->fp4 ? (a->fp4_recipe ? a->fp4_recipe : "nvfp4") : "", last);
        last[0] = 0;
        if (s->fp4) snprintf(last, sizeof last, ", %d last layers bf16", s->fp4_bf16_last);
        snprintf(was, cap, "compute %s%s%s", s->fp4 ? "fp4, recipe " : s->fp8 ? "fp8" : "bf16", s->fp4 ? s->fp4_recipe : "",
                 last);
        return 1;
    }
    if ((given & COLLAGE_RUN_COMPUTE) && fp8_differs) { /* fp8 compute: another run's products */
        snprintf(why, cap, "--compute %s%s%s", a->fp8 ? "fp8 --fp8-recipe " : "bf16",
                 a->fp8 ? (a->fp8_recipe ? a->fp8_recipe : "delayed") : "", a->fp8 && a->fp8_e4m3_all ? " --fp8-e4m3-all" : "");
        snprintf(was, cap, "compute %s%s%s", s->fp8 ? "fp8, recipe " : "bf16", s->fp8 ? s->fp8_recipe : "",
                 s->fp8 && s->fp8_e4m3_all ? ", e4m3 everywhere" : "");
        return 1;
    }
    if ((given & COLLAGE_RUN_STRATEGY) && a->strategy != s->strategy) {
        snprintf(why, cap, "--precision %s", collage_strategy_name(a->strategy));
        snprintf(was, cap, "precision %s", collage_strategy_name(s->strategy));
        return 1;
    }
    for (size_t i = 0; i < NFIELDS; i++) {
        const run_field *f = &FIELDS[i];
        if (f->change || !(given & f->bit) || !field_differs(f, a, s)) continue;
        field_print(f, a, f->flag, 1, why, cap);
        field_print(f, s, f->key, 0, was, cap);
        return 1;
    }
    if ((given & COLLAGE_RUN_TOKENIZER) && strcmp(a->tokenizer ? a->tokenizer : "byte", saved->tokenizer)) {
        snprintf(why, cap, "--tokenizer %.200s", a->tokenizer ? a->tokenizer : "byte");
        snprintf(was, cap, "tokenizer %.200s", saved->tokenizer);
        return 1;
    }
    if ((given & COLLAGE_RUN_MODEL) && conflict_model(saved, a, given)) {
        snprintf(why, cap, "--model %.200s", a->model ? a->model : "tiny");
        snprintf(was, cap, "a %.60s model of %d layers, %d heads, dim %d", saved->model, s->layers, s->heads, s->dim);
        return 1;
    }
    return 0;
}

int collage_run_changes(const collage_run_saved *saved, const collage_run_config *asked, unsigned given, char *out,
                        size_t cap) {
    int k = 0;
    size_t len = 0;
    if (cap) out[0] = 0;
    for (size_t i = 0; i < NFIELDS; i++) {
        const run_field *f = &FIELDS[i];
        if (!f->change || !(given & f->bit) || !field_differs(f, asked, &saved->cfg)) continue;
        char now[128], was[128];
        field_print(f, asked, f->flag, 1, now, sizeof now);
        field_print(f, &saved->cfg, "", 1, was, sizeof was);
        if (len < cap) len += (size_t)snprintf(out + len, cap - len, "%s%s (the saved run's%s)", k ? ", " : "", now, was);
        k++;
    }
    return k;
}

/* ---------------------------------------------------------------- save */
/* The model file (rank 0): bf16 or fp16 weights widened exactly, so that llm.c's fp32 format loads anywhere. */
static collage_status save_model_file(collage_run *r, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%.4000s/model.bin", dir);
    float *w32 = r->bf16 ? malloc(r->n * sizeof(float)) : (float *)r->params;
    if (!w32) return run_fail(r, COLLAGE_ERR_NOMEM, "out of memory writing '%s'", path);
    if (r->bf16 == 2) collage_fp16_to_f32_row(w32, r->params, r->n);
    else if (r->bf16) collage_bf16_to_f32_row(w32, r->params, r->n);
    collage_status st = collage_model_save_file(path, &r->mc, w32, 0, r->err, sizeof r->err);
    if (r->bf16) free(w32);
    return st;
}

/* A file just written into the checkpoint folder tmp, as its manifest lists it. */
static collage_status file_entry(collage_run *r, const char *tmp, const char *name, mfile *out) {
    char path[4096];
    snprintf(path, sizeof path, "%.4000s/%.63s", tmp, name);
    snprintf(out->name, sizeof out->name, "%.63s", name);
    return collage__sum64_file(path, &out->sum, &out->size, r->err, sizeof r->err);
}

static int weights_finite(const collage_run *r) {
    for (size_t i = 0; i < r->n; i++) {
        const uint16_t top = r->bf16 == 2 ? 0x7c00u : 0x7f80u; /* fp16's or bf16's exponent field all ones */
        if (r->bf16 && (((const uint16_t *)r->params)[i] & top) == top) return 0;
        if (!r->bf16 && !isfinite(((const float *)r->params)[i])) return 0;
    }
    return 1;
}

/* Rank 0, first: the run folder, without the leftovers of killed saves, and an empty tmp folder. */
static collage_status save_begin(collage_run *r, const char *dir, const char *tmp) {
    if (!weights_finite(r))
        return run_fail(r, COLLAGE_ERR_NONFINITE, "step %d: a weight is not finite; not saved, '%s' keeps the checkpoints "
                        "it had", r->step, dir);
    if (collage__mkdir_p(dir) != 0)
        return run_fail(r, COLLAGE_ERR_IO, "cannot create the checkpoint folder '%s': %s", dir, strerror(errno));
    ckpt_clean(dir);
    if (mkdir(tmp, 0755) != 0) return run_fail(r, COLLAGE_ERR_IO, "cannot create '%s': %s", tmp, strerror(errno));
    return COLLAGE_OK;
}

/* fp8 compute with delayed scaling (rank 0; every rank holds the same state): the scaling state's bytes
 * (collage_model_fp8_state_save) as fp8.state in the folder dir; *have: 1 when written. */
static collage_status save_fp8_state(collage_run *r, const char *dir, int *have) {
    *have = 0;
    const size_t nb = r->cfg.fp8 ? collage_model_fp8_state_bytes(r->m) : 0;
    if (!nb) return COLLAGE_OK;
    char path[4096];
    snprintf(path, sizeof path, "%.4000s/fp8.state", dir);
    unsigned char *buf = malloc(nb);
    if (!buf) return run_fail(r, COLLAGE_ERR_NOMEM, "out of memory writing '%s'", path);
    collage_atomic_file af;
    collage_status st = collage_model_fp8_state_save(r->m, buf, nb);
    if (!st) st = collage_atomic_open(&af, path, r->err, sizeof r->err);
    if (!st) st = collage__atomic_finish(&af, fwrite(buf, 1, nb, af.f) == nb, r->err, sizeof r->err);
    free(buf);
    *have = st == COLLAGE_OK;
    return st;
}

/* Rank 0, last: the model file, the manifest listing every file, the folder renamed into place, the
 * checkpoints beyond `keep` removed. shards: every rank's optimizer file (size, checksum). */
static collage_status save_finish(collage_run *r, const char *dir, const char *tmp, const uint64_t *shards) {
    mfile *files = malloc((size_t)(r->P + 2) * sizeof *files);
    int fp8 = 0;
    if (!files) return run_fail(r, COLLAGE_ERR_NOMEM, "out of memory saving to '%s'", dir);
    collage__atomic_defer_dir_sync(1);
    collage_status st = save_model_file(r, tmp);
    if (!st) st = file_entry(r, tmp, "model.bin", &files[0]);
    if (!st) st = save_fp8_state(r, tmp, &fp8);
    if (!st && fp8) st = file_entry(r, tmp, "fp8.state", &files[r->P + 1]);
    for (int k = 0; k < r->P; k++) {
        char path[4096];
        run_opt_path(path, sizeof path, "", k, r->P);
        snprintf(files[k + 1].name, sizeof files[k + 1].name, "%.63s", path + 1);
        files[k + 1].size = shards[2 * k];
        files[k + 1].sum = shards[2 * k + 1];
    }
    if (!st) st = write_manifest(r, tmp, files, r->P + 1 + fp8);
    collage__atomic_defer_dir_sync(0);
    free(files);
    ckpt_sync_dir(tmp);
    char fin[4096];
    ckpt_path(fin, sizeof fin, dir, r->step, NULL);
    if (!st && ckpt_commit(dir, tmp, fin) != 0)
        st = run_fail(r, COLLAGE_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, fin, strerror(errno));
    if (!st) ckpt_prune(dir, r->step, r->run_id, r->cfg.keep > 0 ? r->cfg.keep : 2); /* a failure leaves more */
    return st;
}

collage_status collage_run_save(collage_run *r, const char *dir) {
    if (!r || !dir) return COLLAGE_ERR_NULL;
    if (r->diverged)
        return run_fail(r, COLLAGE_ERR_NONFINITE, "the run diverged at step %d; its state is not saved, '%s' keeps the "
                        "checkpoints it had", r->diverged, dir);
    char tmp[4096], path[4096];
    ckpt_path(tmp, sizeof tmp, dir, r->step, ".tmp");
    collage_status st = run_agree(r, r->R == 0 ? save_begin(r, dir, tmp) : COLLAGE_OK, "saving");
    uint64_t mine[2] = {0, 0}, *all = NULL; /* this rank's optimizer file: size, checksum */
    if (!st) {
        mfile e;
        run_opt_path(path, sizeof path, tmp, r->R, r->P);
        collage__atomic_defer_dir_sync(1); /* tmp is synced once, before its rename */
        int bad = collage_adamw_save(r->opt, path) != COLLAGE_OK;
        collage__atomic_defer_dir_sync(0);
        if (bad) st = run_fail(r, COLLAGE_ERR_IO, "%s", collage_adamw_error(r->opt));
        else if (file_entry(r, tmp, strrchr(path, '/') + 1, &e) == COLLAGE_OK) { mine[0] = e.size; mine[1] = e.sum; }
        else st = COLLAGE_ERR_IO;
        st = run_agree(r, st, "saving");
    }
    if (!st && (!(all = malloc((size_t)r->P * sizeof mine)) || shard_allgather_bytes(run_comm(r), mine, sizeof mine, all)))
        st = run_fail(r, COLLAGE_ERR_IO, "saving: out of memory or the transport failed");
    if (!st) st = run_agree(r, r->R == 0 ? save_finish(r, dir, tmp, all) : COLLAGE_OK, "saving");
    if (st && r->R == 0) ckpt_rm_tree(tmp); /* the folder keeps what it had */
    free(all);
    return st;
}

/* ---------------------------------------------------------------- resume */
/* One file of the checkpoint, checked against its manifest before it is read. */
static collage_status verify_one(collage_run *r, const char *dir, const char *path) {
    manifest m;
    collage_status st = manifest_read(dir, &m, r->err, sizeof r->err);
    if (!st) st = verify_files(&m, dir, strrchr(path, '/') + 1, r->err, sizeof r->err);
    free(m.files);
    return st;
}

/* fp8 compute: the delayed scaling state of the checkpoint in dir (its fp8.state, checked against the
 * manifest), so that the resumed run scales as the uninterrupted one; none saved: nothing to load. */
collage_status run_load_fp8(collage_run *r, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%.4000s/fp8.state", dir);
    if (access(path, F_OK) != 0) return COLLAGE_OK;
    if (!r->cfg.fp8 || !collage_model_fp8_state_bytes(r->m))
        return run_fail(r, COLLAGE_ERR_ARG, "'%s' holds delayed fp8 scaling: resume with --compute fp8 --fp8-recipe "
                        "delayed (and --fp8-e4m3-all if the run had it)", dir);
    if (verify_one(r, dir, path)) return run_fail(r, COLLAGE_ERR_FORMAT, "%s", r->err);
    char *buf = NULL;
    size_t len = 0;
    collage_status st = collage__read_file(path, &buf, &len, r->err, sizeof r->err);
    if (!st && collage_model_fp8_state_load(r->m, buf, len) != COLLAGE_OK)
        st = run_fail(r, COLLAGE_ERR_FORMAT, "'%s': %s", path, collage_model_error(r->m));
    free(buf);
    return st;
}

/* This rank's shard from the saved one (same rank count) or from the saved shards it overlaps. */
collage_status run_load_shards(collage_run *r, const char *dir, const collage_run_saved *saved) {
    char path[4096];
    if (saved->ranks == r->P) {
        run_opt_path(path, sizeof path, dir, r->R, r->P);
        if (verify_one(r, dir, path)) return run_fail(r, COLLAGE_ERR_FORMAT, "%s", r->err);
        if (collage_adamw_load(r->opt, path) != COLLAGE_OK)
            return run_fail(r, COLLAGE_ERR_FORMAT, "%s", collage_adamw_error(r->opt));
    } else {
        size_t got = 0;
        for (int k = 0; k < saved->ranks; k++) {
            size_t a, b, c = 0;
            collage_shard_bounds(r->n, saved->ranks, k, &a, &b);
            if (b <= r->lo || a >= r->hi) continue;
            run_opt_path(path, sizeof path, dir, k, saved->ranks);
            if (verify_one(r, dir, path)) return run_fail(r, COLLAGE_ERR_FORMAT, "%s", r->err);
            if (collage_adamw_load_part(r->opt, path, &c) != COLLAGE_OK)
                return run_fail(r, COLLAGE_ERR_FORMAT, "%s", collage_adamw_error(r->opt));
            got += c;
        }
        if (got != r->hi - r->lo)
            return run_fail(r, COLLAGE_ERR_FORMAT, "the %d saved shards in '%s' cover %zu of its %zu parameters",
                            saved->ranks, dir, got, r->hi - r->lo);
    }
    /* a skipped step advanced the run (its data, its schedule) but not the optimizer */
    if (collage_adamw_steps(r->opt) + (uint64_t)saved->skipped != (uint64_t)saved->step)
        return run_fail(r, COLLAGE_ERR_FORMAT, "'%s' holds %llu optimizer steps but train.state says %d steps of which %d "
                        "skipped", dir, (unsigned long long)collage_adamw_steps(r->opt), saved->step, saved->skipped);
    return COLLAGE_OK;
}
