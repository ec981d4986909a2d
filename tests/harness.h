/* harness.h — the tiny test harness: named tests, checks that keep going after a failure and print
 * the failing input, and the closing line "N passed, N failed" with a non-zero exit on failure. */
#ifndef COLLAGE_HARNESS_H
#define COLLAGE_HARNESS_H
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int h_pass, h_fail, h_cur_fail;

/* CHECK(cond, fmt, ...): on failure print the condition and the formatted input (first 10 per test). */
#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            if (h_cur_fail++ < 10) {                                                      \
                fprintf(stdout, "    FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);       \
                fprintf(stdout, __VA_ARGS__);                                             \
                fputc('\n', stdout);                                                      \
            }                                                                             \
        }                                                                                 \
    } while (0)

static inline double h_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline void h_run(const char *name, void (*fn)(void)) {
    h_cur_fail = 0;
    double t0 = h_now();
    fn();
    double dt = h_now() - t0;
    if (h_cur_fail) { h_fail++; printf("FAIL %s (%d failed checks, %.2fs)\n", name, h_cur_fail, dt); }
    else { h_pass++; printf("ok   %s (%.2fs)\n", name, dt); }
    fflush(stdout);
}
#define RUN(fn) h_run(#fn, fn)

static inline int h_end(void) {
    printf("%d passed, %d failed\n", h_pass, h_fail);
    return h_fail ? 1 : 0;
}

/* Run a shell command (printf-style); capture its stdout+stderr into out (cap bytes, may be NULL);
 * return its exit status, or -1 when it did not exit normally. */
static int h_sh(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4), unused));
static int h_sh(char *out, size_t cap, const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    strncat(cmd, " 2>&1", sizeof cmd - strlen(cmd) - 1);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    if (out && cap) {
        size_t n = fread(out, 1, cap - 1, p);
        out[n] = 0;
    }
    char buf[4096];
    while (fread(buf, 1, sizeof buf, p) > 0) {}
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A whole file in a malloc'd buffer with a 0 after its len bytes; NULL when it cannot be read. */
static unsigned char *h_read_file(const char *path, size_t *len) __attribute__((unused));
static unsigned char *h_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = sz >= 0 ? malloc((size_t)sz + 1) : NULL;
    if (buf) {
        *len = fread(buf, 1, (size_t)sz, f);
        buf[*len] = 0;
    }
    fclose(f);
    return buf;
}

/* The "loss" values of a JSON-lines training log, in order (at most cap); -1 when it cannot be read. */
static int h_read_losses(const char *path, double *loss, int cap) __attribute__((unused));
static int h_read_losses(const char *path, double *loss, int cap) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[2048];
    int n = 0;
    while (n < cap && fgets(line, sizeof line, f)) {
        char *p = strstr(line, "\"loss\":");
        if (p) loss[n++] = strtod(p + 7, NULL);
    }
    fclose(f);
    return n;
}

static inline unsigned h_rand32(void);
static inline void h_seed(unsigned long long s);
/* A small English corpus for the CLI tests: 2000 lines drawn from four proverbs by seed. 0 or -1. */
static int h_write_corpus(const char *path, unsigned long long seed) __attribute__((unused));
static int h_write_corpus(const char *path, unsigned long long seed) {
    static const char *lines[] = {"The quick brown fox jumps over the lazy dog.\n", "A stitch in time saves nine.\n",
                                  "All that glitters is not gold.\n", "Fortune favours the bold.\n"};
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    h_seed(seed);
    for (int i = 0; i < 2000; i++) fputs(lines[h_rand32() % 4], f);
    return fclose(f) == 0 ? 0 : -1;
}

/* The CLI test programs' set-up: the binary (COLLAGE_BIN, else build/collage; bin, 1024 bytes), a
 * fresh folder /tmp/collage-NAME-XXXXXX (dir, 256) and in it text.txt, the corpus of `seed` (text,
 * 512). 0, or 1 after printing why and a failed result line. */
static int h_cli_setup(const char *name, char *bin, char *dir, char *text, unsigned long long seed)
    __attribute__((unused));
static int h_cli_setup(const char *name, char *bin, char *dir, char *text, unsigned long long seed) {
    const char *b = getenv("COLLAGE_BIN");
    snprintf(bin, 1024, "%s", b ? b : "build/collage");
    if (access(bin, X_OK) != 0) {
        printf("test_%s: %s not found (set COLLAGE_BIN)\n0 passed, 1 failed\n", name, bin);
        return 1;
    }
    snprintf(dir, 256, "/tmp/collage-%s-XXXXXX", name);
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    snprintf(text, 512, "%s/text.txt", dir);
    if (h_write_corpus(text, seed)) { perror(text); return 1; }
    return 0;
}
/* The newest checkpoint folder of a run folder written by `collage train --save RUN`: RUN/step-N with
 * the largest N (out, cap bytes); RUN itself when it holds none (the older layout). The number of
 * checkpoint folders found. */
static int h_checkpoint(const char *run, char *out, size_t cap) __attribute__((unused));
static int h_checkpoint(const char *run, char *out, size_t cap) {
    char cmd[1024], line[512] = "";
    snprintf(cmd, sizeof cmd, "ls %s 2>/dev/null | grep -E '^step-[0-9]+$' | sort | tail -n 1", run);
    FILE *p = popen(cmd, "r");
    if (p) {
        if (!fgets(line, sizeof line, p)) line[0] = 0;
        pclose(p);
    }
    line[strcspn(line, "\n")] = 0;
    if (line[0]) snprintf(out, cap, "%s/%s", run, line);
    else snprintf(out, cap, "%s", run);
    snprintf(cmd, sizeof cmd, "ls %s 2>/dev/null | grep -cE '^step-[0-9]+$'", run);
    int n = 0;
    if ((p = popen(cmd, "r"))) {
        if (fgets(line, sizeof line, p)) n = atoi(line);
        pclose(p);
    }
    return n;
}

/* The environment of the tests that start mpirun. Open MPI refuses root unless told (and past 2 ranks
 * a 2-core machine needs --oversubscribe on the command line). ASan builds: Open MPI, PMIx and their
 * plugins keep allocations alive at exit by design, which LeakSanitizer reports as leaks.
 * tests/lsan.supp suppresses those libraries only (and the sanitizer runtime's own leak, as for every
 * test), so a leak in collage's own code is still reported; for the suppressions to match, the plugins
 * must stay loaded until exit (disable_dlclose) and malloc stacks must be unwound fully, through
 * libraries built without frame pointers (fast_unwind_on_malloc=0). No effect on a build without ASan.
 * Run from the repository root. */
static void h_mpi_env(void) __attribute__((unused));
static void h_mpi_env(void) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    setenv("OMPI_MCA_mca_base_component_disable_dlclose", "1", 1);
    setenv("PMIX_MCA_mca_base_component_disable_dlclose", "1", 1);
    char supp[4200], real[4096], asan[1024];
    if (realpath("tests/lsan.supp", real)) {
        snprintf(supp, sizeof supp, "suppressions=%s:print_suppressions=0", real);
        setenv("LSAN_OPTIONS", supp, 1);
    } else setenv("LSAN_OPTIONS", "", 1);
    const char *ao = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof asan, "%s%sfast_unwind_on_malloc=0", ao ? ao : "", ao && *ao ? ":" : "");
    setenv("ASAN_OPTIONS", asan, 1);
}

/* The processes below pid (mpirun's ranks, under timeout and mpirun) that run the program bin: their
 * count (at most cap), their ids in out. A process is matched by its executable (/proc/PID/exe against
 * bin's real path), not by its name, so a program that runs itself again is found whatever it is called. */
static int h_procs_below(pid_t pid, const char *bin, pid_t *out, int cap) __attribute__((unused));
static int h_procs_below(pid_t pid, const char *bin, pid_t *out, int cap) {
    char path[128], buf[1024] = "", want[4096], exe[4096];
    if (cap <= 0 || !realpath(bin, want)) return 0;
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, (int)pid);
    FILE *f = fopen(path, "r");
    if (f) { buf[fread(buf, 1, sizeof buf - 1, f)] = 0; fclose(f); }
    int n = 0;
    for (char *s = NULL, *t = strtok_r(buf, " \n", &s); t && n < cap; t = strtok_r(NULL, " \n", &s)) {
        const pid_t c = (pid_t)atoi(t);
        snprintf(path, sizeof path, "/proc/%d/exe", (int)c);
        const ssize_t len = readlink(path, exe, sizeof exe - 1);
        exe[len > 0 ? len : 0] = 0;
        if (!strcmp(exe, want)) out[n++] = c;
        else n += h_procs_below(c, bin, out + n, cap - n);
    }
    return n;
}

/* rm -rf dir (the CLI tests' folder), reporting a failure without counting it. */
static void h_rm_rf(const char *dir) __attribute__((unused));
static void h_rm_rf(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("could not remove %s\n", dir);
}

/* Deterministic test randomness (xorshift64*), seeded and printed by each test program. */
static unsigned long long h_rng_state = 0x853c49e6748fea9bULL;
static inline void h_seed(unsigned long long s) { h_rng_state = s ? s : 1; }
static inline unsigned long long h_rand64(void) {
    h_rng_state ^= h_rng_state >> 12; h_rng_state ^= h_rng_state << 25; h_rng_state ^= h_rng_state >> 27;
    return h_rng_state * 2685821657736338717ULL;
}
static inline unsigned h_rand32(void) { return (unsigned)(h_rand64() >> 32); }
static inline double h_uniform(void) { return (double)(h_rand64() >> 11) * (1.0 / 9007199254740992.0); }
/* A tensor's fp64 gradient g[off, off + count) against the 4-point central difference of loss(ctx, w)
 * (8(f(x+h) − f(x−h)) − (f(x+2h) − f(x−2h))) / 12h, error O(h⁴)): each element within rel·|g| + abs (the
 * first three failures named), and not all zero; prints max |g| and the worst error over its tolerance.
 * w is restored element by element. */
typedef double (*h_loss_fn)(void *ctx, double *w);
static void h_fd_tensor(const char *name, double *w, const double *g, size_t off, size_t count, h_loss_fn loss,
                        void *ctx, double h, double rel, double abs_tol) __attribute__((unused));
static void h_fd_tensor(const char *name, double *w, const double *g, size_t off, size_t count, h_loss_fn loss,
                        void *ctx, double h, double rel, double abs_tol) {
    double worst = 0, gmax = 0;
    int bad = 0;
    for (size_t i = off; i < off + count; i++) {
        const double x = w[i], d[4] = {h, -h, 2 * h, -2 * h};
        double f[4];
        for (int s = 0; s < 4; s++) { w[i] = x + d[s]; f[s] = loss(ctx, w); }
        w[i] = x;
        const double fd = (8.0 * (f[0] - f[1]) - (f[2] - f[3])) / (12.0 * h), e = fabs(g[i] - fd);
        const double tol = rel * fabs(g[i]) + abs_tol;
        if (e > tol && bad++ < 3) CHECK(0, "%s[%zu]: backward %.12e, finite difference %.12e", name, i - off, g[i], fd);
        gmax = fmax(gmax, fabs(g[i]));
        worst = fmax(worst, e / tol);
    }
    printf("    %-15s max|g| %.2e  worst error / tolerance %.1e%s\n", name, gmax, worst, bad ? "  FAIL" : "");
    CHECK(gmax > 0, "%s: zero gradient", name);
}

/* A tensor's float gradient gf[off, off + count) against the double one gd: max |gf − gd| within
 * tol · max |gd|. Returns max |gf − gd| / max |gd| (0 for an all-zero gd). */
static double h_f32_grad_gap(const char *name, const float *gf, const double *gd, size_t off, size_t count, double tol)
    __attribute__((unused));
static double h_f32_grad_gap(const char *name, const float *gf, const double *gd, size_t off, size_t count, double tol) {
    double gmax = 0, dmax = 0;
    for (size_t j = off; j < off + count; j++) {
        gmax = fmax(gmax, fabs(gd[j]));
        dmax = fmax(dmax, fabs((double)gf[j] - gd[j]));
    }
    CHECK(dmax <= tol * gmax, "%s: max |g32 - g64| %.3e, max |g64| %.3e", name, dmax, gmax);
    return gmax > 0 ? dmax / gmax : 0.0;
}

#endif
