/* test_dist.c — data-parallel `collage train` under mpirun (2 and 3 ranks, oversubscribed): N ranks
 * give bit for bit the weights and losses of one rank summing the same N micro-batches (--accum N),
 * and stay within a named tolerance of one rank with the whole batch in one backward; the optimizer
 * state per rank is 1/N; save with 2 ranks, resume with 2 (exact), 1 and 3 (re-sharded); a bad shard
 * file on one rank stops every rank with a message instead of hanging. Skipped (not passed) when
 * the binary was built without MPI. */
#include "harness.h"
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Tiny model, 6 sequences per step (2 and 3 ranks both divide it), one thread per rank. */
#define TRAIN "--model tiny --layers 1 --dim 32 --heads 2 --batch 6 --seq 16 --threads 1 --quiet"
/* The same for the LLaMA family: 4 query heads on 2 key/value heads. */
#define TRAIN_LLAMA "--model llama-tiny --layers 1 --dim 64 --heads 4 --kv-heads 2 --batch 6 --seq 16 --threads 1 --quiet"
/* The same for a BERT (masked LM: the masks drawn per global row). */
#define TRAIN_BERT "--model bert-tiny --layers 1 --dim 32 --heads 2 --batch 6 --seq 16 --threads 1 --quiet"
/* One rank with the whole batch in one backward vs N ranks (N micro-batch gradients, each rounded to
 * bf16, summed in fp32, divided by N, rounded again): the gradients differ by about one bf16 ulp,
 * and over 8 steps the logged losses by this much at most (measured: 7e-5). */
#define ONE_BATCH_LOSS_TOL 1e-3
/* Resumed with 3 ranks a run saved with 2: the state is re-sharded exactly (proven by the 1-rank
 * --accum 3 resume giving the same bits), but the gradient is then a sum of 3 micro-batches instead
 * of 2, so the losses drift from the uninterrupted 2-rank run by rounding only (measured: 9e-5). */
#define RESHARD_LOSS_TOL 1e-3
/* Optimizer state per rank over the single-rank figure: 1/N up to one 4096-element chunk of the
 * shard split (the tiny preset has 107 chunks). */
#define MEM_SLACK (1.0 / 107 + 1e-9)
#define MPIRUN "timeout 120 mpirun --oversubscribe -x LSAN_OPTIONS -x ASAN_OPTIONS -x PMIX_MCA_mca_base_component_disable_dlclose -np"

static char g_bin[1024], g_dir[256], g_text[512];

static int file_has(const char *path, const char *s) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, s) != NULL;
    fclose(f);
    return found;
}
static double json_field(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return (double)NAN;
    char buf[4096], pat[64];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    snprintf(pat, sizeof pat, "\"%s\":", key);
    char *p = strstr(buf, pat);
    return p ? strtod(p + strlen(pat), NULL) : (double)NAN;
}
/* 1 when the two files hold the same bytes */
static int same_file(const char *a, const char *b) {
    char out[256];
    return h_sh(out, sizeof out, "cmp -s %s %s", a, b) == 0;
}
static void path(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", g_dir, name); }

/* N ranks == 1 rank with --accum N, bit for bit: every logged loss and the saved weights; train: the
 * model's flags (TRAIN, TRAIN_LLAMA, TRAIN_BERT). */
static void check_ranks_vs_accum_of(int N, const char *prec, const char *train) {
    char out[8192], la[600], lb[600], sa[600], sb[600], ca[1024], cb[1024], ma[1100], mb[1100], tag[64];
    snprintf(tag, sizeof tag, "%s%s%s-%d", strstr(train, "llama") ? "llama-" : strstr(train, "bert") ? "bert-" : "",
             strstr(train, "fp8") ? "fp8-" : strstr(train, "fp4") ? "fp4-" : "", prec, N);
    snprintf(la, sizeof la, "%s/ranks-%s.jsonl", g_dir, tag);
    snprintf(lb, sizeof lb, "%s/accum-%s.jsonl", g_dir, tag);
    snprintf(sa, sizeof sa, "%s/ranks-%s", g_dir, tag);
    snprintf(sb, sizeof sb, "%s/accum-%s", g_dir, tag);
    int rc = h_sh(out, sizeof out, MPIRUN " %d %s train --data %s %s --precision %s --steps 8 --log %s --save %s", N,
                 g_bin, g_text, train, prec, la, sa);
    CHECK(rc == 0, "%d ranks, %s: rc %d: %s", N, prec, rc, out);
    rc = h_sh(out, sizeof out, "%s train --data %s %s --precision %s --steps 8 --accum %d --log %s --save %s", g_bin,
             g_text, train, prec, N, lb, sb);
    CHECK(rc == 0, "1 rank --accum %d, %s: rc %d: %s", N, prec, rc, out);
    double a[16], b[16];
    int na = h_read_losses(la, a, 16), nb = h_read_losses(lb, b, 16);
    CHECK(na == 8 && nb == 8, "%s: %d and %d log lines", tag, na, nb);
    for (int i = 0; i < na && i < nb; i++)
        CHECK(a[i] == b[i], "%s step %d: %d ranks %.6f, 1 rank --accum %d %.6f", tag, i + 1, N, a[i], N, b[i]);
    h_checkpoint(sa, ca, sizeof ca);
    h_checkpoint(sb, cb, sizeof cb);
    snprintf(ma, sizeof ma, "%s/model.bin", ca);
    snprintf(mb, sizeof mb, "%s/model.bin", cb);
    CHECK(same_file(ma, mb), "%s: the weights of %d ranks and of 1 rank --accum %d differ", prec, N, N);
    if (strstr(train, "fp8")) { /* the delayed scaling: amaxes max-reduced over the ranks */
        snprintf(ma, sizeof ma, "%s/fp8.state", ca);
        snprintf(mb, sizeof mb, "%s/fp8.state", cb);
        CHECK(same_file(ma, mb), "%s: the fp8 scaling of %d ranks and of 1 rank --accum %d differ", tag, N, N);
    }
    CHECK(file_has(la, "\"comm_ms\":"), "%s: the MPI run's log has no comm_ms", tag);
    printf("    %s: %d ranks == 1 rank --accum %d over 8 steps (losses, model.bin)\n", tag, N, N);
}
static void check_ranks_vs_accum(int N, const char *prec) { check_ranks_vs_accum_of(N, prec, TRAIN); }

static void test_ranks_equal_one_rank_accum(void) {
    check_ranks_vs_accum(2, "collage-light");
    check_ranks_vs_accum(3, "bf16-sr"); /* stochastic rounding keyed by the global index */
    check_ranks_vs_accum(2, "fp32");
    check_ranks_vs_accum_of(2, "collage-light", TRAIN_LLAMA);
    check_ranks_vs_accum_of(2, "collage-light", TRAIN " --compute fp8"); /* delayed scaling */
    /* SR words keyed by step, rank and micro-batch; the transform's signs by the seed */
    check_ranks_vs_accum_of(2, "collage-light", TRAIN " --compute fp4 --fp4-recipe nvfp4,hadamard");
    check_ranks_vs_accum_of(2, "collage-plus", TRAIN_BERT);
}

/* N ranks vs one rank with the whole batch in one backward: the same run up to rounding. */
static void test_ranks_vs_one_batch(void) {
    char out[8192], la[600], lb[600];
    path(la, sizeof la, "onebatch.jsonl");
    path(lb, sizeof lb, "ranks-collage-light-2.jsonl"); /* from the test above */
    int rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN " --precision collage-light --steps 8 --log %s", g_bin, g_text, la);
    CHECK(rc == 0, "one batch: rc %d: %s", rc, out);
    double a[16], b[16], worst = 0;
    int na = h_read_losses(la, a, 16), nb = h_read_losses(lb, b, 16);
    CHECK(na == 8 && nb == 8, "%d and %d log lines", na, nb);
    for (int i = 0; i < na && i < nb; i++) worst = fmax(worst, fabs(a[i] - b[i]));
    CHECK(worst <= ONE_BATCH_LOSS_TOL && na == nb, "losses of 2 ranks and of one batch differ by %.3g", worst);
    printf("    2 ranks vs one batch of 6: largest loss difference %.3g over 8 steps (tolerance %g)\n", worst,
           ONE_BATCH_LOSS_TOL);
}

static void test_memory_per_rank(void) {
    char out[8192], s[3][600];
    double mb[3];
    for (int N = 1; N <= 3; N++) {
        snprintf(s[N - 1], sizeof s[N - 1], "%s/mem%d.json", g_dir, N);
        int rc = N == 1 ? h_sh(out, sizeof out, "%s train --data %s --model tiny --batch 6 --seq 16 --threads 1 --quiet "
                                               "--precision collage-plus --steps 1 --summary %s", g_bin, g_text, s[0])
                        : h_sh(out, sizeof out, MPIRUN " %d %s train --data %s --model tiny --batch 6 --seq 16 --threads 1 "
                                               "--quiet --precision collage-plus --steps 1 --summary %s", N, g_bin, g_text,
                              s[N - 1]);
        CHECK(rc == 0, "%d rank(s): rc %d: %s", N, rc, out);
        mb[N - 1] = json_field(s[N - 1], "optimizer_state_mb_per_rank");
    }
    for (int N = 2; N <= 3; N++) {
        double r = mb[N - 1] / mb[0];
        CHECK(r >= 1.0 / N - 1e-9 && r <= 1.0 / N + MEM_SLACK, "%d ranks: %.4f MB per rank of %.4f: ratio %.4f", N, mb[N - 1],
              mb[0], r);
        printf("    collage-plus, tiny preset: optimizer state %.3f MB on 1 rank, %.3f MB per rank on %d (ratio %.4f)\n",
               mb[0], mb[N - 1], N, r);
    }
}

/* Save with 2 ranks at step 5 of 10; resume with 2 and with 1 (--accum 2): exactly the uninterrupted
 * 2-rank run; with 3: exactly 1 rank --accum 3 resumed from the same files, near the 2-rank run. */
static void test_resume_two_then_two_three_one(void) {
    char out[8192], full[600], half[600], save[600], lg[4][600];
    const char *name[4] = {"r2", "r1a2", "r3", "r1a3"};
    path(full, sizeof full, "full2.jsonl");
    path(half, sizeof half, "half2.jsonl");
    path(save, sizeof save, "half2");
    const char *P = "--precision collage-plus";
    int rc = h_sh(out, sizeof out, MPIRUN " 2 %s train --data %s " TRAIN " %s --steps 10 --log %s", g_bin, g_text, P, full);
    CHECK(rc == 0, "full: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, MPIRUN " 2 %s train --data %s " TRAIN " %s --steps 10 --stop-after 5 --save %s --log %s", g_bin,
             g_text, P, save, half);
    CHECK(rc == 0, "first half: rc %d: %s", rc, out);
    char shard[1100], ck[1024];
    h_checkpoint(save, ck, sizeof ck);
    snprintf(shard, sizeof shard, "%s/optimizer.rank1-of-2.state", ck);
    CHECK(access(shard, R_OK) == 0, "no %s", shard);
    for (int v = 0; v < 4; v++) {
        path(lg[v], sizeof lg[v], name[v]);
        strcat(lg[v], ".jsonl");
        h_sh(out, sizeof out, "cp %s %s", half, lg[v]);
    }
    const char *R = "--threads 1 --quiet --precision collage-plus";
    rc = h_sh(out, sizeof out, MPIRUN " 2 %s train --data %s %s --resume %s --log %s", g_bin, g_text, R, save, lg[0]);
    CHECK(rc == 0, "resume with 2: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s train --data %s %s --accum 2 --resume %s --log %s", g_bin, g_text, R, save, lg[1]);
    CHECK(rc == 0, "resume with 1 --accum 2: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, MPIRUN " 3 %s train --data %s %s --resume %s --log %s", g_bin, g_text, R, save, lg[2]);
    CHECK(rc == 0, "resume with 3: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s train --data %s %s --accum 3 --resume %s --log %s", g_bin, g_text, R, save, lg[3]);
    CHECK(rc == 0, "resume with 1 --accum 3: rc %d: %s", rc, out);
    double f[16], x[4][16], worst = 0;
    int nf = h_read_losses(full, f, 16);
    CHECK(nf == 10, "full run: %d losses", nf);
    for (int v = 0; v < 4; v++) CHECK(h_read_losses(lg[v], x[v], 16) == 10, "%s: not 10 losses", name[v]);
    for (int i = 0; i < 10 && nf == 10; i++) {
        CHECK(x[0][i] == f[i], "resumed with 2, step %d: %.6f vs %.6f", i + 1, x[0][i], f[i]);
        CHECK(x[1][i] == f[i], "resumed with 1 --accum 2, step %d: %.6f vs %.6f", i + 1, x[1][i], f[i]);
        CHECK(x[2][i] == x[3][i], "resumed with 3, step %d: %.6f vs 1 rank --accum 3 %.6f", i + 1, x[2][i], x[3][i]);
        worst = fmax(worst, fabs(x[2][i] - f[i]));
    }
    CHECK(worst <= RESHARD_LOSS_TOL, "resumed with 3: %.3g from the 2-rank run", worst);
    printf("    saved with 2 ranks: resumed with 2 and 1 (--accum 2) exact; with 3 == 1 --accum 3, %.3g from the 2-rank run\n",
           worst);
}

/* One rank's shard file is truncated: that rank fails to load, every rank stops, nobody hangs. */
static void test_failure_on_one_rank_stops_all(void) {
    char out[16384], save[600], bad[600], shard[1100], ck[1024];
    path(save, sizeof save, "half2");
    path(bad, sizeof bad, "bad");
    h_sh(out, sizeof out, "rm -rf %s && cp -r %s %s", bad, save, bad);
    h_checkpoint(bad, ck, sizeof ck);
    snprintf(shard, sizeof shard, "%s/optimizer.rank1-of-2.state", ck);
    CHECK(truncate(shard, 1000) == 0, "cannot truncate %s", shard);
    double t0 = h_now();
    int rc = h_sh(out, sizeof out, MPIRUN " 2 %s train --data %s --threads 1 --quiet --precision collage-plus --resume %s", g_bin,
                 g_text, bad);
    double dt = h_now() - t0;
    CHECK(rc != 0 && rc != 124, "rc %d (124: it hung until the timeout)", rc);
    CHECK(strstr(out, "rank 1: ") && strstr(out, "truncated") && strstr(out, "every rank stops"),
          "no clear message: %s", out);
    printf("    truncated shard on rank 1: every rank stopped in %.1f s with: %.*s\n", dt,
           (int)(strchr(out, '\n') ? strchr(out, '\n') - out : 80), out);
    rc = h_sh(out, sizeof out, MPIRUN " 2 %s train --data %s " TRAIN " --batch 5 --steps 1", g_bin, g_text);
    CHECK(rc == 2 && strstr(out, "--batch 5"), "a batch that does not split: rc %d: %s", rc, out);
}

int main(void) {
    if (h_cli_setup("dist", g_bin, g_dir, g_text, 2)) return 1;
    char out[4096];
    if (h_sh(out, sizeof out, "%s --version", g_bin) != 0) {
        printf("test_dist: %s --version failed: %s\n0 passed, 1 failed\n", g_bin, out);
        h_rm_rf(g_dir);
        return 1;
    }
    if (strstr(out, "without MPI")) {
        printf("SKIP test_dist: %s was built without MPI (make MPI=1 needs mpicc): the data-parallel tests did not run\n",
               g_bin);
        h_rm_rf(g_dir);
        return h_end();
    }
    h_mpi_env();
    if (h_sh(out, sizeof out, "mpirun --version") != 0) {
        printf("test_dist: %s was built with MPI but mpirun does not run: %s\n0 passed, 1 failed\n", g_bin, out);
        h_rm_rf(g_dir);
        return 1;
    }
    printf("test_dist: %s under mpirun (2 and 3 ranks), data in %s\n", g_bin, g_dir);
    RUN(test_ranks_equal_one_rank_accum);
    RUN(test_ranks_vs_one_batch);
    RUN(test_memory_per_rank);
    RUN(test_resume_two_then_two_three_one);
    RUN(test_failure_on_one_rank_stops_all);
    h_rm_rf(g_dir);
    return h_end();
}
