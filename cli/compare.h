/* compare.h — what the parts of `collage compare` share: the grid runner and the command (compare.c),
 * its options (compare_opts.c), the statistics over seeds and the Pareto set (compare_stats.c), the
 * report and results.csv (compare_report.c) and the gnuplot plots (compare_plot.c). */
#ifndef COLLAGE_CLI_COMPARE_H
#define COLLAGE_CLI_COMPARE_H
#include "cli.h"
#include <stddef.h>
#include <sys/types.h>

#define MAX_STRATEGIES 24
#define MAX_BETA2 8
#define MAX_SEEDS 32
#define MAX_PASS 64
#define MAX_BARE 8
#define MAX_COMPUTES 12
#define REF_NOISE 0.01 /* with one seed, a val-loss difference below this is reported as a match */

typedef struct {
    collage_strategy strategy;
    double beta2;
    int seed_index;
    char dir[1024];
    /* results (NAN when the run has none) */
    int done, steps_run;
    double train_loss, val_loss, edq_ratio, lost, bpp, tps, ms, rss, val_acc; /* val_acc: masked LM only */
    /* scheduling */
    pid_t pid;
    int steps_seen;
    double t0, secs;
} run_t;

/* One value of the compute axis (--compute LIST): its name, which is its folder under --out, and the train
 * flags that select it, appended to every run's flags. */
typedef struct {
    char name[32];
    const char *flags[4]; /* flag, value, flag, value */
    int n_flags, e4m3_all;
} cmp_compute;

typedef struct {
    collage_strategy strategies[MAX_STRATEGIES];
    int n_strategies;
    double beta2[MAX_BETA2];
    int n_beta2, seeds, steps, jobs, threads, eval_every;
    uint64_t seed;
    const char *out;
    const char *pass[MAX_PASS]; /* train flags with a value passed through, as given: flag, value, flag, … */
    int n_pass;
    const char *bare[MAX_BARE]; /* train flags without a value passed through (--nesterov, --fp8-e4m3-all) */
    int n_bare;
    cmp_compute computes[MAX_COMPUTES]; /* the compute axis; none: every run computes as --compute says (bf16) */
    int n_computes;
    collage_optimizer optimizer; /* --optimizer as passed (adamw when not): which of the flags its runs read */
    int report_only; /* --report-only: the outputs of the runs already finished in --out/runs, nothing trained */
} compare_opts;

/* compare_opts.c: the options (0, or the exit status after a message), a run's file name, and a train
 * flag passed through (the last one given; NULL when not given). */
int cmp_parse_compare(int argc, char **argv, compare_opts *o);
const char *cmp_file_name(collage_strategy s, char *buf, size_t cap);
const char *cmp_passed_value(const compare_opts *o, const char *flag);
int cmp_passed(const compare_opts *o, const char *flag);

/* compare.c: the grid of o (plan, runs, results.csv, report.md, plots in o->out; 0, or the exit status
 * after a message), its runs handed to the caller in *keep (freed by it) when keep is not NULL; a text
 * file written atomically (0 or -1), a number of a JSON text by key (NAN when absent), β2 as text (buf of 32). */
int cmp_run_grid(const compare_opts *o, const char *cmdline, run_t **keep, int *nkeep);
int cmp_write_text(const char *path, const char *text);
double cmp_json_get(const char *js, const char *key);
const char *cmp_b2str(double b, char *buf);

/* compare_stats.c: mean and sample standard deviation of the finite values added (NAN for both when there
 * is none); one field (at byte offset off of run_t) over the finished runs of (s, β2); a statistic as
 * "mean ± sd" in fmt (scaled); the reference strategy; the paired difference of the final validation
 * loss s minus ref over the seeds where both finished; whether s matches the reference at β2; the Pareto
 * set of bytes against the gap at β2 (its count, indices into strategies); Pearson's r and ranks. */
typedef struct { double mean, sd, sum, sq; int n; } stat_t;
#define STAT(field) cmp_stat_of(runs, nruns, s, b2, offsetof(run_t, field))
stat_t cmp_stat_of(const run_t *runs, int nruns, collage_strategy s, double b2, size_t off);
void cmp_fmt_stat(char *out, size_t cap, stat_t st, const char *fmt, double scale);
collage_strategy cmp_reference(const compare_opts *o);
stat_t cmp_paired_diff(const run_t *runs, int nruns, collage_strategy s, collage_strategy ref, double b2);
stat_t cmp_paired_diff_across(const run_t *runs, int nruns, collage_strategy s, const run_t *refs, int nrefs,
                              collage_strategy ref, double b2);
int cmp_matches(const compare_opts *o, const run_t *runs, int nruns, collage_strategy s, double b2);
int cmp_pareto_set(const compare_opts *o, const run_t *runs, int nruns, double b2, int *pareto);
double cmp_pearson(const double *x, const double *y, int n);
void cmp_ranks(const double *x, int n, double *r);
#define MATCH_FLOOR 0.005

/* compare_report.c: text appended to a growing buffer; whether the runs are masked-LM runs; report.md and
 * results.csv in --out (0, or -1 after a message); results.csv's lines of runs, each led by lead. */
typedef struct { char *p; size_t len, cap; } sbuf;
__attribute__((format(printf, 2, 3))) void cmp_sb_printf(sbuf *b, const char *fmt, ...);
int cmp_runs_mlm(const run_t *runs, int nruns);
int cmp_write_report(const compare_opts *o, const run_t *runs, int nruns, const char *cmdline, int plots_ok);
int cmp_write_csv(const compare_opts *o, const run_t *runs, int nruns);
void cmp_csv_lines(sbuf *b, const compare_opts *o, const run_t *runs, int nruns, const char *lead);
#define CMP_CSV_HEADER "strategy,beta2,seed,steps,train_loss,val_loss,edq_ratio,lost,bytes_per_param,tokens_per_s,ms_per_step," \
                       "peak_rss_mb,val_accuracy"
#define VAL_LOSS(mlm) ((mlm) ? "masked-LM validation loss" : "validation loss")

/* compare_compute.c: the compute axis — --compute, --fp8-recipe and --fp4-recipe lists into o->computes (0, or -1 after a
 * message), and the command over it: one grid per compute in --out/NAME, then report.md, results.csv and
 * compute.png across them in --out (0, or the exit status). */
int cmp_parse_computes(const char *computes, const char *recipes, const char *recipes4, int e4m3_all, compare_opts *o);
int cmp_compare_computes(const compare_opts *o, const char *cmdline);

/* compare_plot.c: the plots' data files and the four PNGs through gnuplot (0: drawn; else not). */
int cmp_render_plots(const compare_opts *o, const run_t *runs, int nruns);
/* Writes script as --out/NAME.gp and runs gnuplot on it there, its errors in NAME.err (removed when it
 * succeeds); 0, or -1 after a message with a hint (gnuplot missing or failing, a quote in --out). */
int cmp_gnuplot(const compare_opts *o, const char *name, const char *script);

#endif
