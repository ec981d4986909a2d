/* train.h — what `collage train`'s command and checks (train.c), its flags (train_flags.c), its loop (train_loop.c) and its
 * printers (train_report.c) share. */
#ifndef COLLAGE_CLI_TRAIN_H
#define COLLAGE_CLI_TRAIN_H
#include "collage_run.h"
#include <stdio.h>

/* Exit statuses of `collage train` besides 0, 1 (a failure) and 2 (a bad flag or file given). */
#define TRAIN_EXIT_DIVERGED 3   /* the run diverged; the last checkpoint stays */
/* interrupted: 128 + the signal (130 for SIGINT, 143 for SIGTERM), after the checkpoint is saved */

typedef struct {
    collage_run_config cfg;
    const char *save, *resume, *log, *summary;
    int stop_after, eval_every, save_every, keep, threads, quiet, overwrite;
    unsigned given; /* COLLAGE_RUN_* bits: settings given on the command line */
    collage_run_saved saved; /* --resume: the checkpoint's settings (cfg's strings point into it) */
} train_opts;

/* train_flags.c: the flags into o (0, or the exit status after a message); the range of a flag in words
 * for the help text (static buffers, eight in turn); --resume's settings of the saved run (0,
 * NOTHING_TO_DO, or the exit status after a message). */
#define NOTHING_TO_DO 256 /* not an exit status: the resumed run is complete, exit 0 */
void        train_usage(FILE *f); /* train.c: the help */
int         train_parse(int argc, char **argv, train_opts *o);
const char *train_range_of(const char *flag);
int         train_resume_config(train_opts *o);

/* What the loop adds up for the summary and the closing line. */
typedef struct {
    double t_start, tokens, last_loss, last_val, last_acc, sum_edq_ratio, sum_lost, sum_tail, comm0;
    double step_secs, eval_secs; /* in the training steps; in the evaluations */
    int start, last_step, n_edq, n_tail, tail_from;
    int saved_step;              /* the step of the last checkpoint written by this run (-1: none) */
} run_totals;

/* train_loop.c: signal handlers (the first signal asks the loop to stop after its step and save, a
 * second one exits at once), the loop with its periodic saves, the closing save. Returns the exit status. */
void train_signals_install(int threads);
int  train_run(collage_run *run, const train_opts *o, FILE **logf);
/* 1 when this rank printed a failure of its own in train_run (dist_release_errors). */
int  train_own_error(void);

long peak_rss_mb(void);
/* --summary: the whole run as one JSON object (what `collage compare` tabulates), written atomically. */
int  write_summary(const train_opts *o, const collage_run_info *in, const run_totals *t, double secs, double comm_s);
/* The run's shape, precision and data, and how it is split over ranks. */
void print_header(const train_opts *o, const collage_run_info *in);
/* --log: one JSON object per step. val: the step's evaluation (loss NaN: none). */
void log_step(FILE *f, const collage_run_step_info *s, const collage_scores *val, double tps, double ms, double comm_ms);
/* --log on resume: drop the lines of steps after `step` (a run killed after its last checkpoint logged
 * them; they are logged again). 0, or -1 after a message. */
int  log_trim(const char *path, int step);
/* A progress bar on a terminal, and plain lines: about 50 per run, plus every evaluation. */
void print_step(const train_opts *o, const collage_run_step_info *s, const collage_scores *val, double tps, double ms,
                const run_totals *t, int tty, int is_eval);
#endif
