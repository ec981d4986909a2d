/* gemm.c — the one door every matrix product of the layer ops goes through: the table of kernels a
 * product can run on (OpenBLAS's sgemm, oneDNN's sgemm, gemm_ref.c's; oneDNN's bf16 GEMM or the widening
 * path for bf16 operands), a fixed grid of single-threaded tiles spread over the OpenMP threads, the
 * guard that keeps OpenBLAS at one thread, and the timing of a model's products (products.c chooses). */
#include "nn.h"
#include <cblas.h>
#include <pthread.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef COLLAGE_DNNL
#include <oneapi/dnnl/dnnl.h>
/* Exported by libdnnl (2.x) but declared only in its internal headers: C = alpha·op(A)·op(B) + beta·C,
 * row-major, A and B bf16, C fp32. */
dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N, dnnl_dim_t K,
                                    float alpha, const uint16_t *A, dnnl_dim_t lda, const uint16_t *B,
                                    dnnl_dim_t ldb, float beta, float *C, dnnl_dim_t ldc);
#endif

#define GEMM_TILES 8            /* tiles per product, about */
#define GEMM_MIN_TILE 128       /* rows or columns per tile, at least (a multiple of 64) */
#define GEMM_PAR_MIN (1 << 21)  /* multiply-adds below which the tiles run on one thread */

/* ---------------------------------------------------------------- the kernels */
char *openblas_get_corename(void);

static void sgemm_openblas(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                           float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A, lda,
                B, ldb, beta, C, ldc);
}

#ifdef COLLAGE_DNNL
static void sgemm_onednn(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                         float beta, float *C, int ldc) {
    dnnl_status_t s = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    COLLAGE_ASSERT(s == dnnl_success);
}
#endif

static void sgemm_ref(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                      float beta, float *C, int ldc) {
    if (collage_get_isa() == COLLAGE_ISA_AVX512) nn_sgemm_ref_avx512(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    else nn_sgemm_ref(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

typedef void (*sgemm_fn)(int, int, int, int, int, const float *, int, const float *, int, float, float *, int);
static char g_openblas_label[96];

static const struct {
    const char *name, *label;
    sgemm_fn fn;
} k_sgemm[NN_SGEMM_COUNT] = {
    [NN_SGEMM_OPENBLAS] = {"openblas", g_openblas_label, sgemm_openblas},
#ifdef COLLAGE_DNNL
    [NN_SGEMM_ONEDNN] = {"onednn", "oneDNN sgemm", sgemm_onednn},
#else
    [NN_SGEMM_ONEDNN] = {"onednn", "oneDNN sgemm", NULL},
#endif
    [NN_SGEMM_REF] = {"ref", "collage's reference sgemm", sgemm_ref},
};

const char *nn_sgemm_name(nn_sgemm k) { return (unsigned)k < NN_SGEMM_COUNT ? k_sgemm[k].name : NULL; }
const char *nn_sgemm_label(nn_sgemm k) {
    if ((unsigned)k >= NN_SGEMM_COUNT) return "?";
    if (k == NN_SGEMM_OPENBLAS && !g_openblas_label[0])
        snprintf(g_openblas_label, sizeof g_openblas_label, "OpenBLAS sgemm (%s kernels)", nn_openblas_core());
    return k_sgemm[k].label;
}
int nn_sgemm_available(nn_sgemm k) { return (unsigned)k < NN_SGEMM_COUNT && k_sgemm[k].fn; }

/* The hardware behind oneDNN's bf16 path, asked of oneDNN once: "AMX", "AVX512_BF16", or NULL (none). */
static pthread_once_t g_hw_once = PTHREAD_ONCE_INIT;
static const char *g_hw;

static void detect_hw(void) {
#ifdef COLLAGE_DNNL
    const unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    const unsigned bf16 = (unsigned)dnnl_cpu_isa_avx512_core_bf16, amx = (unsigned)dnnl_cpu_isa_avx512_core_amx;
    if ((isa & amx) == amx) g_hw = "AMX";
    else if ((isa & bf16) == bf16) g_hw = "AVX512_BF16";
#endif
}

int nn_bf16_available(nn_bf16_path p) {
    pthread_once(&g_hw_once, detect_hw);
    return p == NN_BF16_WIDEN || (p == NN_BF16_ONEDNN && g_hw) || (p == NN_BF16_FMA && collage_get_isa() == COLLAGE_ISA_AVX512);
}
const char *nn_bf16_name(nn_bf16_path p) {
    return p == NN_BF16_ONEDNN ? "onednn" : p == NN_BF16_WIDEN ? "widen" : p == NN_BF16_FMA ? "fma" : NULL;
}
const char *nn_bf16_label(nn_bf16_path p) {
    pthread_once(&g_hw_once, detect_hw);
    if (p == NN_BF16_FMA) return "collage's bf16 GEMM (fp32 FMA, AVX-512)";
    if (p != NN_BF16_ONEDNN) return "widened to fp32 sgemm";
    return g_hw && g_hw[1] == 'M' ? "oneDNN bf16 GEMM (AMX)" : "oneDNN bf16 GEMM (AVX512_BF16)";
}

/* ---------------------------------------------------------------- pins */
static int parse_part(const char *v, size_t n, int bf16) {
    if (n == 4 && !strncmp(v, "auto", 4)) return -1;
    for (int k = 0; k < (bf16 ? NN_BF16_COUNT : NN_SGEMM_COUNT); k++) {
        const char *name = bf16 ? nn_bf16_name((nn_bf16_path)k) : nn_sgemm_name((nn_sgemm)k);
        if (strlen(name) == n && !strncmp(v, name, n)) return k;
    }
    return -2;
}

int nn_products_parse(const char *spec, int *f32, int *bf16, char *err, size_t cap) {
    *f32 = *bf16 = -1;
    if (!spec || !*spec) return snprintf(err, cap, "empty (give fp32=K,bf16=P, or ref)"), -1;
    if (!strcmp(spec, "ref")) return *f32 = NN_SGEMM_REF, *bf16 = NN_BF16_WIDEN, 0;
    for (const char *p = spec; *p;) {
        const size_t len = strcspn(p, ",");
        const char *eq = memchr(p, '=', len);
        const int isbf = eq && eq - p == 4 && !strncmp(p, "bf16", 4), isf = eq && eq - p == 4 && !strncmp(p, "fp32", 4);
        const int k = eq && (isbf || isf) ? parse_part(eq + 1, len - (size_t)(eq + 1 - p), isbf) : -3;
        if (k == -3)
            return snprintf(err, cap, "'%.*s' is not fp32=KERNEL or bf16=PATH", (int)len, p), -1;
        if (k == -2)
            return snprintf(err, cap, "'%.*s': %s", (int)len, p,
                            isbf ? "the bf16 paths are onednn, fma, widen, auto" : "the fp32 kernels are openblas, onednn, ref, auto"), -1;
        if (k >= 0 && (isbf ? !nn_bf16_available((nn_bf16_path)k) : !nn_sgemm_available((nn_sgemm)k)))
            return snprintf(err, cap, "'%.*s': not available in this build on this CPU", (int)len, p), -1;
        *(isbf ? bf16 : f32) = k;
        p += len + (p[len] == ',');
    }
    return 0;
}

/* The process's pin: collage_products_pin's spec (set: 1), else the environment's. */
static pthread_mutex_t g_pin_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_pin[64];
static int g_pin_set;

int nn_products_pin(const char *spec, char *err, size_t cap) {
    int f32, bf16;
    if (spec && nn_products_parse(spec, &f32, &bf16, err, cap) != 0) return -1;
    pthread_mutex_lock(&g_pin_lock);
    g_pin_set = spec != NULL;
    snprintf(g_pin, sizeof g_pin, "%s", spec ? spec : "");
    pthread_mutex_unlock(&g_pin_lock);
    return 0;
}

static _Thread_local char t_pin[64]; /* nn_products_pin_thread's; "" none */

int nn_products_pin_thread(const char *spec, char *err, size_t cap) {
    int f32, bf16;
    if (spec && nn_products_parse(spec, &f32, &bf16, err, cap) != 0) return -1;
    snprintf(t_pin, sizeof t_pin, "%s", spec ? spec : "");
    return 0;
}

void nn_products_pinned(int *f32, int *bf16) {
    char spec[64], err[160];
    pthread_mutex_lock(&g_pin_lock);
    int set = g_pin_set;
    snprintf(spec, sizeof spec, "%s", g_pin);
    pthread_mutex_unlock(&g_pin_lock);
    if (t_pin[0]) set = 1, snprintf(spec, sizeof spec, "%s", t_pin);
    *f32 = *bf16 = -1;
    const char *e = set ? spec : getenv("COLLAGE_GEMM");
    if (e && *e && nn_products_parse(e, f32, bf16, err, sizeof err) != 0) *f32 = *bf16 = -1;
    const char *w = getenv("COLLAGE_BF16_GEMM"); /* the narrower knob: it wins over COLLAGE_GEMM's bf16 part */
    if (!set && w && !strcmp(w, "widen")) *bf16 = NN_BF16_WIDEN;
}

/* ---------------------------------------------------------------- the guard and the kernel in use */
static pthread_mutex_t g_blas_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_blas_depth, g_blas_saved;
static _Thread_local int t_kernel = -1; /* this thread's bracket's kernel; -1: none */

int nn_blas_begin(nn_sgemm k) {
    pthread_mutex_lock(&g_blas_lock);
    if (g_blas_depth++ == 0) {
        g_blas_saved = openblas_get_num_threads();
        if (g_blas_saved != 1) openblas_set_num_threads(1);
    }
    pthread_mutex_unlock(&g_blas_lock);
    const int prev = t_kernel;
    t_kernel = (int)k;
    return prev;
}

void nn_blas_end(int token) {
    t_kernel = token;
    pthread_mutex_lock(&g_blas_lock);
    COLLAGE_ASSERT(g_blas_depth > 0);
    if (--g_blas_depth == 0 && g_blas_saved > 1) openblas_set_num_threads(g_blas_saved);
    pthread_mutex_unlock(&g_blas_lock);
}

/* The sgemm kernel of this thread's products: its bracket's, else the pinned one, else OpenBLAS. */
static nn_sgemm kernel_in_use(void) {
    if (t_kernel >= 0) return (nn_sgemm)t_kernel;
    int f32, bf16;
    nn_products_pinned(&f32, &bf16);
    return f32 >= 0 ? (nn_sgemm)f32 : NN_SGEMM_OPENBLAS;
}

/* Around a tile loop: OpenBLAS single-threaded (nn_blas_begin), and OpenMP's default team 1 on this
 * thread, since oneDNN runs a call made outside a parallel region on omp_get_max_threads() threads:
 * one thread per tile keeps every element's sum the same for any thread count. */
typedef struct { int token, omp; } tiles_guard;

static tiles_guard tiles_begin(nn_sgemm k) {
    tiles_guard g = {.token = nn_blas_begin(k), .omp = 1};
#ifdef _OPENMP
    g.omp = omp_get_max_threads();
    if (g.omp != 1) omp_set_num_threads(1);
#endif
    return g;
}

static void tiles_end(tiles_guard g) {
#ifdef _OPENMP
    if (g.omp != 1) omp_set_num_threads(g.omp);
#endif
    nn_blas_end(g.token);
}

void nn_sgemm_call(nn_sgemm k, int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                   float beta, float *C, int ldc) {
    COLLAGE_ASSERT(nn_sgemm_available(k));
    k_sgemm[k].fn(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

/* ---------------------------------------------------------------- the fp32 and fp64 products */
/* The tile grid of an (M,N) product: split along M when M ≥ N, else along N, in nb tiles of bs rows
 * or columns (the last one shorter). It depends on the shape only, so each element of C is computed
 * by the same kernel call with the same operands for any thread count. */
typedef struct { int split_m, dim, bs, nb; } gemm_grid;

static gemm_grid grid_of(int M, int N) {
    gemm_grid g = {.split_m = M >= N};
    g.dim = g.split_m ? M : N;
    int bs = (g.dim + GEMM_TILES - 1) / GEMM_TILES;
    bs = (bs + 63) / 64 * 64;
    if (bs < GEMM_MIN_TILE) bs = GEMM_MIN_TILE;
    g.bs = bs;
    g.nb = (g.dim + bs - 1) / bs;
    return g;
}

static void dgemm_openblas(int ta, int tb, int M, int N, int K, const double *A, int lda, const double *B, int ldb,
                           double beta, double *C, int ldc) {
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0, A, lda, B,
                ldb, beta, C, ldc);
}

#define GEMM_NAME nn_gemm_f32
#define GEMM_REAL float
#define GEMM_CALL(...) k_sgemm[k].fn(__VA_ARGS__)
#include "gemm_tiles.inc"

#define GEMM_NAME nn_gemm_f64
#define GEMM_REAL double
#define GEMM_CALL(...) dgemm_openblas(__VA_ARGS__)
#include "gemm_tiles.inc"

/* ---------------------------------------------------------------- bf16 operands, fp32 accumulation */
static int ws_reserve(nn_ws *ws, size_t floats) {
    if (floats <= ws->cap) return 0;
    float *p = realloc(ws->p, floats * sizeof(float));
    if (!p) return -1;
    ws->p = p;
    ws->cap = floats;
    return 0;
}

void nn_ws_free(nn_ws *ws) {
    free(ws->p);
    *ws = (nn_ws){0};
}

/* The tiles of a bf16 product: tm × tn blocks of C (the last row and column of tiles shorter), mb × nb
 * of them, numbered row-major. The widening path takes nn_gemm_f32's grid (one dimension split), so its
 * tiles are the sgemm calls of the float model; oneDNN's path takes tiles of at most
 * NATIVE_TILE × NATIVE_TILE, halved along the longer side (not below NATIVE_MIN) until there are
 * NATIVE_COUNT of them: a tile's fp32 result then stays in the core's L2 cache for its epilogue, and
 * oneDNN's kernels run near their peak on that shape (docs/numerics.md §10). Both depend on the shape
 * only, so each element of C comes from the same call with the same operands for any thread count. */
#define NATIVE_TILE 256
#define NATIVE_MIN 64
#define NATIVE_COUNT 6
#define FMA_TILE_N 768
typedef struct { int tm, tn, mb, nb; } tile_grid;

static tile_grid tiles_of(int M, int N, nn_bf16_path path) {
    tile_grid t;
    if (path == NN_BF16_WIDEN) {
        const gemm_grid g = grid_of(M, N);
        t.tm = g.split_m ? g.bs : M;
        t.tn = g.split_m ? N : g.bs;
    } else {
        t.tm = M < NATIVE_TILE ? M : NATIVE_TILE;
        const int wide = path == NN_BF16_FMA ? FMA_TILE_N : NATIVE_TILE; /* its A panels packed once a tile */
        t.tn = N < wide ? N : wide;
        while ((size_t)((M + t.tm - 1) / t.tm) * (size_t)((N + t.tn - 1) / t.tn) < NATIVE_COUNT) {
            int *side = t.tn >= t.tm ? &t.tn : &t.tm;
            if (*side / 2 < NATIVE_MIN) {
                side = side == &t.tn ? &t.tm : &t.tn;
                if (*side / 2 < NATIVE_MIN) break;
            }
            *side /= 2;
        }
    }
    t.mb = (M + t.tm - 1) / t.tm;
    t.nb = (N + t.tn - 1) / t.tn;
    return t;
}

/* A tile's floats: its result, and on the widening path both operands in fp32, on collage's own the
 * operands' packed panels. */
static size_t tile_floats(const tile_grid *t, int K, nn_bf16_path path) {
    const size_t m = (size_t)t->tm, n = (size_t)t->tn;
    return m * n + (path == NN_BF16_WIDEN  ? m * (size_t)K + (size_t)K * n
                    : path == NN_BF16_FMA ? nn_gemm_fma_pack_floats(t->tm, t->tn, K)
                                          : 0);
}

int nn_gemm_bf16_reserve(nn_ws *ws, int M, int N, int K, int nt, nn_bf16_path path) {
    if (path == NN_BF16_FMA) return ws_reserve(ws, nn_gemm_fma_floats(M, N, K, nt)); /* a band's for each thread */
    const tile_grid t = tiles_of(M, N, path);
    const int count = t.mb * t.nb;
    const size_t live = (size_t)(nt < count ? nt : count);
    return ws_reserve(ws, live * tile_floats(&t, K, path));
}

/* rows × cols of bf16 at src (row stride ld) widened into dst (row stride cols). */
static void widen_block(float *dst, const uint16_t *src, int ld, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        const uint16_t *s = src + (size_t)r * ld;
        float *d = dst + (size_t)r * cols;
        for (int c = 0; c < cols; c++) d[c] = bits_f32((uint32_t)s[c] << 16);
    }
}

/* One tile, C (m,n) = op(A)(m,K)·op(B)(K,n) into t (row stride n): oneDNN on bf16 operands, or the
 * operands widened (exact) and one call of sgemm kernel k with the shape of nn_gemm_f32's tile. */
static void tile_product(int ta, int tb, int m, int n, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                         float *t, nn_bf16_path path, nn_sgemm k) {
    if (K == 0) { /* an empty sum: +0, whatever a kernel's quick return leaves in t */
        memset(t, 0, (size_t)m * n * sizeof *t);
        return;
    }
#ifdef COLLAGE_DNNL
    if (path == NN_BF16_ONEDNN) {
        dnnl_status_t s = dnnl_gemm_bf16bf16f32(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, K, 1.0f, A, lda, B, ldb,
                                                0.0f, t, n);
        COLLAGE_ASSERT(s == dnnl_success);
        return;
    }
#endif
    if (path == NN_BF16_FMA) {
        nn_gemm_fma_tile(ta, tb, m, n, K, A, lda, B, ldb, t, t + (size_t)m * n);
        return;
    }
    COLLAGE_ASSERT(path == NN_BF16_WIDEN);
    float *a = t + (size_t)m * n, *b = a + (size_t)m * K;
    if (ta) widen_block(a, A, lda, K, m); else widen_block(a, A, lda, m, K);
    if (tb) widen_block(b, B, ldb, n, K); else widen_block(b, B, ldb, K, n);
    k_sgemm[k].fn(ta, tb, m, n, K, a, ta ? m : K, b, tb ? K : n, 0.0f, t, n);
}

void nn_gemm_bf16(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                  nn_tile_fn ep, void *ctx, nn_ws *ws, nn_bf16_path path, int nt) {
    nn_gemm_bf16_scaled(ta, tb, M, N, K, A, lda, B, ldb, 1.0f, ep, ctx, ws, path, nt);
}

void nn_gemm_bf16_scaled(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                         float s, nn_tile_fn ep, void *ctx, nn_ws *ws, nn_bf16_path path, int nt) {
    const double p0 = nn_prof_begin(); /* the whole call, epilogues included (nn.h: profiling) */
    if (path == NN_BF16_FMA) { /* collage's own: the whole product, its operands packed once (gemm_fma.c) */
        COLLAGE_ASSERT(ws->cap >= nn_gemm_fma_floats(M, N, K, nt));
        const tiles_guard guard = tiles_begin(kernel_in_use());
        nn_gemm_fma(ta, tb, M, N, K, A, lda, B, ldb, s, ep, ctx, ws->p, nt);
        tiles_end(guard);
        nn_prof_end(NN_PROF_PRODUCTS, p0, 2.0 * M * N * K);
        return;
    }
    const tile_grid g = tiles_of(M, N, path);
    const int count = g.mb * g.nb, par = count > 1 && (double)M * N * K >= GEMM_PAR_MIN;
    const size_t per = tile_floats(&g, K, path);
    COLLAGE_ASSERT(ws->cap >= (size_t)(par ? (nt < count ? nt : count) : 1) * per);
    const nn_sgemm k = kernel_in_use();
    const tiles_guard guard = tiles_begin(k);
#pragma omp parallel for schedule(static) num_threads(nt) if (par)
    for (int j = 0; j < count; j++) {
        int me = 0;
#ifdef _OPENMP
        me = omp_get_thread_num();
#endif
        float *t = ws->p + (size_t)me * per;
        const int i0 = j / g.nb * g.tm, j0 = j % g.nb * g.tn;
        const int m = M - i0 < g.tm ? M - i0 : g.tm, n = N - j0 < g.tn ? N - j0 : g.tn;
        tile_product(ta, tb, m, n, K, ta ? A + i0 : A + (size_t)i0 * lda, lda, tb ? B + (size_t)j0 * ldb : B + j0,
                     ldb, t, path, k);
        if (s != 1.0f) {
#pragma omp simd
            for (size_t e = 0; e < (size_t)m * n; e++) t[e] = t[e] * s;
        }
        ep(ctx, t, n, i0, i0 + m, j0, j0 + n);
    }
    tiles_end(guard);
    nn_prof_end(NN_PROF_PRODUCTS, p0, 2.0 * M * N * K);
}

/* The K-blocked product: per thread, a tile's scratch for K blocks of kb, then its accumulator. */
static size_t kblock_floats(const tile_grid *t, int kb, nn_bf16_path path) {
    return tile_floats(t, kb, path) + (size_t)t->tm * (size_t)t->tn;
}

int nn_gemm_bf16_kblocks_reserve(nn_ws *ws, int M, int N, int kb, int nt, nn_bf16_path path) {
    const tile_grid t = tiles_of(M, N, path);
    const int count = t.mb * t.nb;
    const size_t live = (size_t)(nt < count ? nt : count);
    return ws_reserve(ws, live * kblock_floats(&t, kb, path));
}

void nn_gemm_bf16_kblocks(int ta, int tb, int M, int N, int K, int kb, const uint16_t *A, int lda, const uint16_t *B,
                          int ldb, nn_fold_fn fold, nn_tile_fn ep, void *ctx, nn_ws *ws, nn_bf16_path path, int nt) {
    const double p0 = nn_prof_begin();
    const tile_grid g = tiles_of(M, N, path);
    const int count = g.mb * g.nb, par = count > 1 && (double)M * N * K >= GEMM_PAR_MIN;
    const size_t per = kblock_floats(&g, kb < K ? kb : K, path);
    COLLAGE_ASSERT(kb > 0 && ws->cap >= (size_t)(par ? (nt < count ? nt : count) : 1) * per);
    const nn_sgemm k = kernel_in_use();
    const tiles_guard guard = tiles_begin(k);
#pragma omp parallel for schedule(static) num_threads(nt) if (par)
    for (int j = 0; j < count; j++) {
        int me = 0;
#ifdef _OPENMP
        me = omp_get_thread_num();
#endif
        float *t = ws->p + (size_t)me * per, *acc = t + per - (size_t)g.tm * g.tn;
        const int i0 = j / g.nb * g.tm, j0 = j % g.nb * g.tn;
        const int m = M - i0 < g.tm ? M - i0 : g.tm, n = N - j0 < g.tn ? N - j0 : g.tn;
        for (int k0 = 0; k0 < K; k0 += kb) {
            const int kl = K - k0 < kb ? K - k0 : kb;
            const uint16_t *a = ta ? A + (size_t)k0 * lda + i0 : A + (size_t)i0 * lda + k0;
            const uint16_t *b = tb ? B + (size_t)j0 * ldb + k0 : B + (size_t)k0 * ldb + j0;
            tile_product(ta, tb, m, n, kl, a, lda, b, ldb, t, path, k);
            fold(ctx, t, n, acc, n, i0, i0 + m, j0, j0 + n, k0);
        }
        ep(ctx, acc, n, i0, i0 + m, j0, j0 + n);
    }
    tiles_end(guard);
    nn_prof_end(NN_PROF_PRODUCTS, p0, 2.0 * M * N * K);
}

void nn_gemm_fma_ref(int ta, int tb, int m, int n, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                     float *t) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float s = 0.0f;
            for (int k = 0; k < K; k++) {
                const uint16_t a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                const uint16_t b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                s = fmaf(bits_f32((uint32_t)a << 16), bits_f32((uint32_t)b << 16), s);
            }
            t[(size_t)i * n + j] = s;
        }
}

/* ---------------------------------------------------------------- timing a model's products */
static void ep_none(void *ctx, const float *t, int ldt, int i0, int i1, int j0, int j1) {
    (void)ctx, (void)t, (void)ldt, (void)i0, (void)i1, (void)j0, (void)j1;
}

/* The first tile of shape s, timed (best of reps) on this thread: fp32 operands at a, b, c (each large
 * enough), or bf16 ones at a16, b16 with ws for the result. Returns seconds × tiles. On collage's own
 * bf16 path the "tile" is a band of the product (nn_gemm_fma_band), run whole with its packing, and the
 * seconds are scaled by the product's area over the band's. */
static double time_tile(const nn_shape *s, int bf16, nn_sgemm k, nn_bf16_path path, const float *a, const float *b,
                        float *c, const uint16_t *a16, const uint16_t *b16, float *t, int reps) {
    int m, n, tiles;
    if (bf16 && path == NN_BF16_FMA) {
        nn_gemm_fma_band(s->M, s->N, &m, &n);
        tiles = 1;
    } else if (bf16) {
        const tile_grid g = tiles_of(s->M, s->N, path);
        m = g.tm, n = g.tn, tiles = g.mb * g.nb;
    } else {
        const gemm_grid g = grid_of(s->M, s->N);
        m = g.split_m ? g.bs : s->M, n = g.split_m ? s->N : g.bs, tiles = g.nb;
    }
    if (m > s->M) m = s->M; /* a grid's tile may be wider than the product */
    if (n > s->N) n = s->N;
    const int lda = s->ta ? m : s->K, ldb = s->tb ? s->K : n;
    double best = HUGE_VAL;
    for (int r = 0; r <= reps; r++) { /* the first run warms the caches and the kernel's code */
        const double t0 = nn_now();
        if (bf16 && path == NN_BF16_FMA) nn_gemm_fma(s->ta, s->tb, m, n, s->K, a16, lda, b16, ldb, 1.0f, ep_none, NULL, t, 1);
        else if (bf16) tile_product(s->ta, s->tb, m, n, s->K, a16, lda, b16, ldb, t, path, k);
        else k_sgemm[k].fn(s->ta, s->tb, m, n, s->K, a, lda, b, ldb, 0.0f, c, n);
        const double dt = nn_now() - t0;
        if (r > 0 && dt < best) best = dt;
    }
    const double area = bf16 && path == NN_BF16_FMA ? (double)s->M * s->N / ((double)m * n) : 1.0;
    return best * tiles * area;
}

double nn_products_seconds(const nn_shape *shapes, int n, int bf16, nn_sgemm f32, nn_bf16_path path, int reps,
                           double limit) {
    size_t amax = 1, bmax = 1, cmax = 1, pmax = 0;
    for (int i = 0; i < n; i++) {
        const size_t M = (size_t)shapes[i].M, N = (size_t)shapes[i].N, K = (size_t)shapes[i].K;
        if (M * K > amax) amax = M * K;
        if (K * N > bmax) bmax = K * N;
        if (M * N > cmax) cmax = M * N;
        const size_t pk = nn_gemm_fma_pack_floats(shapes[i].M, shapes[i].N, shapes[i].K); /* a tile's at most */
        const size_t pf = nn_gemm_fma_floats(shapes[i].M, shapes[i].N, shapes[i].K, 1); /* a band's */
        if (pk > pmax) pmax = pk;
        if (pf > pmax) pmax = pf;
    }
    float *a = malloc(amax * 4), *b = malloc(bmax * 4), *c = malloc((cmax + amax + bmax + pmax) * 4);
    uint16_t *a16 = malloc(amax * 2), *b16 = malloc(bmax * 2);
    double total = HUGE_VAL;
    if (a && b && c && a16 && b16) {
        for (size_t i = 0; i < amax; i++) a[i] = (float)((int)(i * 2654435761u % 2001u) - 1000) * 1e-3f;
        for (size_t i = 0; i < bmax; i++) b[i] = (float)((int)(i * 40503u % 2001u) - 1000) * 1e-3f;
        for (size_t i = 0; i < amax; i++) a16[i] = (uint16_t)(f32_bits(a[i]) >> 16);
        for (size_t i = 0; i < bmax; i++) b16[i] = (uint16_t)(f32_bits(b[i]) >> 16);
        const tiles_guard guard = tiles_begin(f32);
        total = 0;
        for (int i = 0; i < n && total <= limit; i++)
            total += shapes[i].count * time_tile(&shapes[i], bf16, f32, path, a, b, c, a16, b16, c, reps);
        tiles_end(guard);
        if (total > limit) total = HUGE_VAL;
    }
    free(a), free(b), free(c), free(a16), free(b16);
    return total;
}

/* ---------------------------------------------------------------- OpenBLAS's core type */
const char *nn_openblas_core(void) {
    const char *s = openblas_get_corename();
    return s ? s : "unknown";
}

/* The kernels' vector width by OpenBLAS's name for them (x86-64): 3 AVX-512, 2 AVX2 with FMA, 1 less. */
static int core_level(const char *core) {
    static const char *const avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    static const char *const avx2[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"};
    for (size_t i = 0; i < sizeof avx512 / sizeof *avx512; i++)
        if (!strcasecmp(core, avx512[i])) return 3;
    for (size_t i = 0; i < sizeof avx2 / sizeof *avx2; i++)
        if (!strcasecmp(core, avx2[i])) return 2;
    return 1;
}

int nn_openblas_below(const char **want) {
    const int cpu = collage_isa_supported(COLLAGE_ISA_AVX512) && __builtin_cpu_supports("avx512dq") ? 3
                    : collage_isa_supported(COLLAGE_ISA_AVX2)                                       ? 2
                                                                                                    : 1;
    const int below = core_level(nn_openblas_core()) < cpu;
    if (want) *want = !below ? NULL : cpu == 3 ? "SkylakeX" : "Haswell";
    return below;
}
