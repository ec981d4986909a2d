/* train.h — what `collage train`'s loop (train.c) and its printers (train_report.c) share. */
#ifndef COLLAGE_CLI_TRAIN_H
#define COLLAGE_CLI_TRAIN_H
#include "collage_run.h"
#include <stdio.h>

typedef struct {
    collage_run_config cfg;
    const char *save, *resume, *log, *summary;
    int stop_after, eval_every, threads, quiet, steps_given;
    unsigned given; /* COLLAGE_RUN_* bits: settings given on the command line */
    collage_run_saved saved; /* --resume: the checkpoint's settings (cfg's strings point into it) */
} train_opts;

/* What the loop adds up for the summary and the closing line. */
typedef struct {
    double t_start, tokens, last_loss, last_val, last_acc, sum_edq_ratio, sum_lost, sum_tail, comm0;
    int start, last_step, n_edq, n_tail, tail_from;
} run_totals;

long peak_rss_mb(void);
/* --summary: the whole run as one JSON object (what `collage compare` tabulates), written atomically. */
int  write_summary(const train_opts *o, const collage_run_info *in, const run_totals *t, double secs, double comm_s);
/* The run's shape, precision and data, and how it is split over ranks. */
void print_header(const train_opts *o, const collage_run_info *in);
/* --log: one JSON object per step. val: the step's evaluation (loss NaN: none). */
void log_step(FILE *f, const collage_run_step_info *s, const collage_scores *val, double tps, double ms, double comm_ms);
/* A progress bar on a terminal, and plain lines: about 50 per run, plus every evaluation. */
void print_step(const train_opts *o, const collage_run_step_info *s, const collage_scores *val, double tps, double ms,
                const run_totals *t, int tty, int is_eval);
#endif
