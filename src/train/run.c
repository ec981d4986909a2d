/* run.c — the training run (collage_run.h): set-up of tokenizer, data, model and this rank's
 * optimizer shard; the training step over ranks and micro-batches with every sum in a fixed order;
 * evaluation; the learning-rate schedule. Checkpoints: run_ckpt.c; the collectives' arithmetic:
 * shard.c. */
#include "run_internal.h"
#include "nn.h"
#include <math.h>
#include <stdarg.h>
#include <time.h>
#include <unistd.h>

collage_run_config collage_run_defaults(void) {
    return (collage_run_config){.strategy = COLLAGE_LIGHT, .steps = 1000, .batch = 16, .accum = 1, .warmup = -1,
                                .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1,
                                .clip = 1.0, .seed = 1337, .momentum = 0.9, .keep = 2, .max_skips = 10};
}

double collage_run_lr(const collage_run_config *c, int step) {
    if (step < c->warmup) return c->lr * (double)(step + 1) / (double)c->warmup;
    double span = (double)(c->steps - c->warmup), p = span > 0 ? (double)(step - c->warmup) / span : 1.0;
    double minlr = c->lr * 0.1;
    return minlr + 0.5 * (c->lr - minlr) * (1.0 + cos(M_PI * p));
}

collage_status run_fail(collage_run *r, collage_status st, const char *fmt, ...) {
    char msg[sizeof r->err];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->P > 1) snprintf(r->err, sizeof r->err, "rank %d: %.990s", r->R, msg);
    else snprintf(r->err, sizeof r->err, "%s", msg);
    return st;
}

collage_status run_agree(collage_run *r, collage_status st, const char *what) {
    int any = shard_any(run_comm(r), st != COLLAGE_OK);
    if (st != COLLAGE_OK) return st;
    if (!any) return COLLAGE_OK;
    snprintf(r->err, sizeof r->err, "%s failed on rank %d of %d (its message is above); every rank stops", what, any - 1,
             r->P);
    return COLLAGE_ERR_PEER;
}

const char *collage_run_error(const collage_run *r) { return r ? r->err : "no run"; }
const collage_run_config *collage_run_get_config(const collage_run *r) { return r ? &r->cfg : NULL; }
const void *collage_run_params(const collage_run *r) { return r ? r->params : NULL; }

/* ---------------------------------------------------------------- set-up */
/* Settings that are the same on every rank: checked before anything is allocated. */
static collage_status check_config(collage_run *r) {
    const collage_run_config *c = &r->cfg;
#define NEED(ok, name, fmt, v, range) \
    if (!(ok)) return run_fail(r, COLLAGE_ERR_ARG, "%s " fmt ": it takes %s", name, v, range)
    NEED(c->steps >= 1, "steps", "%d", c->steps, "1 or more");
    NEED(c->batch >= 1, "batch", "%d", c->batch, "1 or more");
    NEED(c->accum >= 1, "accum", "%d", c->accum, "1 or more");
    NEED(c->lr >= 0 && isfinite(c->lr), "lr", "%g", c->lr, "a finite value >= 0");
    NEED(c->beta1 > 0 && c->beta1 < 1, "beta1", "%g", c->beta1, "a value in (0, 1)");
    NEED(c->beta2 > 0 && c->beta2 < 1, "beta2", "%g", c->beta2, "a value in (0, 1)");
    NEED(c->eps > 0 && isfinite(c->eps), "eps", "%g", c->eps, "a finite value > 0");
    NEED(c->weight_decay >= 0 && isfinite(c->weight_decay), "weight decay", "%g", c->weight_decay, "a finite value >= 0");
    NEED(c->clip >= 0 && isfinite(c->clip), "clip", "%g", c->clip, "a finite value >= 0 (0: no clipping)");
    NEED(c->keep >= 0, "keep", "%d", c->keep, "1 or more (0: 2)");
    NEED(c->max_skips >= 0, "max_skips", "%d", c->max_skips, "1 or more (0: 10)");
    NEED(c->momentum >= 0 && c->momentum < 1, "momentum", "%g", c->momentum, "a value in [0, 1)");
    NEED(!c->nesterov || c->momentum > 0, "nesterov", "%d", c->nesterov, "a momentum > 0");
#undef NEED
    char why[256];
    if (collage_optimizer_check(c->optimizer, c->strategy, why, sizeof why) != COLLAGE_OK)
        return run_fail(r, COLLAGE_ERR_ARG, "%s", why);
    collage_composition parts;
    if (c->optimizer == COLLAGE_OPTIM_SGD && collage_strategy_parts(c->strategy, &parts) == COLLAGE_OK &&
        parts.weights == COLLAGE_SCHEME_ECO && !(c->momentum > 0 && !c->nesterov))
        return run_fail(r, COLLAGE_ERR_ARG, "momentum %g%s: %s feeds θ's rounding error into sgd's momentum buffer, which "
                                            "needs a momentum > 0 without nesterov (heavy-ball)", c->momentum,
                        c->nesterov ? " with nesterov" : "", collage_strategy_name(c->strategy));
    if (c->batch % r->M != 0 || r->M > RUN_MAX_MICRO || r->A > RUN_MAX_ACCUM)
        return run_fail(r, COLLAGE_ERR_ARG, "a batch of %d sequences does not split into %d ranks x %d micro-batches of "
                                            "equal size", c->batch, r->P, r->A);
    const collage_strategy_info *T = collage_strategy_get(c->strategy);
    if (T && T->arith == COLLAGE_WORD_FP16 && c->optimizer == COLLAGE_OPTIM_ADAMW && !(collage_lp_to_f32(COLLAGE_FMT_FP16, collage_lp_from_f32(COLLAGE_FMT_FP16, (float)c->eps)) > 0))
        return run_fail(r, COLLAGE_ERR_ARG, "eps %g is 0 in fp16, and %s keeps v and its denominator in fp16: where v underflows "
                                            "the update would divide by 0 (use --eps 1e-4, the usual eps of fp16 training, or "
                                            "fp16-master)", c->eps, T->name);
    collage_tokenizer_kind tk;
    if (collage_tokenizer_kind_parse(c->tokenizer, &tk) != COLLAGE_OK)
        return run_fail(r, COLLAGE_ERR_ARG, "unknown tokenizer '%s' (byte or gpt2)", c->tokenizer);
    return COLLAGE_OK;
}

/* "tiny, small, gpt2, llama-tiny, …": the presets, for messages. */
static const char *preset_list(char *buf, size_t cap) {
    const char *const *p = collage_model_preset_names();
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; p[i] && at < cap; i++) at += (size_t)snprintf(buf + at, cap - at, "%s%s", i ? ", " : "", p[i]);
    return buf;
}

/* The shape of a model file (cfg->init, or the model of the checkpoint resumed), which must fit the
 * tokenizer. */
static collage_status file_shape(collage_run *r, const char *path, int resuming) {
    const collage_run_config *c = &r->cfg;
    char err[1024];
    if (!resuming && (c->model || c->layers || c->heads || c->kv_heads || c->dim || c->hidden))
        return run_fail(r, COLLAGE_ERR_ARG, "the model in '%s' gives the run its shape: leave the preset and the sizes "
                                            "(layers, heads, kv_heads, dim, hidden) unset", path);
    if (collage_model_read_header(path, &r->mc, NULL, err, sizeof err) != COLLAGE_OK)
        return run_fail(r, COLLAGE_ERR_IO, "%s", err);
    const int V = collage_tokenizer_vocab_size(r->tok);
    if (collage_model_text_vocab(&r->mc) != V)
        return run_fail(r, COLLAGE_ERR_ARG, "the model in '%s' has a vocabulary of %d but the %s tokenizer has %d symbols",
                        path, collage_model_text_vocab(&r->mc), c->tokenizer, V);
    return COLLAGE_OK;
}

/* The model's shape: from a model file, or the preset with the config's sizes over it and the
 * tokenizer's vocabulary; seq and context filled in. Writes the resolved shape back into r->cfg. */
static collage_status model_shape(collage_run *r, const char *resume_dir) {
    collage_run_config *c = &r->cfg;
    collage_model_config *m = &r->mc;
    char from[4096] = "", names[512];
    if (resume_dir) collage_checkpoint_model_path(resume_dir, from, sizeof from);
    else if (c->init) snprintf(from, sizeof from, "%s", c->init);
    if (from[0]) {
        collage_status st = file_shape(r, from, resume_dir != NULL);
        if (st) return st;
    } else {
        if (collage_model_preset(c->model ? c->model : "tiny", m) != COLLAGE_OK)
            return run_fail(r, COLLAGE_ERR_ARG, "unknown model '%s' (%s)", c->model, preset_list(names, sizeof names));
        collage_model_config_resize(m, c->layers, c->heads, c->kv_heads, c->dim, c->hidden);
        collage_model_config_set_vocab(m, collage_tokenizer_vocab_size(r->tok));
    }
    r->mlm = collage_family_objective(m->family) == COLLAGE_OBJECTIVE_MASKED_LM;
    c->layers = m->num_layers; c->heads = m->num_heads; c->dim = m->channels;
    c->kv_heads = m->num_kv_heads; c->hidden = m->hidden_dim;
    if (c->seq <= 0) c->seq = m->max_seq_len < 64 ? m->max_seq_len : 64;
    if (!from[0] && c->context > 0) m->max_seq_len = c->context;
    else if (!from[0] && c->seq > m->max_seq_len) m->max_seq_len = c->seq;
    c->context = m->max_seq_len;
    char msg[256];
    if (collage_model_check(m, c->batch, c->seq, msg, sizeof msg) != COLLAGE_OK)
        return run_fail(r, COLLAGE_ERR_ARG, "bad model shape: %s", msg);
    return COLLAGE_OK;
}

static collage_status open_data(collage_run *r, const char *resume_dir, const collage_run_saved *saved) {
    collage_tokenizer_kind tk = COLLAGE_TOKENIZER_BYTE;
    collage_tokenizer_kind_parse(r->cfg.tokenizer, &tk);
    char err[1024];
    if (collage_tokenizer_create(tk, NULL, &r->tok, err, sizeof err) != COLLAGE_OK)
        return run_fail(r, COLLAGE_ERR_IO, "%s", err);
    collage_status st = model_shape(r, resume_dir);
    if (st) return st;
    collage_loader_config lc = {.path = r->cfg.data, .tokenizer = r->tok, .B = r->cfg.batch, .T = r->cfg.seq,
                                .seed = r->cfg.seed};
    if (collage_loader_create(&lc, &r->ld, err, sizeof err) != COLLAGE_OK) return run_fail(r, COLLAGE_ERR_IO, "%s", err);
    r->fingerprint = collage_loader_fingerprint(r->ld);
    if (saved && r->fingerprint != saved->data_fingerprint)
        return run_fail(r, COLLAGE_ERR_ARG, "the data differ from those of the saved run (another data path or tokenizer)");
    return COLLAGE_OK;
}

/* The model on the kernels its products take: the process's pin if any (collage_products_pin,
 * COLLAGE_GEMM), else a resumed run's recorded ones, else the ones measured on this machine, rank 0's on
 * every rank (each rank measures; a rank that chose otherwise takes rank 0's), so that every rank
 * computes the same bits. */
static collage_status create_model(collage_run *r, collage_real prec, const char *recorded) {
    int f32, bf16;
    nn_products_pinned(&f32, &bf16);
    const int pinned = f32 >= 0 || bf16 >= 0, take = !pinned && recorded && recorded[0];
    char err[160];
    if (take && nn_products_pin_thread(recorded, err, sizeof err) != 0)
        return run_fail(r, COLLAGE_ERR_FORMAT, "the recorded products '%s': %s", recorded, err);
    collage_status st = collage_model_create(&r->mc, prec, r->Bm, r->cfg.seq, &r->m);
    if (st == COLLAGE_OK && !pinned && !take && r->has_comm) {
        char mine[48] = {0}, *all = calloc((size_t)r->comm.size, sizeof mine);
        snprintf(mine, sizeof mine, "%s", collage_model_products_spec(r->m));
        if (!all || r->comm.allgather(r->comm.ctx, mine, sizeof mine, 1, all)) st = COLLAGE_ERR_IO;
        if (st == COLLAGE_OK && strcmp(mine, all) != 0 && nn_products_pin_thread(all, err, sizeof err) == 0) {
            collage_model_free(r->m);
            r->m = NULL;
            st = collage_model_create(&r->mc, prec, r->Bm, r->cfg.seq, &r->m);
        }
        free(all);
    }
    nn_products_pin_thread(NULL, err, sizeof err);
    return st;
}

/* The model, this rank's optimizer shard over the weight slab, the step's buffers. */
static collage_status make_model(collage_run *r, const collage_run_saved *saved) {
    collage_run_config *c = &r->cfg;
    collage_real prec = r->bf16 == 2 ? COLLAGE_REAL_FP16 : r->bf16 ? COLLAGE_REAL_BF16 : COLLAGE_REAL_FP32;
    if (c->fp8 && r->bf16 != 1)
        return run_fail(r, COLLAGE_ERR_ARG, "fp8 compute runs on bf16 weights: %s keeps %s ones (take a bf16 strategy, "
                        "e.g. collage-light)", collage_strategy_name(c->strategy), r->bf16 ? "fp16" : "fp32");
    if (c->fp4 && (r->bf16 != 1 || c->fp8))
        return run_fail(r, COLLAGE_ERR_ARG, c->fp8 ? "fp4 compute and fp8 compute at once: take one --compute"
                        : "fp4 compute runs on bf16 weights: take a bf16 strategy, e.g. collage-light");
    if (c->fp8) prec = COLLAGE_REAL_FP8;
    if (c->fp4) prec = COLLAGE_REAL_FP4;
    collage_status mst = create_model(r, prec, saved ? saved->products : NULL);
    if (mst == COLLAGE_OK && c->fp4 && collage_model_fp4_set(r->m, r->fp4_recipe, c->fp4_bf16_last, c->seed) != COLLAGE_OK)
        return run_fail(r, COLLAGE_ERR_ARG, "fp4: --fp4-recipe '%s' (nvfp4 | mxfp4, each optionally ,hadamard, then ,rn) or "
                        "--fp4-bf16-last %d (0 … %d linear layers): %s", r->fp4_recipe, c->fp4_bf16_last,
                        collage_model_fp4_layers(r->m), collage_model_error(r->m));
    if (mst == COLLAGE_OK && c->fp8 && collage_model_fp8_set(r->m, r->fp8_recipe, c->fp8_e4m3_all) != COLLAGE_OK)
        return run_fail(r, COLLAGE_ERR_ARG, "fp8 recipe '%s' is not one of delayed, current, block, mxfp8",
                        r->fp8_recipe);
    if (mst == COLLAGE_ERR_IO) return run_fail(r, COLLAGE_ERR_IO, "the transport failed agreeing on the products' kernels");
    if (mst == COLLAGE_ERR_FORMAT) return mst;
    if (mst == COLLAGE_ERR_UNSUPPORTED)
        return run_fail(r, COLLAGE_ERR_ARG, "the %s family has no %s model: %s needs a family that has one",
                        collage_family_name(r->mc.family), collage_real_name(prec), collage_strategy_name(c->strategy));
    if (mst != COLLAGE_OK)
        return run_fail(r, COLLAGE_ERR_NOMEM, "cannot create the model (%zu parameters)", collage_model_num_params(&r->mc));
    r->n = collage_model_size(r->m);
    collage_shard_bounds(r->n, r->P, r->R, &r->lo, &r->hi);
    if (r->hi == r->lo || r->n / (size_t)r->P > (size_t)INT32_MAX)
        return run_fail(r, COLLAGE_ERR_ARG, "%zu parameters do not split into %d shards of whole %zu-element chunks", r->n,
                        r->P, COLLAGE_SHARD_CHUNK);
    int ng = collage_model_param_groups(&r->mc, c->weight_decay, NULL, 0);
    collage_param_group *groups = calloc((size_t)(ng > 0 ? ng : 1), sizeof *groups);
    r->params = aligned_alloc(64, (r->n * r->wb + 63) & ~(size_t)63);
    collage_status st = groups && r->params ? COLLAGE_OK : COLLAGE_ERR_NOMEM;
    if (st == COLLAGE_OK) {
        collage_model_param_groups(&r->mc, c->weight_decay, groups, ng);
        collage_adamw_config ac = {.strategy = c->strategy, .n = r->hi - r->lo, .beta1 = c->beta1, .beta2 = c->beta2,
                                   .eps = c->eps, .weight_decay = c->weight_decay, .groups = groups, .n_groups = ng,
                                   .clip = c->clip, .skip_nonfinite = 1, .edq = 1, .seed = c->seed,
                                   .params = (char *)r->params + r->lo * r->wb, .index0 = r->lo, .total = r->n,
                                   .optimizer = c->optimizer, .momentum = c->momentum, .nesterov = c->nesterov};
        st = collage_adamw_create(&ac, &r->opt);
    }
    free(groups);
    size_t bt = (size_t)r->Bm * (size_t)c->seq;
    r->in = malloc(sizeof(int32_t) * bt);
    r->tg = malloc(sizeof(int32_t) * bt);
    if (r->M > 1) r->gshard = malloc((r->hi - r->lo) * r->wb);
    if (r->A > 1) r->gacc = malloc(r->n * sizeof(float));
    r->gathered = malloc((size_t)(2 * r->M > 5 * r->P ? 2 * r->M : 5 * r->P) * sizeof(double));
    if (r->mlm) {
        r->gin = malloc(sizeof(int32_t) * (size_t)c->batch * (size_t)c->seq);
        r->gtg = malloc(sizeof(int32_t) * (size_t)c->batch * (size_t)c->seq);
    }
    r->parts = malloc((size_t)r->P * sizeof(collage_edq));
    if (st != COLLAGE_OK || !r->in || !r->tg || (r->M > 1 && !r->gshard) || (r->A > 1 && !r->gacc) || !r->gathered ||
        !r->parts || (r->mlm && (!r->gin || !r->gtg)))
        return run_fail(r, st == COLLAGE_OK ? COLLAGE_ERR_NOMEM : st, "cannot create the optimizer (%zu parameters): %s",
                        r->n, collage_status_str(st == COLLAGE_OK ? COLLAGE_ERR_NOMEM : st));
    r->grads = collage_model_grads(r->m);
    return COLLAGE_OK;
}

/* The weights: the family's initialisation, or this rank's state from the checkpoint (with the loss
 * scaler's state). */
static collage_status first_weights(collage_run *r, const char *resume_dir, const collage_run_saved *saved) {
    if (saved) {
        collage_status st = run_load_shards(r, resume_dir, saved);
        if (st == COLLAGE_OK) st = run_load_fp8(r, resume_dir);
        r->step = saved->step;
        if (r->bf16 == 2 && saved->loss_scale > 0) {
            r->loss_scale = saved->loss_scale;
            r->scale_good = saved->loss_scale_good;
        }
        return st;
    }
    float *w0 = malloc(r->n * sizeof(float));
    char err[1024];
    if (w0 && r->cfg.init && collage_model_load_file(r->cfg.init, &r->mc, w0, 0, err, sizeof err) != COLLAGE_OK) {
        free(w0);
        return run_fail(r, COLLAGE_ERR_IO, "%s", err);
    }
    if (!w0 || (!r->cfg.init && collage_model_init_weights(&r->mc, r->cfg.seed, w0, r->n) != COLLAGE_OK)) {
        free(w0);
        return run_fail(r, COLLAGE_ERR_NOMEM, "cannot initialise %zu weights (out of memory?)", r->n);
    }
    collage_status st = collage_adamw_set_weights_f32(r->opt, w0 + r->lo, r->hi - r->lo);
    free(w0);
    return st;
}

/* The configuration's strings, owned by the run. */
static collage_status own_strings(collage_run *r, const collage_run_config *cfg) {
    r->cfg = *cfg;
    snprintf(r->tokenizer_name, sizeof r->tokenizer_name, "%s", cfg->tokenizer ? cfg->tokenizer : "byte");
    r->cfg.tokenizer = r->tokenizer_name;
    if (cfg->model) {
        snprintf(r->model_name, sizeof r->model_name, "%s", cfg->model);
        r->cfg.model = r->model_name;
    }
    if (cfg->init && !(r->cfg.init = r->init = strdup(cfg->init))) return COLLAGE_ERR_NOMEM;
    if (cfg->data && !(r->data = strdup(cfg->data))) return COLLAGE_ERR_NOMEM;
    snprintf(r->fp8_recipe, sizeof r->fp8_recipe, "%s", cfg->fp8_recipe ? cfg->fp8_recipe : "delayed");
    r->cfg.fp8_recipe = r->fp8_recipe;
    snprintf(r->fp4_recipe, sizeof r->fp4_recipe, "%s", cfg->fp4_recipe ? cfg->fp4_recipe : "nvfp4");
    r->cfg.fp4_recipe = r->fp4_recipe;
    r->cfg.data = r->data;
    if (r->cfg.accum < 1) r->cfg.accum = 1;
    if (r->cfg.warmup < 0) r->cfg.warmup = r->cfg.steps / 20;
    return COLLAGE_OK;
}

/* A new run's id: a hash of the clock, the process and the seed (only rank 0's is ever written). */
static uint64_t new_run_id(const collage_run *r) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x[4] = {(uint64_t)ts.tv_sec, (uint64_t)ts.tv_nsec, (uint64_t)getpid(), r->cfg.seed};
    return collage__sum64(x, sizeof x);
}

/* The checkpoint to resume from: its settings, checked against cfg; the leftovers of killed saves in
 * its run folder removed (rank 0). ckdir receives its folder. */
static collage_status resume_from(collage_run *r, const char *resume_dir, collage_run_saved *saved, char *ckdir,
                                  size_t cap) {
    collage_checkpoint ck;
    char why[256], was[256];
    collage_status st = collage_checkpoint_find(resume_dir, &ck, r->err, sizeof r->err);
    if (st) return st;
    snprintf(ckdir, cap, "%s", ck.dir);
    st = run_manifest_read(ck.dir, saved, r->err, sizeof r->err);
    if (st && ck.previous[0]) {
        size_t len = strlen(r->err);
        snprintf(r->err + len, sizeof r->err - len, " (the checkpoint before it: --resume %.900s)", ck.previous);
    }
    if (st) return st;
    unsigned shape = (~(unsigned)COLLAGE_RUN_MODEL & 0xffffu) | COLLAGE_RUN_COMPUTE;
    if (collage_run_conflict(saved, &r->cfg, shape, why, was, sizeof why))
        return run_fail(r, COLLAGE_ERR_ARG, "%s differs from the run saved in '%s' (%s there)", why, ck.dir, was);
    collage_model_config want; /* a checkpoint of another family is refused before anything is read */
    if (collage_model_preset(r->cfg.model ? r->cfg.model : "tiny", &want) == COLLAGE_OK &&
        strcmp(collage_family_name(want.family), saved->model) != 0)
        return run_fail(r, COLLAGE_ERR_ARG, "'%s' holds a %s run, not a %s one (model %s)", resume_dir, saved->model,
                        collage_family_name(want.family), r->cfg.model ? r->cfg.model : "tiny");
    if (r->R == 0 && (strcmp(ck.dir, resume_dir) != 0 || saved->version == 1)) ckpt_clean(resume_dir);
    r->resumed_ranks = saved->ranks;
    r->resumed_accum = saved->accum;
    r->run_id = saved->run_id;
    r->skipped = saved->skipped;
    return COLLAGE_OK;
}

static collage_status setup(collage_run *r, const char *resume_dir) {
    collage_run_saved saved;
    char ckdir[4096] = "";
    collage_status st = resume_dir ? resume_from(r, resume_dir, &saved, ckdir, sizeof ckdir) : COLLAGE_OK;
    if (!resume_dir) r->run_id = new_run_id(r);
    const collage_run_saved *sv = resume_dir ? &saved : NULL;
    if (!st) st = open_data(r, resume_dir, sv);
    if (!st) st = make_model(r, sv);
    if (!st) st = first_weights(r, ckdir, sv);
    return st;
}

collage_status collage_run_create(const collage_run_config *cfg, const collage_comm *comm, const char *resume_dir,
                                  collage_run **out, char *err, size_t cap) {
    if (!cfg || !out) return collage__fail(err, cap, COLLAGE_ERR_NULL, "no configuration");
    *out = NULL;
    collage_run *r = calloc(1, sizeof *r);
    if (!r) return collage__fail(err, cap, COLLAGE_ERR_NOMEM, "out of memory");
    if (comm && comm->size > 1) { r->comm = *comm; r->has_comm = 1; }
    r->P = shard_size(run_comm(r));
    r->R = shard_rank(run_comm(r));
    collage_status st = own_strings(r, cfg);
    r->A = r->cfg.accum;
    r->M = r->P * r->A;
    r->Bm = r->cfg.batch / (r->M > 0 ? r->M : 1);
    r->bf16 = collage_strategy_is_fp16(r->cfg.strategy) ? 2 : !collage_strategy_is_fp32(r->cfg.strategy);
    r->wb = r->bf16 ? 2 : 4;
    r->loss_scale = r->bf16 != 2 ? 1.0 : r->cfg.loss_scale > 0 ? r->cfg.loss_scale : COLLAGE_LOSS_SCALE_INIT;
    if (!st) st = check_config(r); /* the same on every rank: no agreement needed */
    if (!st) {
        st = run_agree(r, setup(r, resume_dir), "set-up");
        if (!st && shard_allgather_slab(run_comm(r), r->params, r->wb, r->n)) /* every rank's shard to every rank */
            st = run_fail(r, COLLAGE_ERR_IO, "the transport failed gathering the weights");
    }
    if (st) {
        collage__fail(err, cap, st, "%s", r->err[0] ? r->err : collage_status_str(st));
        collage_run_free(r);
        return st;
    }
    *out = r;
    return COLLAGE_OK;
}

void collage_run_free(collage_run *r) {
    if (!r) return;
    free(r->in); free(r->tg); free(r->gin); free(r->gtg); free(r->gshard); free(r->gacc); free(r->gathered); free(r->parts);
    collage_adamw_free(r->opt);
    free(r->params);
    collage_model_free(r->m);
    collage_loader_free(r->ld);
    collage_tokenizer_free(r->tok);
    free(r->data);
    free(r->amax_all);
    free(r->init);
    free(r);
}

collage_run_info collage_run_get_info(const collage_run *r) {
    collage_run_info in = {0};
    if (!r) return in;
    in.model = r->mc;
    in.params = r->n;
    in.train_tokens = (size_t)collage_loader_windows(r->ld, COLLAGE_SPLIT_TRAIN) * (size_t)r->cfg.seq;
    in.step = r->step;
    in.ranks = r->P; in.accum = r->A; in.micro_batch = r->Bm;
    in.resumed_ranks = r->resumed_ranks; in.resumed_accum = r->resumed_accum;
    in.has_val = collage_loader_has_val(r->ld);
    in.memory = collage_adamw_memory(r->opt);
    /* optimizer state per parameter (m, v, compensation, master), on the largest shard */
    double state_bpp = in.memory.m + in.memory.v + in.memory.compensation + in.memory.master;
    size_t max_shard = 0;
    for (int k = 0; k < r->P; k++) {
        size_t a, b;
        collage_shard_bounds(r->n, r->P, k, &a, &b);
        if (b - a > max_shard) max_shard = b - a;
    }
    in.state_mb_per_rank = state_bpp * (double)max_shard / 1e6;
    in.products = collage_model_products(r->m);
    collage_model_memory mm = {0};
    collage_model_memory_get(r->m, &mm);
    in.weight_bytes = r->n * r->wb;
    in.state_bytes = (size_t)(state_bpp * (double)(r->hi - r->lo));
    in.grad_bytes = mm.gradients + (r->gacc ? r->n * sizeof(float) : 0) + (r->gshard ? (r->hi - r->lo) * r->wb : 0);
    in.act_bytes = mm.activations;
    in.scratch_bytes = mm.scratch;
    return in;
}

/* ---------------------------------------------------------------- the step */
/* Mean loss of one global batch: micro-batch k = rank·A + a of M, the M losses gathered and added in
 * k order. NaN if a forward failed on any rank. */
static double global_loss(collage_run *r, const double *mine) {
    double *all = r->gathered, sum = 0;
    if (shard_allgather_doubles(run_comm(r), mine, r->A, all)) return (double)NAN;
    for (int k = 0; k < r->M; k++) sum += all[k];
    return sum / r->M;
}

/* EDQ of the whole slab from every rank's shard, combined in rank order. */
static collage_edq edq_all(collage_run *r, const collage_edq *mine) {
    double v[5] = {mine->sum_dot, mine->sum_dot_state, mine->sum_nn, (double)mine->lost_count, (double)mine->updates};
    double *all = r->gathered;
    collage_edq *parts = r->parts;
    if (r->P == 1 || shard_allgather_doubles(run_comm(r), v, 5, all)) return *mine;
    for (int k = 0; k < r->P; k++)
        parts[k] = (collage_edq){.sum_dot = all[5 * k], .sum_dot_state = all[5 * k + 1], .sum_nn = all[5 * k + 2],
                                 .lost_count = (uint64_t)all[5 * k + 3], .updates = (uint64_t)all[5 * k + 4]};
    return collage_edq_combine(parts, r->P);
}

/* An fp8 product refused an operand with NaN or Inf: the micro-batch's gradient is NaN (bf16 0x7FC0), so
 * the step is skipped as any gradient with NaN is (the optimizer's skip_nonfinite, on every rank). */
static void fp8_refused(collage_run *r) {
    uint16_t *g = collage_model_grads(r->m);
    for (size_t i = 0; i < r->n; i++) g[i] = 0x7FC0;
}

/* fp8 compute after a step: the delayed amaxes max-reduced over the ranks (max is exact in any order), then
 * the scaling moves on, or forgets the step's amaxes when it was skipped. 0, or -1 when the transport
 * failed or out of memory. */
static int fp8_end_step(collage_run *r, int skipped) {
    int n = 0;
    float *amax = collage_model_fp8_amaxes(r->m, &n);
    if (amax && r->has_comm && r->P > 1) {
        if (!r->amax_all && !(r->amax_all = malloc((size_t)n * (size_t)r->P * sizeof(float)))) return -1;
        if (r->comm.allgather(r->comm.ctx, amax, (size_t)n, sizeof(float), r->amax_all)) return -1;
        for (int q = 0; q < r->P; q++)
            for (int i = 0; i < n; i++) amax[i] = fmaxf(amax[i], r->amax_all[(size_t)q * (size_t)n + (size_t)i]);
    }
    return collage_model_fp8_end_step(r->m, skipped) == COLLAGE_OK ? 0 : -1;
}

/* This rank's micro-batches, forward and backward, in order; the losses in mine. */
static collage_status micro_batches(collage_run *r, double *mine) {
    for (int a = 0; a < r->A; a++) {
        collage_batch b = {.tokens = r->in, .targets = r->tg, .B = r->Bm, .T = r->cfg.seq};
        run_micro_batch(r, COLLAGE_SPLIT_TRAIN, (uint64_t)r->step, r->R * r->A + a, &b.loss_divisor);
        collage_model_zero_grad(r->m);
        collage_forward_info fi = {.loss = (double)NAN};
        if (r->cfg.fp4) /* the gradients' SR words: one key per micro-batch of the whole step, any rank count */
            collage_model_fp4_key(r->m, collage_rand_key(collage_rand_key(r->cfg.seed, RUN_FP4_SR_STREAM),
                                                         (uint64_t)r->step * (uint64_t)(r->P * r->A) +
                                                             (uint64_t)(r->R * r->A + a)));
        collage_status st = collage_model_forward_batch(r->m, r->params, &b, &fi);
        if (st == COLLAGE_OK) st = collage_model_backward(r->m);
        if (st == COLLAGE_ERR_NONFINITE && (r->cfg.fp8 || r->cfg.fp4)) fp8_refused(r);
        else if (st != COLLAGE_OK) return run_fail(r, COLLAGE_ERR_ARG, "step %d: %s", r->step + 1, collage_model_error(r->m));
        mine[a] = fi.loss;
        if (r->A > 1) shard_accumulate(r->gacc, r->grads, r->bf16, r->n, a > 0);
    }
    return COLLAGE_OK;
}

/* The fp16 strategies' loss scaler after a step whose scaled gradient was finite (ok) or not: double
 * the scale after COLLAGE_LOSS_SCALE_GROWTH finite steps in a row, halve it on an overflow. Returns 0,
 * or -1 when an overflow comes at COLLAGE_LOSS_SCALE_MIN (a gradient that is not finite at any scale). */
static int loss_scaler(collage_run *r, int ok) {
    if (ok) {
        if (++r->scale_good >= COLLAGE_LOSS_SCALE_GROWTH) { r->loss_scale *= 2; r->scale_good = 0; }
        return 0;
    }
    r->scale_good = 0;
    if (r->loss_scale <= COLLAGE_LOSS_SCALE_MIN) return -1;
    r->loss_scale /= 2;
    return 0;
}

/* After step `step` (from 1): a skipped step extends the streak of skipped steps, a clean one ends it;
 * a non-finite loss, or max_skips skipped steps in a row, make the run diverge. The same on every
 * rank (the loss and the skip are global). Returns st, or COLLAGE_ERR_NONFINITE with the message. */
collage_status run_watch(collage_run *r, collage_status st, int step, double loss, int skipped) {
    int max = r->cfg.max_skips > 0 ? r->cfg.max_skips : 10;
    if (!skipped && isfinite(loss)) { r->streak = 0; return st; }
    if (r->streak++ == 0) r->first_bad = step;
    r->skipped += skipped;
    if (!isfinite(loss)) {
        r->diverged = step;
        char since[64] = "";
        if (r->first_bad < step) snprintf(since, sizeof since, " (the gradient was not finite from step %d)", r->first_bad);
        return run_fail(r, COLLAGE_ERR_NONFINITE, "the run diverged at step %d: the loss is %s%s", step,
                        isnan(loss) ? "NaN" : "infinite", since);
    }
    if (r->streak >= max) {
        r->diverged = step;
        return run_fail(r, COLLAGE_ERR_NONFINITE, "the run diverged: %d steps in a row had a gradient with NaN or Inf and "
                        "were skipped (steps %d to %d)", r->streak, r->first_bad, step);
    }
    return run_fail(r, COLLAGE_ERR_NONFINITE, "step %d: the gradient holds NaN or Inf; the step was skipped, the weights "
                    "are unchanged (%d in a row; %d in a row stop the run)", step, r->streak, max);
}

collage_status collage_run_step(collage_run *r, collage_run_step_info *info) {
    if (!r || !info) return COLLAGE_ERR_NULL;
    if (r->diverged)
        return run_fail(r, COLLAGE_ERR_NONFINITE, "the run diverged at step %d; it cannot go on", r->diverged);
    double mine[RUN_MAX_ACCUM];
    if (r->bf16 == 2 && collage_model_set_loss_scale(r->m, r->loss_scale) != COLLAGE_OK)
        return run_fail(r, COLLAGE_ERR_UNSUPPORTED, "the model takes no loss scale");
    collage_status st = run_agree(r, micro_batches(r, mine), "a training step");
    if (st) return st;
    memset(info, 0, sizeof *info);
    info->loss = global_loss(r, mine);
    /* the gradient of the whole batch, this rank's shard of it: sums in a fixed order */
    const void *g = r->grads;
    if (r->M > 1) {
        const void *x = r->A > 1 ? (const void *)r->gacc : r->grads;
        if (shard_reduce_scatter(run_comm(r), x, r->A > 1 ? 0 : r->bf16, r->n, r->M, r->gshard, r->bf16))
            return run_fail(r, COLLAGE_ERR_NOMEM, "out of memory in the gradient reduction");
        g = r->gshard;
    }
    double sumsq = shard_grad_sumsq(run_comm(r), g, r->bf16, r->n);
    info->lr = collage_run_lr(&r->cfg, r->step);
    info->loss_scale = r->loss_scale;
    collage_adamw_set_grad_scale(r->opt, r->loss_scale);
    st = collage_adamw_step_sumsq(r->opt, g, info->lr, sumsq, &info->stats);
    if (st != COLLAGE_OK && st != COLLAGE_ERR_NONFINITE) return run_fail(r, st, "optimizer: %s", collage_status_str(st));
    int overflow = 0; /* fp16: the scaler decides, on every rank alike (the skip is global) */
    if (r->bf16 == 2) {
        overflow = st == COLLAGE_ERR_NONFINITE && loss_scaler(r, 0) == 0;
        if (st == COLLAGE_OK) loss_scaler(r, 1);
    }
    if (shard_allgather_slab(run_comm(r), r->params, r->wb, r->n)) /* the updated weights to every rank */
        return run_fail(r, COLLAGE_ERR_IO, "the transport failed gathering the weights");
    if (r->cfg.fp8 && fp8_end_step(r, overflow || info->stats.skipped))
        return run_fail(r, COLLAGE_ERR_IO, "the transport failed reducing the fp8 scaling's amaxes");
    info->edq = edq_all(r, &info->stats.edq);
    info->step = ++r->step;
    info->overflow = overflow;
    if (overflow) { /* the loss scaler's skip: counted, and no sign of divergence unless the loss is not finite */
        r->skipped++;
        if (isfinite(info->loss)) return COLLAGE_OK;
    }
    st = run_watch(r, st, info->step, info->loss, overflow ? 0 : info->stats.skipped);
    info->diverged = r->diverged != 0;
    return st;
}

/* ---------------------------------------------------------------- evaluation */
/* One evaluation batch: this rank's micro-batches, their losses gathered as the step's are; the hits and
 * the scored positions of every micro-batch added into *hits, *scored. */
static double evaluate_batch(collage_run *r, collage_split split, int b, double *hits, double *scored) {
    double mine[RUN_MAX_ACCUM], counts[2 * RUN_MAX_ACCUM];
    for (int a = 0; a < r->A; a++) {
        collage_batch mb = {.tokens = r->in, .targets = r->tg, .B = r->Bm, .T = r->cfg.seq};
        collage_forward_info fi = {.loss = (double)NAN};
        if (run_micro_batch(r, split, (uint64_t)b, r->R * r->A + a, &mb.loss_divisor) == 0)
            collage_model_forward_batch(r->m, r->params, &mb, &fi);
        mine[a] = fi.loss;
        counts[2 * a] = (double)fi.correct;
        counts[2 * a + 1] = (double)fi.scored;
    }
    const double loss = global_loss(r, mine);
    if (shard_allgather_doubles(run_comm(r), counts, 2 * r->A, r->gathered)) return (double)NAN;
    for (int k = 0; k < r->M; k++) { *hits += r->gathered[2 * k]; *scored += r->gathered[2 * k + 1]; }
    return loss;
}

collage_status collage_run_evaluate_scores(collage_run *r, collage_split split, int batches, collage_scores *out) {
    if (!r || !out) return COLLAGE_ERR_NULL;
    *out = (collage_scores){.loss = (double)NAN, .accuracy = (double)NAN};
    uint64_t per_epoch = collage_loader_steps_per_epoch(r->ld, split);
    if (per_epoch == 0 || batches < 1) return COLLAGE_OK;
    if ((uint64_t)batches > per_epoch) batches = (int)per_epoch;
    double sum = 0, hits = 0, scored = 0;
    /* fp8: an evaluation's quantizations leave the step's delayed amaxes as they were (each rank evaluates
     * its own batches: recorded, they would differ between ranks and between a run and its resumption) */
    int na = 0;
    float *amax = r->m ? collage_model_fp8_amaxes(r->m, &na) : NULL, *keep = NULL;
    if (amax && !(keep = malloc((size_t)na * sizeof *keep))) return COLLAGE_ERR_NOMEM;
    if (keep) memcpy(keep, amax, (size_t)na * sizeof *keep);
    for (int b = 0; b < batches; b++) sum += evaluate_batch(r, split, b, &hits, &scored);
    if (keep) memcpy(amax, keep, (size_t)na * sizeof *keep);
    free(keep);
    out->loss = sum / batches;
    out->scored = (long long)scored;
    if (r->mlm && scored > 0) out->accuracy = hits / scored;
    return COLLAGE_OK;
}

collage_status collage_run_evaluate(collage_run *r, collage_split split, int batches, double *loss) {
    if (!loss) return COLLAGE_ERR_NULL;
    collage_scores sc;
    collage_status st = collage_run_evaluate_scores(r, split, batches, &sc);
    *loss = st == COLLAGE_OK ? sc.loss : (double)NAN;
    return st;
}

collage_status collage_eval_loss(collage_model *m, const void *params, const collage_loader *ld, collage_split split,
                                 int B, int T, int batches, double *loss) {
    if (!loss) return COLLAGE_ERR_NULL;
    collage_scores sc = {.loss = (double)NAN};
    collage_status st = collage_eval_scores(m, params, ld, split, B, T, batches, &sc);
    *loss = sc.loss;
    return st == COLLAGE_ERR_NULL || st == COLLAGE_ERR_NOMEM ? st : COLLAGE_OK; /* a failed forward: the batches before it */
}
