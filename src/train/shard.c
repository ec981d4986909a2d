/* shard.c — data-parallel arithmetic over a collage_comm (shard.h): the transport moves bytes,
 * the sums are done here in rank or chunk order. */
#include "shard.h"
#include "internal.h"
#include <math.h>

#define PIECE ((size_t)1 << 20) /* elements per shard per all-to-all round: buffers stay bounded */

int shard_rank(const collage_comm *c) { return c ? c->rank : 0; }
int shard_size(const collage_comm *c) { return c ? c->size : 1; }
static int many(const collage_comm *c) { return c && c->size > 1; }

int shard_any(const collage_comm *c, int flag) {
    if (!many(c)) return flag != 0;
    int any = c->any(c->ctx, flag);
    return any < 0 ? c->size : any;
}

void collage_shard_bounds(size_t n, int size, int r, size_t *lo, size_t *hi) {
    size_t chunks = (n + COLLAGE_SHARD_CHUNK - 1) / COLLAGE_SHARD_CHUNK;
    size_t c0 = chunks * (size_t)r / (size_t)size, c1 = chunks * (size_t)(r + 1) / (size_t)size;
    *lo = c0 * COLLAGE_SHARD_CHUNK < n ? c0 * COLLAGE_SHARD_CHUNK : n;
    *hi = c1 * COLLAGE_SHARD_CHUNK < n ? c1 * COLLAGE_SHARD_CHUNK : n;
}

void shard_accumulate(float *acc, const void *x, int x_bf16, size_t n, int add) {
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

static int local_reduce_scatter(const void *x, int x_bf16, size_t n, int m, void *out, int out_bf16) {
    size_t piece = n < PIECE ? n : PIECE, es = x_bf16 ? 2 : 4;
    float *acc = malloc((piece ? piece : 1) * sizeof(float));
    if (!acc) return -1;
    for (size_t off = 0; off < n; off += piece) {
        size_t c = n - off < piece ? n - off : piece;
        shard_accumulate(acc, (const char *)x + off * es, x_bf16, c, 0);
        from_acc((char *)out + off * (out_bf16 ? 2 : 4), acc, c, m, out_bf16);
    }
    free(acc);
    return 0;
}

/* Per rank: the elements of its shard that round `off` moves (at most piece). */
static size_t in_round(size_t shard, size_t off, size_t piece) {
    return shard > off ? (shard - off < piece ? shard - off : piece) : 0;
}

int shard_reduce_scatter(const collage_comm *c, const void *x, int x_bf16, size_t n, int m, void *out,
                         int out_bf16) {
    if (!many(c)) return local_reduce_scatter(x, x_bf16, n, m, out, out_bf16);
    int P = c->size, r = c->rank, rc = 0;
    size_t es = x_bf16 ? 2 : 4, hi, maxs = 0;
    size_t *lay = malloc(6 * (size_t)P * sizeof *lay);
    if (!lay) return -1;
    size_t *klo = lay, *ks = lay + P, *sc = lay + 2 * P, *sd = lay + 3 * P, *rcnt = lay + 4 * P, *rd = lay + 5 * P;
    for (int k = 0; k < P; k++) {
        collage_shard_bounds(n, P, k, &klo[k], &hi);
        ks[k] = hi - klo[k];
        if (ks[k] > maxs) maxs = ks[k];
    }
    size_t piece = maxs < PIECE ? maxs : PIECE;
    char *rb = malloc((size_t)P * (piece ? piece : 1) * es);
    float *acc = malloc((piece ? piece : 1) * sizeof(float));
    if (!rb || !acc) rc = -1;
    for (size_t off = 0; rc == 0 && off < maxs; off += piece) {
        size_t mine = in_round(ks[r], off, piece);
        for (int k = 0; k < P; k++) {
            size_t cnt = in_round(ks[k], off, piece);
            sc[k] = cnt;
            sd[k] = cnt ? klo[k] + off : 0;
            rcnt[k] = mine;
            rd[k] = (size_t)k * piece;
        }
        if (c->alltoallv(c->ctx, x, sc, sd, rb, rcnt, rd, es)) { rc = -1; break; }
        /* rank order: the sum starts from rank 0's value itself, then adds rank 1's, … */
        for (int k = 0; k < P; k++) shard_accumulate(acc, rb + (size_t)k * piece * es, x_bf16, mine, k > 0);
        from_acc((char *)out + off * (out_bf16 ? 2 : 4), acc, mine, m, out_bf16);
    }
    free(lay); free(rb); free(acc);
    return rc;
}

/* Counts and displacements (elements) of every rank's shard, or of its chunks when chunks is set. */
static size_t *shard_layout(const collage_comm *c, size_t n, int chunks) {
    int P = c->size;
    size_t *cnt = malloc(2 * (size_t)P * sizeof *cnt);
    for (int k = 0; cnt && k < P; k++) {
        size_t lo, hi;
        collage_shard_bounds(n, P, k, &lo, &hi);
        if (chunks) { lo /= COLLAGE_SHARD_CHUNK; hi = (hi + COLLAGE_SHARD_CHUNK - 1) / COLLAGE_SHARD_CHUNK; }
        cnt[k] = hi - lo;
        cnt[P + k] = lo;
    }
    return cnt;
}

int shard_allgather_slab(const collage_comm *c, void *slab, size_t elsize, size_t n) {
    if (!many(c)) return 0;
    size_t *cnt = shard_layout(c, n, 0);
    int rc = cnt ? c->allgatherv(c->ctx, slab, cnt, cnt + c->size, elsize) : -1;
    free(cnt);
    return rc ? -1 : 0;
}

int shard_allgather_bytes(const collage_comm *c, const void *mine, size_t k, void *out) {
    if (!many(c)) { memcpy(out, mine, k); return 0; }
    return c->allgather(c->ctx, mine, k, 1, out) ? -1 : 0;
}

int shard_allgather_doubles(const collage_comm *c, const double *mine, int k, double *out) {
    if (!many(c)) { memcpy(out, mine, (size_t)k * sizeof *out); return 0; }
    return c->allgather(c->ctx, mine, (size_t)k, sizeof(double), out) ? -1 : 0;
}

double shard_grad_sumsq(const collage_comm *c, const void *g, int bf16, size_t n) {
    size_t chunks = (n + COLLAGE_SHARD_CHUNK - 1) / COLLAGE_SHARD_CHUNK, lo, hi;
    collage_shard_bounds(n, shard_size(c), shard_rank(c), &lo, &hi);
    double *all = calloc(chunks ? chunks : 1, sizeof *all);
    if (!all) return (double)NAN;
    /* this rank's chunks (lo is chunk-aligned), each summed in the library's fixed order */
    if (hi > lo) collage_sumsq_chunks(g, bf16, hi - lo, COLLAGE_SHARD_CHUNK, all + lo / COLLAGE_SHARD_CHUNK);
    int bad = 0;
    if (many(c)) {
        size_t *cnt = shard_layout(c, n, 1);
        bad = !cnt || c->allgatherv(c->ctx, all, cnt, cnt + c->size, sizeof(double));
        free(cnt);
    }
    double sum = 0;
    for (size_t k = 0; k < chunks; k++) sum += all[k];
    free(all);
    return bad ? (double)NAN : sum;
}
