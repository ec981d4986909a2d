/* gemm.c — the one door every matrix product of the layer ops goes through: a fixed grid of
 * single-threaded OpenBLAS tiles (sgemm for float, dgemm for double) spread over the OpenMP threads,
 * and the guard that keeps OpenBLAS at one thread for the length of a library call. */
#include "nn.h"
#include <cblas.h>
#include <pthread.h>

#define GEMM_TILES 8            /* tiles per product, about */
#define GEMM_MIN_TILE 128       /* rows or columns per tile, at least (a multiple of 64) */
#define GEMM_PAR_MIN (1 << 21)  /* multiply-adds below which the tiles run on one thread */

/* The tile grid of an (M,N) product: split along M when M ≥ N, else along N, in nb tiles of bs rows
 * or columns (the last one shorter). It depends on the shape only, so each element of C is computed
 * by the same BLAS call with the same operands for any thread count. */
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

#define GEMM_NAME nn_gemm_f32
#define GEMM_REAL float
#define GEMM_BLAS cblas_sgemm
#define GEMM_ONE 1.0f
#include "gemm_tiles.inc"

#define GEMM_NAME nn_gemm_f64
#define GEMM_REAL double
#define GEMM_BLAS cblas_dgemm
#define GEMM_ONE 1.0
#include "gemm_tiles.inc"

/* OpenBLAS's thread count is process-wide, and model calls may run on several host threads at once (the
 * ranks of a run over threads): the first call in sets it to 1 and keeps the caller's value, the last
 * one out puts that value back. When the host keeps OpenBLAS at one thread, nothing is set. */
static pthread_mutex_t g_blas_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_blas_depth, g_blas_saved;

void nn_blas_begin(void) {
    pthread_mutex_lock(&g_blas_lock);
    if (g_blas_depth++ == 0) {
        g_blas_saved = openblas_get_num_threads();
        if (g_blas_saved != 1) openblas_set_num_threads(1);
    }
    pthread_mutex_unlock(&g_blas_lock);
}

void nn_blas_end(void) {
    pthread_mutex_lock(&g_blas_lock);
    COLLAGE_ASSERT(g_blas_depth > 0);
    if (--g_blas_depth == 0 && g_blas_saved > 1) openblas_set_num_threads(g_blas_saved);
    pthread_mutex_unlock(&g_blas_lock);
}

/* ---------------------------------------------------------------- bf16 operands, fp32 accumulation */
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

/* The hardware behind the native path, asked of oneDNN once: AMX tiles, AVX512_BF16, or none. */
static pthread_once_t g_hw_once = PTHREAD_ONCE_INIT;
static nn_bf16_path g_hw = NN_BF16_WIDEN;

static void detect_hw(void) {
#ifdef COLLAGE_DNNL
    const unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    const unsigned bf16 = (unsigned)dnnl_cpu_isa_avx512_core_bf16, amx = (unsigned)dnnl_cpu_isa_avx512_core_amx;
    if ((isa & amx) == amx) g_hw = NN_BF16_AMX;
    else if ((isa & bf16) == bf16) g_hw = NN_BF16_AVX512;
#endif
}

nn_bf16_path nn_bf16_hardware(void) {
    pthread_once(&g_hw_once, detect_hw);
    return g_hw;
}

nn_bf16_path nn_bf16_path_chosen(void) {
    const char *e = getenv("COLLAGE_BF16_GEMM");
    if (e && strcmp(e, "widen") == 0) return NN_BF16_WIDEN;
    return nn_bf16_hardware();
}

const char *nn_bf16_path_name(nn_bf16_path p) {
    switch (p) {
    case NN_BF16_AMX: return "oneDNN bf16 GEMM (AMX)";
    case NN_BF16_AVX512: return "oneDNN bf16 GEMM (AVX512_BF16)";
    default: return "widening to fp32 sgemm";
    }
}

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
typedef struct { int tm, tn, mb, nb; } tile_grid;

static tile_grid tiles_of(int M, int N, nn_bf16_path path) {
    tile_grid t;
    if (path == NN_BF16_WIDEN) {
        const gemm_grid g = grid_of(M, N);
        t.tm = g.split_m ? g.bs : M;
        t.tn = g.split_m ? N : g.bs;
    } else {
        t.tm = M < NATIVE_TILE ? M : NATIVE_TILE;
        t.tn = N < NATIVE_TILE ? N : NATIVE_TILE;
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

/* A tile's floats: its result, and on the widening path both operands in fp32. */
static size_t tile_floats(const tile_grid *t, int K, int widen) {
    const size_t m = (size_t)t->tm, n = (size_t)t->tn;
    return m * n + (widen ? m * (size_t)K + (size_t)K * n : 0);
}

int nn_gemm_bf16_reserve(nn_ws *ws, int M, int N, int K, int nt, nn_bf16_path path) {
    const tile_grid t = tiles_of(M, N, path);
    const int count = t.mb * t.nb;
    const size_t live = (size_t)(nt < count ? nt : count);
    return ws_reserve(ws, live * tile_floats(&t, K, path == NN_BF16_WIDEN));
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
 * operands widened (exact) and one sgemm with the shape of nn_gemm_f32's tile. */
static void tile_product(int ta, int tb, int m, int n, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                         float *t, nn_bf16_path path) {
#ifdef COLLAGE_DNNL
    if (path != NN_BF16_WIDEN) {
        dnnl_status_t s = dnnl_gemm_bf16bf16f32(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, K, 1.0f, A, lda, B, ldb,
                                                0.0f, t, n);
        COLLAGE_ASSERT(s == dnnl_success);
        return;
    }
#endif
    (void)path;
    float *a = t + (size_t)m * n, *b = a + (size_t)m * K;
    if (ta) widen_block(a, A, lda, K, m); else widen_block(a, A, lda, m, K);
    if (tb) widen_block(b, B, ldb, n, K); else widen_block(b, B, ldb, K, n);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, K, 1.0f, a,
                ta ? m : K, b, tb ? K : n, 0.0f, t, n);
}

void nn_gemm_bf16(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                  nn_tile_fn ep, void *ctx, nn_ws *ws, nn_bf16_path path, int nt) {
    const tile_grid g = tiles_of(M, N, path);
    const int count = g.mb * g.nb, par = count > 1 && (double)M * N * K >= GEMM_PAR_MIN;
    const size_t per = tile_floats(&g, K, path == NN_BF16_WIDEN);
    COLLAGE_ASSERT(ws->cap >= (size_t)(par ? (nt < count ? nt : count) : 1) * per);
#ifdef _OPENMP
    /* oneDNN runs a call on omp_get_max_threads() threads unless it is made inside a parallel region:
     * one thread per tile keeps every element's sum the same for any thread count. */
    const int saved = omp_get_max_threads();
    if (saved != 1) omp_set_num_threads(1);
#endif
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
                     ldb, t, path);
        ep(ctx, t, n, i0, i0 + m, j0, j0 + n);
    }
#ifdef _OPENMP
    if (saved != 1) omp_set_num_threads(saved);
#endif
}
