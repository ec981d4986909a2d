/* compare.c — `collage compare`: the Collage paper's experiment in miniature. Every (strategy, β2, seed)
 * combination is trained by a child `collage train` on the same data, the same initial weights and the
 * same batch order, so that runs differ only in precision; runs go side by side, one thread each, and a
 * finished run (its summary.json, with the same arguments) is never redone. The results become
 * results.csv, report.md and four gnuplot PNGs in --out. */
#include "cli.h"
#include "collage_data.h" /* collage_atomic_*: every output file is written to a temporary name, then renamed */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_STRATEGIES 24
#define MAX_BETA2 8
#define MAX_SEEDS 32
#define MAX_PASS 64
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

typedef struct {
    collage_strategy strategies[MAX_STRATEGIES];
    int n_strategies;
    double beta2[MAX_BETA2];
    int n_beta2, seeds, steps, jobs, threads, eval_every;
    uint64_t seed;
    const char *out;
    const char *pass[MAX_PASS]; /* train flags passed through, as given */
    int n_pass;
} compare_opts;

static void compare_usage(FILE *f) {
    fprintf(f,
            "usage: collage compare [--precision LIST|all] [--beta2 LIST] [--seeds N] [--steps N] [--out DIR]\n"
            "                       [--jobs J] [--threads T] [--seed N] [train flags...]\n"
            "Trains every (strategy, beta2, seed) on the same data, initial weights and batch order, then writes\n"
            "results.csv, report.md and plots (val_loss.png, edq.png, loss_vs_bytes.png, frontier.png) to --out.\n"
            "  --precision LIST    comma-separated strategies (compositions too: collage-light+m=int8,v=int8),\n"
            "                      'all' (every preset) or 'frontier' (the 16-bit strategies and the 8-bit\n"
            "                      compositions their bytes suggest, against bf16-master: README)\n"
            "                      (default: fp32,bf16,collage-light,collage-plus,bf16-master)\n"
            "  --beta2 LIST        comma-separated (default: 0.95,0.999)\n"
            "  --seeds N           seeds per combination (default 1); seed k trains with --seed SEED+k\n"
            "  --steps N           steps per run (default 1000: most of the gap opens late, as the lr decays)\n"
            "  --out DIR           output folder (default compare); rerunning skips finished runs\n"
            "  --jobs J            runs side by side (default: the number of cores)\n"
            "  --threads T         threads per run (default: cores / jobs)\n"
            "  --eval-every N      validation interval (default steps/20)\n"
            "  --seed N            the first run's --seed (default 1337): the same initial weights and batch\n"
            "                      order for every strategy and beta2\n"
            "Other flags go to `collage train` unchanged; the defaults, docs/training.md:\n"
            "  --model tiny (2 layers, width 128, 4 heads), --seq 64, --batch 16, --lr 3e-4, warm-up steps/20,\n"
            "  --wd 0.1, --clip 1.0, --eps 1e-8 (1e-4 for the strategies with fp16 arithmetic, which refuse an\n"
            "  eps that is 0 in fp16), on the fortunes corpus with 10%% held out;\n"
            "  --model llama-tiny compares on the LLaMA family (docs/llama.md), --model bert-tiny on a BERT\n"
            "  encoder trained by masked LM.\n");
}

/* The frontier: the fewest bytes at bf16-master's quality. The 16-bit strategies the paper compares, and
 * the 8-bit compositions their bytes suggest: the two compensated ones and stochastic rounding with m
 * and v in 8 bits (dynamic code, re-quantized to nearest and stochastically), e4m3 beside them, and
 * bf16-master with 8-bit states (the usual 8-bit Adam). */
static const char FRONTIER[] = "bf16-master,bf16,bf16-sr,bf16-remainder,collage-light,collage-plus,"
                               "collage-light+m=int8,v=int8,collage-light+m=int8,v=int8,q=sr,"
                               "bf16-sr+m=int8,v=int8,bf16-sr+m=int8,v=int8,q=sr,bf16-remainder+m=int8,v=int8,"
                               "bf16-master+m=int8,v=int8,collage-light+m=e4m3,v=e4m3";

/* Comma-separated list of strategies ("all": every preset; "frontier": FRONTIER). A composition's own
 * parts are comma-separated too: a piece that starts with m=, v= or q= continues the strategy before it. */
static int parse_strategies(const char *v, compare_opts *o) {
    o->n_strategies = 0;
    if (!strcmp(v, "all")) {
        for (int s = 0; s < COLLAGE_STRATEGY_COUNT && s < MAX_STRATEGIES; s++) o->strategies[o->n_strategies++] = (collage_strategy)s;
        return 0;
    }
    if (!strcmp(v, "frontier")) v = FRONTIER;
    char buf[2048], names[MAX_STRATEGIES + 1][128];
    int k = -1;
    snprintf(buf, sizeof buf, "%s", v);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        const int part = (t[0] == 'm' || t[0] == 'v' || t[0] == 'q') && t[1] == '=' && k >= 0 && strchr(names[k], '+');
        if (part) {
            size_t len = strlen(names[k]);
            snprintf(names[k] + len, sizeof names[k] - len, ",%s", t);
            continue;
        }
        if (++k >= MAX_STRATEGIES) {
            fprintf(stderr, "collage compare: --precision: at most %d strategies\nhint: two compare runs into one --out\n",
                    MAX_STRATEGIES);
            return -1;
        }
        snprintf(names[k], sizeof names[k], "%s", t);
    }
    for (int i = 0; i <= k; i++) {
        collage_strategy s;
        if (collage_strategy_parse(names[i], &s) != COLLAGE_OK) {
            fprintf(stderr, "collage compare: '%s' in --precision: %s\nhint: collage train --help lists the strategies and "
                            "how to compose one; or pass 'all' or 'frontier'\n", names[i], collage_strategy_parse_error());
            return -1;
        }
        for (int j = 0; j < o->n_strategies; j++)
            if (o->strategies[j] == s) {
                fprintf(stderr, "collage compare: --precision: '%s' appears twice\nhint: name each strategy once\n", names[i]);
                return -1;
            }
        o->strategies[o->n_strategies++] = s;
    }
    if (!o->n_strategies) {
        fprintf(stderr, "collage compare: --precision lists no strategy\nhint: e.g. --precision bf16,collage-light\n");
        return -1;
    }
    return 0;
}

/* A strategy's name as a file name: a composition's '+', ',' and '=' become '_', '_' and '-'
 * ("collage-light_m-int8_v-int8"); a preset's is its name. */
static const char *file_name(collage_strategy s, char *buf, size_t cap) {
    snprintf(buf, cap, "%s", collage_strategy_name(s));
    for (char *c = buf; *c; c++) *c = *c == '+' || *c == ',' ? '_' : *c == '=' ? '-' : *c;
    return buf;
}

static int parse_beta2(const char *v, compare_opts *o) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", v);
    o->n_beta2 = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end;
        double b = strtod(t, &end);
        if (*end || end == t || !(b > 0 && b < 1)) {
            fprintf(stderr, "collage compare: --beta2 expects numbers in (0, 1) separated by commas, got '%s'\nhint: e.g. "
                            "--beta2 0.95,0.999\n", t);
            return -1;
        }
        if (o->n_beta2 == MAX_BETA2) {
            fprintf(stderr, "collage compare: --beta2: at most %d values\nhint: fewer values\n", MAX_BETA2);
            return -1;
        }
        o->beta2[o->n_beta2++] = b;
    }
    if (!o->n_beta2) { fprintf(stderr, "collage compare: --beta2 lists no value\nhint: e.g. --beta2 0.95,0.999\n"); return -1; }
    return 0;
}

static int parse_compare(int argc, char **argv, compare_opts *o) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (compare_opts){.seeds = 1, .steps = 1000, .out = "compare", .seed = 1337, .eval_every = -1};
    if (cpus < 1) cpus = 1;
    parse_strategies("fp32,bf16,collage-light,collage-plus,bf16-master", o);
    parse_beta2("0.95,0.999", o);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        size_t z;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { compare_usage(stdout); exit(0); }
        if (strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "collage compare: unexpected argument '%s'\nhint: collage compare --help\n", a);
            return -1;
        }
        if (!strcmp(a, "--save") || !strcmp(a, "--resume") || !strcmp(a, "--log") || !strcmp(a, "--summary") ||
            !strcmp(a, "--stop-after")) {
            fprintf(stderr, "collage compare: %s is set by compare for each run (its files live in --out)\nhint: drop %s; "
                            "rerunning the same command continues the unfinished runs\n", a, a);
            return -1;
        }
        const int own = !strcmp(a, "--precision") || !strcmp(a, "--beta2") || !strcmp(a, "--seeds") || !strcmp(a, "--steps") ||
                        !strcmp(a, "--jobs") || !strcmp(a, "--threads") || !strcmp(a, "--eval-every") ||
                        !strcmp(a, "--seed") || !strcmp(a, "--out");
        const int kind = own ? 1 : cli_train_flag(a);
        if (kind < 0) return cli_unknown("compare", a);
        if (kind == 0) continue; /* --quiet, --overwrite: compare's children are quiet and write their own folders */
        if (!v) return cli_needs_value("compare", a);
        if (!strcmp(a, "--out") || !strcmp(a, "--data") || !strcmp(a, "--init")) bad = cli_path("compare", a, v);
        else if (!v[0]) {
            fprintf(stderr, "collage compare: %s '': an empty value (an unset variable?)\nhint: collage compare --help\n", a);
            return -1;
        }
        if (bad) return -1;
        if (!strcmp(a, "--precision")) bad = parse_strategies(v, o);
        else if (!strcmp(a, "--beta2")) bad = parse_beta2(v, o);
        else if (!strcmp(a, "--seeds")) bad = cli_parse_range("compare", a, v, 1, MAX_SEEDS, &o->seeds);
        else if (!strcmp(a, "--steps")) bad = cli_parse_range("compare", a, v, 1, INT_MAX, &o->steps);
        else if (!strcmp(a, "--jobs")) bad = cli_parse_range("compare", a, v, 1, 1024, &o->jobs);
        else if (!strcmp(a, "--threads")) bad = cli_parse_threads("compare", v, &o->threads);
        else if (!strcmp(a, "--eval-every")) bad = cli_parse_range("compare", a, v, 1, INT_MAX, &o->eval_every);
        else if (!strcmp(a, "--seed")) { bad = cli_parse_size("compare", a, v, &z); o->seed = z; }
        else if (!strcmp(a, "--out")) o->out = v;
        else {
            if (o->n_pass + 2 > MAX_PASS) {
                fprintf(stderr, "collage compare: %s: too many flags for train (at most %d)\nhint: fewer flags\n", a, MAX_PASS / 2);
                return -1;
            }
            o->pass[o->n_pass++] = a;
            o->pass[o->n_pass++] = v;
        }
        if (bad) return -1;
        i++;
    }
    if (o->jobs <= 0) o->jobs = (int)cpus;
    if (o->threads <= 0) o->threads = (int)cpus / o->jobs > 0 ? (int)cpus / o->jobs : 1;
    if (o->eval_every <= 0) o->eval_every = o->steps / 20 > 0 ? o->steps / 20 : 1;
    return 0;
}

/* The value of a train flag given to compare (the last one), NULL when not given; given flags take
 * precedence over compare's §6 defaults. */
static const char *passed_value(const compare_opts *o, const char *flag) {
    const char *v = NULL;
    for (int i = 0; i < o->n_pass; i += 2)
        if (!strcmp(o->pass[i], flag)) v = o->pass[i + 1];
    return v;
}
static int passed(const compare_opts *o, const char *flag) { return passed_value(o, flag) != NULL; }

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
        if (!passed(o, defaults[d][0])) {
            ARG("%s", defaults[d][0]); ARG("%s", defaults[d][1]);
        }
    for (int i = 0; i < o->n_pass; i++) ARG("%s", o->pass[i]);
    ARG("--precision"); ARG("%s", collage_strategy_name(r->strategy));
    ARG("--beta2"); ARG("%.10g", r->beta2);
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

static int write_text(const char *path, const char *text) {
    char err[512];
    collage_atomic_file af;
    if (collage_atomic_open(&af, path, err, sizeof err)) { fprintf(stderr, "collage compare: %s\n", err); return -1; }
    fputs(text, af.f);
    if (collage_atomic_commit(&af, err, sizeof err)) { fprintf(stderr, "collage compare: %s\n", err); return -1; }
    return 0;
}

/* A number of a flat JSON object by key; NAN when absent or null. */
static double json_get(const char *js, const char *key) {
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
    r->steps_run = (int)json_get(buf, "steps_run");
    if (r->steps_run != steps) return 0;
    r->train_loss = json_get(buf, "tail_loss");
    r->val_loss = json_get(buf, "val_loss");
    r->val_acc = json_get(buf, "val_accuracy");
    r->edq_ratio = json_get(buf, "edq_ratio");
    r->lost = json_get(buf, "lost");
    r->bpp = json_get(buf, "bytes_per_param");
    r->tps = json_get(buf, "tokens_per_s");
    r->ms = json_get(buf, "ms_per_step");
    r->rss = json_get(buf, "peak_rss_mb");
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
    execv("/proc/self/exe", argv);
    fprintf(stderr, "collage compare: cannot run /proc/self/exe: %s\n", strerror(errno));
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

static const char *b2str(double b, char *buf) { snprintf(buf, 32, "%g", b); return buf; }

/* ------------------------------------------------------------------ statistics and the report */
/* Mean and sample standard deviation of the finite values added (NAN for both when there is none). */
typedef struct { double mean, sd, sum, sq; int n; } stat_t;
static void stat_add(stat_t *st, double x) {
    if (!isfinite(x)) return;
    st->sum += x; st->sq += x * x; st->n++;
}
static stat_t stat_done(stat_t st) {
    if (!st.n) { st.mean = st.sd = (double)NAN; return st; }
    st.mean = st.sum / st.n;
    st.sd = st.n > 1 ? sqrt(fmax(0.0, (st.sq - st.sum * st.sum / st.n) / (st.n - 1))) : 0.0;
    return st;
}

/* One field (at byte offset off of run_t) over the finished runs of (s, β2). */
static stat_t stat_of(const run_t *runs, int nruns, collage_strategy s, double b2, size_t off) {
    stat_t st = {0};
    for (int i = 0; i < nruns; i++)
        if (runs[i].strategy == s && runs[i].beta2 == b2 && runs[i].done)
            stat_add(&st, *(const double *)((const char *)&runs[i] + off));
    return stat_done(st);
}
#define STAT(field) stat_of(runs, nruns, s, b2, offsetof(run_t, field))

/* Text appended to a growing buffer. */
typedef struct { char *p; size_t len, cap; } sbuf;
__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int k = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (k >= 0 && b->len + (size_t)k < b->cap) { b->len += (size_t)k; return; }
        size_t cap = b->cap * 2 + (size_t)(k > 0 ? k : 0) + 256;
        char *q = realloc(b->p, cap);
        if (!q) return;
        b->p = q; b->cap = cap;
    }
}

static void fmt_stat(char *out, size_t cap, stat_t st, const char *fmt, double scale) {
    char a[32], b[32], sdfmt[16];
    size_t k = 0;
    if (!st.n) { snprintf(out, cap, "—"); return; }
    for (const char *f = fmt; *f && k + 1 < sizeof sdfmt; f++)
        if (*f != '+') sdfmt[k++] = *f; /* a spread has no sign */
    sdfmt[k] = 0;
    snprintf(a, sizeof a, fmt, st.mean * scale);
    if (st.n > 1) { snprintf(b, sizeof b, sdfmt, st.sd * scale); snprintf(out, cap, "%s ± %s", a, b); }
    else snprintf(out, cap, "%s", a);
}

static int has(const compare_opts *o, collage_strategy s) {
    for (int i = 0; i < o->n_strategies; i++)
        if (o->strategies[i] == s) return 1;
    return 0;
}

/* The strategy the others are judged against: bf16-master when it ran, else fp32, else the first. */
static collage_strategy reference(const compare_opts *o) {
    return has(o, COLLAGE_BF16_MASTER) ? COLLAGE_BF16_MASTER : has(o, COLLAGE_FP32) ? COLLAGE_FP32 : o->strategies[0];
}

/* Paired difference of the final validation loss, s minus the reference, over the seeds where both
 * finished: runs of one seed share weights and batches, so the pair removes most of the seed noise. */
static stat_t paired_diff(const run_t *runs, int nruns, collage_strategy s, collage_strategy ref, double b2) {
    stat_t st = {0};
    for (int i = 0; i < nruns; i++) {
        const run_t *a = &runs[i];
        if (a->strategy != s || a->beta2 != b2 || !a->done) continue;
        for (int j = 0; j < nruns; j++) {
            const run_t *r = &runs[j];
            if (r->strategy == ref && r->beta2 == b2 && r->seed_index == a->seed_index && r->done) stat_add(&st, a->val_loss - r->val_loss);
        }
    }
    return stat_done(st);
}

/* One paragraph per β2: every strategy's final validation loss against the reference, as a paired
 * difference judged against its spread over seeds (MATCH_FLOOR below which a difference is a match). */
#define MATCH_FLOOR 0.005
static void paragraph(sbuf *b, const compare_opts *o, const run_t *runs, int nruns, double b2) {
    collage_strategy ref = reference(o), s = ref;
    stat_t r = STAT(val_loss);
    if (!r.n) { sb_printf(b, "No finished run of %s at β2 = %g to compare against.\n\n", collage_strategy_name(ref), b2); return; }
    sb_printf(b, "At β2 = %g the reference, %s, ends at a validation loss of %.4f. ", b2, collage_strategy_name(ref), r.mean);
    if (o->seeds > 1)
        sb_printf(b, "Each difference below is paired by seed; it counts when it exceeds both twice its standard error over "
                     "the %d seeds and %.3f. ", o->seeds, MATCH_FLOOR);
    else
        sb_printf(b, "With one seed the noise is not measured: a difference below %.2f is called a match (rerun with "
                     "--seeds 3 to measure it). ", REF_NOISE);
    for (int i = 0; i < o->n_strategies; i++) {
        s = o->strategies[i];
        if (s == ref) continue;
        stat_t d = paired_diff(runs, nruns, s, ref, b2), lost = STAT(lost), e = STAT(edq_ratio), bpp = STAT(bpp);
        if (!d.n) continue;
        double noise = o->seeds > 1 ? fmax(2 * d.sd / sqrt((double)d.n), MATCH_FLOOR) : REF_NOISE;
        const char *verdict = fabs(d.mean) <= noise ? "matches it" : d.mean > 0 ? "ends worse" : "ends better";
        sb_printf(b, "**%s** %s (%+.4f", collage_strategy_name(s), verdict, d.mean);
        if (d.n > 1) sb_printf(b, " ± %.4f", d.sd);
        sb_printf(b, ") at %.4g bytes per parameter", bpp.mean);
        if (isfinite(lost.mean) && lost.mean > 0.001) {
            const char *kept = collage_strategy_get(s)->keeps_update_in; /* NULL: the update is lost */
            if (kept) sb_printf(b, "; its bf16 weights stayed put on %.1f%% of nonzero updates, which %s carried instead", 100 * lost.mean, kept);
            else sb_printf(b, "; %.1f%% of its nonzero weight updates were lost to rounding (EDQ ratio %.3f)", 100 * lost.mean, e.mean);
        }
        sb_printf(b, ". ");
    }
    sb_printf(b, "\n\n");
}

/* Plain bf16 second moment (one bf16 word v, no δv): at β2 = 0.999, 1 − β2 is below half an ulp of 1,
 * so v cannot decay. */
static int plain_bf16_v(collage_strategy s) {
    const collage_strategy_info *T = collage_strategy_get(s);
    return T->word[COLLAGE_ROLE_V].format == COLLAGE_WORD_BF16 && T->word[COLLAGE_ROLE_DV].format == COLLAGE_WORD_NONE;
}

/* The plain-bf16-v strategies of the table, "bf16, collage-light, …", into out. */
static void plain_bf16_v_list(char *out, size_t cap) {
    size_t len = 0;
    out[0] = 0;
    for (int s = 0; s < COLLAGE_STRATEGY_COUNT && len < cap; s++)
        if (plain_bf16_v((collage_strategy)s))
            len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? ", " : "", collage_strategy_name((collage_strategy)s));
}

/* The paper's β2 claim, read off the runs: how each strategy's final loss moves from the smallest to the
 * largest β2, relative to the reference's move (a positive number: it fell behind as β2 grew). */
static void beta2_paragraph(sbuf *b, const compare_opts *o, const run_t *runs, int nruns) {
    if (o->n_beta2 < 2) return;
    double lo = o->beta2[0], hi = o->beta2[0];
    for (int j = 1; j < o->n_beta2; j++) { if (o->beta2[j] < lo) lo = o->beta2[j]; if (o->beta2[j] > hi) hi = o->beta2[j]; }
    collage_strategy ref = reference(o);
    stat_t rl = paired_diff(runs, nruns, ref, ref, lo); /* n only: is the reference there at both */
    stat_t rh = paired_diff(runs, nruns, ref, ref, hi);
    if (!rl.n || !rh.n) return;
    sb_printf(b, "## From β2 = %g to β2 = %g\n\nThe change of each strategy's gap to %s (its Δ val at β2 = %g minus its Δ val at "
                 "β2 = %g; positive: it falls further behind as β2 grows): ", lo, hi, collage_strategy_name(ref), hi, lo);
    double least_plain = (double)INFINITY, most_other = -(double)INFINITY;
    int first = 1;
    for (int i = 0; i < o->n_strategies; i++) {
        collage_strategy s = o->strategies[i];
        if (s == ref) continue;
        stat_t a = paired_diff(runs, nruns, s, ref, lo), c = paired_diff(runs, nruns, s, ref, hi);
        if (!a.n || !c.n) continue;
        double g = c.mean - a.mean;
        sb_printf(b, "%s%s %+.4f", first ? "" : ", ", collage_strategy_name(s), g);
        first = 0;
        if (plain_bf16_v(s)) least_plain = fmin(least_plain, g);
        else most_other = fmax(most_other, g);
    }
    char plain[512];
    plain_bf16_v_list(plain, sizeof plain);
    sb_printf(b, ". A second moment stored as one bf16 word (%s) cannot "
                 "decay at β2 = 0.999, because 1 − β2 is below half an ulp of 1, so those strategies are expected to fall "
                 "behind as β2 approaches 1; collage-plus keeps v as two words and the fp32 strategies keep it in fp32. ", plain);
    if (isfinite(least_plain) && isfinite(most_other))
        sb_printf(b, "Here the smallest move among the plain-bf16-v strategies is %+.4f and the largest among the others %+.4f: %s\n\n",
                  least_plain, most_other,
                  least_plain > most_other + (o->seeds > 1 ? MATCH_FLOOR : REF_NOISE) ? "every one of them fell further behind than any other, as expected."
                                                                                     : "the runs do not separate the two groups beyond the noise.");
    else sb_printf(b, "\n\n");
}

/* Whether the runs are masked-LM runs (their summaries have a masked-token accuracy): their losses are
 * over the masked tokens, which the report and the plots say. */
static int runs_mlm(const run_t *runs, int nruns) {
    for (int i = 0; i < nruns; i++)
        if (runs[i].done && isfinite(runs[i].val_acc)) return 1;
    return 0;
}
#define VAL_LOSS(mlm) ((mlm) ? "masked-LM validation loss" : "validation loss")

/* ------------------------------------------------------------------ the frontier */
/* Whether s's gap to the reference at β2 is within the noise the paragraphs use (paired by seed). */
static int matches(const compare_opts *o, const run_t *runs, int nruns, collage_strategy s, double b2) {
    const collage_strategy ref = reference(o);
    if (s == ref) return 1;
    stat_t d = paired_diff(runs, nruns, s, ref, b2);
    if (!d.n) return 0;
    double noise = o->seeds > 1 ? fmax(2 * d.sd / sqrt((double)d.n), MATCH_FLOOR) : REF_NOISE;
    return fabs(d.mean) <= noise || d.mean < 0;
}

/* The Pareto set at β2: strategies that no other beats on both bytes per parameter and the mean gap
 * to the reference (fewer or equal bytes and a smaller gap, one of them strictly). pareto[i] for
 * o->strategies[i]; returns how many. */
static int pareto_set(const compare_opts *o, const run_t *runs, int nruns, double b2, int *pareto) {
    const collage_strategy ref = reference(o);
    double bytes[MAX_STRATEGIES], gap[MAX_STRATEGIES];
    int have[MAX_STRATEGIES], k = 0;
    for (int i = 0; i < o->n_strategies; i++) {
        const collage_strategy s = o->strategies[i];
        stat_t bpp = stat_of(runs, nruns, s, b2, offsetof(run_t, bpp)), d = paired_diff(runs, nruns, s, ref, b2);
        have[i] = bpp.n && (s == ref || d.n);
        bytes[i] = bpp.mean;
        gap[i] = s == ref ? 0.0 : d.mean;
    }
    for (int i = 0; i < o->n_strategies; i++) {
        pareto[i] = have[i];
        for (int j = 0; j < o->n_strategies && pareto[i]; j++)
            if (j != i && have[j] && bytes[j] <= bytes[i] && gap[j] <= gap[i] && (bytes[j] < bytes[i] || gap[j] < gap[i]))
                pareto[i] = 0;
        k += pareto[i];
    }
    return k;
}

/* The frontier: per β2 the Pareto set of bytes against the gap, then the fewest bytes at which a
 * strategy matches the reference at every β2 (the question the frontier answers). */
static void frontier_paragraph(sbuf *b, const compare_opts *o, const run_t *runs, int nruns, int plots_ok) {
    const collage_strategy ref = reference(o);
    sb_printf(b, "## The frontier: bytes against quality\n\nFor each β2, the Pareto set: the strategies that no other beats on "
                 "both training-state bytes per parameter (gradient included) and the mean validation-loss gap to %s "
                 "(paired by seed; ± its spread over seeds).\n\n", collage_strategy_name(ref));
    for (int j = 0; j < o->n_beta2; j++) {
        int pareto[MAX_STRATEGIES];
        if (!pareto_set(o, runs, nruns, o->beta2[j], pareto)) continue;
        sb_printf(b, "- β2 = %g:", o->beta2[j]);
        int first = 1;
        for (int i = 0; i < o->n_strategies; i++) { /* in order of bytes */
            int best = -1;
            double bb = (double)INFINITY;
            for (int k = 0; k < o->n_strategies; k++) {
                if (!pareto[k]) continue;
                double x = stat_of(runs, nruns, o->strategies[k], o->beta2[j], offsetof(run_t, bpp)).mean;
                if (x < bb) { bb = x; best = k; }
            }
            if (best < 0) break;
            pareto[best] = 0;
            const collage_strategy s = o->strategies[best];
            stat_t d = paired_diff(runs, nruns, s, ref, o->beta2[j]);
            sb_printf(b, "%s **%s** (%.4g B", first ? "" : ",", collage_strategy_name(s), bb);
            if (s == ref) sb_printf(b, ", the reference)");
            else if (d.n > 1) sb_printf(b, ", %+.4f ± %.4f)", d.mean, d.sd);
            else sb_printf(b, ", %+.4f)", d.mean);
            first = 0;
            (void)i;
        }
        sb_printf(b, "\n");
    }
    /* the fewest bytes that match at every β2 */
    int best = -1;
    double bb = (double)INFINITY;
    for (int i = 0; i < o->n_strategies; i++) {
        const collage_strategy s = o->strategies[i];
        int all = 1;
        double x = 0;
        for (int j = 0; j < o->n_beta2 && all; j++) {
            all = matches(o, runs, nruns, s, o->beta2[j]);
            x = stat_of(runs, nruns, s, o->beta2[j], offsetof(run_t, bpp)).mean;
        }
        if (all && x < bb) { bb = x; best = i; }
    }
    sb_printf(b, "\nA strategy matches %s when its gap is within the noise of the paragraphs above (or below zero). ",
              collage_strategy_name(ref));
    if (best >= 0)
        sb_printf(b, "The fewest bytes that match it at every β2 tried: **%s**, %.4g bytes per parameter", 
                  collage_strategy_name(o->strategies[best]), bb);
    else sb_printf(b, "No strategy but the reference matches it at every β2 tried");
    /* the question of the frontier: which strategies of at most 8 bytes (8.03 with two 8-bit states'
     * block scales) match the reference at every β2, by name */
    int cheap = 0;
    sb_printf(b, ". At 8 bytes per parameter or less (8.03 where both moments are 8-bit: each adds 4 bytes of scale per "
                 "%d elements), the strategies that match it at every β2: ", COLLAGE_QBLOCK);
    for (int i = 0; i < o->n_strategies; i++) {
        const collage_strategy s = o->strategies[i];
        int all = 1;
        for (int j = 0; j < o->n_beta2 && all; j++) all = matches(o, runs, nruns, s, o->beta2[j]);
        double x = stat_of(runs, nruns, s, o->beta2[0], offsetof(run_t, bpp)).mean;
        if (!all || s == ref || !(x <= 8.0 + 8.0 / COLLAGE_QBLOCK + 1e-9)) continue;
        sb_printf(b, "%s**%s** (%.4g B)", cheap++ ? ", " : "", collage_strategy_name(s), x);
    }
    sb_printf(b, "%s.\n\n", cheap ? "" : "none");
    if (plots_ok) sb_printf(b, "![bytes against the gap](frontier.png)\n\n");
}

/* Pearson's r of (x, y) over n pairs; NAN for fewer than 3 or no spread. */
static double pearson(const double *x, const double *y, int n) {
    if (n < 3) return (double)NAN;
    double mx = 0, my = 0, sxx = 0, syy = 0, sxy = 0;
    for (int i = 0; i < n; i++) { mx += x[i]; my += y[i]; }
    mx /= n; my /= n;
    for (int i = 0; i < n; i++) { sxx += (x[i] - mx) * (x[i] - mx); syy += (y[i] - my) * (y[i] - my); sxy += (x[i] - mx) * (y[i] - my); }
    return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : (double)NAN;
}
/* Ranks (1-based, ties averaged) of x[0, n). */
static void ranks(const double *x, int n, double *r) {
    for (int i = 0; i < n; i++) {
        int below = 0, same = 0;
        for (int j = 0; j < n; j++) { below += x[j] < x[i]; same += x[j] == x[i]; }
        r[i] = below + (same + 1) / 2.0;
    }
}

/* The paper's open question: does EDQ predict the loss? Over every finished run but the reference's,
 * the correlation of its mean EDQ ratio (and lost fraction) with its validation-loss gap to the
 * reference in the run of the same seed and β2; then, over strategies, the rank correlation of the
 * mean EDQ ratio with the mean gap. */
static void edq_paragraph(sbuf *b, const compare_opts *o, const run_t *runs, int nruns) {
    const collage_strategy ref = reference(o);
    double *e = malloc(sizeof(double) * 3 * (size_t)(nruns + MAX_STRATEGIES * MAX_BETA2) * 2), *l = e + nruns, *g = l + nruns;
    if (!e) return;
    int n = 0;
    for (int i = 0; i < nruns; i++) {
        const run_t *a = &runs[i];
        if (a->strategy == ref || !a->done || !isfinite(a->edq_ratio)) continue;
        for (int j = 0; j < nruns; j++) {
            const run_t *r = &runs[j];
            if (r->strategy != ref || r->beta2 != a->beta2 || r->seed_index != a->seed_index || !r->done) continue;
            e[n] = a->edq_ratio; l[n] = a->lost; g[n] = a->val_loss - r->val_loss; n++;
        }
    }
    const double re = pearson(e, g, n), rl = pearson(l, g, n);
    /* per (strategy, β2): mean EDQ ratio and mean gap, ranked */
    double *me = g + nruns, *mg = me + MAX_STRATEGIES * MAX_BETA2, *ra = mg + MAX_STRATEGIES * MAX_BETA2;
    double *rb = ra + MAX_STRATEGIES * MAX_BETA2;
    int m = 0;
    for (int j = 0; j < o->n_beta2; j++)
        for (int i = 0; i < o->n_strategies; i++) {
            const collage_strategy s = o->strategies[i];
            if (s == ref) continue;
            stat_t x = stat_of(runs, nruns, s, o->beta2[j], offsetof(run_t, edq_ratio)), d = paired_diff(runs, nruns, s, ref, o->beta2[j]);
            if (!x.n || !d.n) continue;
            me[m] = x.mean; mg[m] = d.mean; m++;
        }
    ranks(me, m, ra);
    ranks(mg, m, rb);
    const double rho = pearson(ra, rb, m);
    sb_printf(b, "## Does EDQ predict the loss?\n\nOver the %d runs of the comparison other than %s's, each paired with the "
                 "reference's run of the same seed and β2: the correlation of a run's mean EDQ ratio with its validation-loss gap "
                 "is r = %.2f, and of its lost-update fraction with the gap r = %.2f (Pearson). Over the %d (strategy, β2) means, "
                 "the rank correlation of the EDQ ratio with the gap is ρ = %.2f (Spearman; a higher EDQ ratio should mean a "
                 "smaller gap: ρ near −1). ", n, collage_strategy_name(ref), re, rl, m, rho);
    if (!isfinite(rho)) sb_printf(b, "Too few runs to say whether EDQ predicted the ranking.\n\n");
    else if (rho <= -0.7) sb_printf(b, "EDQ predicted the ranking of the strategies.\n\n");
    else if (rho <= -0.4) sb_printf(b, "EDQ predicted the ranking only in part.\n\n");
    else sb_printf(b, "EDQ did not predict the ranking of the strategies here (by its definition it sees how much of each "
                      "intended update reaches θ, not how precisely the moments that shape the update are kept).\n\n");
    free(e);
}

static int write_report(const compare_opts *o, const run_t *runs, int nruns, const char *cmdline, int plots_ok) {
    sbuf b = {malloc(4096), 0, 4096};
    if (!b.p) return -1;
    time_t now = time(NULL);
    char date[64];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    sb_printf(&b, "# collage compare: report\n\nMade %s by `%s` (collage %s). %d runs: %d strategies × %d values of β2 × %d seed%s, "
                  "%d steps each; every run starts from the same weights and sees the same batches (seed k trains with "
                  "--seed %llu+k), so the runs of one seed differ only in precision. Each run's own files, including the exact "
                  "`collage train` command (args.txt), are in `runs/`.\n\n",
              date, cmdline, collage_version(), nruns, o->n_strategies, o->n_beta2, o->seeds, o->seeds > 1 ? "s" : "", o->steps,
              (unsigned long long)o->seed);
    sb_printf(&b, "Columns: validation loss at the last step (8 held-out batches, the same for every run); train loss as the mean "
                  "of the last 5%% of steps; EDQ ratio ⟨Δ_eff, Δ⟩/‖Δ‖² averaged over steps (1 = every update applied in full); "
                  "lost = the fraction of nonzero intended updates that left the stored bf16 weight unchanged (a compensated "
                  "strategy keeps them in its compensation, master or remainder); Δ val = the validation loss minus the "
                  "reference's in the run of the same seed; bytes of training "
                  "state per parameter; tokens/s of one run (runs go side by side, %d thread%s each). Values are mean ± standard "
                  "deviation over seeds when there is more than one.\n\n", o->threads, o->threads > 1 ? "s" : "");
    const int mlm = runs_mlm(runs, nruns); /* their validation's masked-token accuracy gets a column */
    if (mlm) sb_printf(&b, "The model is trained by masked language modelling: its losses are over the masked tokens, and "
                           "val acc is the fraction of the validation's masked tokens (a fixed mask, the same for every run) "
                           "whose most probable prediction is the original token.\n\n");
    for (int j = 0; j < o->n_beta2; j++) {
        double b2 = o->beta2[j];
        sb_printf(&b, "## β2 = %g\n\n| strategy | val loss | %sΔ val vs %s | train loss | EDQ ratio | lost | bytes/param | tokens/s | "
                      "peak MB |\n|---|---|%s---|---|---|---|---|---|---|\n", b2, mlm ? "val acc | " : "",
                  collage_strategy_name(reference(o)), mlm ? "---|" : "");
        for (int i = 0; i < o->n_strategies; i++) {
            collage_strategy s = o->strategies[i];
            char c[9][96];
            fmt_stat(c[0], 96, STAT(val_loss), "%.4f", 1);
            fmt_stat(c[8], 96, STAT(val_acc), "%.2f%%", 100);
            if (mlm) snprintf(c[0] + strlen(c[0]), 96 - strlen(c[0]), " | %s", c[8]);
            if (s == reference(o)) snprintf(c[7], 96, "(reference)");
            else fmt_stat(c[7], 96, paired_diff(runs, nruns, s, reference(o), b2), "%+.4f", 1);
            fmt_stat(c[1], 96, STAT(train_loss), "%.4f", 1);
            fmt_stat(c[2], 96, STAT(edq_ratio), "%.4f", 1);
            fmt_stat(c[3], 96, STAT(lost), "%.1f%%", 100);
            fmt_stat(c[4], 96, STAT(bpp), "%.4g", 1);
            fmt_stat(c[5], 96, STAT(tps), "%.0f", 1);
            fmt_stat(c[6], 96, STAT(rss), "%.0f", 1);
            sb_printf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", collage_strategy_name(s), c[0], c[7], c[1], c[2], c[3],
                      c[4], c[5], c[6]);
        }
        sb_printf(&b, "\n");
        paragraph(&b, o, runs, nruns, b2);
    }
    beta2_paragraph(&b, o, runs, nruns);
    frontier_paragraph(&b, o, runs, nruns, plots_ok);
    edq_paragraph(&b, o, runs, nruns);
    if (plots_ok)
        sb_printf(&b, "## Plots\n\n![validation loss against step](val_loss.png)\n\n![EDQ ratio against step](edq.png)\n\n"
                      "![final validation loss against bytes per parameter](loss_vs_bytes.png)\n");
    else sb_printf(&b, "## Plots\n\nNot rendered: gnuplot was not found or failed (see the message of the run; `apt-get install gnuplot-nox`).\n");
    char path[4200];
    snprintf(path, sizeof path, "%s/report.md", o->out);
    int rc = write_text(path, b.p);
    free(b.p);
    return rc;
}

static int write_csv(const compare_opts *o, const run_t *runs, int nruns) {
    sbuf b = {malloc(4096), 0, 4096};
    if (!b.p) return -1;
    sb_printf(&b, "strategy,beta2,seed,steps,train_loss,val_loss,edq_ratio,lost,bytes_per_param,tokens_per_s,ms_per_step,peak_rss_mb,"
                  "val_accuracy\n");
    for (int i = 0; i < nruns; i++) {
        const run_t *r = &runs[i];
        if (!r->done) continue;
        const char *name = collage_strategy_name(r->strategy), *q = strchr(name, ',') ? "\"" : ""; /* quoted when it has a comma */
        sb_printf(&b, "%s%s%s,%g,%llu,%d,%.6f,%.6f,%.6f,%.6f,%.2f,%.1f,%.3f,%.0f,", q, name, q, r->beta2,
                  (unsigned long long)(o->seed + (uint64_t)r->seed_index), r->steps_run, r->train_loss, r->val_loss, r->edq_ratio,
                  r->lost, r->bpp, r->tps, r->ms, r->rss);
        if (isfinite(r->val_acc)) sb_printf(&b, "%.6f", r->val_acc); /* empty for a next-token model */
        sb_printf(&b, "\n");
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/results.csv", o->out);
    int rc = write_text(path, b.p);
    free(b.p);
    return rc;
}

/* ------------------------------------------------------------------ plots */
/* Per run of the first seed: the validation curve and a moving average of the EDQ ratio, as data files. */
static int write_plot_data(const run_t *runs, int nruns, int window) {
    char path[4200], line[2048];
    for (int i = 0; i < nruns; i++) {
        const run_t *r = &runs[i];
        if (r->seed_index != 0 || !r->done) continue;
        snprintf(path, sizeof path, "%s/log.jsonl", r->dir);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        sbuf val = {malloc(1024), 0, 1024}, edq = {malloc(1024), 0, 1024};
        enum { WMAX = 25 };
        double win[WMAX] = {0}, sum = 0;
        int W = window < 1 ? 1 : window > WMAX ? WMAX : window;
        int k = 0;
        while (val.p && edq.p && fgets(line, sizeof line, f)) {
            double step = json_get(line, "step"), v = json_get(line, "val_loss"), e = json_get(line, "edq_ratio");
            if (isfinite(v)) sb_printf(&val, "%g %.6f\n", step, v);
            if (!isfinite(e)) continue;
            sum += e - win[k % W];
            win[k % W] = e;
            k++;
            if (k >= W) sb_printf(&edq, "%g %.6f\n", step, sum / W);
        }
        fclose(f);
        int bad = !val.p || !edq.p;
        if (!bad) {
            snprintf(path, sizeof path, "%s/val.dat", r->dir);
            bad |= write_text(path, val.p);
            snprintf(path, sizeof path, "%s/edq.dat", r->dir);
            bad |= write_text(path, edq.p);
        }
        free(val.p); free(edq.p);
        if (bad) return -1;
    }
    return 0;
}

/* The validation loss (top: the whole run; bottom: its second half, where the gaps open) and the EDQ
 * ratio: one column per β2, one line per strategy, runs of the first seed. */
static void plot_curves(sbuf *g, const compare_opts *o, const run_t *runs, int nruns) {
    char b2s[32];
    for (int plot = 0; plot < 2; plot++) {
        const char *name = plot == 0 ? "val_loss" : "edq", *file = plot == 0 ? "val.dat" : "edq.dat";
        int rows = plot == 0 ? 2 : 1;
        sb_printf(g, "set terminal pngcairo size %d,%d font ',10'\nset output '%s.png'\nset multiplot layout %d,%d\n"
                      "set xlabel 'step'\nset ylabel '%s'\n", 520 * o->n_beta2, 400 * rows, name, rows, o->n_beta2,
                  plot == 0 ? VAL_LOSS(runs_mlm(runs, nruns)) : "EDQ ratio (moving average)");
        sb_printf(g, "set key %s\n", plot == 0 ? "top right" : "bottom left");
        for (int row = 0; row < rows; row++) {
            if (row == 1) sb_printf(g, "set xrange [%d:*]\nset autoscale y\nset key top right\n", o->steps / 2);
            for (int j = 0; j < o->n_beta2; j++) {
                sb_printf(g, "set title 'beta2 = %s%s'\nplot ", b2str(o->beta2[j], b2s), row ? ", second half" : "");
                int first = 1;
                for (int i = 0; i < nruns; i++) {
                    const run_t *r = &runs[i];
                    if (r->seed_index || r->beta2 != o->beta2[j] || !r->done) continue;
                    const char *base = strrchr(r->dir, '/');
                    sb_printf(g, "%s'runs/%s/%s' with lines lw 2 title '%s'", first ? "" : ", ", base + 1, file,
                              collage_strategy_name(r->strategy));
                    first = 0;
                }
                sb_printf(g, "%s\n", first ? "NaN notitle" : "");
            }
        }
        sb_printf(g, "unset multiplot\nset xrange [*:*]\n");
    }
}

/* Final validation loss against bytes per parameter: one series per β2, points labelled by strategy;
 * a label whose point shares its x with an earlier one of the same β2 goes on the left. */
static void plot_loss_vs_bytes(sbuf *g, const compare_opts *o, const run_t *runs, int nruns) {
    char b2s[32];
    const char *val = VAL_LOSS(runs_mlm(runs, nruns));
    sb_printf(g, "set terminal pngcairo size 640,440 font ',10'\nset output 'loss_vs_bytes.png'\nset title 'final %s "
                  "against training-state bytes per parameter'\nset xlabel 'bytes per parameter'\nset ylabel '%s "
                  "(mean over seeds)'\nset offsets 2, 3, 0.02, 0.02\nset key top right\nplot ", val, val);
    for (int j = 0; j < o->n_beta2; j++)
        sb_printf(g, "%s'-' using 1:2 with points pt %d ps 1.5 title 'beta2 = %s', '-' using 1:2:3 with labels left offset 1,0 "
                      "font ',8' notitle, '-' using 1:2:3 with labels right offset -1,0 font ',8' notitle",
                  j ? ", " : "", 7 + 2 * j, b2str(o->beta2[j], b2s));
    sb_printf(g, "\n");
    for (int j = 0; j < o->n_beta2; j++)
        for (int part = 0; part < 3; part++) { /* points, labels on the right, labels on the left */
            for (int i = 0; i < o->n_strategies; i++) {
                collage_strategy s = o->strategies[i];
                double b2 = o->beta2[j];
                stat_t v = STAT(val_loss), bpp = STAT(bpp);
                if (!v.n || !isfinite(v.mean)) continue;
                int shared = 0;
                for (int e = 0; e < i; e++) {
                    s = o->strategies[e];
                    stat_t be = STAT(bpp);
                    shared |= be.n && fabs(be.mean - bpp.mean) < 0.01;
                }
                s = o->strategies[i];
                if (part == 0 || (part == 1 && !shared) || (part == 2 && shared))
                    sb_printf(g, "%g %.6f %s\n", bpp.mean, v.mean, collage_strategy_name(s));
            }
            sb_printf(g, "e\n");
        }
}

/* The frontier: the gap to the reference (mean ± sd over seeds) against bytes per parameter, one panel
 * per β2, its Pareto set joined by a line. Labels of points at (nearly) the same bytes are stacked
 * upwards, so that they stay legible. */
static void plot_frontier(sbuf *g, const compare_opts *o, const run_t *runs, int nruns) {
    char b2s[32];
    const collage_strategy ref = reference(o);
    /* loss_vs_bytes.png's offsets would widen this x range to -2: bytes start at 0 */
    sb_printf(g, "set terminal pngcairo size 1000,%d font ',10'\nset output 'frontier.png'\nset multiplot layout %d,1\n"
                  "unset offsets\nset xlabel 'training-state bytes per parameter (gradient included)'\nset ylabel '%s - %s'\n"
                  "set key top right\n", 430 * o->n_beta2, o->n_beta2, runs_mlm(runs, nruns) ? "masked-LM val loss" : "val loss",
              collage_strategy_name(ref));
    for (int j = 0; j < o->n_beta2; j++) {
        const double b2 = o->beta2[j];
        int pareto[MAX_STRATEGIES], order[MAX_STRATEGIES], no = 0, done[MAX_STRATEGIES] = {0};
        double x[MAX_STRATEGIES], y[MAX_STRATEGIES], sd[MAX_STRATEGIES], lo = 0, hi = 0;
        pareto_set(o, runs, nruns, b2, pareto);
        for (int k = 0; k < o->n_strategies; k++) { /* by bytes */
            int best = -1;
            double bb = (double)INFINITY;
            for (int i = 0; i < o->n_strategies; i++) {
                double v = stat_of(runs, nruns, o->strategies[i], b2, offsetof(run_t, bpp)).mean;
                if (!done[i] && isfinite(v) && v < bb) { bb = v; best = i; }
            }
            if (best < 0) break;
            done[best] = 1;
            const collage_strategy s = o->strategies[best];
            stat_t d = paired_diff(runs, nruns, s, ref, b2);
            if (s != ref && !d.n) continue;
            order[no] = best;
            x[no] = bb;
            y[no] = s == ref ? 0.0 : d.mean;
            sd[no] = s == ref || d.n < 2 ? 0.0 : d.sd;
            lo = fmin(lo, y[no] - sd[no]);
            hi = fmax(hi, y[no] + sd[no]);
            no++;
        }
        const double step = (hi - lo > 0 ? hi - lo : 1e-3) / 14.0;
        sb_printf(g, "set title 'beta2 = %s: the gap to %s against bytes (mean +- sd over seeds; the Pareto set joined)'\n"
                      "set yrange [%g:%g]\nset xrange [0:*]\nplot '-' using 1:2:3 with yerrorbars pt 7 ps 1.2 lc %d title "
                      "'strategies', '-' using 1:2 with lines lw 2 lc %d title 'Pareto set', '-' using 1:2:3 with labels left "
                      "font ',8' notitle\n", b2str(b2, b2s), collage_strategy_name(ref), lo - step, hi + step * (no + 1), j + 1,
                  j + 1);
        for (int i = 0; i < no; i++) sb_printf(g, "%g %.6f %.6f\n", x[i], y[i], sd[i]);
        sb_printf(g, "e\n");
        for (int i = 0; i < no; i++)
            if (pareto[order[i]]) sb_printf(g, "%g %.6f\n", x[i], y[i]);
        sb_printf(g, "e\n");
        for (int i = 0; i < no; i++) { /* the k-th label at these bytes sits k steps above its point */
            int k = 0;
            for (int e = 0; e < i; e++) k += fabs(x[e] - x[i]) < 0.5;
            sb_printf(g, "%g %.6f %s\n", x[i] + 0.15, y[i] + step * (k + 0.4), collage_strategy_name(o->strategies[order[i]]));
        }
        sb_printf(g, "e\n");
    }
    sb_printf(g, "unset multiplot\nset xrange [*:*]\nset yrange [*:*]\n");
}

/* Renders the four PNGs with gnuplot (a script in --out, so a user can restyle them). */
static int render_plots(const compare_opts *o, const run_t *runs, int nruns) {
    int window = o->steps / 20 < 25 ? (o->steps / 20 > 0 ? o->steps / 20 : 1) : 25;
    if (write_plot_data(runs, nruns, window)) return -1;
    sbuf g = {malloc(4096), 0, 4096};
    if (!g.p) return -1;
    sb_printf(&g, "# gnuplot script written by collage compare; run `gnuplot plots.gp` in this folder to redraw.\n"
                  "set grid\nset key top right\n");
    plot_curves(&g, o, runs, nruns);
    plot_loss_vs_bytes(&g, o, runs, nruns);
    plot_frontier(&g, o, runs, nruns);
    char path[4200];
    snprintf(path, sizeof path, "%s/plots.gp", o->out);
    int rc = write_text(path, g.p);
    free(g.p);
    if (rc) return -1;
    char cmd[8600];
    if (strchr(o->out, '\'')) {
        fprintf(stderr, "collage compare: not rendering the plots: --out '%s' holds a quote\nhint: run `gnuplot plots.gp` in that folder\n", o->out);
        return -1;
    }
    snprintf(cmd, sizeof cmd, "cd '%s' && gnuplot plots.gp 2> plots.err", o->out);
    rc = system(cmd);
    if (rc != 0) {
        fprintf(stderr, "collage compare: gnuplot failed (exit %d) — see %s/plots.err\nhint: apt-get install gnuplot-nox\n",
                WIFEXITED(rc) ? WEXITSTATUS(rc) : rc, o->out);
        return -1;
    }
    snprintf(path, sizeof path, "%s/plots.err", o->out);
    unlink(path);
    return 0;
}

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
                snprintf(r->dir, sizeof r->dir, "%s/runs/%s-b%s-s%d", o->out, file_name(r->strategy, fn, sizeof fn),
                         b2str(r->beta2, b2s), si + 1);
                char *av[MAX_ARGV], args[8192];
                if (run_argv(o, r, av) < 0) return -1;
                argv_line(av, args, sizeof args);
                *finished += finished_before(r, args, o->steps);
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
    if (write_text(path, args)) return -1;
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
    int rc = write_csv(o, runs, nruns);
    int plots_ok = rc == 0 && render_plots(o, runs, nruns) == 0;
    rc |= write_report(o, runs, nruns, cmdline, plots_ok);
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

int cmd_compare(int argc, char **argv) {
    compare_opts o;
    if (parse_compare(argc, argv, &o)) return 2;
    const char *warmup = passed_value(&o, "--warmup");
    if (warmup && atoi(warmup) > o.steps) { /* every run would refuse it; say so before any folder is made */
        fprintf(stderr, "collage compare: --warmup %s is longer than --steps %d: the learning rate would never reach "
                        "--lr\nhint: --warmup %d or less\n", warmup, o.steps, o.steps);
        return 2;
    }
    int nruns = o.n_strategies * o.n_beta2 * o.seeds;
    run_t *runs = calloc((size_t)nruns, sizeof *runs);
    if (!runs) return 1;
    char cmdline[4096] = "collage compare";
    for (int i = 0; i < argc; i++) {
        size_t len = strlen(cmdline);
        snprintf(cmdline + len, sizeof cmdline - len, " %s", argv[i]);
    }
    sched_t S = {.tty = isatty(1)};
    if (plan_runs(&o, runs, &S.finished)) {
        fprintf(stderr, "collage compare: a flag's value is too long for a run's command line\nhint: shorter paths\n");
        free(runs);
        return 2;
    }
    if (prepare_out(o.out)) { free(runs); return 1; }
    printf("collage compare: %d runs (%d strategies x %d beta2 x %d seeds) on %s, %d steps each, %d side by side with %d "
           "thread%s each; %d already finished in %s/\n", nruns, o.n_strategies, o.n_beta2, o.seeds,
           cli_data_name(passed_value(&o, "--data")), o.steps, o.jobs, o.threads, o.threads > 1 ? "s" : "", S.finished, o.out);
    fflush(stdout);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    S.todo = nruns - S.finished;
    S.t_start = cli_now();
    S.steps_total = (long)S.todo * o.steps;
    run_all(&o, runs, nruns, &S);
    if (g_stop || S.failed) {
        for (int i = 0; i < nruns; i++)
            if (runs[i].pid > 0) kill(runs[i].pid, SIGTERM);
        while (wait(NULL) > 0) {}
        if (g_stop) fprintf(stderr, "\ncollage compare: interrupted; %d of %d runs finished — rerun the same command to continue\n", S.finished, nruns);
        free(runs);
        return 1;
    }
    if (S.tty) printf("\r\033[K");
    int rc = write_outputs(&o, runs, nruns, cmdline, S.t_start);
    free(runs);
    return rc ? 1 : 0;
}
