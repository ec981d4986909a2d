/* compare_report.c — the report of `collage compare`: report.md (a paragraph per β2, the β2 and frontier
 * paragraphs, the EDQ paragraph, the table) and results.csv, each written to a temporary name, then renamed. */
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
#include <time.h>
#include <unistd.h>

/* Text appended to a growing buffer. */
__attribute__((format(printf, 2, 3))) void cmp_sb_printf(sbuf *b, const char *fmt, ...) {
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
/* One paragraph per β2: every strategy's final validation loss against the reference, as a paired
 * difference judged against its spread over seeds (MATCH_FLOOR below which a difference is a match). */
static void paragraph(sbuf *b, const compare_opts *o, const run_t *runs, int nruns, double b2) {
    collage_strategy ref = cmp_reference(o), s = ref;
    stat_t r = STAT(val_loss);
    if (!r.n) { cmp_sb_printf(b, "No finished run of %s at β2 = %g to compare against.\n\n", collage_strategy_name(ref), b2); return; }
    cmp_sb_printf(b, "At β2 = %g the reference, %s, ends at a validation loss of %.4f. ", b2, collage_strategy_name(ref), r.mean);
    if (o->seeds > 1)
        cmp_sb_printf(b, "Each difference below is paired by seed; it counts when it exceeds both twice its standard error over "
                     "the %d seeds and %.3f. ", o->seeds, MATCH_FLOOR);
    else
        cmp_sb_printf(b, "With one seed the noise is not measured: a difference below %.2f is called a match (rerun with "
                     "--seeds 3 to measure it). ", REF_NOISE);
    for (int i = 0; i < o->n_strategies; i++) {
        s = o->strategies[i];
        if (s == ref) continue;
        stat_t d = cmp_paired_diff(runs, nruns, s, ref, b2), lost = STAT(lost), e = STAT(edq_ratio), bpp = STAT(bpp);
        if (!d.n) continue;
        double noise = o->seeds > 1 ? fmax(2 * d.sd / sqrt((double)d.n), MATCH_FLOOR) : REF_NOISE;
        const char *verdict = fabs(d.mean) <= noise ? "matches it" : d.mean > 0 ? "ends worse" : "ends better";
        cmp_sb_printf(b, "**%s** %s (%+.4f", collage_strategy_name(s), verdict, d.mean);
        if (d.n > 1) cmp_sb_printf(b, " ± %.4f", d.sd);
        cmp_sb_printf(b, ") at %.4g bytes per parameter", bpp.mean);
        if (isfinite(lost.mean) && lost.mean > 0.001) {
            const char *kept = collage_strategy_get(s)->keeps_update_in; /* NULL: the update is lost */
            if (kept) cmp_sb_printf(b, "; its bf16 weights stayed put on %.1f%% of nonzero updates, which %s carried instead", 100 * lost.mean, kept);
            else cmp_sb_printf(b, "; %.1f%% of its nonzero weight updates were lost to rounding (EDQ ratio %.3f)", 100 * lost.mean, e.mean);
        }
        cmp_sb_printf(b, ". ");
    }
    cmp_sb_printf(b, "\n\n");
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
    collage_strategy ref = cmp_reference(o);
    stat_t rl = cmp_paired_diff(runs, nruns, ref, ref, lo); /* n only: is the reference there at both */
    stat_t rh = cmp_paired_diff(runs, nruns, ref, ref, hi);
    if (!rl.n || !rh.n) return;
    cmp_sb_printf(b, "## From β2 = %g to β2 = %g\n\nThe change of each strategy's gap to %s (its Δ val at β2 = %g minus its Δ val at "
                 "β2 = %g; positive: it falls further behind as β2 grows): ", lo, hi, collage_strategy_name(ref), hi, lo);
    double least_plain = (double)INFINITY, most_other = -(double)INFINITY;
    int first = 1;
    for (int i = 0; i < o->n_strategies; i++) {
        collage_strategy s = o->strategies[i];
        if (s == ref) continue;
        stat_t a = cmp_paired_diff(runs, nruns, s, ref, lo), c = cmp_paired_diff(runs, nruns, s, ref, hi);
        if (!a.n || !c.n) continue;
        double g = c.mean - a.mean;
        cmp_sb_printf(b, "%s%s %+.4f", first ? "" : ", ", collage_strategy_name(s), g);
        first = 0;
        if (plain_bf16_v(s)) least_plain = fmin(least_plain, g);
        else most_other = fmax(most_other, g);
    }
    char plain[512];
    plain_bf16_v_list(plain, sizeof plain);
    cmp_sb_printf(b, ". A second moment stored as one bf16 word (%s) cannot "
                 "decay at β2 = 0.999, because 1 − β2 is below half an ulp of 1, so those strategies are expected to fall "
                 "behind as β2 approaches 1; collage-plus keeps v as two words and the fp32 strategies keep it in fp32. ", plain);
    if (isfinite(least_plain) && isfinite(most_other))
        cmp_sb_printf(b, "Here the smallest move among the plain-bf16-v strategies is %+.4f and the largest among the others %+.4f: %s\n\n",
                  least_plain, most_other,
                  least_plain > most_other + (o->seeds > 1 ? MATCH_FLOOR : REF_NOISE) ? "every one of them fell further behind than any other, as expected."
                                                                                     : "the runs do not separate the two groups beyond the noise.");
    else cmp_sb_printf(b, "\n\n");
}

/* Whether the runs are masked-LM runs (their summaries have a masked-token accuracy): their losses are
 * over the masked tokens, which the report and the plots say. */
int cmp_runs_mlm(const run_t *runs, int nruns) {
    for (int i = 0; i < nruns; i++)
        if (runs[i].done && isfinite(runs[i].val_acc)) return 1;
    return 0;
}
/* The frontier: per β2 the Pareto set of bytes against the gap, then the fewest bytes at which a
 * strategy matches the reference at every β2 (the question the frontier answers). */
static void frontier_paragraph(sbuf *b, const compare_opts *o, const run_t *runs, int nruns, int plots_ok) {
    const collage_strategy ref = cmp_reference(o);
    cmp_sb_printf(b, "## The frontier: bytes against quality\n\nFor each β2, the Pareto set: the strategies that no other beats on "
                 "both training-state bytes per parameter (gradient included) and the mean validation-loss gap to %s "
                 "(paired by seed; ± its spread over seeds).\n\n", collage_strategy_name(ref));
    for (int j = 0; j < o->n_beta2; j++) {
        int pareto[MAX_STRATEGIES];
        if (!cmp_pareto_set(o, runs, nruns, o->beta2[j], pareto)) continue;
        cmp_sb_printf(b, "- β2 = %g:", o->beta2[j]);
        int first = 1;
        for (int i = 0; i < o->n_strategies; i++) { /* in order of bytes */
            int best = -1;
            double bb = (double)INFINITY;
            for (int k = 0; k < o->n_strategies; k++) {
                if (!pareto[k]) continue;
                double x = cmp_stat_of(runs, nruns, o->strategies[k], o->beta2[j], offsetof(run_t, bpp)).mean;
                if (x < bb) { bb = x; best = k; }
            }
            if (best < 0) break;
            pareto[best] = 0;
            const collage_strategy s = o->strategies[best];
            stat_t d = cmp_paired_diff(runs, nruns, s, ref, o->beta2[j]);
            cmp_sb_printf(b, "%s **%s** (%.4g B", first ? "" : ",", collage_strategy_name(s), bb);
            if (s == ref) cmp_sb_printf(b, ", the reference)");
            else if (d.n > 1) cmp_sb_printf(b, ", %+.4f ± %.4f)", d.mean, d.sd);
            else cmp_sb_printf(b, ", %+.4f)", d.mean);
            first = 0;
            (void)i;
        }
        cmp_sb_printf(b, "\n");
    }
    /* the fewest bytes that match at every β2 */
    int best = -1;
    double bb = (double)INFINITY;
    for (int i = 0; i < o->n_strategies; i++) {
        const collage_strategy s = o->strategies[i];
        int all = 1;
        double x = 0;
        for (int j = 0; j < o->n_beta2 && all; j++) {
            all = cmp_matches(o, runs, nruns, s, o->beta2[j]);
            x = cmp_stat_of(runs, nruns, s, o->beta2[j], offsetof(run_t, bpp)).mean;
        }
        if (all && x < bb) { bb = x; best = i; }
    }
    cmp_sb_printf(b, "\nA strategy matches %s when its gap is within the noise of the paragraphs above (or below zero). ",
              collage_strategy_name(ref));
    if (best >= 0)
        cmp_sb_printf(b, "The fewest bytes that match it at every β2 tried: **%s**, %.4g bytes per parameter", 
                  collage_strategy_name(o->strategies[best]), bb);
    else cmp_sb_printf(b, "No strategy but the reference matches it at every β2 tried");
    /* the question of the frontier: which strategies of at most 8 bytes (8.03 with two 8-bit states'
     * block scales) match the reference at every β2, by name */
    int cheap = 0;
    cmp_sb_printf(b, ". At 8 bytes per parameter or less (8.03 where both moments are 8-bit: each adds 4 bytes of scale per "
                 "%d elements), the strategies that match it at every β2: ", COLLAGE_QBLOCK);
    for (int i = 0; i < o->n_strategies; i++) {
        const collage_strategy s = o->strategies[i];
        int all = 1;
        for (int j = 0; j < o->n_beta2 && all; j++) all = cmp_matches(o, runs, nruns, s, o->beta2[j]);
        double x = cmp_stat_of(runs, nruns, s, o->beta2[0], offsetof(run_t, bpp)).mean;
        if (!all || s == ref || !(x <= 8.0 + 8.0 / COLLAGE_QBLOCK + 1e-9)) continue;
        cmp_sb_printf(b, "%s**%s** (%.4g B)", cheap++ ? ", " : "", collage_strategy_name(s), x);
    }
    cmp_sb_printf(b, "%s.\n\n", cheap ? "" : "none");
    if (plots_ok) cmp_sb_printf(b, "![bytes against the gap](frontier.png)\n\n");
}
/* The paper's open question: does EDQ predict the loss? Over every finished run but the reference's,
 * the correlation of its mean EDQ ratio (and lost fraction) with its validation-loss gap to the
 * reference in the run of the same seed and β2; then, over strategies, the rank correlation of the
 * mean EDQ ratio with the mean gap. */
static void edq_paragraph(sbuf *b, const compare_opts *o, const run_t *runs, int nruns) {
    const collage_strategy ref = cmp_reference(o);
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
    const double re = cmp_pearson(e, g, n), rl = cmp_pearson(l, g, n);
    /* per (strategy, β2): mean EDQ ratio and mean gap, ranked */
    double *me = g + nruns, *mg = me + MAX_STRATEGIES * MAX_BETA2, *ra = mg + MAX_STRATEGIES * MAX_BETA2;
    double *rb = ra + MAX_STRATEGIES * MAX_BETA2;
    int m = 0;
    for (int j = 0; j < o->n_beta2; j++)
        for (int i = 0; i < o->n_strategies; i++) {
            const collage_strategy s = o->strategies[i];
            if (s == ref) continue;
            stat_t x = cmp_stat_of(runs, nruns, s, o->beta2[j], offsetof(run_t, edq_ratio)), d = cmp_paired_diff(runs, nruns, s, ref, o->beta2[j]);
            if (!x.n || !d.n) continue;
            me[m] = x.mean; mg[m] = d.mean; m++;
        }
    cmp_ranks(me, m, ra);
    cmp_ranks(mg, m, rb);
    const double rho = cmp_pearson(ra, rb, m);
    cmp_sb_printf(b, "## Does EDQ predict the loss?\n\nOver the %d runs of the comparison other than %s's, each paired with the "
                 "reference's run of the same seed and β2: the correlation of a run's mean EDQ ratio with its validation-loss gap "
                 "is r = %.2f, and of its lost-update fraction with the gap r = %.2f (Pearson). Over the %d (strategy, β2) means, "
                 "the rank correlation of the EDQ ratio with the gap is ρ = %.2f (Spearman; a higher EDQ ratio should mean a "
                 "smaller gap: ρ near −1). ", n, collage_strategy_name(ref), re, rl, m, rho);
    if (!isfinite(rho)) cmp_sb_printf(b, "Too few runs to say whether EDQ predicted the ranking.\n\n");
    else if (rho <= -0.7) cmp_sb_printf(b, "EDQ predicted the ranking of the strategies.\n\n");
    else if (rho <= -0.4) cmp_sb_printf(b, "EDQ predicted the ranking only in part.\n\n");
    else cmp_sb_printf(b, "EDQ did not predict the ranking of the strategies here (by its definition it sees how much of each "
                      "intended update reaches θ, not how precisely the moments that shape the update are kept).\n\n");
    free(e);
}

/* --report-only's opening: what the report covers, then --out/about.md as it is, where the maker of the
 * runs (python -m collage.compare) says how they were trained. */
static void header_report_only(sbuf *b, const compare_opts *o, const run_t *runs, int nruns, const char *cmdline,
                               const char *date) {
    int done = 0;
    for (int i = 0; i < nruns; i++) done += runs[i].done;
    cmp_sb_printf(b, "# collage compare: report\n\nMade %s by `%s` (collage %s) from the finished runs in `runs/`: %d of the "
                  "grid's %d (%d strategies × %d values of β2 × %d seed%s, %d steps each).\n\n", date, cmdline, collage_version(),
                  done, nruns, o->n_strategies, o->n_beta2, o->seeds, o->seeds > 1 ? "s" : "", o->steps);
    char path[4200];
    snprintf(path, sizeof path, "%s/about.md", o->out);
    FILE *f = fopen(path, "r");
    if (!f) return;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf - 1, f)) > 0) { buf[n] = 0; cmp_sb_printf(b, "%s", buf); }
    fclose(f);
    cmp_sb_printf(b, "\n");
}

int cmp_write_report(const compare_opts *o, const run_t *runs, int nruns, const char *cmdline, int plots_ok) {
    sbuf b = {malloc(4096), 0, 4096};
    if (!b.p) return -1;
    time_t now = time(NULL);
    char date[64];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    if (o->report_only) header_report_only(&b, o, runs, nruns, cmdline, date);
    else
        cmp_sb_printf(&b, "# collage compare: report\n\nMade %s by `%s` (collage %s). %d runs: %d strategies × %d values of β2 × %d "
                      "seed%s, %d steps each; every run starts from the same weights and sees the same batches (seed k trains "
                      "with --seed %llu+k), so the runs of one seed differ only in precision. Each run's own files, including "
                      "the exact `collage train` command (args.txt), are in `runs/`.\n\n",
                  date, cmdline, collage_version(), nruns, o->n_strategies, o->n_beta2, o->seeds, o->seeds > 1 ? "s" : "",
                  o->steps, (unsigned long long)o->seed);
    cmp_sb_printf(&b, "Columns: validation loss at the last step (8 held-out batches, the same for every run); train loss as the mean "
                  "of the last 5%% of steps; EDQ ratio ⟨Δ_eff, Δ⟩/‖Δ‖² averaged over steps (1 = every update applied in full); "
                  "lost = the fraction of nonzero intended updates that left the stored bf16 weight unchanged (a compensated "
                  "strategy keeps them in its compensation, master or remainder); Δ val = the validation loss minus the "
                  "reference's in the run of the same seed; bytes of training "
                  "state per parameter; tokens/s of one run (%s%d thread%s each). Values are mean ± standard "
                  "deviation over seeds when there is more than one.\n\n", o->report_only ? "" : "runs go side by side, ",
                  o->threads, o->threads > 1 ? "s" : "");
    const char *opt = cmp_passed_value(o, "--optimizer");
    if (opt && strcmp(opt, "adamw"))
        cmp_sb_printf(&b, "The optimizer is %s (`--optimizer %s`, docs/numerics.md §14)%s.\n\n", opt, opt,
                      strcmp(opt, "sgd") ? "" : ": it has no β2, so the β2 below is a label only");
    const int mlm = cmp_runs_mlm(runs, nruns); /* their validation's masked-token accuracy gets a column */
    if (mlm) cmp_sb_printf(&b, "The model is trained by masked language modelling: its losses are over the masked tokens, and "
                           "val acc is the fraction of the validation's masked tokens (a fixed mask, the same for every run) "
                           "whose most probable prediction is the original token.\n\n");
    for (int j = 0; j < o->n_beta2; j++) {
        double b2 = o->beta2[j];
        cmp_sb_printf(&b, "## β2 = %g\n\n| strategy | val loss | %sΔ val vs %s | train loss | EDQ ratio | lost | bytes/param | tokens/s | "
                      "peak MiB |\n|---|---|%s---|---|---|---|---|---|---|\n", b2, mlm ? "val acc | " : "",
                  collage_strategy_name(cmp_reference(o)), mlm ? "---|" : "");
        for (int i = 0; i < o->n_strategies; i++) {
            collage_strategy s = o->strategies[i];
            char c[9][96];
            cmp_fmt_stat(c[0], 96, STAT(val_loss), "%.4f", 1);
            cmp_fmt_stat(c[8], 96, STAT(val_acc), "%.2f%%", 100);
            if (mlm) snprintf(c[0] + strlen(c[0]), 96 - strlen(c[0]), " | %s", c[8]);
            if (s == cmp_reference(o)) snprintf(c[7], 96, "(reference)");
            else cmp_fmt_stat(c[7], 96, cmp_paired_diff(runs, nruns, s, cmp_reference(o), b2), "%+.4f", 1);
            cmp_fmt_stat(c[1], 96, STAT(train_loss), "%.4f", 1);
            cmp_fmt_stat(c[2], 96, STAT(edq_ratio), "%.4f", 1);
            cmp_fmt_stat(c[3], 96, STAT(lost), "%.1f%%", 100);
            cmp_fmt_stat(c[4], 96, STAT(bpp), "%.4g", 1);
            cmp_fmt_stat(c[5], 96, STAT(tps), "%.0f", 1);
            cmp_fmt_stat(c[6], 96, STAT(rss), "%.0f", 1);
            cmp_sb_printf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", collage_strategy_name(s), c[0], c[7], c[1], c[2], c[3],
                      c[4], c[5], c[6]);
        }
        cmp_sb_printf(&b, "\n");
        paragraph(&b, o, runs, nruns, b2);
    }
    beta2_paragraph(&b, o, runs, nruns);
    frontier_paragraph(&b, o, runs, nruns, plots_ok);
    edq_paragraph(&b, o, runs, nruns);
    if (plots_ok)
        cmp_sb_printf(&b, "## Plots\n\n![validation loss against step](val_loss.png)\n\n![EDQ ratio against step](edq.png)\n\n"
                      "![final validation loss against bytes per parameter](loss_vs_bytes.png)\n");
    else cmp_sb_printf(&b, "## Plots\n\nNot rendered: gnuplot was not found or failed (see the message of the run; `apt-get install gnuplot-nox`).\n");
    char path[4200];
    snprintf(path, sizeof path, "%s/report.md", o->out);
    int rc = cmp_write_text(path, b.p);
    free(b.p);
    return rc;
}

/* One line per finished run of runs, each led by lead ("" or a compute's "NAME,"). */
void cmp_csv_lines(sbuf *b, const compare_opts *o, const run_t *runs, int nruns, const char *lead) {
    for (int i = 0; i < nruns; i++) {
        const run_t *r = &runs[i];
        if (!r->done) continue;
        const char *name = collage_strategy_name(r->strategy), *q = strchr(name, ',') ? "\"" : ""; /* quoted when it has a comma */
        cmp_sb_printf(b, "%s%s%s%s,%g,%llu,%d,%.6f,%.6f,%.6f,%.6f,%.2f,%.1f,%.3f,%.0f,", lead, q, name, q, r->beta2,
                  (unsigned long long)(o->seed + (uint64_t)r->seed_index), r->steps_run, r->train_loss, r->val_loss, r->edq_ratio,
                  r->lost, r->bpp, r->tps, r->ms, r->rss);
        if (isfinite(r->val_acc)) cmp_sb_printf(b, "%.6f", r->val_acc); /* empty for a next-token model */
        cmp_sb_printf(b, "\n");
    }
}

int cmp_write_csv(const compare_opts *o, const run_t *runs, int nruns) {
    sbuf b = {malloc(4096), 0, 4096};
    if (!b.p) return -1;
    cmp_sb_printf(&b, "%s\n", CMP_CSV_HEADER);
    cmp_csv_lines(&b, o, runs, nruns, "");
    char path[4200];
    snprintf(path, sizeof path, "%s/results.csv", o->out);
    int rc = cmp_write_text(path, b.p);
    free(b.p);
    return rc;
}
