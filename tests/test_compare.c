/* test_compare.c — `collage compare` end to end on a very small model: every file is written, the CSV
 * parses and holds every (strategy, β2, seed) once, the report has a table per β2, the plots are PNGs,
 * and a rerun after deleting one result redoes only that one (and a changed command redoes all). */
#include "harness.h"
#include "collage.h"
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHAPE "--layers 1 --dim 32 --heads 2 --batch 4 --seq 16"
#define LIST_P "fp32,bf16,collage-light"
static const char *g_strategies[] = {"fp32", "bf16", "collage-light"};
static const char *g_betas[] = {"0.95", "0.999"};
enum { NS = 3, NB = 2, NSEED = 2, NRUNS = NS * NB * NSEED };

static char g_bin[1024], g_dir[256], g_text[512], g_out[512];

static int is_png(const char *path) {
    unsigned char sig[8] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(sig, 1, 8, f);
    fclose(f);
    return n == 8 && sig[0] == 0x89 && sig[1] == 'P' && sig[2] == 'N' && sig[3] == 'G';
}

/* The modification time of one run's summary, in ns (0 when it is missing). */
static long long summary_mtime(const char *strategy, const char *b2, int seed) {
    char path[1024];
    struct stat sb;
    snprintf(path, sizeof path, "%s/runs/%s-b%s-s%d/summary.json", g_out, strategy, b2, seed);
    if (stat(path, &sb) != 0) return 0;
    return (long long)sb.st_mtim.tv_sec * 1000000000LL + sb.st_mtim.tv_nsec;
}

/* Parses results.csv: every row has 12 fields, finite numbers, and each combination occurs once. */
static int check_csv(int expect_rows) {
    char path[700], line[1024];
    snprintf(path, sizeof path, "%s/results.csv", g_out);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "no %s", path);
    if (!f) return 0;
    int seen[NS][NB][NSEED] = {{{0}}}, rows = 0;
    CHECK(fgets(line, sizeof line, f) && !strncmp(line, "strategy,beta2,seed,steps,train_loss,val_loss,edq_ratio,lost,", 61),
          "header: %s", line);
    while (fgets(line, sizeof line, f)) {
        char strat[64];
        double b2, v[9];
        unsigned long long seed;
        int k = sscanf(line, "%63[^,],%lf,%llu,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf", strat, &b2, &seed, &v[0], &v[1], &v[2], &v[3],
                       &v[4], &v[5], &v[6], &v[7], &v[8]);
        CHECK(k == 12, "row has %d fields: %s", k, line);
        rows++;
        if (k != 12) continue;
        for (int i = 0; i < 9; i++) CHECK(isfinite(v[i]), "field %d not finite: %s", i + 4, line);
        CHECK(v[0] == 6 && v[2] > 0 && v[2] < 10 && v[3] >= 0 && v[3] <= 1.5 && v[4] >= 0 && v[4] <= 1 && v[5] >= 8 && v[5] <= 16,
              "implausible row: %s", line);
        int s = -1, b = b2 == 0.95 ? 0 : b2 == 0.999 ? 1 : -1, sd = (int)(seed - 1337);
        for (int i = 0; i < NS; i++)
            if (!strcmp(strat, g_strategies[i])) s = i;
        CHECK(s >= 0 && b >= 0 && sd >= 0 && sd < NSEED, "unexpected combination: %s", line);
        if (s >= 0 && b >= 0 && sd >= 0 && sd < NSEED) seen[s][b][sd]++;
        /* bf16 rounds updates away; fp32 loses none */
        if (s == 0) CHECK(v[4] < 1e-3, "fp32 lost %g of its updates", v[4]);
        if (s == 1) CHECK(v[4] > 0.01, "bf16 lost only %g of its updates", v[4]);
    }
    fclose(f);
    CHECK(rows == expect_rows, "%d rows, expected %d", rows, expect_rows);
    int once = 1;
    for (int s = 0; s < NS; s++)
        for (int b = 0; b < NB; b++)
            for (int d = 0; d < NSEED; d++) once &= seen[s][b][d] == 1;
    CHECK(once, "a combination is missing or repeated");
    return rows;
}

static int run_compare(char *out, size_t cap, const char *extra) {
    return h_sh(out, cap, "%s compare --out %s --data %s --precision " LIST_P " --beta2 0.95,0.999 --seeds %d --steps 6 "
                "--eval-every 2 " SHAPE " %s", g_bin, g_out, g_text, NSEED, extra);
}

static void test_compare_writes_everything(void) {
    static char out[65536];
    int rc = run_compare(out, sizeof out, "");
    CHECK(rc == 0, "compare exited %d: %s", rc, out);
    CHECK(strstr(out, "0 already finished") != NULL, "first run: %s", out);
    check_csv(NRUNS);
    const char *pngs[] = {"val_loss.png", "edq.png", "loss_vs_bytes.png"};
    for (int i = 0; i < 3; i++) {
        char path[700];
        snprintf(path, sizeof path, "%s/%s", g_out, pngs[i]);
        CHECK(is_png(path), "%s is not a PNG", path);
    }
    char path[700], report[65536] = "";
    snprintf(path, sizeof path, "%s/report.md", g_out);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "no report.md");
    if (f) { report[fread(report, 1, sizeof report - 1, f)] = 0; fclose(f); }
    CHECK(strstr(report, "## β2 = 0.95\n") && strstr(report, "## β2 = 0.999\n"), "a table per beta2: %.400s", report);
    for (int s = 0; s < NS; s++) {
        char row[64];
        snprintf(row, sizeof row, "| %s |", g_strategies[s]);
        const char *first = strstr(report, row);
        CHECK(first && strstr(first + 1, row), "report lacks two rows of %s", g_strategies[s]);
    }
    CHECK(strstr(report, "At β2 = 0.95 the reference, fp32,") && strstr(report, "At β2 = 0.999 the reference, fp32,"),
          "a paragraph per beta2");
    CHECK(strstr(report, "val_loss.png") != NULL, "report does not show the plot");
}

static void test_rerun_redoes_only_deleted(void) {
    static char out[65536];
    long long before[NS][NB][NSEED];
    for (int s = 0; s < NS; s++)
        for (int b = 0; b < NB; b++)
            for (int d = 0; d < NSEED; d++) before[s][b][d] = summary_mtime(g_strategies[s], g_betas[b], d + 1);
    char path[1024];
    snprintf(path, sizeof path, "%s/runs/bf16-b0.999-s2/summary.json", g_out);
    CHECK(unlink(path) == 0, "cannot delete %s", path);
    int rc = run_compare(out, sizeof out, "");
    CHECK(rc == 0, "rerun exited %d: %s", rc, out);
    CHECK(strstr(out, "11 already finished") != NULL && strstr(out, "[start 1 of 1] bf16 beta2 0.999 seed 1338"), "rerun: %s", out);
    for (int s = 0; s < NS; s++)
        for (int b = 0; b < NB; b++)
            for (int d = 0; d < NSEED; d++) {
                long long now = summary_mtime(g_strategies[s], g_betas[b], d + 1);
                if (s == 1 && b == 1 && d == 1) CHECK(now != 0, "the deleted run was not redone");
                else CHECK(now == before[s][b][d], "%s beta2 %s seed %d was redone", g_strategies[s], g_betas[b], d + 1);
            }
    check_csv(NRUNS);
    /* a different command (another learning rate) redoes every run */
    rc = run_compare(out, sizeof out, "--lr 1e-3");
    CHECK(rc == 0 && strstr(out, "0 already finished"), "changed command: rc %d: %s", rc, out);
    check_csv(NRUNS);
}

static void test_compare_bad_input(void) {
    char out[8192], bad[700];
    snprintf(bad, sizeof bad, "%s/bad", g_dir);
    int rc = h_sh(out, sizeof out, "%s compare --out %s --precision fp32,nonsense", g_bin, bad);
    CHECK(rc == 2 && strstr(out, "nonsense"), "unknown strategy: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s compare --out %s --beta2 0.9,1.5", g_bin, bad);
    CHECK(rc == 2 && strstr(out, "1.5"), "beta2 out of range: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s compare --out %s --save x", g_bin, bad);
    CHECK(rc == 2 && strstr(out, "--save"), "--save: rc %d: %s", rc, out);
    /* a train flag that is wrong fails the first run, and compare names its log and stops */
    rc = h_sh(out, sizeof out, "%s compare --out %s --data %s/missing.txt --precision fp32 --beta2 0.95 --steps 2", g_bin, bad, g_dir);
    CHECK(rc == 1 && strstr(out, "missing.txt") && strstr(out, "train.out"), "missing data: rc %d: %s", rc, out);
    char csv[800];
    snprintf(csv, sizeof csv, "%s/results.csv", bad);
    CHECK(access(csv, F_OK) != 0, "a failed comparison wrote %s", csv);
}

/* A composition in --precision (its parts comma-separated like the list), and the frontier's sections:
 * the Pareto set per β2, which always holds the strategy of the fewest bytes (bf16, 8), the question at
 * 8 bytes, EDQ's correlation over the runs, the plot; the composition's name quoted in the CSV. */
static void test_frontier_report(void) {
    static char out[65536], report[65536];
    char dir[700], path[800], csv[8192] = "";
    snprintf(dir, sizeof dir, "%s/frontier", g_dir);
    int rc = h_sh(out, sizeof out, "%s compare --out %s --data %s --precision bf16-master,bf16,collage-light+m=int8,v=int8 "
                  "--beta2 0.95 --seeds 2 --steps 6 --eval-every 2 " SHAPE, g_bin, dir, g_text);
    CHECK(rc == 0 && strstr(out, "3 strategies"), "compare exited %d: %s", rc, out);
    snprintf(path, sizeof path, "%s/report.md", dir);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "no %s", path);
    if (f) { report[fread(report, 1, sizeof report - 1, f)] = 0; fclose(f); }
    CHECK(strstr(report, "| collage-light+m=int8,v=int8 |") != NULL, "no row of the composition: %.600s", report);
    const char *pareto = strstr(report, "- β2 = 0.95:");
    CHECK(pareto && strstr(pareto, "**bf16** (8 B"), "the Pareto set lacks bf16: %.300s", pareto ? pareto : report);
    CHECK(strstr(report, "At 8 bytes per parameter or less (8.03 where both moments are 8-bit") != NULL, "no answer at 8 bytes: %.300s", report);
    CHECK(strstr(report, "## Does EDQ predict the loss?\n\nOver the 4 runs") != NULL, "no EDQ correlation over 4 runs");
    snprintf(path, sizeof path, "%s/frontier.png", dir);
    CHECK(is_png(path), "%s is not a PNG", path);
    snprintf(path, sizeof path, "%s/results.csv", dir);
    f = fopen(path, "r");
    if (f) { csv[fread(csv, 1, sizeof csv - 1, f)] = 0; fclose(f); }
    CHECK(strstr(csv, "\"collage-light+m=int8,v=int8\",0.95,") != NULL, "the composition's name unquoted in %s", path);
}

/* --precision all (docs/training.md) runs every preset, the fp16 ones with eps 1e-4 (1e-8 is 0 in fp16,
 * which they refuse) and the others with 1e-8, and writes the report; an --eps given goes to every run. */
static void test_all_presets(void) {
    static char out[65536];
    char dir[700], path[1200], args[4096];
    snprintf(dir, sizeof dir, "%s/all", g_dir);
    int rc = h_sh(out, sizeof out, "%s compare --out %s --data %s --precision all --beta2 0.95 --steps 2 --eval-every 1 " SHAPE,
                  g_bin, dir, g_text);
    char last[64];
    snprintf(last, sizeof last, "[%d/%d] done", (int)COLLAGE_STRATEGY_COUNT, (int)COLLAGE_STRATEGY_COUNT);
    CHECK(rc == 0 && strstr(out, last), "compare --precision all exited %d: %s", rc, out);
    for (int s = 0; s < COLLAGE_STRATEGY_COUNT; s++) {
        const collage_strategy_info *row = collage_strategy_get((collage_strategy)s);
        snprintf(path, sizeof path, "cat %s/runs/%s-b0.95-s1/args.txt", dir, row->name);
        const char *eps = row->arith == COLLAGE_WORD_FP16 ? "--eps 1e-4 " : "--eps 1e-8 ";
        CHECK(h_sh(args, sizeof args, "%s", path) == 0 && strstr(args, eps), "%s: want %s: %s", row->name, eps, args);
        snprintf(path, sizeof path, "%s/runs/%s-b0.95-s1/summary.json", dir, row->name);
        CHECK(access(path, F_OK) == 0, "%s: no summary", row->name);
    }
    snprintf(path, sizeof path, "%s/report.md", dir);
    CHECK(access(path, F_OK) == 0, "no %s", path);
    snprintf(dir, sizeof dir, "%s/eps", g_dir);
    rc = h_sh(out, sizeof out, "%s compare --out %s --data %s --precision fp16,bf16 --beta2 0.95 --steps 1 --eval-every 1 "
              "--eps 1e-3 " SHAPE, g_bin, dir, g_text);
    CHECK(rc == 0, "compare --eps 1e-3 exited %d: %s", rc, out);
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "cat %s/runs/%s-b0.95-s1/args.txt", dir, i ? "bf16" : "fp16");
        CHECK(h_sh(args, sizeof args, "%s", path) == 0 && strstr(args, "--eps 1e-3") && !strstr(args, "1e-4") &&
              !strstr(args, "1e-8"), "--eps 1e-3 given: %s", args);
    }
}

/* The plots say what was measured and start their byte axis at 0: frontier.png's x range (gnuplot's
 * own GPVAL_X_MIN after the script, when gnuplot is here), and "masked-LM validation loss" on every loss
 * axis of a BERT comparison, "validation loss" on a GPT's. */
static void test_plot_axes_and_labels(void) {
    static char out[65536], gp[65536];
    char dir[700], bert[700];
    snprintf(dir, sizeof dir, "%s/all", g_dir); /* test_all_presets' */
    snprintf(bert, sizeof bert, "%s/bert", g_dir);
    if (h_sh(NULL, 0, "command -v gnuplot") == 0) {
        int rc = h_sh(out, sizeof out, "cd %s && gnuplot -e \"load 'plots.gp'\" -e 'print \"xmin \", GPVAL_X_MIN'", dir);
        const char *x = strstr(out, "xmin ");
        CHECK(rc == 0 && x && atof(x + 5) == 0.0, "frontier.png's x axis: rc %d: %s", rc, out);
    } else printf("    skip the x range of frontier.png: no gnuplot\n");
    h_sh(gp, sizeof gp, "cat %s/plots.gp", dir);
    CHECK(strstr(gp, "set ylabel 'validation loss'") && !strstr(gp, "masked-LM"), "a GPT's plots: %.300s", gp);
    int rc = h_sh(out, sizeof out, "%s compare --out %s --data %s --model bert-tiny --precision bf16,bf16-master --beta2 0.95 "
                  "--steps 2 --eval-every 1 " SHAPE, g_bin, bert, g_text);
    h_sh(gp, sizeof gp, "cat %s/plots.gp", bert);
    CHECK(rc == 0 && strstr(gp, "set ylabel 'masked-LM validation loss'\n") && strstr(gp, "final masked-LM validation loss") &&
          strstr(gp, "set ylabel 'masked-LM val loss - bf16-master'") && !strstr(gp, "'validation loss"),
          "a BERT's plots: rc %d: %.2000s", rc, gp);
}

/* --report-only over g_out's finished grid (test_rerun_redoes_only_deleted's, --lr 1e-3): nothing runs (the
 * summaries keep their times), results.csv holds every run, and a wider grid (a third β2 never run) is
 * reported over the runs it has, its panel saying so; about.md goes under the heading; refusals: no
 * finished run (another --steps) and --compute. */
static void test_report_only(void) {
    static char out[65536], report[65536];
    char path[800];
    const long long before = summary_mtime("bf16", "0.95", 1);
    snprintf(path, sizeof path, "%s/about.md", g_out);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (f) { fputs("These runs were made by hand.\n", f); fclose(f); }
    snprintf(path, sizeof path, "%s/results.csv", g_out);
    unlink(path);
    int rc = h_sh(out, sizeof out, "%s compare --report-only --out %s --precision " LIST_P " --beta2 0.95,0.999 --seeds %d "
                  "--steps 6", g_bin, g_out, NSEED);
    CHECK(rc == 0 && strstr(out, "wrote ") && !strstr(out, "[start"), "report-only: rc %d: %s", rc, out);
    CHECK(summary_mtime("bf16", "0.95", 1) == before, "--report-only ran a run again");
    check_csv(NRUNS);
    rc = h_sh(out, sizeof out, "%s compare --report-only --out %s --precision " LIST_P " --beta2 0.95,0.9,0.999 --seeds %d "
              "--steps 6", g_bin, g_out, NSEED);
    CHECK(rc == 0 && strstr(out, "12 of the grid's 18 runs have finished"), "a wider grid: rc %d: %s", rc, out);
    snprintf(path, sizeof path, "%s/report.md", g_out);
    f = fopen(path, "r");
    if (f) { report[fread(report, 1, sizeof report - 1, f)] = 0; fclose(f); }
    CHECK(f && strstr(report, "from the finished runs in `runs/`: 12 of the grid's 18") &&
          strstr(report, "These runs were made by hand.") && strstr(report, "## β2 = 0.9\n") &&
          strstr(report, "## The frontier") && strstr(report, "## Does EDQ predict the loss?"), "report: %.1500s", report);
    if (h_sh(NULL, 0, "command -v gnuplot") == 0) {
        snprintf(path, sizeof path, "%s/frontier.png", g_out);
        CHECK(strstr(out, "frontier.png") && is_png(path), "plots of a wider grid: %s", out);
    }
    rc = h_sh(out, sizeof out, "%s compare --report-only --out %s --precision " LIST_P " --steps 7", g_bin, g_out);
    CHECK(rc == 1 && strstr(out, "no run of this grid has finished") && strstr(out, "hint:"), "nothing finished: rc %d: %s", rc,
          out);
    rc = h_sh(out, sizeof out, "%s compare --report-only --out %s --compute bf16,fp8", g_bin, g_out);
    CHECK(rc == 2 && strstr(out, "--compute"), "--compute: rc %d: %s", rc, out);
    unlink(path);
}

/* The compute axis: one grid per compute in --out/NAME, the report and results.csv across them (a compute
 * column; every strategy under every compute once; the fp8 rows' runs made with their recipe's flags);
 * its refusals name the flag; a train flag without a value (--nesterov) reaches every run. */
static void test_compute_axis(void) {
    static char out[65536], report[65536];
    char dir[700], path[900], line[1024];
    snprintf(dir, sizeof dir, "%s/computes", g_dir);
    int rc = h_sh(out, sizeof out, "%s compare --out %s --data %s --precision bf16-master,collage-light --beta2 0.95 --steps 2 "
                  "--eval-every 1 --compute bf16,fp8 --fp8-recipe block,mxfp8 " SHAPE, g_bin, dir, g_text);
    CHECK(rc == 0, "compare --compute: rc %d: %s", rc, out);
    const char *names[] = {"bf16", "fp8-block", "fp8-mxfp8"};
    for (int a = 0; a < 3; a++) {
        snprintf(path, sizeof path, "%s/%s/results.csv", dir, names[a]);
        CHECK(access(path, F_OK) == 0, "no %s", path);
        snprintf(path, sizeof path, "%s/%s/runs/collage-light-b0.95-s1/args.txt", dir, names[a]);
        FILE *f = fopen(path, "r");
        CHECK(f && fgets(line, sizeof line, f), "no %s", path);
        if (f) fclose(f);
        CHECK(strstr(line, a ? "--compute fp8 --fp8-recipe" : "--compute bf16") && (!a || strstr(line, names[a] + 4)),
              "%s ran with: %s", names[a], line);
    }
    snprintf(path, sizeof path, "%s/report.md", dir);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "no %s", path);
    if (f) { report[fread(report, 1, sizeof report - 1, f)] = 0; fclose(f); }
    CHECK(strstr(report, "| `collage-light` | 10 |") && strstr(report, "fp8-mxfp8 |") && strstr(report, "(reference)") &&
          strstr(report, "**fp8-block**:"), "report across computes: %s", report);
    snprintf(path, sizeof path, "%s/compute.png", dir);
    CHECK(is_png(path), "%s is not a PNG", path);
    snprintf(path, sizeof path, "%s/results.csv", dir);
    f = fopen(path, "r");
    int rows = 0, per[3] = {0};
    CHECK(f && fgets(line, sizeof line, f) && !strncmp(line, "compute,strategy,beta2,", 23), "header of %s", path);
    while (f && fgets(line, sizeof line, f)) {
        rows++;
        for (int a = 0; a < 3; a++) per[a] += !strncmp(line, names[a], strlen(names[a])) && line[strlen(names[a])] == ',';
    }
    if (f) fclose(f);
    CHECK(rows == 6 && per[0] == 2 && per[1] == 2 && per[2] == 2, "%d rows (%d %d %d)", rows, per[0], per[1], per[2]);
    /* refusals, before any run */
    rc = h_sh(out, sizeof out, "%s compare --out %s/x --precision fp32,bf16 --compute fp8", g_bin, dir);
    CHECK(rc == 2 && strstr(out, "fp32") && strstr(out, "bf16 weights"), "fp32 under fp8: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s compare --out %s/x --precision bf16 --compute bf16,fp8 --fp8-recipe delayed,blocky", g_bin, dir);
    CHECK(rc == 2 && strstr(out, "blocky"), "unknown recipe: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s compare --out %s/x --precision bf16 --fp8-recipe current", g_bin, dir);
    CHECK(rc == 2 && strstr(out, "--fp8-recipe") && strstr(out, "--compute"), "recipe without compute: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s compare --out %s/x --precision bf16 --compute bf16 --fp8-e4m3-all", g_bin, dir);
    CHECK(rc == 2 && strstr(out, "--fp8-e4m3-all"), "e4m3-all without fp8: rc %d: %s", rc, out);
    /* --nesterov reaches the runs (SGD reads no --beta2: compare refuses one) */
    rc = h_sh(out, sizeof out, "%s compare --out %s/sgd --data %s --precision bf16 --steps 1 --eval-every 1 "
              "--optimizer sgd --nesterov " SHAPE, g_bin, dir, g_text);
    snprintf(path, sizeof path, "%s/sgd/runs/bf16-b0.95-s1/args.txt", dir);
    f = fopen(path, "r");
    CHECK(rc == 0 && f && fgets(line, sizeof line, f) && strstr(line, "--nesterov"), "--nesterov: rc %d: %s", rc, out);
    if (f) fclose(f);
}

int main(void) {
    if (h_cli_setup("compare", g_bin, g_dir, g_text, 2)) return 1;
    snprintf(g_out, sizeof g_out, "%s/out", g_dir);
    printf("test_compare: %s, data in %s\n", g_bin, g_dir);
    RUN(test_compare_writes_everything);
    RUN(test_rerun_redoes_only_deleted);
    RUN(test_report_only);
    RUN(test_compare_bad_input);
    RUN(test_frontier_report);
    RUN(test_all_presets);
    RUN(test_plot_axes_and_labels);
    RUN(test_compute_axis);
    h_rm_rf(g_dir);
    return h_end();
}
