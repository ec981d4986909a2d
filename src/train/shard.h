/* shard.h — the arithmetic of data-parallel training over a collage_comm (collage_run.h): the
 * gradient reduce-scatter summed in rank order, the all-gather of the weights, the gradient's Σg²
 * by chunks, losses and EDQ gathered in rank order. The transport only moves bytes; every sum is
 * done here in a fixed order, so a run gives the same bits whatever the transport's algorithm.
 * comm NULL (or size 1) is one process: every collective is a local copy or a no-op. */
#ifndef COLLAGE_SHARD_H
#define COLLAGE_SHARD_H
#include "collage_run.h"

int    shard_rank(const collage_comm *c);
int    shard_size(const collage_comm *c);
/* 1 + the highest rank whose flag is set, 0 when none (-1 folded into "failed" when the transport fails). */
int    shard_any(const collage_comm *c, int flag);
/* acc[i] = x[i] as fp32 (x: bf16 bits or float), or acc[i] += x[i] when add. */
void   shard_accumulate(float *acc, const void *x, int x_bf16, size_t n, int add);
/* out: this rank's shard [lo, hi) of (x_0 + x_1 + … + x_{size-1}) / m, the sum in fp32 in rank
 * order starting from x_0 itself, divided once, rounded to bf16 (RN) when out_bf16. In pieces of
 * bounded size. 0, or -1 (out of memory, transport failure). */
int    shard_reduce_scatter(const collage_comm *c, const void *x, int x_bf16, size_t n, int m, void *out,
                            int out_bf16);
/* In place: rank r's shard of slab (n elements of elsize bytes) to every rank. 0 or -1. */
int    shard_allgather_slab(const collage_comm *c, void *slab, size_t elsize, size_t n);
/* k bytes per rank to out (size·k, rank order). 0 or -1. */
int    shard_allgather_bytes(const collage_comm *c, const void *mine, size_t k, void *out);
/* k doubles per rank to out (size·k, rank order). 0 or -1. */
int    shard_allgather_doubles(const collage_comm *c, const double *mine, int k, double *out);
/* The whole gradient's Σg² from this rank's reduced shard g (bf16 bits or float) of its [lo, hi):
 * per chunk in double, every chunk to every rank, added in chunk order. Non-finite if any g is.
 * NaN when memory or the transport fails. */
double shard_grad_sumsq(const collage_comm *c, const void *g, int bf16, size_t n);
#endif
