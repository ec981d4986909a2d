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

/* Each tile is one BLAS call that runs single-threaded (nn_blas_begin): the OpenMP threads are the only
 * ones that run, and a second pool of threads beside OpenMP's would halve the speed on a small machine. */
void nn_gemm_f32(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float beta,
                 float *C, int ldc, int nt) {
    (void)nt; /* read by the OpenMP pragmas only */
    const gemm_grid g = grid_of(M, N);
    const enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
#pragma omp parallel for schedule(static) num_threads(nt) if (g.nb > 1 && (double)M * N * K >= GEMM_PAR_MIN)
    for (int j = 0; j < g.nb; j++) {
        const int j0 = j * g.bs, w = g.dim - j0 < g.bs ? g.dim - j0 : g.bs;
        if (g.split_m)
            cblas_sgemm(CblasRowMajor, TA, TB, w, N, K, 1.0f, ta ? A + j0 : A + (size_t)j0 * lda, lda, B, ldb, beta,
                        C + (size_t)j0 * ldc, ldc);
        else
            cblas_sgemm(CblasRowMajor, TA, TB, M, w, K, 1.0f, A, lda, tb ? B + (size_t)j0 * ldb : B + j0, ldb, beta,
                        C + j0, ldc);
    }
}

void nn_gemm_f64(int ta, int tb, int M, int N, int K, const double *A, int lda, const double *B, int ldb,
                 double beta, double *C, int ldc, int nt) {
    (void)nt; /* read by the OpenMP pragmas only */
    const gemm_grid g = grid_of(M, N);
    const enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
#pragma omp parallel for schedule(static) num_threads(nt) if (g.nb > 1 && (double)M * N * K >= GEMM_PAR_MIN)
    for (int j = 0; j < g.nb; j++) {
        const int j0 = j * g.bs, w = g.dim - j0 < g.bs ? g.dim - j0 : g.bs;
        if (g.split_m)
            cblas_dgemm(CblasRowMajor, TA, TB, w, N, K, 1.0, ta ? A + j0 : A + (size_t)j0 * lda, lda, B, ldb, beta,
                        C + (size_t)j0 * ldc, ldc);
        else
            cblas_dgemm(CblasRowMajor, TA, TB, M, w, K, 1.0, A, lda, tb ? B + (size_t)j0 * ldb : B + j0, ldb, beta,
                        C + j0, ldc);
    }
}

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
