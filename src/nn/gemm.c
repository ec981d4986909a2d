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
