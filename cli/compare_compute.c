/* compare_compute.c — the compute axis of `collage compare`: the grid trained once per compute (bf16, and
 * fp8 with each scaling recipe of docs/numerics.md §13), each in --out/NAME with its own report, then one
 * report across them in --out: every strategy's gap to the reference strategy computing in bf16, paired by
 * seed, its EDQ ratio and lost-update fraction under each compute, results.csv with a compute column, and
 * compute.png. */
#include "compare.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

static const char *const RECIPES[] = {"delayed", "current", "block", "mxfp8"};
#define N_RECIPES (int)(sizeof RECIPES / sizeof *RECIPES)

/* The recipe named t (the table's own string), NULL when there is none. */
static const char *recipe_of(const char *t) {
    for (int r = 0; r < N_RECIPES; r++)
        if (!strcmp(t, RECIPES[r])) return RECIPES[r];
    return NULL;
}

/* An fp4 compute of the axis: fp4-RECIPE (its comma a dash in the name), --compute fp4 --fp4-recipe R. */
static int add_compute4(compare_opts *o, const char *recipe) {
    if (o->n_computes == MAX_COMPUTES) {
        fprintf(stderr, "collage compare: --compute: at most %d computes\nhint: fewer recipes\n", MAX_COMPUTES);
        return -1;
    }
    cmp_compute *c = &o->computes[o->n_computes++];
    *c = (cmp_compute){.flags = {"--compute", "fp4", "--fp4-recipe", recipe}, .n_flags = 4};
    snprintf(c->name, sizeof c->name, "fp4-%s", recipe);
    for (char *p = c->name; *p; p++) *p = *p == ',' ? '-' : *p;
    return 0;
}

/* The fp4 recipes of --fp4-recipe LIST ("all": the four recipes, cli.h CLI_FP4_ALL; a list separated by ';'
 * or spaces, as each recipe may hold a comma, or the single recipe) into out; their count, or -1 after a
 * message. */
static int parse_recipes4(const char *v, const char **out) {
    int n = 0;
    if (!strcmp(v, "all")) {
        for (int r = 0; r < CLI_FP4_ALL; r++) out[n++] = cli_fp4_recipes[r];
        return n;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    for (char *save = NULL, *t = strtok_r(buf, "; ", &save); t; t = strtok_r(NULL, "; ", &save)) {
        const char *r = NULL;
        for (int k = 0; k < CLI_FP4_RECIPES && !r; k++) r = strcmp(t, cli_fp4_recipes[k]) ? NULL : cli_fp4_recipes[k];
        for (int k = 0; k < n && r; k++)
            if (out[k] == r) r = NULL;
        if (!r) {
            fprintf(stderr, "collage compare: --fp4-recipe: '%s' is not a recipe or appears twice\nhint: nvfp4, "
                            "nvfp4,hadamard, mxfp4, mxfp4,hadamard, each optionally ,rn (separated by ';') or all\n", t);
            return -1;
        }
        out[n++] = r;
    }
    if (!n) fprintf(stderr, "collage compare: --fp4-recipe lists no recipe\nhint: e.g. --fp4-recipe 'nvfp4;mxfp4'\n");
    return n ? n : -1;
}

/* A compute of the axis: bf16 when recipe is NULL, else fp8 with that recipe. */
static int add_compute(compare_opts *o, const char *recipe, int e4m3_all) {
    if (o->n_computes == MAX_COMPUTES) {
        fprintf(stderr, "collage compare: --compute: at most %d computes\nhint: fewer recipes\n", MAX_COMPUTES);
        return -1;
    }
    cmp_compute *c = &o->computes[o->n_computes++];
    *c = (cmp_compute){.flags = {"--compute", recipe ? "fp8" : "bf16"}, .n_flags = 2};
    snprintf(c->name, sizeof c->name, "%s", recipe ? "fp8-" : "bf16");
    if (!recipe) return 0;
    c->flags[2] = "--fp8-recipe";
    c->flags[3] = recipe;
    c->n_flags = 4;
    c->e4m3_all = e4m3_all;
    snprintf(c->name + 4, sizeof c->name - 4, "%s%s", recipe, e4m3_all ? "-e4m3" : "");
    return 0;
}

/* The recipes of --fp8-recipe LIST ("all": every one) into out; their count, or -1 after a message. */
static int parse_recipes(const char *v, const char **out) {
    char buf[256];
    int n = 0;
    if (!strcmp(v, "all")) {
        for (int r = 0; r < N_RECIPES; r++) out[n++] = RECIPES[r];
        return n;
    }
    snprintf(buf, sizeof buf, "%s", v);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        const char *r = recipe_of(t);
        if (!r) {
            fprintf(stderr, "collage compare: --fp8-recipe: '%s' is not a recipe\nhint: delayed, current, block, mxfp8 "
                            "(comma-separated) or all\n", t);
            return -1;
        }
        for (int k = 0; k < n; k++)
            if (out[k] == r) { fprintf(stderr, "collage compare: --fp8-recipe: '%s' appears twice\nhint: name each once\n", t); return -1; }
        out[n++] = r;
    }
    if (!n) fprintf(stderr, "collage compare: --fp8-recipe lists no recipe\nhint: e.g. --fp8-recipe delayed,mxfp8\n");
    return n ? n : -1;
}

/* A strategy that fp8 compute cannot run (its weights are not bf16): named, -1. */
static int check_fp8_strategies(const compare_opts *o) {
    for (int i = 0; i < o->n_strategies; i++) {
        const collage_strategy s = o->strategies[i];
        if (!collage_strategy_is_fp32(s) && !collage_strategy_is_fp16(s)) continue;
        fprintf(stderr, "collage compare: --compute fp8 and fp4 run on bf16 weights: %s keeps %s ones\nhint: drop it from "
                        "--precision, or compare it with --compute bf16 alone\n", collage_strategy_name(s),
                collage_strategy_is_fp32(s) ? "fp32" : "fp16");
        return -1;
    }
    return 0;
}

int cmp_parse_computes(const char *computes, const char *recipes, const char *recipes4, int e4m3_all, compare_opts *o) {
    const char *rs[N_RECIPES] = {"delayed"}, *rs4[CLI_FP4_RECIPES] = {"nvfp4"};
    int nr = 1, nr4 = 1, fp8 = 0, fp4 = 0;
    char buf[256];
    if (!computes) {
        fprintf(stderr, "collage compare: %s without --compute\nhint: add --compute fp8 (or bf16,fp8)\n",
                recipes ? "--fp8-recipe" : recipes4 ? "--fp4-recipe" : "--fp8-e4m3-all");
        return -1;
    }
    if (recipes && (nr = parse_recipes(recipes, rs)) < 0) return -1;
    if (recipes4 && (nr4 = parse_recipes4(recipes4, rs4)) < 0) return -1;
    o->n_computes = 0;
    snprintf(buf, sizeof buf, "%s", computes);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        const int is_fp8 = !strcmp(t, "fp8"), is_bf16 = !strcmp(t, "bf16"), is_fp4 = !strcmp(t, "fp4");
        if ((!is_fp8 && !is_bf16 && !is_fp4) || (is_fp8 && fp8) || (is_fp4 && fp4)) {
            fprintf(stderr, "collage compare: --compute: '%s' %s\nhint: --compute bf16, fp8, fp4 or a list such as "
                            "bf16,fp8,fp4 (the recipes: --fp8-recipe, --fp4-recipe)\n", t,
                    is_fp8 || is_fp4 ? "appears twice" : "is not bf16, fp8 or fp4");
            return -1;
        }
        if (is_fp4) {
            fp4 = 1;
            for (int k = 0; k < nr4; k++)
                if (add_compute4(o, rs4[k])) return -1;
            continue;
        }
        for (int k = 0; k < o->n_computes && is_bf16; k++)
            if (!strcmp(o->computes[k].name, "bf16")) { fprintf(stderr, "collage compare: --compute: 'bf16' appears twice\nhint: name it once\n"); return -1; }
        fp8 |= is_fp8;
        for (int k = 0; k < (is_fp8 ? nr : 1); k++)
            if (add_compute(o, is_fp8 ? rs[k] : NULL, e4m3_all)) return -1;
    }
    if (!o->n_computes) { fprintf(stderr, "collage compare: --compute lists nothing\nhint: e.g. --compute bf16,fp8\n"); return -1; }
    if (!fp8 && (recipes || e4m3_all)) {
        fprintf(stderr, "collage compare: %s without fp8 in --compute\nhint: --compute bf16,fp8\n", recipes ? "--fp8-recipe" : "--fp8-e4m3-all");
        return -1;
    }
    if (!fp4 && recipes4) {
        fprintf(stderr, "collage compare: --fp4-recipe without fp4 in --compute\nhint: --compute bf16,fp4\n");
        return -1;
    }
    return fp8 || fp4 ? check_fp8_strategies(o) : 0;
}

/* ------------------------------------------------------------------ across the computes */
typedef struct { run_t *runs; int n; } grid_t;

/* The compute the others are judged against: bf16 when it ran, else the first. */
static int reference_compute(const compare_opts *o) {
    for (int a = 0; a < o->n_computes; a++)
        if (!strcmp(o->computes[a].name, "bf16")) return a;
    return 0;
}

/* The gap of strategy s under compute a to the reference strategy under the reference compute at β2. */
static stat_t gap(const compare_opts *o, const grid_t *g, int a, collage_strategy s, double b2) {
    const int r = reference_compute(o);
    return cmp_paired_diff_across(g[a].runs, g[a].n, s, g[r].runs, g[r].n, cmp_reference(o), b2);
}

/* Whether that gap is within the noise (compare's rule: within twice its standard error, at least
 * MATCH_FLOOR; with one seed REF_NOISE) or below zero. The reference itself under the reference compute
 * matches by definition. */
static int matches(const compare_opts *o, const grid_t *g, int a, collage_strategy s, double b2) {
    if (a == reference_compute(o) && s == cmp_reference(o)) return 1;
    stat_t d = gap(o, g, a, s, b2);
    if (!d.n) return 0;
    double noise = o->seeds > 1 ? fmax(2 * d.sd / sqrt((double)d.n), MATCH_FLOOR) : REF_NOISE;
    return fabs(d.mean) <= noise || d.mean < 0;
}

/* Per β2: the gap of every strategy under every compute, then its EDQ ratio and lost-update fraction. */
static void across_tables(sbuf *b, const compare_opts *o, const grid_t *g, double b2) {
    const int rc = reference_compute(o);
    char cell[128];
    for (int t = 0; t < 2; t++) {
        cmp_sb_printf(b, t == 0 ? "**β2 = %g: Δ val** (mean ± sd over seeds; **bold**: worse than the reference beyond the noise)\n\n"
                                : "**β2 = %g: EDQ ratio / lost updates**\n\n", b2);
        cmp_sb_printf(b, "| strategy |%s", t == 0 ? " bytes/param |" : "");
        for (int a = 0; a < o->n_computes; a++) cmp_sb_printf(b, " %s |", o->computes[a].name);
        cmp_sb_printf(b, "\n|---|%s", t == 0 ? "---|" : "");
        for (int a = 0; a < o->n_computes; a++) cmp_sb_printf(b, "---|");
        cmp_sb_printf(b, "\n");
        for (int i = 0; i < o->n_strategies; i++) {
            const collage_strategy s = o->strategies[i];
            cmp_sb_printf(b, "| `%s` |", collage_strategy_name(s));
            if (t == 0) {
                cmp_sb_printf(b, " %.4g |", cmp_stat_of(g[rc].runs, g[rc].n, s, b2, offsetof(run_t, bpp)).mean);
            }
            for (int a = 0; a < o->n_computes; a++) {
                const run_t *runs = g[a].runs;
                const int nruns = g[a].n;
                if (t == 1) {
                    char lost[64];
                    cmp_fmt_stat(cell, sizeof cell, STAT(edq_ratio), "%.4f", 1);
                    cmp_fmt_stat(lost, sizeof lost, STAT(lost), "%.1f%%", 100);
                    cmp_sb_printf(b, " %s / %s |", cell, lost);
                } else if (a == rc && s == cmp_reference(o)) {
                    cmp_fmt_stat(cell, sizeof cell, STAT(val_loss), "%.4f", 1);
                    cmp_sb_printf(b, " %s (reference) |", cell);
                } else {
                    cmp_fmt_stat(cell, sizeof cell, gap(o, g, a, s, b2), "%+.4f", 1);
                    const int bold = !matches(o, g, a, s, b2) && strcmp(cell, "—");
                    cmp_sb_printf(b, " %s%s%s |", bold ? "**" : "", cell, bold ? "**" : "");
                }
            }
            cmp_sb_printf(b, "\n");
        }
        cmp_sb_printf(b, "\n");
    }
}

/* The answer, per compute: the strategies that match the reference at every β2, and what the compute
 * itself costs each strategy (its gap under that compute minus its gap under the reference compute). */
static void across_answer(sbuf *b, const compare_opts *o, const grid_t *g) {
    const int rc = reference_compute(o);
    cmp_sb_printf(b, "## Which strategies match %s with %s compute\n\n", collage_strategy_name(cmp_reference(o)), o->computes[rc].name);
    for (int a = 0; a < o->n_computes; a++) {
        int k = 0;
        cmp_sb_printf(b, "- **%s**: ", o->computes[a].name);
        for (int i = 0; i < o->n_strategies; i++) {
            const collage_strategy s = o->strategies[i];
            int all = 1;
            for (int j = 0; j < o->n_beta2 && all; j++) all = matches(o, g, a, s, o->beta2[j]);
            if (all) cmp_sb_printf(b, "%s%s", k++ ? ", " : "", collage_strategy_name(s));
        }
        cmp_sb_printf(b, "%s match at every β2", k ? "" : "none");
        if (a != rc) {
            cmp_sb_printf(b, "; the compute's own cost, each strategy's Δ under %s minus its Δ under %s (mean over β2 and seeds):",
                          o->computes[a].name, o->computes[rc].name);
            for (int i = 0; i < o->n_strategies; i++) {
                const collage_strategy s = o->strategies[i];
                double sum = 0;
                int n = 0;
                for (int j = 0; j < o->n_beta2; j++) {
                    stat_t d = cmp_paired_diff_across(g[a].runs, g[a].n, s, g[rc].runs, g[rc].n, s, o->beta2[j]);
                    if (d.n) { sum += d.mean; n++; }
                }
                if (n) cmp_sb_printf(b, " %s %+.4f%s", collage_strategy_name(s), sum / n, i + 1 < o->n_strategies ? "," : "");
            }
            cmp_sb_printf(b, "; against %s under %s itself, paired by seed:", collage_strategy_name(cmp_reference(o)), o->computes[a].name);
            for (int j = 0; j < o->n_beta2; j++)
                for (int i = 0; i < o->n_strategies; i++) {
                    const collage_strategy s = o->strategies[i];
                    stat_t d = cmp_paired_diff(g[a].runs, g[a].n, s, cmp_reference(o), o->beta2[j]);
                    if (s == cmp_reference(o) || !d.n) continue;
                    cmp_sb_printf(b, " %s %+.4f ± %.4f (β2 %g)%s", collage_strategy_name(s), d.mean, d.n > 1 ? d.sd : 0.0, o->beta2[j],
                                  j + 1 < o->n_beta2 || i + 1 < o->n_strategies ? "," : "");
                }
        }
        cmp_sb_printf(b, ".\n");
    }
    cmp_sb_printf(b, "\n");
}

/* compute.png: per β2, each strategy's gap to the reference (mean ± sd over seeds) against the compute. */
static int across_plot(const compare_opts *o, const grid_t *g) {
    sbuf p = {malloc(4096), 0, 4096};
    char b2s[32];
    if (!p.p) return -1;
    cmp_sb_printf(&p, "# gnuplot script written by collage compare; run `gnuplot compute.gp` in this folder to redraw.\nset grid\n"
                  "set terminal pngcairo size 900,%d font ',10'\nset output 'compute.png'\nset multiplot layout %d,1\nset xtics (",
                  380 * o->n_beta2, o->n_beta2);
    for (int a = 0; a < o->n_computes; a++) cmp_sb_printf(&p, "%s'%s' %d", a ? ", " : "", o->computes[a].name, a);
    cmp_sb_printf(&p, ")\nset xrange [-0.5:%g]\nset ylabel 'val loss - %s (bf16 compute)'\nset key outside right\n",
                  o->n_computes - 0.5, collage_strategy_name(cmp_reference(o)));
    for (int j = 0; j < o->n_beta2; j++) {
        cmp_sb_printf(&p, "set title 'beta2 = %s'\nplot ", cmp_b2str(o->beta2[j], b2s));
        for (int i = 0; i < o->n_strategies; i++)
            cmp_sb_printf(&p, "%s'-' using 1:2:3 with yerrorlines lw 2 title '%s'", i ? ", " : "", collage_strategy_name(o->strategies[i]));
        cmp_sb_printf(&p, "\n");
        for (int i = 0; i < o->n_strategies; i++) {
            for (int a = 0; a < o->n_computes; a++) {
                const int ref = a == reference_compute(o) && o->strategies[i] == cmp_reference(o);
                stat_t d = gap(o, g, a, o->strategies[i], o->beta2[j]);
                if (ref) cmp_sb_printf(&p, "%g 0 0\n", a + 0.04 * (i - o->n_strategies / 2));
                else if (d.n) cmp_sb_printf(&p, "%g %.6f %.6f\n", a + 0.04 * (i - o->n_strategies / 2), d.mean, d.n > 1 ? d.sd : 0.0);
            }
            cmp_sb_printf(&p, "e\n");
        }
    }
    cmp_sb_printf(&p, "unset multiplot\n");
    const int rc = cmp_gnuplot(o, "compute", p.p);
    free(p.p);
    return rc;
}

/* report.md and results.csv across the computes, in --out. */
static int write_across(const compare_opts *o, const grid_t *g, const char *cmdline) {
    sbuf b = {malloc(4096), 0, 4096}, csv = {malloc(4096), 0, 4096};
    char date[64], path[4200], lead[40];
    time_t now = time(NULL);
    if (!b.p || !csv.p) { free(b.p); free(csv.p); return 1; }
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    const int plots_ok = across_plot(o, g) == 0;
    cmp_sb_printf(&b, "# collage compare across computes: report\n\nMade %s by `%s` (collage %s). The grid — %d strategies × %d "
                  "values of β2 × %d seed%s, %d steps each — trained once per compute: ", date, cmdline, collage_version(),
                  o->n_strategies, o->n_beta2, o->seeds, o->seeds > 1 ? "s" : "", o->steps);
    for (int a = 0; a < o->n_computes; a++)
        cmp_sb_printf(&b, "%s[%s](%s/report.md)", a ? ", " : "", o->computes[a].name, o->computes[a].name);
    cmp_sb_printf(&b, " (each with its own report, runs and plots). bf16: every matrix product on bf16 operands, fp32 sums; "
                  "fp8-RECIPE: the operands quantized to fp8 with that scaling recipe (docs/numerics.md §13: e4m3 forward, the "
                  "incoming gradient in e5m2 backward; -e4m3: in e4m3 too), fp32 sums; fp4-RECIPE: the operands quantized to "
                  "E2M1 in blocks with that recipe's scales (docs/numerics.md §15: nvfp4, 16-element blocks with E4M3 scales; "
                  "mxfp4, 32-element blocks with E8M0 scales; -hadamard: the 16×16 random Hadamard transform on the weight "
                  "gradient's inputs; the gradients rounded stochastically, -rn: to nearest), fp32 sums. Runs of one seed start from the same "
                  "weights and see the same batches under every compute. Δ val: a run's final validation loss minus %s's with "
                  "%s compute in the run of the same seed and β2.\n\n", collage_strategy_name(cmp_reference(o)),
                  o->computes[reference_compute(o)].name);
    for (int j = 0; j < o->n_beta2; j++) across_tables(&b, o, g, o->beta2[j]);
    across_answer(&b, o, g);
    if (plots_ok) cmp_sb_printf(&b, "![the gap to the reference under each compute](compute.png)\n");
    cmp_sb_printf(&csv, "compute,%s\n", CMP_CSV_HEADER);
    for (int a = 0; a < o->n_computes; a++) {
        snprintf(lead, sizeof lead, "%s,", o->computes[a].name);
        cmp_csv_lines(&csv, o, g[a].runs, g[a].n, lead);
    }
    snprintf(path, sizeof path, "%s/report.md", o->out);
    int rc = cmp_write_text(path, b.p);
    snprintf(path, sizeof path, "%s/results.csv", o->out);
    rc |= cmp_write_text(path, csv.p);
    free(b.p);
    free(csv.p);
    if (!rc) printf("wrote %s/report.md, %s/results.csv%s across the computes\n", o->out, o->out, plots_ok ? " and compute.png" : "");
    return rc ? 1 : 0;
}

int cmp_compare_computes(const compare_opts *o, const char *cmdline) {
    grid_t g[MAX_COMPUTES] = {{0}};
    static char outs[MAX_COMPUTES][1100];
    int rc = 0;
    for (int a = 0; a < o->n_computes && !rc; a++) {
        const cmp_compute *c = &o->computes[a];
        compare_opts oa = *o;
        oa.n_computes = 0;
        snprintf(outs[a], sizeof outs[a], "%s/%s", o->out, c->name);
        oa.out = outs[a];
        if (oa.n_pass + c->n_flags > MAX_PASS || oa.n_bare + c->e4m3_all > MAX_BARE) {
            fprintf(stderr, "collage compare: too many flags for train\nhint: fewer flags\n");
            return 2;
        }
        for (int k = 0; k < c->n_flags; k++) oa.pass[oa.n_pass++] = c->flags[k];
        if (c->e4m3_all) oa.bare[oa.n_bare++] = "--fp8-e4m3-all";
        printf("collage compare: compute %s (%d of %d)\n", c->name, a + 1, o->n_computes);
        rc = cmp_run_grid(&oa, cmdline, &g[a].runs, &g[a].n);
    }
    if (!rc) rc = write_across(o, g, cmdline);
    for (int a = 0; a < o->n_computes; a++) free(g[a].runs);
    return rc;
}
