/* compare_plot.c — the plots of `collage compare`: per run of the first seed the data files, then gnuplot
 * draws the validation curves, the loss against bytes, the EDQ ratio and the frontier as PNGs. */
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
            double step = cmp_json_get(line, "step"), v = cmp_json_get(line, "val_loss"), e = cmp_json_get(line, "edq_ratio");
            if (isfinite(v)) cmp_sb_printf(&val, "%g %.6f\n", step, v);
            if (!isfinite(e)) continue;
            sum += e - win[k % W];
            win[k % W] = e;
            k++;
            if (k >= W) cmp_sb_printf(&edq, "%g %.6f\n", step, sum / W);
        }
        fclose(f);
        int bad = !val.p || !edq.p;
        if (!bad) {
            snprintf(path, sizeof path, "%s/val.dat", r->dir);
            bad |= cmp_write_text(path, val.p);
            snprintf(path, sizeof path, "%s/edq.dat", r->dir);
            bad |= cmp_write_text(path, edq.p);
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
        cmp_sb_printf(g, "set terminal pngcairo size %d,%d font ',10'\nset output '%s.png'\nset multiplot layout %d,%d\n"
                      "set xlabel 'step'\nset ylabel '%s'\n", 520 * o->n_beta2, 400 * rows, name, rows, o->n_beta2,
                  plot == 0 ? VAL_LOSS(cmp_runs_mlm(runs, nruns)) : "EDQ ratio (moving average)");
        cmp_sb_printf(g, "set key %s\n", plot == 0 ? "top right" : "bottom left");
        for (int row = 0; row < rows; row++) {
            if (row == 1) cmp_sb_printf(g, "set xrange [%d:*]\nset autoscale y\nset key top right\n", o->steps / 2);
            for (int j = 0; j < o->n_beta2; j++) {
                cmp_sb_printf(g, "set title 'beta2 = %s%s'\n", cmp_b2str(o->beta2[j], b2s), row ? ", second half" : "");
                int any = 0; /* a panel without a finished run (--report-only over part of a grid) says so */
                for (int i = 0; i < nruns; i++) any |= !runs[i].seed_index && runs[i].beta2 == o->beta2[j] && runs[i].done;
                if (!any) {
                    cmp_sb_printf(g, "set label 9 'no finished run' at graph 0.5,0.5 center\nplot [0:1][0:1] -1 notitle\n"
                                  "unset label 9\n");
                    continue;
                }
                cmp_sb_printf(g, "plot ");
                int first = 1;
                for (int i = 0; i < nruns; i++) {
                    const run_t *r = &runs[i];
                    if (r->seed_index || r->beta2 != o->beta2[j] || !r->done) continue;
                    const char *base = strrchr(r->dir, '/');
                    cmp_sb_printf(g, "%s'runs/%s/%s' with lines lw 2 title '%s'", first ? "" : ", ", base + 1, file,
                              collage_strategy_name(r->strategy));
                    first = 0;
                }
                cmp_sb_printf(g, "\n");
            }
        }
        cmp_sb_printf(g, "unset multiplot\nset xrange [*:*]\n");
    }
}

/* Final validation loss against bytes per parameter: one series per β2, points labelled by strategy;
 * a label whose point shares its x with an earlier one of the same β2 goes on the left. */
static void plot_loss_vs_bytes(sbuf *g, const compare_opts *o, const run_t *runs, int nruns) {
    char b2s[32];
    const char *val = VAL_LOSS(cmp_runs_mlm(runs, nruns));
    cmp_sb_printf(g, "set terminal pngcairo size 640,440 font ',10'\nset output 'loss_vs_bytes.png'\nset title 'final %s "
                  "against training-state bytes per parameter'\nset xlabel 'bytes per parameter'\nset ylabel '%s "
                  "(mean over seeds)'\nset offsets 2, 3, 0.02, 0.02\nset key top right\nplot ", val, val);
    for (int j = 0; j < o->n_beta2; j++)
        cmp_sb_printf(g, "%s'-' using 1:2 with points pt %d ps 1.5 title 'beta2 = %s', '-' using 1:2:3 with labels left offset 1,0 "
                      "font ',8' notitle, '-' using 1:2:3 with labels right offset -1,0 font ',8' notitle",
                  j ? ", " : "", 7 + 2 * j, cmp_b2str(o->beta2[j], b2s));
    cmp_sb_printf(g, "\n");
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
                    cmp_sb_printf(g, "%g %.6f %s\n", bpp.mean, v.mean, collage_strategy_name(s));
            }
            cmp_sb_printf(g, "e\n");
        }
}

/* The frontier: the gap to the reference (mean ± sd over seeds) against bytes per parameter, one panel
 * per β2, its Pareto set joined by a line. Labels of points at (nearly) the same bytes are stacked
 * upwards, so that they stay legible. */
static void plot_frontier(sbuf *g, const compare_opts *o, const run_t *runs, int nruns) {
    char b2s[32];
    const collage_strategy ref = cmp_reference(o);
    /* loss_vs_bytes.png's offsets would widen this x range to -2: bytes start at 0 */
    cmp_sb_printf(g, "set terminal pngcairo size 1000,%d font ',10'\nset output 'frontier.png'\nset multiplot layout %d,1\n"
                  "unset offsets\nset xlabel 'training-state bytes per parameter (gradient included)'\nset ylabel '%s - %s'\n"
                  "set key top right\n", 430 * o->n_beta2, o->n_beta2, cmp_runs_mlm(runs, nruns) ? "masked-LM val loss" : "val loss",
              collage_strategy_name(ref));
    for (int j = 0; j < o->n_beta2; j++) {
        const double b2 = o->beta2[j];
        int pareto[MAX_STRATEGIES], order[MAX_STRATEGIES], no = 0, done[MAX_STRATEGIES] = {0};
        double x[MAX_STRATEGIES], y[MAX_STRATEGIES], sd[MAX_STRATEGIES], lo = 0, hi = 0;
        cmp_pareto_set(o, runs, nruns, b2, pareto);
        for (int k = 0; k < o->n_strategies; k++) { /* by bytes */
            int best = -1;
            double bb = (double)INFINITY;
            for (int i = 0; i < o->n_strategies; i++) {
                double v = cmp_stat_of(runs, nruns, o->strategies[i], b2, offsetof(run_t, bpp)).mean;
                if (!done[i] && isfinite(v) && v < bb) { bb = v; best = i; }
            }
            if (best < 0) break;
            done[best] = 1;
            const collage_strategy s = o->strategies[best];
            stat_t d = cmp_paired_diff(runs, nruns, s, ref, b2);
            if (s != ref && !d.n) continue;
            order[no] = best;
            x[no] = bb;
            y[no] = s == ref ? 0.0 : d.mean;
            sd[no] = s == ref || d.n < 2 ? 0.0 : d.sd;
            lo = fmin(lo, y[no] - sd[no]);
            hi = fmax(hi, y[no] + sd[no]);
            no++;
        }
        if (!no) {
            cmp_sb_printf(g, "set title 'beta2 = %s'\nset label 9 'no finished run' at graph 0.5,0.5 center\nplot [0:1][0:1] -1 "
                          "notitle\nunset label 9\n", cmp_b2str(b2, b2s));
            continue;
        }
        const double step = (hi - lo > 0 ? hi - lo : 1e-3) / 14.0;
        cmp_sb_printf(g, "set title 'beta2 = %s: the gap to %s against bytes (mean +- sd over seeds; the Pareto set joined)'\n"
                      "set yrange [%g:%g]\nset xrange [0:*]\nplot '-' using 1:2:3 with yerrorbars pt 7 ps 1.2 lc %d title "
                      "'strategies', '-' using 1:2 with lines lw 2 lc %d title 'Pareto set', '-' using 1:2:3 with labels left "
                      "font ',8' notitle\n", cmp_b2str(b2, b2s), collage_strategy_name(ref), lo - step, hi + step * (no + 1), j + 1,
                  j + 1);
        for (int i = 0; i < no; i++) cmp_sb_printf(g, "%g %.6f %.6f\n", x[i], y[i], sd[i]);
        cmp_sb_printf(g, "e\n");
        for (int i = 0; i < no; i++)
            if (pareto[order[i]]) cmp_sb_printf(g, "%g %.6f\n", x[i], y[i]);
        cmp_sb_printf(g, "e\n");
        for (int i = 0; i < no; i++) { /* the k-th label at these bytes sits k steps above its point */
            int k = 0;
            for (int e = 0; e < i; e++) k += fabs(x[e] - x[i]) < 0.5;
            cmp_sb_printf(g, "%g %.6f %s\n", x[i] + 0.15, y[i] + step * (k + 0.4), collage_strategy_name(o->strategies[order[i]]));
        }
        cmp_sb_printf(g, "e\n");
    }
    cmp_sb_printf(g, "unset multiplot\nset xrange [*:*]\nset yrange [*:*]\n");
}

int cmp_gnuplot(const compare_opts *o, const char *name, const char *script) {
    char path[4200], cmd[8600];
    snprintf(path, sizeof path, "%s/%s.gp", o->out, name);
    if (cmp_write_text(path, script)) return -1;
    if (strchr(o->out, '\'')) {
        fprintf(stderr, "collage compare: not rendering %s.png: --out '%s' holds a quote\nhint: run `gnuplot %s.gp` in that folder\n",
                name, o->out, name);
        return -1;
    }
    snprintf(cmd, sizeof cmd, "cd '%s' && gnuplot %s.gp 2> %s.err", o->out, name, name);
    const int rc = system(cmd);
    if (rc != 0) {
        fprintf(stderr, "collage compare: gnuplot failed (exit %d) — see %s/%s.err\nhint: apt-get install gnuplot-nox\n",
                WIFEXITED(rc) ? WEXITSTATUS(rc) : rc, o->out, name);
        return -1;
    }
    snprintf(path, sizeof path, "%s/%s.err", o->out, name);
    unlink(path);
    return 0;
}

/* Renders the four PNGs with gnuplot (a script in --out, so a user can restyle them). */
int cmp_render_plots(const compare_opts *o, const run_t *runs, int nruns) {
    int window = o->steps / 20 < 25 ? (o->steps / 20 > 0 ? o->steps / 20 : 1) : 25;
    if (write_plot_data(runs, nruns, window)) return -1;
    sbuf g = {malloc(4096), 0, 4096};
    if (!g.p) return -1;
    cmp_sb_printf(&g, "# gnuplot script written by collage compare; run `gnuplot plots.gp` in this folder to redraw.\n"
                  "set grid\nset key top right\n");
    plot_curves(&g, o, runs, nruns);
    plot_loss_vs_bytes(&g, o, runs, nruns);
    plot_frontier(&g, o, runs, nruns);
    const int rc = cmp_gnuplot(o, "plots", g.p);
    free(g.p);
    return rc;
}
