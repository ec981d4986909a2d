/* products.c — which kernels a model's matrix products run on (nn.h's table): pinned (collage_products_pin,
 * COLLAGE_GEMM), else remembered for this machine and these shapes (the products file, FFTW's wisdom),
 * else measured now, each kernel timed on the model's own product shapes on one thread, the fastest
 * taken and remembered. Measured once per machine, kept in a file and recorded by a training run, so
 * the choice, and with it the bits, is the same on every rerun and resume (docs/numerics.md §10). */
#include "model.h"
#include "nn.h"
#include <cpuid.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define PRODUCTS_MAGIC "collage-products 1"
/* The kernels' revision, part of every key: raised when a kernel of the table changes its speed (or one
 * is added), so that a choice made by an earlier library is measured again rather than kept.
 * 2: bf16=fma packs each operand once per product. */
#define PRODUCTS_REVISION 2
#define PRODUCTS_MEMO 64      /* shape sets remembered in the process */
#define PRODUCTS_REPS 2       /* timed runs of each tile (after one to warm up) */
#define PRODUCTS_SLACK 1.5    /* a kernel past this many times the best so far stops being timed */

/* ---------------------------------------------------------------- the model's products */
/* Each matrix a token goes through (collage_tensor_info's product) as its three products on N rows
 * (forward out = inp·Wᵀ, backward dinp = dout·W, dW = doutᵀ·inp), a masked-LM head's on about 15% of
 * them, each counted once per layer. Returns the count (at most cap). */
static int shapes_of(const collage_model_config *cfg, int N, nn_shape *out, int cap) {
    collage_tensor_info t[COLLAGE_MODEL_MAX_TENSORS];
    const int nt = collage_model_tensors(cfg, t, COLLAGE_MODEL_MAX_TENSORS);
    int n = 0;
    for (int k = 0; k < nt && n + 3 <= cap; k++) {
        if (!t[k].product) continue;
        const int layered = t[k].ndim == 3, OC = (int)t[k].shape[layered], C = (int)t[k].shape[layered + 1];
        const int rows = t[k].product == 2 ? (N + 6) / 7 : N, count = layered ? (int)t[k].shape[0] : 1;
        out[n++] = (nn_shape){0, 1, rows, OC, C, count};
        out[n++] = (nn_shape){0, 0, rows, C, OC, count};
        out[n++] = (nn_shape){1, 0, OC, C, rows, count};
    }
    return n;
}

static double flops_of(const nn_shape *s, int n) {
    double f = 0;
    for (int i = 0; i < n; i++) f += 2.0 * s[i].count * s[i].M * s[i].N * (double)s[i].K;
    return f;
}

/* ---------------------------------------------------------------- the machine's key */
/* What the kernels' speed and bits depend on: the CPU (brand, family, model), OpenBLAS's core type,
 * oneDNN's instruction set (DNNL_MAX_CPU_ISA caps it), collage's (COLLAGE_ISA) and its kernels' revision. */
static void machine_key(char *out, size_t cap) {
    unsigned r[12] = {0}, a = 0, b = 0, c = 0, d = 0;
    for (unsigned i = 0; i < 3; i++) __get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
    char brand[49] = {0};
    memcpy(brand, r, 48);
    for (char *p = brand; *p; p++)
        if (*p == ' ' || *p == '|') *p = '_';
    __get_cpuid(1, &a, &b, &c, &d);
    const char *bf16 = nn_bf16_available(NN_BF16_ONEDNN) ? nn_bf16_label(NN_BF16_ONEDNN) : "no-bf16";
    snprintf(out, cap, "%s|%08x|%s|%.24s|%s|r%d", brand[0] == '_' ? brand + strspn(brand, "_") : brand, a,
             nn_openblas_core(), strchr(bf16, '(') ? strchr(bf16, '(') : bf16, collage_isa_name(collage_get_isa()),
             PRODUCTS_REVISION);
    for (char *p = out; *p; p++)
        if (*p == ' ') *p = '_';
}

/* The key of a shape set on this machine: the machine's, then an FNV-1a hash of the shapes. */
static void shapes_key(const nn_shape *s, int n, char *out, size_t cap) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < n; i++) {
        const int v[6] = {s[i].ta, s[i].tb, s[i].M, s[i].N, s[i].K, s[i].count};
        for (int j = 0; j < 6; j++) h = (h ^ (uint64_t)(unsigned)v[j]) * 0x100000001b3ULL;
    }
    char m[160];
    machine_key(m, sizeof m);
    snprintf(out, cap, "%s|%016llx", m, (unsigned long long)h);
}

/* ---------------------------------------------------------------- the products file */
/* COLLAGE_PRODUCTS_FILE, else $XDG_CACHE_HOME/collage/products, else ~/.cache/collage/products; "" or
 * "off": none (measured in each process). Lines: "KEY fp32|bf16 CHOSEN GFLOPS", one per shape set and
 * kind; a line that does not parse, or names a kernel this build lacks, is measured again. */
static int products_path(char *out, size_t cap) {
    const char *e = getenv("COLLAGE_PRODUCTS_FILE");
    if (e) return *e && strcmp(e, "off") ? (snprintf(out, cap, "%s", e), 1) : 0;
    const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char dir[3000];
    if (x && *x) snprintf(dir, sizeof dir, "%s/collage", x);
    else if (home && *home) snprintf(dir, sizeof dir, "%s/.cache/collage", home);
    else return 0;
    char *slash = strrchr(dir, '/');
    *slash = 0;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return 0;
    *slash = '/';
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return 0;
    snprintf(out, cap, "%s/products", dir);
    return 1;
}

static int file_lookup(const char *key, int bf16, int *chosen, double *gflops) {
    char path[4096], line[512];
    if (!products_path(path, sizeof path)) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int found = 0;
    const size_t kl = strlen(key);
    if (fgets(line, sizeof line, f) && !strncmp(line, PRODUCTS_MAGIC, strlen(PRODUCTS_MAGIC))) {
        while (fgets(line, sizeof line, f)) {
            char kind[8], name[16];
            double g;
            if (strncmp(line, key, kl) || line[kl] != ' ' || sscanf(line + kl, " %7s %15s %lf", kind, name, &g) != 3 ||
                strcmp(kind, bf16 ? "bf16" : "fp32"))
                continue;
            int f32k, bk;
            char spec[40], err[160];
            snprintf(spec, sizeof spec, "%s=%s", kind, name);
            if (nn_products_parse(spec, &f32k, &bk, err, sizeof err) != 0 || (bf16 ? bk : f32k) < 0) continue;
            *chosen = bf16 ? bk : f32k;
            *gflops = g;
            found = 1;
        }
    }
    fclose(f);
    return found;
}

/* Adds (or replaces) the line of key and kind, written atomically; a file that cannot be written is
 * left as it was (the choice then holds for this process). */
static void file_store(const char *key, int bf16, const char *name, double gflops) {
    char path[4096], line[512], err[200];
    if (!products_path(path, sizeof path)) return;
    collage_atomic_file af;
    if (collage_atomic_open(&af, path, err, sizeof err) != COLLAGE_OK) return;
    fprintf(af.f, "%s\n", PRODUCTS_MAGIC);
    FILE *f = fopen(path, "r");
    const size_t kl = strlen(key);
    const char *kind = bf16 ? "bf16" : "fp32";
    if (f && fgets(line, sizeof line, f) && !strncmp(line, PRODUCTS_MAGIC, strlen(PRODUCTS_MAGIC)))
        while (fgets(line, sizeof line, f))
            if (strchr(line, '\n') && !(!strncmp(line, key, kl) && line[kl] == ' ' && !strncmp(line + kl + 1, kind, 4)))
                fputs(line, af.f);
    if (f) fclose(f);
    fprintf(af.f, "%s %s %s %.1f\n", key, kind, name, gflops);
    if (collage_atomic_commit(&af, err, sizeof err) != COLLAGE_OK) collage_atomic_abort(&af);
}

/* The products file's lock (PATH.lock, flock'd exclusively): processes that start together (the ranks of
 * an MPI run) measure one at a time, and each looks in the file again once it holds the lock, so that the
 * first one's choice is every one's. -1 when there is no file or the lock cannot be taken (the process
 * then measures on its own, as without a file). */
static int file_lock(void) {
    char path[4096 + 8];
    if (!products_path(path, sizeof path - 8)) return -1;
    strcat(path, ".lock");
    const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    while (flock(fd, LOCK_EX) != 0)
        if (errno != EINTR) { close(fd); return -1; }
    return fd;
}
static void file_unlock(int fd) {
    if (fd >= 0) close(fd); /* closing the descriptor releases the flock */
}

/* ---------------------------------------------------------------- measuring */
static int measure_f32(const nn_shape *s, int n, double *gflops) {
    int best = NN_SGEMM_OPENBLAS;
    double tbest = HUGE_VAL;
    for (int k = 0; k < NN_SGEMM_COUNT; k++) {
        if (!nn_sgemm_available((nn_sgemm)k)) continue;
        const double t = nn_products_seconds(s, n, 0, (nn_sgemm)k, NN_BF16_WIDEN, PRODUCTS_REPS, tbest * PRODUCTS_SLACK);
        if (t < tbest) tbest = t, best = k;
    }
    *gflops = flops_of(s, n) / tbest * 1e-9;
    return best;
}

static int measure_bf16(const nn_shape *s, int n, nn_sgemm f32, double *gflops) {
    int best = NN_BF16_WIDEN;
    double tbest = HUGE_VAL;
    for (int p = NN_BF16_COUNT - 1; p >= 0; p--) {
        if (!nn_bf16_available((nn_bf16_path)p)) continue;
        const double t = nn_products_seconds(s, n, 1, f32, (nn_bf16_path)p, PRODUCTS_REPS, tbest * PRODUCTS_SLACK);
        if (t < tbest) tbest = t, best = p;
    }
    *gflops = flops_of(s, n) / tbest * 1e-9;
    return best;
}

/* ---------------------------------------------------------------- the choice, remembered in the process */
typedef struct {
    char key[224];
    int have[2], chosen[2];
    double gflops[2];
    char how[2][12];
} memo_entry;
static memo_entry g_memo[PRODUCTS_MEMO];
static int g_nmemo;
static pthread_mutex_t g_memo_lock = PTHREAD_MUTEX_INITIALIZER;

/* The choice of one kind (0 fp32, 1 bf16) for the shapes of e: remembered, or measured and stored. */
static void choose_kind(memo_entry *e, int kind, const nn_shape *s, int n) {
    if (e->have[kind]) return;
    if (file_lookup(e->key, kind, &e->chosen[kind], &e->gflops[kind])) {
        snprintf(e->how[kind], sizeof e->how[kind], "remembered");
        e->have[kind] = 1;
        return;
    }
    const int lock = file_lock();
    if (file_lookup(e->key, kind, &e->chosen[kind], &e->gflops[kind])) { /* stored while this process waited */
        snprintf(e->how[kind], sizeof e->how[kind], "remembered");
    } else {
        e->chosen[kind] = kind ? measure_bf16(s, n, (nn_sgemm)e->chosen[0], &e->gflops[kind])
                               : measure_f32(s, n, &e->gflops[kind]);
        snprintf(e->how[kind], sizeof e->how[kind], "measured");
        file_store(e->key, kind, kind ? nn_bf16_name((nn_bf16_path)e->chosen[kind]) : nn_sgemm_name((nn_sgemm)e->chosen[kind]),
                   e->gflops[kind]);
    }
    file_unlock(lock);
    e->have[kind] = 1;
}

void collage__products_forget(void) {
    pthread_mutex_lock(&g_memo_lock);
    g_nmemo = 0;
    pthread_mutex_unlock(&g_memo_lock);
}

collage_status collage__products_for(const collage_model_config *cfg, collage_real prec, int N, collage__products *out) {
    const int bf16 = prec == COLLAGE_REAL_BF16;
    int pin[2];
    nn_products_pinned(&pin[0], &pin[1]);
    nn_shape s[3 * COLLAGE_MODEL_MAX_TENSORS];
    const int n = shapes_of(cfg, N, s, 3 * COLLAGE_MODEL_MAX_TENSORS);
    *out = (collage__products){.prod = {NN_SGEMM_OPENBLAS, NN_BF16_WIDEN}};
    const int kinds = prec == COLLAGE_REAL_FP64 ? 0 : bf16 ? 2 : 1;
    int need = 0;
    for (int k = 0; k < kinds; k++) need |= pin[k] < 0;
    if (need && n > 0) {
        char key[224];
        shapes_key(s, n, key, sizeof key);
        if (pin[0] >= 0) /* bf16's widening path timed with the pinned fp32 kernel: a choice of its own */
            snprintf(key + strlen(key), sizeof key - strlen(key), "|%s", nn_sgemm_name((nn_sgemm)pin[0]));
        pthread_mutex_lock(&g_memo_lock);
        memo_entry *e = NULL;
        for (int i = 0; i < g_nmemo && !e; i++)
            if (!strcmp(g_memo[i].key, key)) e = &g_memo[i];
        if (!e) {
            e = &g_memo[g_nmemo < PRODUCTS_MEMO ? g_nmemo++ : PRODUCTS_MEMO - 1];
            *e = (memo_entry){0};
            snprintf(e->key, sizeof e->key, "%s", key);
        }
        /* the widening path is measured with the fp32 kernel in force: the pinned one where fp32 is pinned */
        if (pin[0] >= 0 && !e->have[0]) e->chosen[0] = pin[0];
        for (int k = 0; k < kinds; k++)
            if (pin[k] < 0) choose_kind(e, k, s, n);
        for (int k = 0; k < kinds; k++)
            if (pin[k] < 0) {
                out->gflops[k] = e->gflops[k];
                snprintf(out->how[k], sizeof out->how[k], "%s", e->how[k]);
            }
        if (pin[0] < 0) out->prod.f32 = (nn_sgemm)e->chosen[0];
        if (bf16 && pin[1] < 0) out->prod.bf16 = (nn_bf16_path)e->chosen[1];
        pthread_mutex_unlock(&g_memo_lock);
    }
    for (int k = 0; k < 2; k++)
        if (pin[k] >= 0) snprintf(out->how[k], sizeof out->how[k], "pinned");
    if (pin[0] >= 0) out->prod.f32 = (nn_sgemm)pin[0];
    if (pin[1] >= 0) out->prod.bf16 = (nn_bf16_path)pin[1];
    return COLLAGE_OK;
}

void collage__products_describe(const collage__products *p, collage_real prec, char *out, size_t cap) {
    const int bf16 = prec == COLLAGE_REAL_BF16;
    char f[96] = "", b[96] = "";
    if (prec == COLLAGE_REAL_FP64) {
        snprintf(out, cap, "OpenBLAS dgemm (%s kernels)", nn_openblas_core());
        return;
    }
    if (p->gflops[0] > 0) snprintf(f, sizeof f, ", %.0f GFLOP/s", p->gflops[0]);
    if (p->gflops[1] > 0) snprintf(b, sizeof b, ", %.0f GFLOP/s", p->gflops[1]);
    if (!bf16) {
        snprintf(out, cap, "%s (%s%s)", nn_sgemm_label(p->prod.f32), p->how[0], f);
    } else if (p->prod.bf16 != NN_BF16_WIDEN) {
        snprintf(out, cap, "%s (%s%s)", nn_bf16_label(p->prod.bf16), p->how[1], b);
    } else {
        snprintf(out, cap, "bf16 widened to fp32, %s (%s%s)", nn_sgemm_label(p->prod.f32), p->how[1], b);
    }
}

void collage__products_spec(const collage__products *p, collage_real prec, char *out, size_t cap) {
    if (prec == COLLAGE_REAL_BF16) snprintf(out, cap, "fp32=%s,bf16=%s", nn_sgemm_name(p->prod.f32), nn_bf16_name(p->prod.bf16));
    else snprintf(out, cap, "fp32=%s", nn_sgemm_name(p->prod.f32));
}

int collage__products_remembered(char *out, size_t cap) {
    char path[4096], line[512], m[160];
    size_t len = 0;
    int n = 0;
    if (cap) out[0] = 0;
    if (!products_path(path, sizeof path)) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    machine_key(m, sizeof m);
    const size_t ml = strlen(m);
    while (fgets(line, sizeof line, f) && len < cap) {
        char kind[8], name[16];
        double g;
        if (strncmp(line, m, ml) || line[ml] != '|' || sscanf(line + strcspn(line, " "), " %7s %15s %lf", kind, name, &g) != 3)
            continue;
        len += (size_t)snprintf(out + len, cap - len, "%s  %s %s %.0f GFLOP/s (shapes %.16s)", n ? "\n" : "", kind, name, g,
                                line + ml + 1);
        n++;
    }
    fclose(f);
    return n;
}

collage_status collage_products_pin(const char *spec, char *err, size_t cap) {
    char e[160];
    if (nn_products_pin(spec, e, sizeof e) != 0) {
        if (err && cap) snprintf(err, cap, "products '%s': %s", spec, e);
        return COLLAGE_ERR_ARG;
    }
    return COLLAGE_OK;
}

collage_status collage_products_check(const char *spec, char *err, size_t cap) {
    int f, b;
    char e[160];
    if (nn_products_parse(spec, &f, &b, e, sizeof e) != 0) {
        if (err && cap) snprintf(err, cap, "%s", e);
        return COLLAGE_ERR_ARG;
    }
    return COLLAGE_OK;
}
