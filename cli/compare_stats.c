/* compare_stats.c — the statistics of `collage compare`: means and spreads over seeds, paired differences
 * against the reference strategy, which strategies match it, the Pareto set of bytes against the gap, and
 * the correlations of the EDQ paragraph. */
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

/* Mean and sample standard deviation of the finite values added (NAN for both when there is none). */
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
stat_t cmp_stat_of(const run_t *runs, int nruns, collage_strategy s, double b2, size_t off) {
    stat_t st = {0};
    for (int i = 0; i < nruns; i++)
        if (runs[i].strategy == s && runs[i].beta2 == b2 && runs[i].done)
            stat_add(&st, *(const double *)((const char *)&runs[i] + off));
    return stat_done(st);
}


void cmp_fmt_stat(char *out, size_t cap, stat_t st, const char *fmt, double scale) {
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
collage_strategy cmp_reference(const compare_opts *o) {
    return has(o, COLLAGE_BF16_MASTER) ? COLLAGE_BF16_MASTER : has(o, COLLAGE_FP32) ? COLLAGE_FP32 : o->strategies[0];
}

/* Paired difference of the final validation loss, s minus the reference, over the seeds where both
 * finished: runs of one seed share weights and batches, so the pair removes most of the seed noise. */
stat_t cmp_paired_diff(const run_t *runs, int nruns, collage_strategy s, collage_strategy ref, double b2) {
    return cmp_paired_diff_across(runs, nruns, s, runs, nruns, ref, b2);
}

/* The same pairing when s's runs and the reference's are two grids (two computes of one comparison). */
stat_t cmp_paired_diff_across(const run_t *runs, int nruns, collage_strategy s, const run_t *refs, int nrefs,
                              collage_strategy ref, double b2) {
    stat_t st = {0};
    for (int i = 0; i < nruns; i++) {
        const run_t *a = &runs[i];
        if (a->strategy != s || a->beta2 != b2 || !a->done) continue;
        for (int j = 0; j < nrefs; j++) {
            const run_t *r = &refs[j];
            if (r->strategy == ref && r->beta2 == b2 && r->seed_index == a->seed_index && r->done) stat_add(&st, a->val_loss - r->val_loss);
        }
    }
    return stat_done(st);
}
/* ------------------------------------------------------------------ the frontier */
/* Whether s's gap to the reference at β2 is within the noise the paragraphs use (paired by seed). */
int cmp_matches(const compare_opts *o, const run_t *runs, int nruns, collage_strategy s, double b2) {
    const collage_strategy ref = cmp_reference(o);
    if (s == ref) return 1;
    stat_t d = cmp_paired_diff(runs, nruns, s, ref, b2);
    if (!d.n) return 0;
    double noise = o->seeds > 1 ? fmax(2 * d.sd / sqrt((double)d.n), MATCH_FLOOR) : REF_NOISE;
    return fabs(d.mean) <= noise || d.mean < 0;
}

/* The Pareto set at β2: strategies that no other beats on both bytes per parameter and the mean gap
 * to the reference (fewer or equal bytes and a smaller gap, one of them strictly). pareto[i] for
 * o->strategies[i]; returns how many. */
int cmp_pareto_set(const compare_opts *o, const run_t *runs, int nruns, double b2, int *pareto) {
    const collage_strategy ref = cmp_reference(o);
    double bytes[MAX_STRATEGIES], gap[MAX_STRATEGIES];
    int have[MAX_STRATEGIES], k = 0;
    for (int i = 0; i < o->n_strategies; i++) {
        const collage_strategy s = o->strategies[i];
        stat_t bpp = cmp_stat_of(runs, nruns, s, b2, offsetof(run_t, bpp)), d = cmp_paired_diff(runs, nruns, s, ref, b2);
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
/* Pearson's r of (x, y) over n pairs; NAN for fewer than 3 or no spread. */
double cmp_pearson(const double *x, const double *y, int n) {
    if (n < 3) return (double)NAN;
    double mx = 0, my = 0, sxx = 0, syy = 0, sxy = 0;
    for (int i = 0; i < n; i++) { mx += x[i]; my += y[i]; }
    mx /= n; my /= n;
    for (int i = 0; i < n; i++) { sxx += (x[i] - mx) * (x[i] - mx); syy += (y[i] - my) * (y[i] - my); sxy += (x[i] - mx) * (y[i] - my); }
    return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : (double)NAN;
}
/* Ranks (1-based, ties averaged) of x[0, n). */
void cmp_ranks(const double *x, int n, double *r) {
    for (int i = 0; i < n; i++) {
        int below = 0, same = 0;
        for (int j = 0; j < n; j++) { below += x[j] < x[i]; same += x[j] == x[i]; }
        r[i] = below + (same + 1) / 2.0;
    }
}
