/* train.c — `collage train`: the flags of a training run (collage_run.h), then a loop that steps
 * the run and prints: a JSON line per step (--log), progress on a terminal, a summary (--summary),
 * the checkpoint folder (--save); the printers are in train_report.c. Data parallel under mpirun
 * through dist.c's transport. */
#include "cli.h"
#include "dist.h"
#include "train.h"
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define VAL_BATCHES 8


static void train_usage(FILE *f) {
    fprintf(f,
            "usage: collage train [options]\n"
            "  --data PATH         text file, folder of text files, or llm.c .bin shard(s)\n"
            "                      (default: the English fortunes of Debian's fortunes package)\n"
            "  --tokenizer NAME    byte (default) | gpt2\n"
            "  --model PRESET      %s (default: tiny);\n"
            "                      or set --layers --heads --dim, and for llama --kv-heads --hidden\n"
            "  --init FILE         start from the weights (and shape) of a model file: llm.c GPT-2, llama2.c\n"
            "  --precision S       collage-light (default) or any strategy of the table:\n"
            "                      %s\n"
            "  --steps N           training steps, the length of the schedule (default 1000)\n"
            "  --stop-after N      stop after N steps (the schedule still spans --steps)\n"
            "  --batch B --seq T   sequences per step and their length (default 16, 64)\n"
            "  --lr X --warmup N   peak learning rate (1e-3) after N linear warm-up steps (default steps/20),\n"
            "                      then cosine decay to a tenth\n"
            "  --beta1 X --beta2 X --eps X --wd X --clip X   AdamW (0.9, 0.95, 1e-8, 0.1, 1.0)\n"
            "  --seed N --threads N --eval-every N (default steps/10)\n"
            "  --save DIR          write model.bin (the family's format: llm.c, llama2.c), optimizer.state and\n"
            "                      train.state there\n"
            "  --resume DIR        continue a run saved with --save, bit for bit\n"
            "  --log FILE          one JSON object per step\n"
            "  --summary FILE      one JSON object for the whole run, written atomically at its end\n"
            "  --accum A           micro-batches per rank per step (default 1): the gradient of the batch is\n"
            "                      summed over ranks x A micro-batches in a fixed order\n"
            "data parallel: mpirun -np N collage train ... (--batch stays the global batch; each rank reads\n"
            "its 1/N of it and holds 1/N of the optimizer state; see docs/training.md)\n",
            cli_preset_names(" | "), cli_strategy_names(" | ", 22));
}

/* ---------------------------------------------------------------- flags */
enum { F_STR, F_INT, F_SIZE, F_DBL };
typedef struct { const char *flag; int kind; size_t off; unsigned bit; int min, max; } flag_spec; /* min, max: F_INT */
#define O(field) offsetof(train_opts, field)
static const flag_spec FLAGS[] = {
    {"--data", F_STR, O(cfg.data), 0, 0, 0},              {"--tokenizer", F_STR, O(cfg.tokenizer), COLLAGE_RUN_TOKENIZER, 0, 0},
    {"--model", F_STR, O(cfg.model), COLLAGE_RUN_MODEL, 0, 0}, {"--save", F_STR, O(save), 0, 0, 0},
    {"--resume", F_STR, O(resume), 0, 0, 0},               {"--log", F_STR, O(log), 0, 0, 0},
    {"--summary", F_STR, O(summary), 0, 0, 0},             {"--layers", F_INT, O(cfg.layers), COLLAGE_RUN_LAYERS, 1, 1024},
    {"--heads", F_INT, O(cfg.heads), COLLAGE_RUN_HEADS, 1, 1 << 16}, {"--dim", F_INT, O(cfg.dim), COLLAGE_RUN_DIM, 1, 1 << 20},
    {"--kv-heads", F_INT, O(cfg.kv_heads), COLLAGE_RUN_KV_HEADS, 1, 1 << 16}, {"--hidden", F_INT, O(cfg.hidden), COLLAGE_RUN_HIDDEN, 1, 1 << 20},
    {"--init", F_STR, O(cfg.init), 0, 0, 0},
    {"--steps", F_INT, O(cfg.steps), 0, 1, INT_MAX},             {"--stop-after", F_INT, O(stop_after), 0, 1, INT_MAX},
    {"--batch", F_INT, O(cfg.batch), COLLAGE_RUN_BATCH, 1, 1 << 20}, {"--seq", F_INT, O(cfg.seq), COLLAGE_RUN_SEQ, 1, 1 << 20},
    {"--warmup", F_INT, O(cfg.warmup), COLLAGE_RUN_WARMUP, 0, INT_MAX}, {"--eval-every", F_INT, O(eval_every), 0, 1, INT_MAX},
    {"--threads", F_INT, O(threads), 0, 1, 1024},             {"--accum", F_INT, O(cfg.accum), 0, 1, 256},
    {"--seed", F_SIZE, O(cfg.seed), COLLAGE_RUN_SEED, 0, 0}, {"--lr", F_DBL, O(cfg.lr), COLLAGE_RUN_LR, 0, 0},
    {"--beta1", F_DBL, O(cfg.beta1), COLLAGE_RUN_BETA1, 0, 0}, {"--beta2", F_DBL, O(cfg.beta2), COLLAGE_RUN_BETA2, 0, 0},
    {"--eps", F_DBL, O(cfg.eps), COLLAGE_RUN_EPS, 0, 0},   {"--wd", F_DBL, O(cfg.weight_decay), COLLAGE_RUN_WD, 0, 0},
    {"--clip", F_DBL, O(cfg.clip), COLLAGE_RUN_CLIP, 0, 0},
};
#undef O

/* One flag with its value; 0, or -1 after a message. */
static int set_flag(train_opts *o, const flag_spec *f, const char *v) {
    void *p = (char *)o + f->off;
    size_t z;
    int bad = 0;
    if (!v) { fprintf(stderr, "collage train: %s needs a value\n", f->flag); return -1; }
    o->given |= f->bit;
    if (!strcmp(f->flag, "--steps")) o->steps_given = 1;
    switch (f->kind) {
    case F_STR: *(const char **)p = v; return 0;
    case F_DBL: return cli_parse_double(f->flag, v, p) ? -1 : 0;
    case F_SIZE:
        if (cli_parse_size(f->flag, v, &z)) return -1;
        *(uint64_t *)p = z;
        return 0;
    default: break;
    }
    if (cli_parse_int(f->flag, v, p)) return -1;
    if (*(int *)p < f->min || *(int *)p > f->max) {
        if (f->max == INT_MAX) fprintf(stderr, "collage train: %s %s: it takes %d or more\n", f->flag, v, f->min);
        else fprintf(stderr, "collage train: %s %s: it takes %d to %d\n", f->flag, v, f->min, f->max);
        fprintf(stderr, "hint: collage train --help\n");
        bad = 1;
    }
    return bad ? -1 : 0;
}

/* 0: run; 1: --help was printed; -1: a bad flag (message printed). */
static int parse_train(int argc, char **argv, train_opts *o) {
    *o = (train_opts){.cfg = collage_run_defaults(), .eval_every = -1};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const flag_spec *f = NULL;
        for (size_t k = 0; k < sizeof FLAGS / sizeof *FLAGS && !f; k++)
            if (!strcmp(a, FLAGS[k].flag)) f = &FLAGS[k];
        if (f) { if (set_flag(o, f, v)) return -1; i++; }
        else if (!strcmp(a, "--precision")) {
            if (!v || collage_strategy_parse(v, &o->cfg.strategy) != COLLAGE_OK) {
                fprintf(stderr, "collage train: unknown --precision '%s'\nhint: collage train --help lists the strategies\n",
                        v ? v : "");
                return -1;
            }
            o->given |= COLLAGE_RUN_STRATEGY;
            i++;
        } else if (!strcmp(a, "--quiet")) o->quiet = 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { if (dist_rank() == 0) train_usage(stdout); return 1; }
        else { fprintf(stderr, "collage train: unknown option '%s'\nhint: collage train --help\n", a); return -1; }
    }
    return 0;
}

/* --resume: the saved run's settings; a flag given with another value than the saved run's is refused
 * (it would silently change the run); --steps may change: it extends the schedule. */
static int resume_config(train_opts *o) {
    collage_run_saved *s = &o->saved;
    char err[1024], why[256], was[256];
    if (o->cfg.init) {
        fprintf(stderr, "collage train: --init '%s' with --resume: a resumed run continues from its checkpoint's weights\n"
                        "hint: drop --init, or start a new run with --save\n", o->cfg.init);
        return -1;
    }
    if (collage_run_read_saved(o->resume, s, err, sizeof err) != COLLAGE_OK) {
        fprintf(stderr, "collage train: %s\nhint: --resume takes a folder written by --save\n", err);
        return -1;
    }
    if (collage_run_conflict(s, &o->cfg, o->given, why, was, sizeof why)) {
        fprintf(stderr, "collage train: %s differs from the run saved in '%s' (%s there)\nhint: --resume continues "
                        "that run as it was set up; drop the flag (only --steps may change: it extends the schedule), or "
                        "start a new run with --save\n", why, o->resume, was);
        return -1;
    }
    int steps = o->cfg.steps, accum = o->cfg.accum;
    const char *data = o->cfg.data;
    o->cfg = s->cfg;
    o->cfg.data = data;
    o->cfg.accum = accum;
    if (o->steps_given) o->cfg.steps = steps;
    if (o->stop_after <= s->step || o->stop_after > o->cfg.steps) o->stop_after = o->cfg.steps;
    return 0;
}

/* ---------------------------------------------------------------- the loop */
static void tally(run_totals *t, const collage_run_step_info *s, double tokens) {
    t->tokens += tokens;
    t->last_loss = s->loss;
    t->last_step = s->step;
    if (!s->stats.skipped && isfinite(s->edq.edq_ratio)) { t->sum_edq_ratio += s->edq.edq_ratio; t->sum_lost += s->edq.lost; t->n_edq++; }
    if (s->step - 1 >= t->tail_from) { t->sum_tail += s->loss; t->n_tail++; }
}

/* Steps until --stop-after; 0, or 1 when a step failed (message printed). */
static int train_loop(collage_run *run, const train_opts *o, FILE *logf, run_totals *t) {
    int tty = isatty(2) && !o->quiet, has_val = collage_run_get_info(run).has_val;
    double tokens = (double)o->cfg.batch * o->cfg.seq;
    for (int step = t->start; step < o->stop_after; step++) {
        double t0 = cli_now(), c0 = dist_comm_seconds(), val = (double)NAN;
        collage_run_step_info s;
        collage_status st = collage_run_step(run, &s);
        if (st == COLLAGE_ERR_NONFINITE) {
            if (!o->quiet) fprintf(stderr, "\ncollage train: %s\n", collage_run_error(run));
        } else if (st != COLLAGE_OK) {
            if (st != COLLAGE_ERR_PEER || dist_rank() == 0) fprintf(stderr, "collage train: %s\n", collage_run_error(run));
            return 1;
        }
        double ms = (cli_now() - t0) * 1e3, comm_ms = (dist_comm_seconds() - c0) * 1e3;
        tally(t, &s, tokens);
        int is_eval = s.step % o->eval_every == 0 || s.step == o->stop_after;
        if (is_eval && has_val) collage_run_evaluate(run, COLLAGE_SPLIT_VAL, VAL_BATCHES, &val);
        if (!isnan(val)) t->last_val = val;
        if (logf) log_step(logf, &s, val, tokens / (ms * 1e-3), ms, comm_ms);
        print_step(o, &s, val, tokens / (ms * 1e-3), ms, t, tty, is_eval);
    }
    return 0;
}

/* After the loop: the closing lines, --summary, --save. 0 or 1. */
static int finish(collage_run *run, const train_opts *o, const run_totals *t) {
    collage_run_info in = collage_run_get_info(run);
    double secs = cli_now() - t->t_start, comm_s = dist_comm_seconds() - t->comm0;
    int ran = t->last_step - t->start, bad = 0;
    if (!o->quiet && ran > 0) {
        printf("done: %d steps in %.1f s, %.1f ms/step, %.0f tokens/s, final loss %.4f; %.0f bytes/param of training state "
               "(%.1f MB), peak RSS %ld MB\n", ran, secs, 1e3 * secs / ran, t->tokens / secs, t->last_loss,
               in.memory.total, in.memory.total * (double)in.params / 1e6, peak_rss_mb());
        if (dist_mpi())
            printf("communication (rank 0): %.1f ms/step of %.1f (%.1f%%), %d rank%s\n", 1e3 * comm_s / ran,
                   1e3 * secs / ran, 100 * comm_s / secs, in.ranks, in.ranks > 1 ? "s" : "");
    }
    if (dist_rank() == 0 && o->summary && ran > 0 && write_summary(o, &in, t, secs, comm_s)) bad = 1;
    if (dist_any(bad)) return 1;
    if (!o->save) return 0;
    collage_status st = collage_run_save(run, o->save);
    if (st != COLLAGE_OK) {
        if (st != COLLAGE_ERR_PEER || dist_rank() == 0) fprintf(stderr, "collage train: --save: %s\n", collage_run_error(run));
        return 1;
    }
    if (!o->quiet)
        printf("saved step %d to %s/ (model.bin in the %s family's format, %s, train.state)\n", t->last_step, o->save,
               collage_family_name(in.model.family),
               in.ranks > 1 ? "one optimizer state per rank" : "optimizer.state");
    return 0;
}

static int train_main(int argc, char **argv) {
    train_opts o;
    int pr = parse_train(argc, argv, &o);
    if (pr) return pr > 0 ? 0 : 2;
    if (dist_rank() != 0) o.quiet = 1; /* only rank 0 prints, logs and writes the summary */
    if (o.stop_after <= 0 || o.stop_after > o.cfg.steps) o.stop_after = o.cfg.steps;
    if (o.eval_every < 0) o.eval_every = o.cfg.steps / 10 > 0 ? o.cfg.steps / 10 : 1; /* of --steps as given */
    if (o.resume && dist_any(resume_config(&o) != 0)) return 1;
    const int M = dist_size() * (o.cfg.accum > 0 ? o.cfg.accum : 1);
    if (o.cfg.batch % M != 0) {
        if (dist_rank() == 0)
            fprintf(stderr, "collage train: --batch %d must split into %d ranks x %d micro-batches (--accum) of equal "
                            "size\nhint: a --batch that is a multiple of %d\n", o.cfg.batch, dist_size(), M / dist_size(), M);
        return 2;
    }
    if (o.threads > 0) collage_set_threads(o.threads);
#ifdef _OPENMP
    if (o.threads > 0) omp_set_num_threads(o.threads);
#endif
    char err[1024];
    collage_run *run = NULL;
    collage_status st = collage_run_create(&o.cfg, dist_comm(), o.resume, &run, err, sizeof err);
    if (st != COLLAGE_OK) {
        if (st != COLLAGE_ERR_PEER || dist_rank() == 0) fprintf(stderr, "collage train: %s\nhint: %s\n", err, cli_hint(st));
        return st == COLLAGE_ERR_ARG ? 2 : 1;
    }
    FILE *logf = NULL;
    if (dist_rank() == 0 && o.log && !(logf = fopen(o.log, o.resume ? "a" : "w")))
        fprintf(stderr, "collage train: cannot write --log '%s'\n", o.log);
    int rc = dist_any(o.log && dist_rank() == 0 && !logf) ? 1 : 0;
    collage_run_info in = collage_run_get_info(run);
    o.cfg = *collage_run_get_config(run);
    run_totals t = {.t_start = cli_now(), .last_loss = (double)NAN, .last_val = (double)NAN, .comm0 = dist_comm_seconds(),
                    .start = in.step, .last_step = in.step};
    t.tail_from = o.stop_after - (o.stop_after / 20 > 0 ? o.stop_after / 20 : 1);
    if (!rc && !o.quiet) print_header(&o, &in);
    if (!rc) rc = train_loop(run, &o, logf, &t);
    if (!rc) rc = finish(run, &o, &t);
    if (logf) fclose(logf);
    collage_run_free(run);
    return rc;
}

int cmd_train(int argc, char **argv) {
    if (dist_init(&argc, &argv) != 0) {
        fprintf(stderr, "collage train: MPI could not start\n");
        return 1;
    }
    /* The library runs its matrix products as single-threaded BLAS tiles on its own threads; with
     * OpenBLAS at one thread from the start, no model call has to switch it and back. */
    openblas_set_num_threads(1);
    int rc = train_main(argc, argv);
    dist_finalize();
    return rc;
}
