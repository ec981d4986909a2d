/* dist.h — the data-parallel layer of `collage train` (ZeRO stage 1): ranks, shard bounds, and the
 * few collectives a step needs. Built with MPI (COLLAGE_MPI, OpenMPI) it runs on MPI_COMM_WORLD;
 * without, there is one rank and every collective is a local copy or a no-op. MPI only ever moves
 * bytes here: every sum is done by this code in a fixed order, so results never depend on MPI's
 * choice of algorithm. libcollage itself knows nothing of MPI. */
#ifndef COLLAGE_DIST_H
#define COLLAGE_DIST_H
#include <stddef.h>
#include <stdint.h>

/* Shards start at multiples of this many elements (64-aligned), and the gradient's Σg² is summed
 * in chunks of it: the chunk sums, added in chunk order, do not depend on the number of ranks. */
#define DIST_CHUNK ((size_t)4096)

/* 0 on success. MPI_Init only in a process started by mpirun (or another MPI launcher): a plain
 * `collage train` is one rank and never starts MPI. */
int    dist_init(int *argc, char ***argv);
void   dist_finalize(void);
int    dist_rank(void);
int    dist_size(void);
int    dist_mpi(void);                     /* 1 when MPI is running in this process */
int    dist_built_with_mpi(void);          /* 1 when built with MPI (COLLAGE_MPI) */
/* Every rank passes its own failure flag; every rank gets 1 if any rank failed. Call it where ranks
 * may diverge (setup, load, save, a step that failed on one rank): none then waits forever in a
 * collective another rank never reaches. */
int    dist_any(int failed);
/* The end: with MPI, MPI_Abort (every rank stops); without, exit. For errors past recovery. */
void   dist_abort(int code) __attribute__((noreturn));
/* Seconds spent inside communication calls since the start. */
double dist_comm_seconds(void);

/* Rank r's shard [lo, hi) of n elements among `size` ranks: whole chunks of DIST_CHUNK, balanced
 * (chunk counts differ by at most one), the last shard ending at n. */
void   dist_bounds(size_t n, int size, int r, size_t *lo, size_t *hi);

/* Deterministic reduce-scatter. x: this rank's n-element slab (bf16 bits when x_bf16, else float).
 * out: this rank's shard [lo, hi) of (x_0 + x_1 + … + x_{size-1}) / m, the sum in fp32 in rank
 * order starting from x_0 itself, divided once, rounded to bf16 (RN) when out_bf16. Moved by
 * MPI_Alltoallv in pieces (bounded buffers), summed here. 0 on success, -1 out of memory. */
int    dist_reduce_scatter(const void *x, int x_bf16, size_t n, int m, void *out, int out_bf16);
/* acc[i] = x[i] as fp32 (x: bf16 bits or float), or acc[i] += x[i] when add: one rank's micro-batch
 * gradients summed in the order the reduce-scatter sums ranks' (bit-identical splits, see README). */
void   dist_accumulate(float *acc, const void *x, int x_bf16, size_t n, int add);
/* All-gather in place: rank r's shard [lo, hi) of slab (n elements of elsize bytes) goes to every rank. */
void   dist_allgather(void *slab, size_t elsize, size_t n);
/* All-gather of k doubles per rank: out holds size·k doubles, rank order. */
void   dist_allgather_doubles(const double *mine, int k, double *out);
/* The whole gradient's Σg² from this rank's reduced shard g (bf16 bits or float) of [lo, hi): per
 * chunk in double, all chunks to every rank, added in chunk order. Non-finite if any g is. */
double dist_grad_sumsq(const void *g, int bf16, size_t n);
#endif
