/* train_flags.c — `collage train`'s flags: the table of each flag's field, kind and range, the parsing
 * that checks each value against its range by itself, and the settings of a resumed run (a flag that
 * shapes the run refused when it differs from the checkpoint's). */
#include "cli.h"
#include "dist.h"
#include "train.h"
#include "collage_data.h"
#include "collage_model.h"
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- flags */
enum { F_STR, F_PATH, F_INT, F_SIZE, F_DBL, F_BARE };
/* min, max: an F_INT's range; lo, hi: an F_DBL's, open at an end when lo_open / hi_open. */
typedef struct {
    const char *flag;
    int kind;
    size_t off;
    unsigned bit;
    int min, max;
    double lo, hi;
    int lo_open, hi_open;
} flag_spec;
#define O(field) offsetof(train_opts, field)
#define FS(flag, field, bit) {flag, F_STR, O(field), bit, 0, 0, 0, 0, 0, 0}
#define FP(flag, field) {flag, F_PATH, O(field), 0, 0, 0, 0, 0, 0, 0}
#define FI(flag, field, bit, min, max) {flag, F_INT, O(field), bit, min, max, 0, 0, 0, 0}
#define FD(flag, field, bit, lo, hi, lo_open, hi_open) {flag, F_DBL, O(field), bit, 0, 0, lo, (double)(hi), lo_open, hi_open}
static const flag_spec FLAGS[] = {
    FP("--data", cfg.data), FS("--tokenizer", cfg.tokenizer, COLLAGE_RUN_TOKENIZER), FS("--model", cfg.model, COLLAGE_RUN_MODEL),
    FP("--save", save), FP("--resume", resume), FP("--log", log), FP("--summary", summary), FP("--init", cfg.init),
    FI("--layers", cfg.layers, COLLAGE_RUN_LAYERS, 1, 1024), FI("--heads", cfg.heads, COLLAGE_RUN_HEADS, 1, 1 << 16),
    FI("--dim", cfg.dim, COLLAGE_RUN_DIM, 1, 1 << 20), FI("--kv-heads", cfg.kv_heads, COLLAGE_RUN_KV_HEADS, 1, 1 << 16),
    FI("--hidden", cfg.hidden, COLLAGE_RUN_HIDDEN, 1, 1 << 20), FI("--steps", cfg.steps, COLLAGE_RUN_STEPS, 1, INT_MAX),
    FI("--stop-after", stop_after, 0, 1, INT_MAX), FI("--batch", cfg.batch, COLLAGE_RUN_BATCH, 1, 1 << 20),
    FI("--seq", cfg.seq, COLLAGE_RUN_SEQ, 1, 1 << 20), FI("--warmup", cfg.warmup, COLLAGE_RUN_WARMUP, 0, INT_MAX),
    FI("--eval-every", eval_every, 0, 1, INT_MAX), FI("--threads", threads, 0, 1, 0 /* 4 x cores */),
    FI("--accum", cfg.accum, 0, 1, 256), FI("--save-every", save_every, 0, 0, INT_MAX), FI("--keep", keep, 0, 1, 1000),
    FI("--max-skips", cfg.max_skips, 0, 1, INT_MAX), {"--seed", F_SIZE, O(cfg.seed), COLLAGE_RUN_SEED, 0, 0, 0, 0, 0, 0},
    FD("--lr", cfg.lr, COLLAGE_RUN_LR, 0, INFINITY, 0, 1), FD("--beta1", cfg.beta1, COLLAGE_RUN_BETA1, 0, 1, 1, 1),
    FD("--beta2", cfg.beta2, COLLAGE_RUN_BETA2, 0, 1, 1, 1), FD("--eps", cfg.eps, COLLAGE_RUN_EPS, 0, INFINITY, 1, 1),
    FD("--wd", cfg.weight_decay, COLLAGE_RUN_WD, 0, INFINITY, 0, 1), FD("--clip", cfg.clip, COLLAGE_RUN_CLIP, 0, INFINITY, 0, 1),
    FD("--loss-scale", cfg.loss_scale, 0, 0, INFINITY, 1, 1),
    FD("--momentum", cfg.momentum, COLLAGE_RUN_MOMENTUM, 0, 1, 0, 1),
    {"--nesterov", F_BARE, O(cfg.nesterov), COLLAGE_RUN_NESTEROV, 0, 0, 0, 0, 0, 0},
    FS("--fp8-recipe", cfg.fp8_recipe, 0), {"--fp8-e4m3-all", F_BARE, O(cfg.fp8_e4m3_all), 0, 0, 0, 0, 0, 0, 0},
    FS("--fp4-recipe", cfg.fp4_recipe, COLLAGE_RUN_COMPUTE), FI("--fp4-bf16-last", cfg.fp4_bf16_last, COLLAGE_RUN_COMPUTE, 0, 1 << 20),
    {"--overwrite", F_BARE, O(overwrite), 0, 0, 0, 0, 0, 0, 0}, {"--quiet", F_BARE, O(quiet), 0, 0, 0, 0, 0, 0, 0},
};
#undef O
#undef FS
#undef FP
#undef FI
#undef FD

/* ---------------------------------------------------------------- which optimizer reads which flag */
/* The update rule's own flags and the optimizers that read each (collage_adamw_config: AdamW its β and
 * eps, Lion its β, SGD μ and Nesterov's form; --lr --warmup --wd --clip every one). A flag given to an
 * optimizer that does not read it would change nothing: it is refused. `other`: where the optimizers
 * that do not read it keep the same idea, for the hint. */
#define BY(o) (1u << COLLAGE_OPTIM_##o)
static const struct {
    const char *flag;
    unsigned readers;
    const char *other;
} OPTIM_FLAGS[] = {
    {"--beta1", BY(ADAMW) | BY(LION), "sgd's momentum is --momentum"},
    {"--beta2", BY(ADAMW) | BY(LION), NULL},
    {"--eps", BY(ADAMW), NULL},
    {"--momentum", BY(SGD), "adamw's and lion's momentum is --beta1"},
    {"--nesterov", BY(SGD), NULL},
};
#undef BY
#define N_OPTIM_FLAGS (sizeof OPTIM_FLAGS / sizeof *OPTIM_FLAGS)

int cli_optimizer_reads(collage_optimizer o, const char *flag) {
    for (size_t i = 0; i < N_OPTIM_FLAGS; i++)
        if (!strcmp(OPTIM_FLAGS[i].flag, flag)) return (OPTIM_FLAGS[i].readers >> o & 1u) != 0;
    return 1;
}

int cli_refuse_unread(const char *cmd, const char *flag, collage_optimizer o, const char *resume) {
    size_t k = 0;
    while (k < N_OPTIM_FLAGS && strcmp(OPTIM_FLAGS[k].flag, flag)) k++;
    if (k == N_OPTIM_FLAGS || cli_optimizer_reads(o, flag)) return 0;
    char reads[128] = "--lr --warmup", readers[64] = "";
    int n = 0;
    for (size_t i = 0; i < N_OPTIM_FLAGS; i++)
        if (cli_optimizer_reads(o, OPTIM_FLAGS[i].flag))
            snprintf(reads + strlen(reads), sizeof reads - strlen(reads), " %s", OPTIM_FLAGS[i].flag);
    snprintf(reads + strlen(reads), sizeof reads - strlen(reads), " --wd --clip");
    for (int j = 0; j < COLLAGE_OPTIM_COUNT; j++)
        if (OPTIM_FLAGS[k].readers >> j & 1u)
            snprintf(readers + strlen(readers), sizeof readers - strlen(readers), "%s%s", n++ ? " | " : "",
                     collage_optimizer_name((collage_optimizer)j));
    char other[96] = "";
    if (OPTIM_FLAGS[k].other) snprintf(other, sizeof other, " (%s)", OPTIM_FLAGS[k].other);
    const char *name = collage_optimizer_name(o);
    if (resume)
        fprintf(stderr, "collage %s: %s with --resume %s: the run saved there trains with --optimizer %s, which does not read "
                        "%s (it reads %s)\nhint: drop %s%s\n", cmd, flag, resume, name, flag, reads, flag, other);
    else
        fprintf(stderr, "collage %s: %s with --optimizer %s: %s does not read %s (it reads %s)\nhint: drop %s%s, or "
                        "--optimizer %s, which read%s it\n", cmd, flag, name, name, flag, reads, flag, other, readers, n > 1 ? "" : "s");
    return -1;
}

/* A numeric flag's range in words: "a number in (0, 1)", "a number > 0", "1 to 1024", "0 or more". */
static const char *range_words(const flag_spec *f, char *out, size_t cap) {
    const int max = f->max ? f->max : cli_max_threads();
    if (f->kind == F_DBL && isinf(f->hi)) snprintf(out, cap, "a number %s %g", f->lo_open ? ">" : ">=", f->lo);
    else if (f->kind == F_DBL)
        snprintf(out, cap, "a number in %c%g, %g%c", f->lo_open ? '(' : '[', f->lo, f->hi, f->hi_open ? ')' : ']');
    else if (max == INT_MAX) snprintf(out, cap, "%d or more", f->min);
    else if (f->max) snprintf(out, cap, "%d to %d", f->min, max);
    else snprintf(out, cap, "%d to %d (4 x the %d cores)", f->min, max, max / 4);
    return out;
}

static int out_of_range(const flag_spec *f, const char *v, const void *p) {
    char range[96];
    if (f->kind == F_DBL) {
        double x = *(const double *)p;
        if ((f->lo_open ? x > f->lo : x >= f->lo) && (f->hi_open ? x < f->hi : x <= f->hi)) return 0;
    } else {
        int x = *(const int *)p, max = f->max ? f->max : cli_max_threads();
        if (x >= f->min && x <= max) return 0;
    }
    fprintf(stderr, "collage train: %s %s: it takes %s\nhint: collage train --help\n", f->flag, v,
            range_words(f, range, sizeof range));
    return 1;
}

/* One flag with its value; 0, or -1 after a message. */
static int set_flag(train_opts *o, const flag_spec *f, const char *v) {
    void *p = (char *)o + f->off;
    size_t z;
    if (f->kind == F_BARE) { *(int *)p = 1; o->given |= f->bit; return 0; }
    if (!v) return cli_needs_value("train", f->flag);
    o->given |= f->bit;
    switch (f->kind) {
    case F_PATH: *(const char **)p = v; return cli_path("train", f->flag, v);
    case F_STR:
        *(const char **)p = v;
        if (v[0]) return 0;
        fprintf(stderr, "collage train: %s '': an empty value (an unset variable?)\nhint: collage train --help lists "
                        "its values\n", f->flag);
        return -1;
    case F_DBL: return cli_parse_double("train", f->flag, v, p) || out_of_range(f, v, p) ? -1 : 0;
    case F_SIZE:
        if (cli_parse_size("train", f->flag, v, &z)) return -1;
        *(uint64_t *)p = z;
        return 0;
    default: return cli_parse_int("train", f->flag, v, p) || out_of_range(f, v, p) ? -1 : 0;
    }
}

/* The COLLAGE_RUN_* bit of a flag of the table (0: none). */
static unsigned flag_bit(const char *flag) {
    for (size_t i = 0; i < sizeof FLAGS / sizeof *FLAGS; i++)
        if (!strcmp(FLAGS[i].flag, flag)) return FLAGS[i].bit;
    return 0;
}

/* The update rule's flags given against optimizer opt (the run's, or with resume the saved run's):
 * 0, or -1 after a message. */
static int unread_by_optimizer(const train_opts *o, collage_optimizer opt, const char *resume) {
    for (size_t i = 0; i < N_OPTIM_FLAGS; i++)
        if ((o->given & flag_bit(OPTIM_FLAGS[i].flag)) && cli_refuse_unread("train", OPTIM_FLAGS[i].flag, opt, resume))
            return -1;
    return 0;
}

const char *cli_fp16_names(void) {
    static char buf[256];
    size_t len = 0;
    buf[0] = 0;
    for (int k = 0; k < COLLAGE_STRATEGY_COUNT && len < sizeof buf; k++)
        if (collage_strategy_is_fp16((collage_strategy)k))
            len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s", len ? " | " : "", collage_strategy_name((collage_strategy)k));
    return buf;
}

/* --loss-scale is the first scale of the fp16 strategies' dynamic loss scaling; no other strategy
 * scales its loss, and a resumed run continues with the scale its checkpoint carries. s: the run's
 * strategy (with resume, the saved run's, whose scale is saved_scale). 0, or -1 after a message. */
static int unread_loss_scale(const train_opts *o, collage_strategy s, const char *resume, double saved_scale) {
    if (!(o->cfg.loss_scale > 0)) return 0;
    const char *name = collage_strategy_name(s);
    if (resume && collage_strategy_is_fp16(s))
        fprintf(stderr, "collage train: --loss-scale with --resume %s: the run continues with the loss scale its checkpoint "
                        "carries (%g)\nhint: drop --loss-scale; the scale adapts by itself (doubled after %d finite steps, "
                        "halved on an overflow)\n", resume, saved_scale, COLLAGE_LOSS_SCALE_GROWTH);
    else if (resume)
        fprintf(stderr, "collage train: --loss-scale with --resume %s: the run saved there trains with --precision %s, which "
                        "does not scale its loss (only the fp16 strategies do)\nhint: drop --loss-scale\n", resume, name);
    else if (!collage_strategy_is_fp16(s))
        fprintf(stderr, "collage train: --loss-scale with --precision %s: %s does not scale its loss (only the fp16 strategies "
                        "do: their gradients would underflow without it)\nhint: drop --loss-scale, or --precision %s\n",
                name, name, cli_fp16_names());
    else return 0;
    return -1;
}

/* 0: run; 1: --help was printed; -1: a bad flag (message printed). */
int train_parse(int argc, char **argv, train_opts *o) {
    *o = (train_opts){.cfg = collage_run_defaults(), .eval_every = -1, .save_every = -1};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const flag_spec *f = NULL;
        for (size_t k = 0; k < sizeof FLAGS / sizeof *FLAGS && !f; k++)
            if (!strcmp(a, FLAGS[k].flag)) f = &FLAGS[k];
        if (f) {
            if (set_flag(o, f, v)) return -1;
            i += f->kind != F_BARE;
        } else if (!strcmp(a, "--precision") || !strcmp(a, "--strategy")) {
            if (cli_parse_strategy("train", a, v, &o->cfg.strategy)) return -1;
            o->given |= COLLAGE_RUN_STRATEGY;
            i++;
        } else if (!strcmp(a, "--compute")) {
            if (!v) return cli_needs_value("train", a);
            if (strcmp(v, "bf16") && strcmp(v, "fp8") && strcmp(v, "fp4")) {
                fprintf(stderr, "collage train: --compute %s: unknown\nhint: --compute takes bf16, fp8 or fp4\n", v);
                return -1;
            }
            o->cfg.fp8 = !strcmp(v, "fp8");
            o->cfg.fp4 = !strcmp(v, "fp4");
            o->given |= COLLAGE_RUN_COMPUTE;
            i++;
        } else if (!strcmp(a, "--optimizer")) {
            if (cli_parse_optimizer("train", a, v, &o->cfg.optimizer)) return -1;
            o->given |= COLLAGE_RUN_OPTIMIZER;
            i++;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { if (dist_rank() == 0) train_usage(stdout); return 1; }
        else return cli_unknown("train", a);
    }
    if (!o->cfg.fp8 && (o->cfg.fp8_recipe || o->cfg.fp8_e4m3_all)) {
        fprintf(stderr, "collage train: %s: an fp8 compute setting without --compute fp8\nhint: add --compute fp8 (bf16 "
                        "strategies)\n", o->cfg.fp8_recipe ? "--fp8-recipe" : "--fp8-e4m3-all");
        return -1;
    }
    if (!o->cfg.fp4 && (o->cfg.fp4_recipe || o->cfg.fp4_bf16_last)) {
        fprintf(stderr, "collage train: %s: an fp4 compute setting without --compute fp4\nhint: add --compute fp4 (bf16 "
                        "strategies)\n", o->cfg.fp4_recipe ? "--fp4-recipe" : "--fp4-bf16-last");
        return -1;
    }
    if (o->cfg.fp4_recipe && cli_check_fp4_recipe("train", o->cfg.fp4_recipe)) return -1;
    /* a resumed run's optimizer and strategy are its checkpoint's: checked in train_resume_config */
    if ((!o->resume || (o->given & COLLAGE_RUN_OPTIMIZER)) && unread_by_optimizer(o, o->cfg.optimizer, NULL)) return -1;
    if ((!o->resume || (o->given & COLLAGE_RUN_STRATEGY)) && unread_loss_scale(o, o->cfg.strategy, NULL, 0)) return -1;
    char why[256];
    if (collage_optimizer_check(o->cfg.optimizer, o->cfg.strategy, why, sizeof why) != COLLAGE_OK) {
        const int sign = strstr(why, "sign") != NULL; /* eco with lion */
        fprintf(stderr, "collage train: --optimizer %s --precision %s: %s\nhint: %s\n", collage_optimizer_name(o->cfg.optimizer),
                collage_strategy_name(o->cfg.strategy), why,
                sign ? "eco steps with --optimizer adamw or sgd; lion takes every other strategy whose v is not a pair"
                     : "--optimizer adamw keeps v; lion and sgd take any strategy whose v is not a pair");
        return -1;
    }
    if (o->cfg.optimizer == COLLAGE_OPTIM_LION && !(o->given & COLLAGE_RUN_BETA2))
        o->cfg.beta2 = collage_optimizer_get(COLLAGE_OPTIM_LION)->beta2; /* Lion's β2: its own default */
    return 0;
}

int cli_train_flag(const char *flag) {
    for (size_t i = 0; i < sizeof FLAGS / sizeof *FLAGS; i++)
        if (!strcmp(FLAGS[i].flag, flag)) return FLAGS[i].kind != F_BARE;
    return !strcmp(flag, "--precision") || !strcmp(flag, "--strategy") || !strcmp(flag, "--optimizer") ||
                   !strcmp(flag, "--compute") ? 1 : -1;
}

const char *train_range_of(const char *flag) {
    static char buf[8][96];
    static int k;
    char *out = buf[k++ % 8];
    out[0] = 0;
    for (size_t i = 0; i < sizeof FLAGS / sizeof *FLAGS; i++)
        if (!strcmp(FLAGS[i].flag, flag)) range_words(&FLAGS[i], out, sizeof buf[0]);
    return out;
}

/* Where a resumed run at step `at` goes: 0; NOTHING_TO_DO after a note when it is complete; 2 after a
 * message when --steps or --stop-after lie at or behind it. */
static int resume_span(train_opts *o, int at) {
    const int end = o->cfg.steps;
    if (end < at) {
        fprintf(stderr, "collage train: --steps %d: the run in '%s' is at step %d already\nhint: --steps %d or more "
                        "extends its schedule\n", end, o->resume, at, at + 1);
        return 2;
    }
    if (o->stop_after > 0 && o->stop_after <= at) {
        fprintf(stderr, "collage train: --stop-after %d: the run in '%s' is at step %d already\nhint: ", o->stop_after,
                o->resume, at);
        if (at < end) fprintf(stderr, "--stop-after %d to %d continues it (its --steps is %d)\n", at + 1, end, end);
        else fprintf(stderr, "it is complete; --steps %d or more extends its schedule\n", at + 1);
        return 2;
    }
    if (at == end) {
        if (!o->quiet)
            fprintf(stderr, "collage train: the run in '%s' is complete (step %d of --steps %d): nothing to do\nhint: "
                            "--steps %d or more extends its schedule\n", o->resume, at, end, at + 1);
        return NOTHING_TO_DO;
    }
    return 0;
}

/* --resume: the saved run's settings. A flag that shapes the run given with another value is refused
 * (it would silently make another run); --lr --warmup --eps --wd --clip --steps may change, with a note.
 * 0, or the exit status after a message. */
int train_resume_config(train_opts *o) {
    collage_run_saved *s = &o->saved;
    char err[1024], why[256], was[256], changes[1024];
    if (o->cfg.init) {
        fprintf(stderr, "collage train: --init '%s' with --resume: a resumed run continues from its checkpoint's weights\n"
                        "hint: drop --init, or start a new run with --save\n", o->cfg.init);
        return 2;
    }
    if (collage_run_read_saved(o->resume, s, err, sizeof err) != COLLAGE_OK) {
        collage_checkpoint ck;
        fprintf(stderr, "collage train: --resume: %s\n", err);
        if (collage_checkpoint_find(o->resume, &ck, NULL, 0) == COLLAGE_OK && ck.previous[0])
            fprintf(stderr, "hint: the checkpoint before it is %s (%scollage train --resume %s continues from there)\n",
                    ck.previous, dist_launcher(), ck.previous);
        else fprintf(stderr, "hint: --resume takes a folder written by --save (or one of its step-N folders)\n");
        return 1;
    }
    /* a flag the saved run does not read (an optimizer or strategy given otherwise is a conflict, below) */
    const int same_opt = !(o->given & COLLAGE_RUN_OPTIMIZER) || o->cfg.optimizer == s->cfg.optimizer;
    const int same_strategy = !(o->given & COLLAGE_RUN_STRATEGY) || o->cfg.strategy == s->cfg.strategy;
    if ((same_opt && unread_by_optimizer(o, s->cfg.optimizer, o->resume)) ||
        (same_strategy && unread_loss_scale(o, s->cfg.strategy, o->resume, s->loss_scale)))
        return 2;
    if (collage_run_conflict(s, &o->cfg, o->given, why, was, sizeof why)) {
        fprintf(stderr, "collage train: %s differs from the run saved in '%s' (%s there)\nhint: --resume continues "
                        "that run as it was set up; drop the flag (--lr --warmup --eps --wd --clip --steps may change), or "
                        "start a new run with --save\n", why, o->resume, was);
        return 2;
    }
    collage_run_config a = o->cfg;
    unsigned g = o->given;
    o->cfg = s->cfg;
    o->cfg.data = a.data;
    o->cfg.accum = a.accum;
    o->cfg.max_skips = a.max_skips;
    if (g & COLLAGE_RUN_STEPS) o->cfg.steps = a.steps;
    if (g & COLLAGE_RUN_WARMUP) o->cfg.warmup = a.warmup;
    if (g & COLLAGE_RUN_LR) o->cfg.lr = a.lr;
    if (g & COLLAGE_RUN_EPS) o->cfg.eps = a.eps;
    if (g & COLLAGE_RUN_WD) o->cfg.weight_decay = a.weight_decay;
    if (g & COLLAGE_RUN_CLIP) o->cfg.clip = a.clip;
    int rc = resume_span(o, s->step);
    if (!rc && collage_run_changes(s, &a, g, changes, sizeof changes) && !o->quiet)
        fprintf(stderr, "collage train: resuming '%s' at step %d with %s: the new values apply from step %d on\n",
                o->resume, s->step, changes, s->step + 1);
    return rc;
}

