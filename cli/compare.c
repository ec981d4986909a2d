/* compare.c — `collage compare`: the Collage paper's experiment in miniature. Every (strategy, β2, seed)
 * combination is trained by a child `collage train` on the same data, the same initial weights and the
 * same batch order, so that runs differ only in precision; runs go side by side, one thread each, and a
 * finished run (its summary.json, with the same arguments) is never redone. The results become
 * results.csv, report.md and four gnuplot PNGs in --out. */
#include "compare.h"
#include "collage_data.h" /* collage_atomic_*: every output file is written to a temporary name, then renamed */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_ARGV 96
#define FP16_EPS "1e-4"
/* argv of the child `collage train` of one run, NULL-terminated; its strings live in a static store that
 * the next call overwrites. -1 when an argument does not fit. */
static int run_argv(const compare_opts *o, const run_t *r, char **argv) {
    static char store[MAX_ARGV][2048];
    int n = 0;
#define ARG(...) do { if (n + 1 >= MAX_ARGV || snprintf(store[n], sizeof store[n], __VA_ARGS__) >= (int)sizeof store[n]) return -1; \
                      argv[n] = store[n]; n++; } while (0)
    ARG("collage"); ARG("train");
    /* eps: 1e-8 is 0 in fp16, which the strategies with fp16 arithmetic refuse; they take fp16's usual 1e-4 */
    const int fp16 = collage_strategy_get(r->strategy)->arith == COLLAGE_WORD_FP16;
    const char *defaults[][2] = {{"--model", "tiny"}, {"--seq", "64"}, {"--batch", "16"}, {"--lr", "3e-4"},
                                 {"--wd", "0.1"}, {"--clip", "1.0"}, {"--eps", fp16 ? FP16_EPS : "1e-8"}};
    for (size_t d = 0; d < sizeof defaults / sizeof *defaults; d++)
        if (!cmp_passed(o, defaults[d][0]) && cli_optimizer_reads(o->optimizer, defaults[d][0])) {
            ARG("%s", defaults[d][0]); ARG("%s", defaults[d][1]);
        }
    /* --loss-scale is the fp16 strategies': the other runs of the grid do not scale their loss */
    for (int i = 0; i < o->n_pass; i += 2)
        if (strcmp(o->pass[i], "--loss-scale") || collage_strategy_is_fp16(r->strategy)) {
            ARG("%s", o->pass[i]); ARG("%s", o->pass[i + 1]);
        }
    for (int i = 0; i < o->n_bare; i++) ARG("%s", o->bare[i]);
    ARG("--precision"); ARG("%s", collage_strategy_name(r->strategy));
    if (cli_optimizer_reads(o->optimizer, "--beta2")) { ARG("--beta2"); ARG("%.10g", r->beta2); } /* SGD has none */
    ARG("--seed"); ARG("%llu", (unsigned long long)(o->seed + (uint64_t)r->seed_index));
    ARG("--steps"); ARG("%d", o->steps);
    ARG("--eval-every"); ARG("%d", o->eval_every);
    ARG("--threads"); ARG("%d", o->threads);
    ARG("--log"); ARG("%s/log.jsonl", r->dir);
    ARG("--summary"); ARG("%s/summary.json", r->dir);
#undef ARG
    argv[n] = NULL;
    return n;
}

/* One line with every argument, to tell whether a finished run was made with the same command. */
static void argv_line(char **argv, char *out, size_t cap) {
    size_t len = 0;
    out[0] = 0;
    for (int i = 1; argv[i] && len < cap; i++) len += (size_t)snprintf(out + len, cap - len, "%s%s", i > 1 ? " " : "", argv[i]);
}

static int read_text(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
    return 0;
}

int cmp_write_text(const char *path, const char *text) {
    char err[512];
    collage_atomic_file af;
    if (collage_atomic_open(&af, path, err, sizeof err)) { fprintf(stderr, "collage compare: %s\n", err); return -1; }
    fputs(text, af.f);
    if (collage_atomic_commit(&af, err, sizeof err)) { fprintf(stderr, "collage compare: %s\n", err); return -1; }
    return 0;
}

/* A number of a flat JSON object by key; NAN when absent or null. */
double cmp_json_get(const char *js, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(js, pat);
    if (!p) return (double)NAN;
    p += strlen(pat);
    if (!strncmp(p, "null", 4)) return (double)NAN;
    char *end;
    double x = strtod(p, &end);
    return end == p ? (double)NAN : x;
}

/* The results of a run from its summary.json; 1 when it exists and covers every step. */
static int load_result(run_t *r, int steps) {
    char path[4200], buf[4096];
    snprintf(path, sizeof path, "%s/summary.json", r->dir);
    if (read_text(path, buf, sizeof buf)) return 0;
    r->steps_run = (int)cmp_json_get(buf, "steps_run");
    if (r->steps_run != steps) return 0;
    r->train_loss = cmp_json_get(buf, "tail_loss");
    r->val_loss = cmp_json_get(buf, "val_loss");
    r->val_acc = cmp_json_get(buf, "val_accuracy");
    r->edq_ratio = cmp_json_get(buf, "edq_ratio");
    r->lost = cmp_json_get(buf, "lost");
    r->bpp = cmp_json_get(buf, "bytes_per_param");
    r->tps = cmp_json_get(buf, "tokens_per_s");
    r->ms = cmp_json_get(buf, "ms_per_step");
    r->rss = cmp_json_get(buf, "peak_rss_mb");
    r->done = 1;
    return 1;
}

/* A run made earlier counts as finished when it was made with the same arguments (its args.txt) and
 * its summary covers every step. */
static int finished_before(run_t *r, const char *args, int steps) {
    char path[4200], saved[8192];
    snprintf(path, sizeof path, "%s/args.txt", r->dir);
    if (read_text(path, saved, sizeof saved) || strcmp(saved, args) != 0) return 0;
    return load_result(r, steps);
}

/* The step of the last line of a run's log (progress for the ETA); 0 when there is none yet. */
static int last_logged_step(const char *dir) {
    char path[4200], buf[1024];
    snprintf(path, sizeof path, "%s/log.jsonl", dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    long size = ftell(f), from = size > 1000 ? size - 1000 : 0;
    fseek(f, from, SEEK_SET);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *last = NULL;
    for (const char *p = buf; (p = strstr(p, "{\"step\":")); p++) last = p;
    return last ? atoi(last + 8) : 0;
}

static pid_t launch(char **argv, const char *dir) {
    char logpath[4200];
    snprintf(logpath, sizeof logpath, "%s/train.out", dir);
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0) return pid;
    FILE *o = fopen(logpath, "w");
    if (o) { dup2(fileno(o), 1); dup2(fileno(o), 2); }
    cli_exec_self(argv);
    fprintf(stderr, "collage compare: cannot run this collage again: %s\n", strerror(errno));
    _exit(127);
}

static void tail_file(const char *path, FILE *to) {
    char buf[2048];
    FILE *f = fopen(path, "r");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, size > 1500 ? size - 1500 : 0, SEEK_SET);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fprintf(to, "%s", buf);
    fclose(f);
}

const char *cmp_b2str(double b, char *buf) { snprintf(buf, 32, "%g", b); return buf; }
/* ------------------------------------------------------------------ the command */
static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { (void)sig; g_stop = 1; }

/* Where the runs stand while they go side by side. */
typedef struct {
    int running, next, failed, started, finished, todo, tty;
    long steps_total;
    double t_start, last_print;
} sched_t;

/* Every combination, strategy-major within a β2 so that the first results to arrive can be compared;
 * *finished = the runs already done by an earlier command with the same arguments. -1: too many flags. */
static int plan_runs(const compare_opts *o, run_t *runs, int *finished) {
    int k = 0;
    *finished = 0;
    for (int si = 0; si < o->seeds; si++)
        for (int j = 0; j < o->n_beta2; j++)
            for (int i = 0; i < o->n_strategies; i++) {
                run_t *r = &runs[k++];
                char b2s[32], fn[160];
                *r = (run_t){.strategy = o->strategies[i], .beta2 = o->beta2[j], .seed_index = si};
                snprintf(r->dir, sizeof r->dir, "%s/runs/%s-b%s-s%d", o->out, cmp_file_name(r->strategy, fn, sizeof fn),
                         cmp_b2str(r->beta2, b2s), si + 1);
                char *av[MAX_ARGV], args[8192];
                if (run_argv(o, r, av) < 0) return -1;
                argv_line(av, args, sizeof args);
                /* --report-only trusts every summary that covers the steps: its runs may be python's */
                *finished += o->report_only ? load_result(r, o->steps) : finished_before(r, args, o->steps);
            }
    return 0;
}

/* Starts run r: its folder, its args.txt, the child. -1 (with a message) when any of them fails. */
static int start_run(const compare_opts *o, run_t *r, sched_t *S) {
    char *av[MAX_ARGV], args[8192], path[4200];
    run_argv(o, r, av);
    argv_line(av, args, sizeof args);
    snprintf(path, sizeof path, "%s/summary.json", r->dir);
    unlink(path); /* a stale result never counts for a new run */
    if (cli_mkdir_p(r->dir)) { fprintf(stderr, "collage compare: cannot create '%s': %s\n", r->dir, strerror(errno)); return -1; }
    snprintf(path, sizeof path, "%s/args.txt", r->dir);
    if (cmp_write_text(path, args)) return -1;
    r->pid = launch(av, r->dir);
    if (r->pid < 0) { fprintf(stderr, "collage compare: fork: %s\n", strerror(errno)); return -1; }
    r->t0 = cli_now();
    r->steps_seen = 0;
    S->running++; S->started++;
    printf("%s[start %d of %d] %s beta2 %g seed %llu\n", S->tty ? "\r\033[K" : "", S->started, S->todo,
           collage_strategy_name(r->strategy), r->beta2, (unsigned long long)(o->seed + (uint64_t)r->seed_index));
    fflush(stdout);
    return 0;
}

/* The child pid has ended with status: its run is done (results loaded) or has failed (its output shown). */
static void reap(const compare_opts *o, run_t *runs, int nruns, pid_t pid, int status, sched_t *S) {
    char path[4200];
    for (int i = 0; i < nruns; i++) {
        run_t *r = &runs[i];
        if (r->pid != pid) continue;
        r->pid = 0;
        S->running--;
        r->secs = cli_now() - r->t0;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && load_result(r, o->steps)) {
            S->finished++;
            printf("%s[%d/%d] done  %s beta2 %g seed %llu: val loss %.4f, EDQ ratio %.3f, lost %.1f%% (%.0f s)\n",
                   S->tty ? "\r\033[K" : "", S->finished, nruns, collage_strategy_name(r->strategy), r->beta2,
                   (unsigned long long)(o->seed + (uint64_t)r->seed_index), r->val_loss, r->edq_ratio, 100 * r->lost, r->secs);
        } else if (!g_stop) {
            snprintf(path, sizeof path, "%s/train.out", r->dir);
            fprintf(stderr, "\ncollage compare: the run in %s failed (%s %d); the end of %s:\n", r->dir,
                    WIFEXITED(status) ? "exit" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), path);
            tail_file(path, stderr);
            fprintf(stderr, "hint: fix the flag or file it names and rerun the same command; finished runs are kept\n");
            S->failed = 1;
        }
    }
}

/* Progress: steps logged by the running runs; the ETA assumes the remaining steps go as fast. */
static void progress(const compare_opts *o, run_t *runs, int nruns, sched_t *S) {
    long steps_done = 0;
    for (int i = 0; i < nruns; i++) {
        if (runs[i].pid > 0) runs[i].steps_seen = last_logged_step(runs[i].dir);
        if (runs[i].pid > 0 || (runs[i].secs > 0 && runs[i].done)) steps_done += runs[i].pid > 0 ? runs[i].steps_seen : o->steps;
    }
    double now = cli_now(), el = now - S->t_start;
    if (steps_done > 0 && now - S->last_print >= (S->tty ? 1.0 : 60.0)) {
        double eta = el / (double)steps_done * (double)(S->steps_total - steps_done);
        if (S->tty) printf("\r\033[K%ld/%ld steps, %d running, ETA %dm%02ds", steps_done, S->steps_total, S->running, (int)eta / 60, (int)eta % 60);
        else printf("progress: %ld/%ld steps, %d running, ETA %dm%02ds\n", steps_done, S->steps_total, S->running, (int)eta / 60, (int)eta % 60);
        fflush(stdout);
        S->last_print = now;
    }
}

/* Runs every unfinished combination, o->jobs at a time, until all are done, one fails, or a signal. */
static void run_all(const compare_opts *o, run_t *runs, int nruns, sched_t *S) {
    while (!g_stop && !S->failed && (S->next < nruns || S->running)) {
        while (!g_stop && !S->failed && S->running < o->jobs && S->next < nruns) {
            run_t *r = &runs[S->next++];
            if (!r->done && start_run(o, r, S)) S->failed = 1;
        }
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid > 0) { reap(o, runs, nruns, pid, status, S); continue; }
        if (pid < 0 && errno != EINTR && errno != ECHILD) break;
        progress(o, runs, nruns, S);
        usleep(200000);
    }
}

/* results.csv, the plots and report.md of the finished runs; 0 when all were written. */
static int write_outputs(const compare_opts *o, const run_t *runs, int nruns, const char *cmdline, double t_start) {
    int rc = cmp_write_csv(o, runs, nruns);
    int plots_ok = rc == 0 && cmp_render_plots(o, runs, nruns) == 0;
    rc |= cmp_write_report(o, runs, nruns, cmdline, plots_ok);
    if (!rc)
        printf("wrote %s/results.csv, %s/report.md%s (%.0f s)\n", o->out, o->out,
               plots_ok ? " and val_loss.png, edq.png, loss_vs_bytes.png, frontier.png" : " (no plots)", cli_now() - t_start);
    return rc;
}

/* --out/runs created and written to before the first run starts. 0, or -1 after a message. */
static int prepare_out(const char *out) {
    char path[4200], err[1024] = "";
    collage_atomic_file probe;
    snprintf(path, sizeof path, "%s/runs", out);
    int bad = cli_mkdir_p(path) != 0;
    if (bad) snprintf(err, sizeof err, "cannot create '%.900s': %s", path, strerror(errno));
    snprintf(path, sizeof path, "%s/runs/.write-test", out);
    if (!bad) {
        bad = collage_atomic_open(&probe, path, err, sizeof err) != COLLAGE_OK;
        if (!bad) collage_atomic_abort(&probe);
    }
    if (bad) fprintf(stderr, "collage compare: --out '%s': %s\nhint: --out takes a folder you can write to\n", out, err);
    return bad ? -1 : 0;
}

/* --report-only: the outputs of the finished runs of the grid (runs freed here). 0, or the exit status
 * after a message when none has finished or an output cannot be written. */
static int report_only(const compare_opts *o, run_t *runs, int nruns, int finished, const char *cmdline) {
    char b2s[32], fn[160];
    if (!finished) {
        fprintf(stderr, "collage compare: --report-only: no run of this grid has finished in '%s/runs' (a run's folder is "
                        "NAME-bBETA2-sK, e.g. %s-b%s-s1, with a summary.json of %d steps)\nhint: the same --precision, --beta2, "
                        "--seeds and --steps as the command that made the runs\n", o->out,
                cmp_file_name(o->strategies[0], fn, sizeof fn), cmp_b2str(o->beta2[0], b2s), o->steps);
        free(runs);
        return 1;
    }
    if (finished < nruns) printf("collage compare: --report-only: %d of the grid's %d runs have finished; the report covers those\n",
                                 finished, nruns);
    const int rc = write_outputs(o, runs, nruns, cmdline, cli_now());
    free(runs);
    return rc ? 1 : 0;
}

/* The grid of o: plan, run, results. The runs go to *keep (the caller frees them) when keep is not NULL. */
int cmp_run_grid(const compare_opts *o, const char *cmdline, run_t **keep, int *nkeep) {
    int nruns = o->n_strategies * o->n_beta2 * o->seeds;
    run_t *runs = calloc((size_t)nruns, sizeof *runs);
    if (!runs) return 1;
    sched_t S = {.tty = isatty(1)};
    if (plan_runs(o, runs, &S.finished)) {
        fprintf(stderr, "collage compare: a flag's value is too long for a run's command line\nhint: shorter paths\n");
        free(runs);
        return 2;
    }
    if (o->report_only) return report_only(o, runs, nruns, S.finished, cmdline);
    if (prepare_out(o->out)) { free(runs); return 1; }
    printf("collage compare: %d runs (%d strategies x %d beta2 x %d seeds) on %s, %d steps each, %d side by side with %d "
           "thread%s each; %d already finished in %s/\n", nruns, o->n_strategies, o->n_beta2, o->seeds,
           cli_data_name(cmp_passed_value(o, "--data")), o->steps, o->jobs, o->threads, o->threads > 1 ? "s" : "", S.finished, o->out);
    fflush(stdout);
    S.todo = nruns - S.finished;
    S.t_start = cli_now();
    S.steps_total = (long)S.todo * o->steps;
    run_all(o, runs, nruns, &S);
    if (g_stop || S.failed) {
        for (int i = 0; i < nruns; i++)
            if (runs[i].pid > 0) kill(runs[i].pid, SIGTERM);
        while (wait(NULL) > 0) {}
        if (g_stop) fprintf(stderr, "\ncollage compare: interrupted; %d of %d runs finished — rerun the same command to continue\n", S.finished, nruns);
        free(runs);
        return 1;
    }
    if (S.tty) printf("\r\033[K");
    int rc = write_outputs(o, runs, nruns, cmdline, S.t_start);
    if (keep && !rc) { *keep = runs; *nkeep = nruns; }
    else free(runs);
    return rc ? 1 : 0;
}

int cmd_compare(int argc, char **argv) {
    compare_opts o;
    if (cmp_parse_compare(argc, argv, &o)) return 2;
    const char *warmup = cmp_passed_value(&o, "--warmup");
    if (warmup && atoi(warmup) > o.steps) { /* every run would refuse it; say so before any folder is made */
        fprintf(stderr, "collage compare: --warmup %s is longer than --steps %d: the learning rate would never reach "
                        "--lr\nhint: --warmup %d or less\n", warmup, o.steps, o.steps);
        return 2;
    }
    char cmdline[4096] = "collage compare";
    for (int i = 0; i < argc; i++) {
        size_t len = strlen(cmdline);
        snprintf(cmdline + len, sizeof cmdline - len, " %s", argv[i]);
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    return o.n_computes ? cmp_compare_computes(&o, cmdline) : cmp_run_grid(&o, cmdline, NULL, NULL);
}
