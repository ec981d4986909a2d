/* compare_opts.c — `collage compare`'s help and options: the strategies, β2 values, seeds, steps and jobs,
 * and the train flags passed through to every run as given. */
#include "compare.h"
#include "collage_data.h"
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
            "  --report-only       train nothing: results.csv, report.md and the plots of the runs already\n"
            "                      finished in --out/runs (by compare, or by `python -m collage.compare`,\n"
            "                      whose description in --out/about.md the report includes), for the grid\n"
            "                      the other flags name\n"
            "Other flags go to `collage train` unchanged; the defaults, docs/training.md:\n"
            "  --model tiny (2 layers, width 128, 4 heads), --seq 64, --batch 16, --lr 3e-4, warm-up steps/20,\n"
            "  --wd 0.1, --clip 1.0, --eps 1e-8 (1e-4 for the strategies with fp16 arithmetic, which refuse an\n"
            "  eps that is 0 in fp16), on the fortunes corpus with 10%% held out;\n"
            "  --model llama-tiny compares on the LLaMA family (docs/llama.md), --model bert-tiny on a BERT\n"
            "  encoder trained by masked LM; --optimizer lion (--beta2 default 0.99) or sgd (one run per\n"
            "  strategy and seed: SGD has no β2) compares the strategies under another update rule. A flag\n"
            "  the optimizer does not read is refused as train refuses it (--beta2 with sgd too); --loss-scale\n"
            "  goes to the fp16 strategies' runs only.\n"
            "The compute axis (docs/numerics.md §13): --compute LIST (bf16, fp8) with --fp8-recipe LIST (delayed,\n"
            "  current, block, mxfp8, or all; default delayed) trains the grid once per compute — bf16, fp8-delayed,\n"
            "  … — in --out/NAME (each with its own report), then writes report.md, results.csv and compute.png\n"
            "  across them in --out: every strategy's gap to the reference strategy with bf16 compute, e.g.\n"
            "  --compute bf16,fp8 --fp8-recipe all --precision bf16-master,collage-light,collage-plus,bf16-sr,bf16;\n"
            "  --fp8-e4m3-all goes to the fp8 computes. fp4 (docs/numerics.md §15) with --fp4-recipe LIST (nvfp4,\n"
            "  nvfp4,hadamard, mxfp4, mxfp4,hadamard, each optionally ,rn, separated by ';', or all: the four\n"
            "  without ,rn; default nvfp4): fp4-nvfp4, ….\n");
}

/* The frontier: the fewest bytes at bf16-master's quality. The 16-bit strategies the paper compares, and
 * the 8-bit compositions their bytes suggest: the two compensated ones and stochastic rounding with m
 * and v in 8 bits (dynamic code, re-quantized to nearest and stochastically), e4m3 beside them, and
 * bf16-master with 8-bit states (the usual 8-bit Adam); bf16-c8 with 8-bit states (7.03 bytes, no
 * stochastic rounding of θ); eco, plain bf16's bytes with θ's rounding error fed back into m, and with 8-bit
 * states (6.03 bytes). */
static const char FRONTIER[] = "bf16-master,bf16,bf16-sr,bf16-remainder,collage-light,collage-plus,"
                               "collage-light+m=int8,v=int8,collage-light+m=int8,v=int8,q=sr,"
                               "bf16-sr+m=int8,v=int8,bf16-sr+m=int8,v=int8,q=sr,bf16-remainder+m=int8,v=int8,"
                               "bf16-master+m=int8,v=int8,collage-light+m=e4m3,v=e4m3,bf16-c8+m=int8,v=int8,"
                               "bf16-c8+m=int8,v=int8,q=sr,eco,eco+m=int8,v=int8";

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
const char *cmp_file_name(collage_strategy s, char *buf, size_t cap) {
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

/* A train flag without a value, passed to every run. */
static int pass_bare(compare_opts *o, const char *flag) {
    for (int i = 0; i < o->n_bare; i++)
        if (!strcmp(o->bare[i], flag)) return 0;
    if (o->n_bare == MAX_BARE) {
        fprintf(stderr, "collage compare: %s: too many flags for train (at most %d without a value)\nhint: fewer flags\n", flag, MAX_BARE);
        return -1;
    }
    o->bare[o->n_bare++] = flag;
    return 0;
}

/* The flags that no run of the grid would read: an update rule's flag its optimizer does not read (train's
 * table), --beta2 with SGD, --loss-scale without an fp16 strategy. 0, or -1 after a message. */
static int unread_flags(compare_opts *o, int b2_given) {
    const char *opt = cmp_passed_value(o, "--optimizer");
    o->optimizer = COLLAGE_OPTIM_ADAMW;
    if (opt && cli_parse_optimizer("compare", "--optimizer", opt, &o->optimizer)) return -1;
    for (int i = 0; i < o->n_pass; i += 2)
        if (cli_refuse_unread("compare", o->pass[i], o->optimizer, NULL)) return -1;
    for (int i = 0; i < o->n_bare; i++)
        if (cli_refuse_unread("compare", o->bare[i], o->optimizer, NULL)) return -1;
    if (b2_given && cli_refuse_unread("compare", "--beta2", o->optimizer, NULL)) return -1;
    int fp16 = 0;
    for (int s = 0; s < o->n_strategies; s++) fp16 |= collage_strategy_is_fp16(o->strategies[s]);
    if (cmp_passed(o, "--loss-scale") && !fp16) {
        fprintf(stderr, "collage compare: --loss-scale: no strategy of --precision scales its loss (only the fp16 "
                        "strategies do: %s)\nhint: drop --loss-scale, or add an fp16 strategy to --precision; its runs take "
                        "it\n", cli_fp16_names());
        return -1;
    }
    return 0;
}

int cmp_parse_compare(int argc, char **argv, compare_opts *o) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (compare_opts){.seeds = 1, .steps = 1000, .out = "compare", .seed = 1337, .eval_every = -1};
    if (cpus < 1) cpus = 1;
    parse_strategies("fp32,bf16,collage-light,collage-plus,bf16-master", o);
    parse_beta2("0.95,0.999", o);
    int b2_given = 0, e4m3_all = 0;
    const char *computes = NULL, *recipes = NULL, *recipes4 = NULL;
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
                        !strcmp(a, "--seed") || !strcmp(a, "--out") || !strcmp(a, "--compute") || !strcmp(a, "--fp8-recipe") ||
                        !strcmp(a, "--fp4-recipe");
        const int kind = own ? 1 : !strcmp(a, "--report-only") ? 0 : cli_train_flag(a);
        if (kind < 0) return cli_unknown("compare", a);
        if (kind == 0) { /* --quiet, --overwrite: compare's children are quiet and write their own folders */
            if (!strcmp(a, "--fp8-e4m3-all")) e4m3_all = 1; /* the fp8 computes' */
            else if (!strcmp(a, "--report-only")) o->report_only = 1;
            else if (strcmp(a, "--quiet") && strcmp(a, "--overwrite") && pass_bare(o, a)) return -1;
            continue;
        }
        if (!v) return cli_needs_value("compare", a);
        if (!strcmp(a, "--out") || !strcmp(a, "--data") || !strcmp(a, "--init")) bad = cli_path("compare", a, v);
        else if (!v[0]) {
            fprintf(stderr, "collage compare: %s '': an empty value (an unset variable?)\nhint: collage compare --help\n", a);
            return -1;
        }
        if (bad) return -1;
        if (!strcmp(a, "--precision")) bad = parse_strategies(v, o);
        else if (!strcmp(a, "--beta2")) { bad = parse_beta2(v, o); b2_given = 1; }
        else if (!strcmp(a, "--seeds")) bad = cli_parse_range("compare", a, v, 1, MAX_SEEDS, &o->seeds);
        else if (!strcmp(a, "--steps")) bad = cli_parse_range("compare", a, v, 1, INT_MAX, &o->steps);
        else if (!strcmp(a, "--jobs")) bad = cli_parse_range("compare", a, v, 1, 1024, &o->jobs);
        else if (!strcmp(a, "--threads")) bad = cli_parse_threads("compare", v, &o->threads);
        else if (!strcmp(a, "--eval-every")) bad = cli_parse_range("compare", a, v, 1, INT_MAX, &o->eval_every);
        else if (!strcmp(a, "--seed")) { bad = cli_parse_size("compare", a, v, &z); o->seed = z; }
        else if (!strcmp(a, "--out")) o->out = v;
        else if (!strcmp(a, "--compute")) computes = v;
        else if (!strcmp(a, "--fp8-recipe")) recipes = v;
        else if (!strcmp(a, "--fp4-recipe")) recipes4 = v;
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
    if (o->report_only && (computes || recipes || recipes4)) {
        fprintf(stderr, "collage compare: --report-only makes one grid's report; %s asks for one grid per compute\nhint: "
                        "--report-only --out DIR/NAME for each compute's folder, or drop --report-only\n",
                computes ? "--compute" : recipes ? "--fp8-recipe" : "--fp4-recipe");
        return -1;
    }
    if ((computes || recipes || recipes4 || e4m3_all) && cmp_parse_computes(computes, recipes, recipes4, e4m3_all, o))
        return -1;
    if (unread_flags(o, b2_given)) return -1;
    /* Lion's β2 is its own (0.99); SGD reads none: one run per strategy and seed, no --beta2 passed */
    if (o->optimizer == COLLAGE_OPTIM_LION && !b2_given) parse_beta2("0.99", o);
    if (o->optimizer == COLLAGE_OPTIM_SGD) parse_beta2("0.95", o);
    if (o->jobs <= 0) o->jobs = (int)cpus;
    if (o->threads <= 0) o->threads = (int)cpus / o->jobs > 0 ? (int)cpus / o->jobs : 1;
    if (o->eval_every <= 0) o->eval_every = o->steps / 20 > 0 ? o->steps / 20 : 1;
    return 0;
}

/* The value of a train flag given to compare (the last one), NULL when not given; given flags take
 * precedence over compare's §6 defaults. */
const char *cmp_passed_value(const compare_opts *o, const char *flag) {
    const char *v = NULL;
    for (int i = 0; i < o->n_pass; i += 2)
        if (!strcmp(o->pass[i], flag)) v = o->pass[i + 1];
    return v;
}
int cmp_passed(const compare_opts *o, const char *flag) { return cmp_passed_value(o, flag) != NULL; }
