/* adamw.cu — the AdamW step of collage_cuda.h: Σg² per chunk of 2^14 (16 lanes and a fixed tree, as
 * collage_sumsq_chunks), the chunk sums added in order and the clipping factor computed on the device in
 * double (no round trip to the host), then one launch over every block of 2^14 elements of every tensor
 * (a device table of the tensors, found by binary search), each element stepped by adamw_elem.h's
 * functions: the same functions tests/test_adamw_elem.c runs on the host against libcollage's reference.
 * Built with --fmad=false and IEEE division and square root (Makefile NVCC_NUMERICS). */
#include "collage_cuda.h"
#include "adamw_elem.h"

#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 256
#define ILP 4 /* elements a thread has in flight in the plain step */

/* A tensor of the step as the kernels read it. */
typedef struct {
    ce_ptrs P;
    ce_k k;
    size_t n;
    uint64_t index0;
    size_t unit0;  /* its first block among all the tensors' blocks */
    size_t chunk0; /* its first Σg² chunk */
    int vec;       /* every slab on 16 bytes: the plain step takes 8 elements a thread (ce_load8) */
} dev_tensor;

/* What the reduction leaves for the step and for collage_cuda_adamw_stats. */
typedef struct {
    double sumsq, gnorm, coef;
    int skip;
    ce_coef c;
} dev_result;

struct collage_cuda_adamw {
    collage_cuda_adamw_config cfg;
    ce_desc D;
    int device;
    dev_tensor *h_tab, *d_tab;   /* the table, built on the host and copied */
    ce_qtab *d_qtab;
    double *d_chunks;            /* Σg² chunk sums */
    unsigned *d_ready, epoch;    /* the chunks' publication marks, this launch's number (sumsq_total_kernel) */
    size_t max_chunks, max_units;
    ce_acc *d_unit_acc, *d_tensor_acc; /* EDQ: per block, per tensor */
    dev_result *d_res;
    cudaStream_t last_stream;
    int last_k, have_step;
    char err[512];
};

/* The caller's current device is left as it was: each call makes the optimizer's device current for its
 * own work and gives the caller's back (no process-wide side effect). */
typedef struct { int prev, changed; } device_guard;
static device_guard device_enter(int dev) {
    device_guard g = {0, 0};
    if (cudaGetDevice(&g.prev) == cudaSuccess && g.prev != dev && cudaSetDevice(dev) == cudaSuccess) g.changed = 1;
    return g;
}
static void device_leave(device_guard g) {
    if (g.changed) cudaSetDevice(g.prev);
}

static collage_status fail(collage_cuda_adamw *o, collage_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (o) vsnprintf(o->err, sizeof o->err, fmt, ap);
    va_end(ap);
    return st;
}
#define CU(o, call)                                                                                         \
    do {                                                                                                    \
        cudaError_t e_ = (call);                                                                            \
        if (e_ != cudaSuccess) return fail(o, COLLAGE_ERR_UNSUPPORTED, "%s: %s", #call, cudaGetErrorString(e_)); \
    } while (0)

/* ------------------------------------------------------------------ kernels */
/* The tensor holding index x of a per-tensor numbering whose first indices are first(t[j]) ascending. */
__device__ static int find_unit(const dev_tensor *t, int k, size_t x) {
    int lo = 0, hi = k - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (t[mid].unit0 <= x) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}
__device__ static int find_chunk(const dev_tensor *t, int k, size_t x) {
    int lo = 0, hi = k - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (t[mid].chunk0 <= x) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* Σg² chunk c of the table (c < n_chunks) by its 16 threads (lane = thread % 16), into out[c] by lane 0;
 * l: the block's THREADS doubles of shared memory. Where ready is given, lane 0 then publishes the chunk:
 * ready[c] = epoch, a release store after out[c]'s. WF: the gradient's word format. */
template <int WF>
__device__ static void sumsq_chunk(const dev_tensor *t, int k, size_t c, size_t n_chunks, double *out, double *l,
                                   unsigned *ready, unsigned epoch) {
    const int lane = (int)(threadIdx.x % 16);
    double s = 0;
    if (c < n_chunks) {
        const dev_tensor *T = &t[find_chunk(t, k, c)];
        const size_t a = (c - T->chunk0) * CE_BLOCK, b = T->n - a > CE_BLOCK ? a + CE_BLOCK : T->n;
        s = ce_sumsq_lane(WF, T->P.g, a, b, lane);
    }
    l[threadIdx.x] = s;
    __syncthreads();
    if (lane == 0 && c < n_chunks) {
        out[c] = ce_sumsq_tree(&l[threadIdx.x]);
        if (ready) asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(ready + c), "r"(epoch) : "memory");
    }
}

/* The chunk sums added in order from 0 by thread 0, the block loading them into shared memory (batch,
 * TOTAL_BATCH doubles) a batch at a time (coalesced, many loads in flight: the adds are one dependent
 * chain, the loads need not be), then the clipping factor and the skip (adamw_elem.h ce_clip) into res.
 * Where ready is given, a thread reads its chunks of a batch once their marks read epoch (the marks
 * polled together, then a fence, then the sums from L2): the chain runs while the chunks are summed. */
#define TOTAL_PER (8)
#define TOTAL_BATCH (TOTAL_PER * THREADS)
__device__ static void total_in_order(const double *chunks, size_t n, const unsigned *ready, unsigned epoch,
                                      double clip, int skip_nonfinite, double gscale, dev_result *res, double *batch) {
    double sum = 0;
    for (size_t base = 0; base < n; base += TOTAL_BATCH) {
        const size_t m = n - base < TOTAL_BATCH ? n - base : TOTAL_BATCH;
        if (ready) {
            unsigned pending = 0;
            for (int j = 0; j < TOTAL_PER; j++) pending |= (threadIdx.x + (size_t)j * THREADS < m) << j;
            while (pending) {
                unsigned e[TOTAL_PER];
#pragma unroll
                for (int j = 0; j < TOTAL_PER; j++) {
                    e[j] = epoch;
                    if (pending >> j & 1)
                        asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];"
                                     : "=r"(e[j]) : "l"(ready + base + threadIdx.x + (size_t)j * THREADS) : "memory");
                }
#pragma unroll
                for (int j = 0; j < TOTAL_PER; j++) pending &= e[j] == epoch ? ~(1u << j) : ~0u;
            }
            __threadfence();
        }
#pragma unroll
        for (int j = 0; j < TOTAL_PER; j++) {
            const size_t i = threadIdx.x + (size_t)j * THREADS;
            if (i < m) batch[i] = __ldcg(chunks + base + i);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
#pragma unroll 16
            for (size_t i = 0; i < m; i++) sum += batch[i];
        }
        __syncthreads();
    }
    if (threadIdx.x != 0) return;
    dev_result r;
    r.sumsq = sum;
    r.c = ce_clip(sum, clip, skip_nonfinite, gscale, &r.gnorm, &r.coef, &r.skip);
    *res = r;
}

/* Σg² chunks: 16 chunks a block, 16 threads a chunk, into out. */
template <int WF>
__global__ static void sumsq_kernel(const dev_tensor *t, int k, size_t n_chunks, double *out) {
    __shared__ double l[THREADS];
    sumsq_chunk<WF>(t, k, (size_t)blockIdx.x * (THREADS / 16) + threadIdx.x / 16, n_chunks, out, l, NULL, 0);
}

/* The given chunk sums (the whole model's, all-reduced) added in order, one block. */
__global__ static void total_kernel(const double *chunks, size_t n, double clip, int skip_nonfinite, double gscale,
                                    dev_result *res) {
    __shared__ double batch[TOTAL_BATCH];
    total_in_order(chunks, n, NULL, 0, clip, skip_nonfinite, gscale, res, batch);
}

/* Σg² and its total in one launch: block 0 adds the chunk sums in order as the other blocks publish them
 * (ready[c] = epoch, a number of this launch's own), so that the chain of additions overlaps the reading
 * of the gradient instead of following it. No block waits for block 0, so any order of the blocks'
 * scheduling completes. */
template <int WF>
__global__ static void sumsq_total_kernel(const dev_tensor *t, int k, size_t n_chunks, double *out, unsigned *ready,
                                          unsigned epoch, double clip, int skip_nonfinite, double gscale,
                                          dev_result *res) {
    __shared__ double sh[TOTAL_BATCH];
    if (blockIdx.x == 0) total_in_order(out, n_chunks, ready, epoch, clip, skip_nonfinite, gscale, res, sh);
    else sumsq_chunk<WF>(t, k, (size_t)(blockIdx.x - 1) * (THREADS / 16) + threadIdx.x / 16, n_chunks, out, sh,
                         ready, epoch);
}

/* The EDQ terms of a tile's elements, added by one thread in element order (ce_acc_add): the scalar
 * reference's sums. Called by every thread of the block. */
__device__ static void edq_tile(ce_terms *sh, const ce_terms *mine, int live, int count, ce_acc *acc) {
    sh[threadIdx.x] = live ? *mine : ce_terms{0.0, 0.0, 0.0};
    __syncthreads();
    if (threadIdx.x == 0)
        for (int i = 0; i < count; i++) ce_acc_add(acc, &sh[i]);
    __syncthreads();
}

/* An 8-bit moment's tile: scale from the tile's absmax (NaN flagged apart; max is exact in any order),
 * written by thread 0 after every thread has read the old one, then each thread's code. */
__device__ static void q8_tile_store(const ce_qtab *Q, int code, int sr, uint64_t key, uint8_t *codes, float *scale,
                                     size_t i, int live, float x, uint64_t index, float *red, int *nan_any) {
    const float v = live ? fabsf(x) : 0.0f;
    red[threadIdx.x] = v != v ? 0.0f : v;
    if (threadIdx.x == 0) *nan_any = 0;
    __syncthreads();
    if (live && v != v) *nan_any = 1;
    for (int w = THREADS / 2; w; w >>= 1) {
        if ((int)threadIdx.x < w) red[threadIdx.x] = red[threadIdx.x + w] > red[threadIdx.x] ? red[threadIdx.x + w] : red[threadIdx.x];
        __syncthreads();
    }
    float sc, recip;
    const int on = ce_q_scale(code, red[0], *nan_any, &sc, &recip);
    if (live) codes[i] = on ? ce_q_code(Q, code, x * recip, sr, ce_rand32(key, index)) : ce_q_zero(code);
    __syncthreads(); /* every thread has read red[0] and *nan_any before the next tile writes them */
    if (threadIdx.x == 0) *scale = sc;
}

/* Elements i … i + 7's words and gradient asked of L2 ahead of their loads (a hint: no registers held). */
__device__ static void l2_prefetch(const void *p, size_t byte) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"((const char *)p + byte));
}
__device__ static size_t word_size(int wf) { return wf == COLLAGE_WORD_FP32 ? 4 : 2; } /* fp32 or 16-bit */
__device__ static void prefetch8(const ce_desc *D, const ce_ptrs *P, size_t i) {
    l2_prefetch(P->g, i * word_size(D->wf));
    l2_prefetch(P->w, i * word_size(D->wf));
    l2_prefetch(P->m, i * word_size(D->mf));
    l2_prefetch(P->v, i * word_size(D->vf));
    if (ce_has_comp(D->w)) l2_prefetch(P->comp, i * 2);
    if (D->v_pair) l2_prefetch(P->dv, i * 2);
    if (ce_has_master(D->w)) l2_prefetch(P->master, i * 4);
}

/* One block [a, b) of a tensor of a strategy without 8-bit moments. */
template <int LOCAL>
__device__ static void block_plain(const ce_desc *D, const dev_tensor *Tg, size_t a, size_t b, ce_coef c, int edq,
                                   ce_acc *acc) {
    __shared__ ce_terms sh[THREADS];
    dev_tensor Tl; /* LOCAL: the pointers and scalars in registers (the stores below could alias the table) */
    if (LOCAL) { Tl.P = Tg->P; Tl.k = Tg->k; Tl.index0 = Tg->index0; Tl.vec = Tg->vec; }
    const dev_tensor *T = LOCAL ? &Tl : Tg;
    if (!edq && T->vec) { /* 16-byte loads and stores, 8 elements a thread; the block's tail one by one */
        const size_t nv = (b - a) / CE_VEC;
        for (size_t j = threadIdx.x; j < nv; j += THREADS) {
            const size_t i = a + j * CE_VEC;
            ce_state s[CE_VEC];
            uint32_t g[CE_VEC];
            /* the next round's words, while this one computes: for the 16-bit lines, bound by their
             * instructions (+2%); the fp32 lines are bound by memory and ran 18% slower with it (H200) */
            if (D->arith != COLLAGE_WORD_FP32 && j + THREADS < nv) prefetch8(D, &T->P, i + THREADS * CE_VEC);
            ce_load8(D, &T->P, i, s, g);
#pragma unroll
            for (int k = 0; k < CE_VEC; k++) {
                ce_terms e;
                ce_step(D, &s[k], g[k], &T->k, c, T->index0 + i + (size_t)k, &e);
            }
            ce_store8(D, &T->P, i, s);
        }
        for (size_t i = a + nv * CE_VEC + threadIdx.x; i < b; i += THREADS) {
            ce_state s = ce_load(D, &T->P, i);
            ce_terms e;
            ce_step(D, &s, ce_load_word(D->wf, T->P.g, i), &T->k, c, T->index0 + i, &e);
            ce_store(D, &T->P, i, &s);
        }
        return;
    }
    if (!edq) { /* ILP elements' words loaded before any is stored: their loads in flight together */
        for (size_t i0 = a + threadIdx.x; i0 < b; i0 += (size_t)THREADS * ILP) {
            ce_state s[ILP];
            uint32_t g[ILP];
#pragma unroll
            for (int u = 0; u < ILP; u++) {
                const size_t i = i0 + (size_t)u * THREADS;
                if (i < b) { s[u] = ce_load(D, &T->P, i); g[u] = ce_load_word(D->wf, T->P.g, i); }
            }
#pragma unroll
            for (int u = 0; u < ILP; u++) {
                const size_t i = i0 + (size_t)u * THREADS;
                if (i >= b) continue;
                ce_terms e;
                ce_step(D, &s[u], g[u], &T->k, c, T->index0 + i, &e);
                ce_store(D, &T->P, i, &s[u]);
            }
        }
        return;
    }
    for (size_t ta = a; ta < b; ta += THREADS) {
        const size_t i = ta + threadIdx.x;
        const int live = i < b;
        ce_terms e = {0.0, 0.0, 0.0};
        if (live) {
            ce_state s = ce_load(D, &T->P, i);
            ce_step(D, &s, ce_load_word(D->wf, T->P.g, i), &T->k, c, T->index0 + i, &e);
            ce_store(D, &T->P, i, &s);
        }
        edq_tile(sh, &e, live, (int)(b - ta < THREADS ? b - ta : THREADS), acc);
    }
}

/* One block [a, b) of a tensor of an 8-bit strategy, in tiles of 256 (the blocks of scales): the moments'
 * new values, the updates, then each 8-bit moment re-quantized (adamw_ref.c q8_block). */
__device__ static void block_q8(const ce_desc *D, const ce_qtab *Q, const dev_tensor *T, size_t a, size_t b, ce_coef c,
                                int edq, ce_acc *acc) {
    __shared__ ce_terms sh[THREADS];
    __shared__ float red[THREADS];
    __shared__ int nan_any;
    for (size_t ta = a; ta < b; ta += CE_QBLOCK) {
        const size_t i = ta + threadIdx.x;
        const int live = i < b;
        float mx = 0.0f, vx = 0.0f;
        ce_state s;
        ce_terms e = {0.0, 0.0, 0.0};
        if (live) {
            s = ce_load(D, &T->P, i);
            const float ms = D->mq >= 0 ? T->P.mscale[i / CE_QBLOCK] : 0.0f, vs = D->vq >= 0 ? T->P.vscale[i / CE_QBLOCK] : 0.0f;
            ce_q8_moments(D, Q, &s, ce_load_word(D->wf, T->P.g, i), ms, vs, &T->k, c, &mx, &vx);
            ce_q8_update(D, &s, &mx, vx, &T->k, T->index0 + i, &e);
            ce_store(D, &T->P, i, &s);
        }
        __syncthreads(); /* every scale of the tile read */
        if (edq) edq_tile(sh, &e, live, (int)(b - ta < CE_QBLOCK ? b - ta : CE_QBLOCK), acc);
        if (D->mq >= 0)
            q8_tile_store(Q, D->mq, D->sr_states, ce_q_state_key(T->k.key, 1), (uint8_t *)T->P.m,
                          &T->P.mscale[ta / CE_QBLOCK], i, live, mx, T->index0 + i, red, &nan_any);
        if (D->vq >= 0)
            q8_tile_store(Q, D->vq, D->sr_states, ce_q_state_key(T->k.key, 2), (uint8_t *)T->P.v,
                          &T->P.vscale[ta / CE_QBLOCK], i, live, vx, T->index0 + i, red, &nan_any);
        __syncthreads();
    }
}

/* The step: CUDA block u is block u of all the tensors' blocks (adamw_elem.h ce_block_range). GENERIC:
 * the description is the argument D0 (compositions); else the template's parts, folded at compile time,
 * at most 64 registers a thread so that four blocks share a multiprocessor (the step is bound by its
 * instructions and its memory latency together: the occupancy counts). */
template <int GENERIC, int W, int M, int V, int SR, int V1>
__global__ static void __launch_bounds__(THREADS, GENERIC ? 1 : 4) step_kernel(const dev_tensor *t, int k, ce_desc D0, const ce_qtab *Q,
                                                              const dev_result *res, int edq, ce_acc *unit_acc) {
    const ce_desc D = GENERIC ? D0 : ce_desc_make(W, M, V, SR, V1);
    if (res->skip) return;
    const ce_coef c = res->c;
    const size_t u = blockIdx.x;
    const dev_tensor *T = &t[find_unit(t, k, u)];
    size_t a, b;
    ce_block_range(ce_desc_q8(&D), T->index0, T->n, u - T->unit0, &a, &b);
    ce_acc acc = {0, 0, 0, 0, 0};
    if (ce_desc_q8(&D)) block_q8(&D, Q, T, a, b, c, edq, &acc);
    else block_plain<!GENERIC>(&D, T, a, b, c, edq, &acc); /* LOCAL triples the generic kernel's compile time */
    if (edq && threadIdx.x == 0) unit_acc[u] = acc;
}

/* Each tensor's EDQ: its blocks' sums added in order from 0 (adamw.c step_end). */
__global__ static void edq_kernel(const dev_tensor *t, int k, size_t n_units, const ce_acc *unit_acc, ce_acc *out) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= k) return;
    const size_t end = j + 1 < k ? t[j + 1].unit0 : n_units;
    ce_acc s = {0, 0, 0, 0, 0};
    for (size_t u = t[j].unit0; u < end; u++) {
        s.dot += unit_acc[u].dot; s.dot_state += unit_acc[u].dot_state; s.nn += unit_acc[u].nn;
        s.lost += unit_acc[u].lost; s.nonzero += unit_acc[u].nonzero;
    }
    out[j] = s;
}

/* ------------------------------------------------------------------ launch */
typedef void (*step_fn)(const dev_tensor *, int, ce_desc, const ce_qtab *, const dev_result *, int, ce_acc *);
#define PRESET(S, W, M, V, V1)                                                                                  \
    case S: return step_kernel<0, COLLAGE_SCHEME_##W, COLLAGE_MOMENT_##M, COLLAGE_MOMENT_##V, 0, V1>;
/* The kernel compiled for strategy s: each preset's own, the generic one for compositions. */
static step_fn kernel_of(collage_strategy s) {
    switch (s) {
        PRESET(COLLAGE_FP32, FP32, FP32, FP32, 0)
        PRESET(COLLAGE_BF16, BF16, BF16, BF16, 0)
        PRESET(COLLAGE_LIGHT, MCF, BF16, BF16, 0)
        PRESET(COLLAGE_PLUS, MCF, BF16, MCF, 0)
        PRESET(COLLAGE_BF16_FP32_STATES, BF16, FP32, FP32, 0)
        PRESET(COLLAGE_BF16_MASTER, MASTER, FP32, FP32, 0)
        PRESET(COLLAGE_BF16_KAHAN, KAHAN, BF16, BF16, 0)
        PRESET(COLLAGE_BF16_SR, SR, BF16, BF16, 0)
        PRESET(COLLAGE_BF16_REMAINDER, REMAINDER, BF16, BF16, 0)
        PRESET(COLLAGE_PLUS_V1, MCF, BF16, MCF, 1)
        PRESET(COLLAGE_FP16, FP16, FP16, FP16, 0)
        PRESET(COLLAGE_FP16_LIGHT, FP16_MCF, FP16, FP16, 0)
        PRESET(COLLAGE_FP16_PLUS, FP16_MCF, FP16, FP16_MCF, 0)
        PRESET(COLLAGE_FP16_MASTER, FP16_MASTER, FP32, FP32, 0)
        PRESET(COLLAGE_BF16_C8, C8, BF16, BF16, 0)
        PRESET(COLLAGE_ECO, ECO, BF16, BF16, 0)
    default: return step_kernel<1, 0, 0, 0, 0, 0>;
    }
}

static collage_status create_device(collage_cuda_adamw *o);

collage_status collage_cuda_adamw_create(const collage_cuda_adamw_config *cfg, collage_cuda_adamw **out) {
    if (!cfg || !out) return COLLAGE_ERR_NULL;
    *out = NULL;
    if (!collage_strategy_valid(cfg->strategy) || cfg->max_tensors <= 0 || !(cfg->clip >= 0) ||
        !(cfg->grad_scale >= 0) || !isfinite(cfg->grad_scale))
        return COLLAGE_ERR_ARG;
    ce_desc D;
    if (ce_desc_of(cfg->strategy, &D) != COLLAGE_OK) return COLLAGE_ERR_UNSUPPORTED; /* a part with no lines here */
    collage_cuda_adamw *o = (collage_cuda_adamw *)calloc(1, sizeof *o);
    if (!o) return COLLAGE_ERR_NOMEM;
    o->cfg = *cfg;
    if (o->cfg.grad_scale == 0) o->cfg.grad_scale = 1.0;
    o->D = D;
    o->max_chunks = cfg->max_elements / CE_BLOCK + (size_t)cfg->max_tensors;
    o->max_units = o->max_chunks + (size_t)cfg->max_tensors; /* 8-bit: a first block may be short */
    o->h_tab = (dev_tensor *)calloc((size_t)cfg->max_tensors, sizeof *o->h_tab);
    *out = o;
    if (!o->h_tab) return COLLAGE_ERR_NOMEM;
    const device_guard g = device_enter(cfg->device);
    const collage_status st = create_device(o);
    device_leave(g);
    return st;
}

/* The optimizer's device memory, on the current device. */
static collage_status create_device(collage_cuda_adamw *o) {
    const collage_cuda_adamw_config *cfg = &o->cfg;
    ce_qtab q;
    ce_qtab_fill(&q);
    int dev = -1;
    CU(o, cudaGetDevice(&dev));
    if (dev != cfg->device) return fail(o, COLLAGE_ERR_UNSUPPORTED, "CUDA device %d cannot be used", cfg->device);
    CU(o, cudaMalloc((void **)&o->d_tab, (size_t)cfg->max_tensors * sizeof *o->d_tab));
    CU(o, cudaMalloc((void **)&o->d_qtab, sizeof *o->d_qtab));
    CU(o, cudaMalloc((void **)&o->d_chunks, o->max_chunks * sizeof *o->d_chunks));
    CU(o, cudaMalloc((void **)&o->d_ready, o->max_chunks * sizeof *o->d_ready));
    CU(o, cudaMemset(o->d_ready, 0, o->max_chunks * sizeof *o->d_ready));
    CU(o, cudaMalloc((void **)&o->d_unit_acc, o->max_units * sizeof *o->d_unit_acc));
    CU(o, cudaMalloc((void **)&o->d_tensor_acc, (size_t)cfg->max_tensors * sizeof *o->d_tensor_acc));
    CU(o, cudaMalloc((void **)&o->d_res, sizeof *o->d_res));
    CU(o, cudaMemcpy(o->d_qtab, &q, sizeof q, cudaMemcpyHostToDevice));
    return COLLAGE_OK;
}

void collage_cuda_adamw_free(collage_cuda_adamw *o) {
    if (!o) return;
    cudaFree(o->d_tab); cudaFree(o->d_qtab); cudaFree(o->d_chunks); cudaFree(o->d_ready);
    cudaFree(o->d_unit_acc); cudaFree(o->d_tensor_acc); cudaFree(o->d_res);
    free(o->h_tab);
    free(o);
}

const char *collage_cuda_adamw_error(const collage_cuda_adamw *o) { return o ? o->err : "no optimizer"; }

size_t collage_cuda_sumsq_chunk_count(const collage_cuda_tensor *t, int k) {
    size_t c = 0;
    for (int j = 0; t && j < k; j++) c += (t[j].n + CE_BLOCK - 1) / CE_BLOCK;
    return c;
}

/* The table of the k tensors into o->h_tab and onto the device; the numbers of blocks and chunks. */
static collage_status upload(collage_cuda_adamw *o, const collage_cuda_tensor *t, int k, cudaStream_t st,
                             size_t *units, size_t *chunks) {
    if (k < 0 || k > o->cfg.max_tensors) return fail(o, COLLAGE_ERR_SIZE, "%d tensors; the optimizer takes at most %d", k, o->cfg.max_tensors);
    if (k && !t) return COLLAGE_ERR_NULL;
    const ce_desc *D = &o->D;
    const int q8 = ce_desc_q8(D);
    const collage_strategy_info *R = collage_strategy_get(o->cfg.strategy);
    size_t u = 0, c = 0, elems = 0;
    for (int j = 0; j < k; j++) {
        const collage_cuda_tensor *x = &t[j];
        for (int r = 0; r < COLLAGE_ROLE_COUNT; r++)
            if (R->word[r].format != COLLAGE_WORD_NONE && x->n && !x->words[r])
                return fail(o, COLLAGE_ERR_NULL, "tensor %d has no %s word", j, collage_word_role_name((collage_word_role)r));
        if (x->n && !x->grad) return fail(o, COLLAGE_ERR_NULL, "tensor %d has no gradient", j);
        if (q8 && x->index0 % CE_QBLOCK) return fail(o, COLLAGE_ERR_SIZE, "tensor %d starts at slab index %llu, not a multiple of 256", j, (unsigned long long)x->index0);
        if (!(x->lr >= 0) || !isfinite(x->lr) || x->step == 0) return fail(o, COLLAGE_ERR_ARG, "tensor %d: lr %g, step %llu", j, x->lr, (unsigned long long)x->step);
        dev_tensor *T = &o->h_tab[j];
        T->P.w = x->words[COLLAGE_ROLE_WEIGHTS];
        T->P.g = x->grad;
        T->P.m = x->words[COLLAGE_ROLE_M];
        T->P.v = x->words[COLLAGE_ROLE_V];
        T->P.comp = (uint16_t *)(x->words[COLLAGE_ROLE_COMPENSATION] ? x->words[COLLAGE_ROLE_COMPENSATION]
                                 : x->words[COLLAGE_ROLE_KAHAN]      ? x->words[COLLAGE_ROLE_KAHAN]
                                                                     : x->words[COLLAGE_ROLE_REMAINDER]);
        T->P.dv = (uint16_t *)x->words[COLLAGE_ROLE_DV];
        T->P.master = (float *)x->words[COLLAGE_ROLE_MASTER];
        T->P.corr = (int8_t *)x->words[COLLAGE_ROLE_CORRECTION];
        const size_t pad = (x->n + 63) & ~(size_t)63;
        T->P.mscale = D->mq >= 0 ? (float *)((char *)x->words[COLLAGE_ROLE_M] + pad) : NULL;
        T->P.vscale = D->vq >= 0 ? (float *)((char *)x->words[COLLAGE_ROLE_V] + pad) : NULL;
        T->k = ce_k_make(x->lr, x->beta1, x->beta2, x->eps, x->weight_decay, x->step, o->cfg.seed);
        T->vec = ce_vec_ok(D, &T->P);
        T->n = x->n;
        T->index0 = x->index0;
        T->unit0 = u;
        T->chunk0 = c;
        u += ce_n_blocks(q8, x->index0, x->n);
        c += (x->n + CE_BLOCK - 1) / CE_BLOCK;
        elems += x->n;
    }
    if (elems > o->cfg.max_elements || u > o->max_units)
        return fail(o, COLLAGE_ERR_SIZE, "%zu elements; the optimizer takes at most %zu", elems, o->cfg.max_elements);
    /* from pageable memory: the copy has taken the table when the call returns, so it may be rewritten */
    if (k) CU(o, cudaMemcpyAsync(o->d_tab, o->h_tab, (size_t)k * sizeof *o->h_tab, cudaMemcpyHostToDevice, st));
    *units = u;
    *chunks = c;
    return COLLAGE_OK;
}

/* Σg² of the table's chunks into out[0 .. chunks). */
static void launch_sumsq(const collage_cuda_adamw *o, int k, size_t chunks, double *out, cudaStream_t st) {
    if (!chunks) return;
    const unsigned blocks = (unsigned)((chunks + 15) / 16);
    if (o->D.wf == COLLAGE_WORD_FP32) sumsq_kernel<COLLAGE_WORD_FP32><<<blocks, THREADS, 0, st>>>(o->d_tab, k, chunks, out);
    else if (o->D.wf == COLLAGE_WORD_FP16) sumsq_kernel<COLLAGE_WORD_FP16><<<blocks, THREADS, 0, st>>>(o->d_tab, k, chunks, out);
    else sumsq_kernel<COLLAGE_WORD_BF16><<<blocks, THREADS, 0, st>>>(o->d_tab, k, chunks, out);
}

/* Σg² of the table's chunks into o->d_chunks and their total, the clipping factor, into o->d_res: one launch
 * (the marks' number advances each launch; 0, the marks' first value, is never one). */
static void launch_sumsq_total(collage_cuda_adamw *o, int k, size_t chunks, cudaStream_t st) {
    const unsigned blocks = 1 + (unsigned)((chunks + 15) / 16);
    if (++o->epoch == 0) o->epoch = 1;
    const double clip = o->cfg.clip, gs = o->cfg.grad_scale;
    const int skip = o->cfg.skip_nonfinite;
    if (o->D.wf == COLLAGE_WORD_FP32)
        sumsq_total_kernel<COLLAGE_WORD_FP32><<<blocks, THREADS, 0, st>>>(o->d_tab, k, chunks, o->d_chunks, o->d_ready,
                                                                          o->epoch, clip, skip, gs, o->d_res);
    else if (o->D.wf == COLLAGE_WORD_FP16)
        sumsq_total_kernel<COLLAGE_WORD_FP16><<<blocks, THREADS, 0, st>>>(o->d_tab, k, chunks, o->d_chunks, o->d_ready,
                                                                          o->epoch, clip, skip, gs, o->d_res);
    else
        sumsq_total_kernel<COLLAGE_WORD_BF16><<<blocks, THREADS, 0, st>>>(o->d_tab, k, chunks, o->d_chunks, o->d_ready,
                                                                          o->epoch, clip, skip, gs, o->d_res);
}

static collage_status sumsq_chunks(collage_cuda_adamw *o, const collage_cuda_tensor *t, int k, double *out,
                                   void *stream) {
    cudaStream_t st = (cudaStream_t)stream;
    size_t units, chunks;
    collage_status s = upload(o, t, k, st, &units, &chunks);
    if (s != COLLAGE_OK) return s;
    launch_sumsq(o, k, chunks, out, st);
    CU(o, cudaGetLastError());
    return COLLAGE_OK;
}

static collage_status step(collage_cuda_adamw *o, const collage_cuda_tensor *t, int k, const double *chunk_sums,
                           size_t n_chunks, void *stream) {
    cudaStream_t st = (cudaStream_t)stream;
    size_t units, chunks;
    collage_status s = upload(o, t, k, st, &units, &chunks);
    if (s != COLLAGE_OK) return s;
    const int need = o->cfg.clip > 0 || o->cfg.skip_nonfinite;
    if (need && !chunk_sums && chunks)
        launch_sumsq_total(o, k, chunks, st);
    else
        total_kernel<<<1, THREADS, 0, st>>>(chunk_sums, need && chunk_sums ? n_chunks : 0, o->cfg.clip,
                                            o->cfg.skip_nonfinite, o->cfg.grad_scale, o->d_res);
    if (units)
        kernel_of(o->cfg.strategy)<<<(unsigned)units, THREADS, 0, st>>>(o->d_tab, k, o->D, o->d_qtab, o->d_res,
                                                                         o->cfg.edq, o->d_unit_acc);
    if (o->cfg.edq && k) edq_kernel<<<(k + 127) / 128, 128, 0, st>>>(o->d_tab, k, units, o->d_unit_acc, o->d_tensor_acc);
    CU(o, cudaGetLastError());
    o->last_stream = st;
    o->last_k = k;
    o->have_step = 1;
    return COLLAGE_OK;
}

static void edq_figures(collage_edq *e, double dot, double ds, double nn, uint64_t lost, uint64_t nz) {
    const double norm = sqrt(nn);
    memset(e, 0, sizeof *e);
    e->sum_dot = dot; e->sum_dot_state = ds; e->sum_nn = nn; e->lost_count = lost;
    e->update_norm = norm; e->updates = nz;
    e->edq = nn > 0 ? dot / norm : 0;
    e->edq_ratio = nn > 0 ? dot / nn : 1;
    e->edq_state = nn > 0 ? ds / norm : 0;
    e->edq_state_ratio = nn > 0 ? ds / nn : 1;
    e->lost = nz ? (double)lost / (double)nz : 0;
}

static collage_status stats_of(collage_cuda_adamw *o, collage_step_stats *stats, collage_edq *per_tensor) {
    CU(o, cudaStreamSynchronize(o->last_stream));
    dev_result r;
    CU(o, cudaMemcpy(&r, o->d_res, sizeof r, cudaMemcpyDeviceToHost));
    if (stats) {
        memset(stats, 0, sizeof *stats);
        stats->skipped = r.skip;
        stats->grad_norm = r.gnorm;
        stats->clip_coef = r.coef;
    }
    if (!o->cfg.edq || r.skip) return COLLAGE_OK;
    ce_acc *acc = (ce_acc *)malloc((size_t)(o->last_k ? o->last_k : 1) * sizeof *acc);
    if (!acc) return COLLAGE_ERR_NOMEM;
    cudaError_t e = cudaMemcpy(acc, o->d_tensor_acc, (size_t)o->last_k * sizeof *acc, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) { free(acc); return fail(o, COLLAGE_ERR_UNSUPPORTED, "cudaMemcpy: %s", cudaGetErrorString(e)); }
    double tot[3] = {0, 0, 0};
    uint64_t tl = 0, tn = 0;
    for (int j = 0; j < o->last_k; j++) {
        if (per_tensor) edq_figures(&per_tensor[j], acc[j].dot, acc[j].dot_state, acc[j].nn, acc[j].lost, acc[j].nonzero);
        tot[0] += acc[j].dot; tot[1] += acc[j].dot_state; tot[2] += acc[j].nn;
        tl += acc[j].lost; tn += acc[j].nonzero;
    }
    if (stats) edq_figures(&stats->edq, tot[0], tot[1], tot[2], tl, tn);
    free(acc);
    return COLLAGE_OK;
}

collage_status collage_cuda_sumsq_chunks(collage_cuda_adamw *o, const collage_cuda_tensor *t, int k, double *out,
                                         void *stream) {
    if (!o || !out) return COLLAGE_ERR_NULL;
    const device_guard g = device_enter(o->cfg.device);
    const collage_status st = sumsq_chunks(o, t, k, out, stream);
    device_leave(g);
    return st;
}

collage_status collage_cuda_adamw_step(collage_cuda_adamw *o, const collage_cuda_tensor *t, int k,
                                       const double *chunk_sums, size_t n_chunks, void *stream) {
    if (!o) return COLLAGE_ERR_NULL;
    const device_guard g = device_enter(o->cfg.device);
    const collage_status st = step(o, t, k, chunk_sums, n_chunks, stream);
    device_leave(g);
    return st;
}

collage_status collage_cuda_adamw_stats(collage_cuda_adamw *o, collage_step_stats *stats, collage_edq *per_tensor) {
    if (!o) return COLLAGE_ERR_NULL;
    if (!o->have_step) return fail(o, COLLAGE_ERR_ARG, "no step has been taken");
    const device_guard g = device_enter(o->cfg.device);
    const collage_status st = stats_of(o, stats, per_tensor);
    device_leave(g);
    return st;
}
