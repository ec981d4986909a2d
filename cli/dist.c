/* dist.c — ranks, shard bounds and the collectives of data-parallel training (see dist.h). With
 * COLLAGE_MPI the bytes travel through MPI (Alltoallv, Allgatherv, Allreduce of an int flag with
 * MAX); every floating-point sum is done here, in rank or chunk order, so that the same run gives
 * the same bits whatever algorithm MPI picks. Without MPI there is one rank. */
#include "dist.h"
#include "cli.h"
#include "internal.h" /* bf16_f32 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef COLLAGE_MPI
#include <mpi.h>
#endif

#define PIECE ((size_t)1 << 20) /* elements per shard per all-to-all round: buffers stay bounded */

static int g_rank = 0, g_size = 1;
static double g_comm;

int dist_rank(void) { return g_rank; }
int dist_size(void) { return g_size; }
double dist_comm_seconds(void) { return g_comm; }

void dist_bounds(size_t n, int size, int r, size_t *lo, size_t *hi) {
    size_t chunks = (n + DIST_CHUNK - 1) / DIST_CHUNK;
    size_t c0 = chunks * (size_t)r / (size_t)size, c1 = chunks * (size_t)(r + 1) / (size_t)size;
    *lo = c0 * DIST_CHUNK < n ? c0 * DIST_CHUNK : n;
    *hi = c1 * DIST_CHUNK < n ? c1 * DIST_CHUNK : n;
}

void dist_accumulate(float *acc, const void *x, int x_bf16, size_t n, int add) {
    const uint16_t *h = x;
    const float *f = x;
    for (size_t i = 0; i < n; i++) {
        float v = x_bf16 ? bf16_f32(h[i]) : f[i];
        acc[i] = add ? acc[i] + v : v;
    }
}
/* out = acc / m, rounded to bf16 (RN) when out_bf16 */
static void from_acc(void *out, float *acc, size_t n, int m, int out_bf16) {
    if (m != 1)
        for (size_t i = 0; i < n; i++) acc[i] /= (float)m;
    if (out_bf16) collage_bf16_from_f32_row(out, acc, n);
    else memcpy(out, acc, n * sizeof(float));
}

/* ---------------------------------------------------------------- one process */
static int local_reduce_scatter(const void *x, int x_bf16, size_t n, int m, void *out, int out_bf16) {
    size_t piece = n < PIECE ? n : PIECE, es = x_bf16 ? 2 : 4;
    float *acc = malloc((piece ? piece : 1) * sizeof(float));
    if (!acc) return -1;
    for (size_t off = 0; off < n; off += piece) {
        size_t c = n - off < piece ? n - off : piece;
        dist_accumulate(acc, (const char *)x + off * es, x_bf16, c, 0);
        from_acc((char *)out + off * (out_bf16 ? 2 : 4), acc, c, m, out_bf16);
    }
    free(acc);
    return 0;
}

#ifdef COLLAGE_MPI
/* ---------------------------------------------------------------- MPI */
static int g_on; /* MPI_Init was called: this process was started by mpirun */
#define TIMED(call) do { double t0_ = cli_now(); call; g_comm += cli_now() - t0_; } while (0)

/* Launched by mpirun (OpenMPI sets OMPI_COMM_WORLD_SIZE; PMI/PMIx launchers set theirs)? A plain
 * `collage train` then runs as one process without starting MPI at all. */
static int launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}
int dist_init(int *argc, char ***argv) {
    if (!launched_by_mpi()) return 0;
    if (MPI_Init(argc, argv) != MPI_SUCCESS) return -1;
    g_on = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    return 0;
}
void dist_finalize(void) { if (g_on) MPI_Finalize(); }
int dist_mpi(void) { return g_on; }
int dist_built_with_mpi(void) { return 1; }
int dist_any(int failed) {
    int any = failed ? g_rank + 1 : 0; /* the highest failing rank + 1 */
    if (g_on) TIMED(MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    return any;
}
void dist_abort(int code) {
    if (g_on) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

/* Element counts as int, as MPI wants them; train keeps every shard below INT32_MAX elements. */
static int icount(size_t x) { return x > (size_t)INT_MAX ? INT_MAX : (int)x; }

int dist_reduce_scatter(const void *x, int x_bf16, size_t n, int m, void *out, int out_bf16) {
    if (!g_on || g_size == 1) return local_reduce_scatter(x, x_bf16, n, m, out, out_bf16);
    int P = g_size, r = g_rank;
    size_t es = x_bf16 ? 2 : 4, hi, maxs = 0;
    size_t *klo = malloc((size_t)P * sizeof *klo), *ks = malloc((size_t)P * sizeof *ks);
    int *sc = malloc(4 * (size_t)P * sizeof *sc);
    for (int k = 0; klo && ks && k < P; k++) {
        dist_bounds(n, P, k, &klo[k], &hi);
        ks[k] = hi - klo[k];
        if (ks[k] > maxs) maxs = ks[k];
    }
    size_t piece = maxs < PIECE ? maxs : PIECE;
    char *rb = malloc((size_t)P * (piece ? piece : 1) * es);
    float *acc = malloc((piece ? piece : 1) * sizeof(float));
    if (!klo || !ks || !sc || !rb || !acc) { free(klo); free(ks); free(sc); free(rb); free(acc); return -1; }
    int *sd = sc + P, *rc = sc + 2 * P, *rd = sc + 3 * P;
    MPI_Datatype t = x_bf16 ? MPI_UINT16_T : MPI_FLOAT; /* MPI moves them, never adds them */
    for (size_t off = 0; off < maxs; off += piece) {
        size_t mine = ks[r] > off ? (ks[r] - off < piece ? ks[r] - off : piece) : 0;
        for (int k = 0; k < P; k++) {
            size_t c = ks[k] > off ? (ks[k] - off < piece ? ks[k] - off : piece) : 0;
            sc[k] = icount(c);
            sd[k] = icount(c ? klo[k] + off : 0);
            rc[k] = icount(mine);
            rd[k] = icount((size_t)k * piece);
        }
        TIMED(MPI_Alltoallv(x, sc, sd, t, rb, rc, rd, t, MPI_COMM_WORLD));
        /* rank order: the sum starts from rank 0's value itself, then adds rank 1's, … */
        for (int k = 0; k < P; k++) dist_accumulate(acc, rb + (size_t)k * piece * es, x_bf16, mine, k > 0);
        from_acc((char *)out + off * (out_bf16 ? 2 : 4), acc, mine, m, out_bf16);
    }
    free(klo); free(ks); free(sc); free(rb); free(acc);
    return 0;
}

/* counts and displacements (elements) of every rank's shard, or of its chunks when chunks is set */
static int *shard_layout(size_t n, int chunks) {
    int P = g_size, *cnt = malloc(2 * (size_t)P * sizeof *cnt);
    if (!cnt) { fprintf(stderr, "collage: out of memory (rank %d)\n", g_rank); dist_abort(1); }
    for (int k = 0; k < P; k++) {
        size_t lo, hi;
        dist_bounds(n, P, k, &lo, &hi);
        if (chunks) { lo /= DIST_CHUNK; hi = (hi + DIST_CHUNK - 1) / DIST_CHUNK; }
        cnt[k] = icount(hi - lo);
        cnt[P + k] = icount(lo);
    }
    return cnt;
}

void dist_allgather(void *slab, size_t elsize, size_t n) {
    if (!g_on || g_size == 1) return;
    int *cnt = shard_layout(n, 0);
    MPI_Datatype t;
    MPI_Type_contiguous((int)elsize, MPI_BYTE, &t);
    MPI_Type_commit(&t);
    TIMED(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, slab, cnt, cnt + g_size, t, MPI_COMM_WORLD));
    MPI_Type_free(&t);
    free(cnt);
}

void dist_allgather_doubles(const double *mine, int k, double *out) {
    if (!g_on) { memcpy(out, mine, (size_t)k * sizeof *out); return; }
    TIMED(MPI_Allgather(mine, k, MPI_DOUBLE, out, k, MPI_DOUBLE, MPI_COMM_WORLD));
}

static void allgather_chunk_sums(double *all, size_t n) {
    if (!g_on || g_size == 1) return;
    int *cnt = shard_layout(n, 1);
    TIMED(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, cnt, cnt + g_size, MPI_DOUBLE, MPI_COMM_WORLD));
    free(cnt);
}
#else
/* ---------------------------------------------------------------- built without MPI: one rank */
int dist_init(int *argc, char ***argv) { (void)argc; (void)argv; return 0; }
void dist_finalize(void) {}
int dist_mpi(void) { return 0; }
int dist_built_with_mpi(void) { return 0; }
int dist_any(int failed) { return failed != 0; }
void dist_abort(int code) { exit(code); }
int dist_reduce_scatter(const void *x, int x_bf16, size_t n, int m, void *out, int out_bf16) {
    return local_reduce_scatter(x, x_bf16, n, m, out, out_bf16);
}
void dist_allgather(void *slab, size_t elsize, size_t n) { (void)slab; (void)elsize; (void)n; }
void dist_allgather_doubles(const double *mine, int k, double *out) { memcpy(out, mine, (size_t)k * sizeof *out); }
static void allgather_chunk_sums(double *all, size_t n) { (void)all; (void)n; }
#endif

double dist_grad_sumsq(const void *g, int bf16, size_t n) {
    size_t chunks = (n + DIST_CHUNK - 1) / DIST_CHUNK, lo, hi;
    dist_bounds(n, g_size, g_rank, &lo, &hi);
    double *all = calloc(chunks ? chunks : 1, sizeof *all);
    if (!all) { fprintf(stderr, "collage: out of memory (rank %d, gradient norm)\n", g_rank); dist_abort(1); }
    /* this rank's chunks (lo is chunk-aligned), each summed in the library's fixed order */
    if (hi > lo) collage_sumsq_chunks(g, bf16, hi - lo, DIST_CHUNK, all + lo / DIST_CHUNK);
    allgather_chunk_sums(all, n);
    double sum = 0;
    for (size_t c = 0; c < chunks; c++) sum += all[c];
    free(all);
    return sum;
}
