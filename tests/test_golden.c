/* test_golden.c — `collage train` against recorded results: 50 steps with each of fp32, bf16,
 * collage-light, collage-plus and bf16-sr, and a save / resume / re-shard cycle under MPI (2 ranks
 * → 1, 1 rank → 2), must log the same losses and gradient norms, character for character, and
 * save the same model.bin and optimizer state in the run's last checkpoint folder, byte for byte
 * (64-bit FNV-1a of each file), as the recording in tests/golden/train50.txt. The products are pinned
 * to collage's reference sgemm (COLLAGE_GEMM=ref: a fixed order of fp32 operations, the bf16 model on
 * its widening path), the one kernel whose bits are the same on every x86-64 CPU: OpenBLAS's and
 * oneDNN's kernels depend on the CPU they find, so rows recorded on them hold on that CPU only. The
 * other kernels are held to tolerances and to thread-count independence in test_model and the family
 * tests.
 * COLLAGE_GOLDEN_RECORD=FILE writes the recording instead of checking it (the runs are the same).
 * COLLAGE_TEST_QUICK=1 (the sanitizer suites) runs three of the five strategies (fp32, collage-plus,
 * bf16-sr: every weight and moment scheme of the five) and two of the four re-shards, one each way. */
#include "harness.h"
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GOLDEN "tests/golden/train50.txt"
#define TRAIN "--batch 4 --seq 32 --steps 50 --threads 1 --quiet --save-every 0" /* a checkpoint at the end only */
#define MPIRUN "timeout 120 mpirun --oversubscribe -x LSAN_OPTIONS -x ASAN_OPTIONS -x COLLAGE_BF16_GEMM -x COLLAGE_GEMM -np"
#define MAX_LINES 4096

static char g_bin[1024], g_dir[256], g_text[512];
static FILE *g_rec;                   /* record mode: the file being written */
static char *g_gold[MAX_LINES];       /* check mode: the recording's lines */
static int g_ngold;

/* 64-bit FNV-1a of a whole file; 0 when it cannot be read. */
static uint64_t fnv_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    uint64_t h = 0xcbf29ce484222325ULL;
    int c;
    while ((c = fgetc(f)) != EOF) h = (h ^ (uint64_t)(unsigned char)c) * 0x100000001b3ULL;
    fclose(f);
    return h;
}

/* The lines a run is judged by: "NAME step S loss L grad_norm G" per logged step (the JSON numbers
 * as printed), then "NAME FILE HASH" per saved file. */
static int run_lines(const char *name, const char *log, const char *save, const char *const *files, char **out,
                     int cap) {
    FILE *f = fopen(log, "r");
    int n = 0;
    char line[4096];
    while (f && n < cap && fgets(line, sizeof line, f)) {
        char *st = strstr(line, "\"step\":"), *lo = strstr(line, "\"loss\":"), *gn = strstr(line, "\"grad_norm\":");
        if (!st || !lo || !gn) continue;
        char buf[512];
        snprintf(buf, sizeof buf, "%s step %d loss %.*s grad_norm %.*s", name, atoi(st + 7),
                 (int)strcspn(lo + 7, ","), lo + 7, (int)strcspn(gn + 12, ","), gn + 12);
        out[n++] = strdup(buf);
    }
    if (f) fclose(f);
    char ck[1024];
    h_checkpoint(save, ck, sizeof ck); /* the newest checkpoint of the run folder */
    for (int i = 0; files && files[i] && n < cap; i++) {
        char p[1100], buf[512];
        snprintf(p, sizeof p, "%s/%s", ck, files[i]);
        snprintf(buf, sizeof buf, "%s %s %016llx", name, files[i], (unsigned long long)fnv_file(p));
        out[n++] = strdup(buf);
    }
    return n;
}

/* Record the run's lines, or check them against the recording's lines that start with "NAME ". */
static void judge(const char *name, const char *log, const char *save, const char *const *files) {
    char *got[512];
    int n = run_lines(name, log, save, files, got, 512);
    if (g_rec) {
        for (int i = 0; i < n; i++) fprintf(g_rec, "%s\n", got[i]);
    } else {
        size_t nl = strlen(name);
        int k = 0;
        for (int i = 0; i < g_ngold; i++) {
            if (strncmp(g_gold[i], name, nl) != 0 || g_gold[i][nl] != ' ') continue;
            CHECK(k < n && !strcmp(g_gold[i], got[k]), "recorded '%s', got '%s'", g_gold[i], k < n ? got[k] : "(nothing)");
            k++;
        }
        CHECK(k > 0, "%s: the recording has no lines for this run", name);
        CHECK(k == n, "%s: %d lines recorded, %d produced", name, k, n);
    }
    for (int i = 0; i < n; i++) free(got[i]);
}

static const char *const MODEL_FILES[] = {"model.bin", "optimizer.state", NULL};

static int g_quick;

static void test_fifty_steps_per_strategy(void) {
    static const char *const S[] = {"fp32", "collage-plus", "bf16-sr", "bf16", "collage-light"};
    for (size_t i = 0; i < (g_quick ? 3 : sizeof S / sizeof *S); i++) {
        char out[8192], log[512], save[512];
        snprintf(log, sizeof log, "%s/%s.jsonl", g_dir, S[i]);
        snprintf(save, sizeof save, "%s/%s", g_dir, S[i]);
        int rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN " --precision %s --log %s --save %s", g_bin, g_text,
                      S[i], log, save);
        CHECK(rc == 0, "%s: exit %d: %s", S[i], rc, out);
        judge(S[i], log, save, MODEL_FILES);
    }
}

/* Saved at step 25 by `from` ranks, resumed to step 50 by `to` ranks (re-sharded): the resumed
 * steps' losses and the final files. */
static void reshard(const char *prec, int from, int to) {
    char out[8192], log[512], a[512], b[512], name[128];
    snprintf(name, sizeof name, "%s-%dto%d", prec, from, to);
    snprintf(a, sizeof a, "%s/%s-a", g_dir, name);
    snprintf(b, sizeof b, "%s/%s-b", g_dir, name);
    snprintf(log, sizeof log, "%s/%s.jsonl", g_dir, name);
    int rc = h_sh(out, sizeof out, MPIRUN " %d %s train --data %s " TRAIN " --precision %s --stop-after 25 --save %s",
                  from, g_bin, g_text, prec, a);
    CHECK(rc == 0, "%s: first half exit %d: %s", name, rc, out);
    rc = h_sh(out, sizeof out, MPIRUN " %d %s train --data %s --threads 1 --quiet --precision %s --resume %s --save %s "
                               "--save-every 0 --log %s", to, g_bin, g_text, prec, a, b, log);
    CHECK(rc == 0, "%s: resume exit %d: %s", name, rc, out);
    static const char *const one[] = {"model.bin", "optimizer.state", NULL};
    static const char *const two[] = {"model.bin", "optimizer.rank0-of-2.state", "optimizer.rank1-of-2.state", NULL};
    judge(name, log, b, to == 1 ? one : two);
}

static void test_mpi_save_resume_reshard(void) {
    reshard("collage-light", 2, 1);
    reshard("bf16-sr", 1, 2);
    if (g_quick) return;
    reshard("fp32", 2, 1);
    reshard("collage-plus", 1, 2);
}

static int load_golden(void) {
    FILE *f = fopen(GOLDEN, "r");
    if (!f) return -1;
    char line[1024];
    while (g_ngold < MAX_LINES && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (line[0] && line[0] != '#') g_gold[g_ngold++] = strdup(line);
    }
    fclose(f);
    return 0;
}

int main(void) {
    if (h_cli_setup("golden", g_bin, g_dir, g_text, 7)) return 1;
    setenv("COLLAGE_GEMM", "ref", 1);
    unsetenv("COLLAGE_BF16_GEMM");
    const char *rec = getenv("COLLAGE_GOLDEN_RECORD");
    if (rec && *rec) {
        if (!(g_rec = fopen(rec, "w"))) { perror(rec); return 1; }
        fprintf(g_rec, "# COLLAGE_GEMM=ref collage train, " TRAIN ", on the test corpus of seed 7: per step the logged loss and\n"
                       "# gradient norm as printed, then a 64-bit FNV-1a hash of each saved file (tests/test_golden.c)\n");
    } else if (load_golden()) {
        printf("test_golden: cannot read %s (run from the repository root)\n0 passed, 1 failed\n", GOLDEN);
        return 1;
    }
    char out[4096];
    int mpi = h_sh(out, sizeof out, "%s --version", g_bin) == 0 && !strstr(out, "without MPI") &&
              h_sh(NULL, 0, "mpirun --version") == 0;
    h_mpi_env();
    g_quick = !g_rec && getenv("COLLAGE_TEST_QUICK") && *getenv("COLLAGE_TEST_QUICK");
    if (g_quick) printf("    COLLAGE_TEST_QUICK: fp32, collage-plus and bf16-sr; re-shards collage-light 2 to 1, bf16-sr 1 to 2\n");
    RUN(test_fifty_steps_per_strategy);
    if (mpi) RUN(test_mpi_save_resume_reshard);
    else printf("SKIP test_mpi_save_resume_reshard: %s was built without MPI or mpirun does not run\n", g_bin);
    if (g_rec) fclose(g_rec);
    h_rm_rf(g_dir);
    return h_end();
}
