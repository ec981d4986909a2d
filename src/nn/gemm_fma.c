/* gemm_fma.c — collage's own product of bf16 operands (nn.h: nn_gemm_fma, nn_gemm_fma_tile): the operands
 * widened to fp32 (exactly) as they are packed into panels, then a 12 × 32 micro-kernel of fp32 fused
 * multiply-adds. On a core whose VDPBF16PS issues at half its FMA rate (Intel family 6 model 207: one every
 * 2 cycles against two FMAs a cycle), fp32 FMA on widened operands is the bf16 product's ceiling without AMX.
 * nn_gemm_fma runs a whole product: each operand packed once into scratch the threads share (in bands that
 * bound it), the threads over the band's panels; nn_gemm_fma_tile one tile, packing its own panels.
 * Contract (nn_gemm_fma_ref computes it in plain C): C[i][j] = fma(a(i,K-1), b(K-1,j), … fma(a(i,0),
 * b(0,j), +0)), one rounding per k in k order, whatever the blocking (a k-block's sums are stored and
 * reloaded as fp32, exactly); subnormals kept. Built for AVX-512 (Makefile); gemm.c enters it only there. */
#include "nn.h"
#include <immintrin.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define MR 12  /* rows of C a micro-kernel keeps: 12 × 2 accumulators, 2 B vectors, 1 broadcast */
#define NR 32  /* columns: two vectors */
#define KC 256 /* k per packed block: a B panel, KC × NR floats, is 32 KiB (the L1 cache) */

static inline int round_up(int x, int to) { return (x + to - 1) / to * to; }

size_t nn_gemm_fma_pack_floats(int m, int n, int K) {
    const int kc = K < KC ? K : KC;
    return (size_t)(round_up(n, NR) + round_up(m, MR)) * (size_t)kc;
}

/* 16 bf16 at p (the first kn, the others 0) widened to fp32. */
static inline __m512 widen16(const uint16_t *p, int kn) {
    const __m256i v = _mm256_maskz_loadu_epi16((__mmask16)((1u << kn) - 1u), p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

/* Rows r < rows of bf16 at src + r·ld (the others 0), their kn ≤ 16 first columns, widened and transposed:
 * out[k] holds column k, row r in lane r. */
static void transpose16(const uint16_t *src, size_t ld, int rows, int kn, __m512 out[16]) {
    __m512 r[16], t[16], u[16];
    for (int i = 0; i < 16; i++) r[i] = i < rows ? widen16(src + (size_t)i * ld, kn) : _mm512_setzero_ps();
    for (int i = 0; i < 16; i += 2) t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    for (int g = 0; g < 16; g += 4) { /* u[g + q]: lane L = rows g..g+3 of column 4L + q */
        u[g + 0] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44);
        u[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xEE);
        u[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
        u[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
    }
    for (int q = 0; q < 4; q++) {
        const __m512 v0 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0x88), w0 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0xDD);
        const __m512 v1 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0x88), w1 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0xDD);
        out[q] = _mm512_shuffle_f32x4(v0, v1, 0x88);
        out[q + 8] = _mm512_shuffle_f32x4(v0, v1, 0xDD);
        out[q + 4] = _mm512_shuffle_f32x4(w0, w1, 0x88);
        out[q + 12] = _mm512_shuffle_f32x4(w0, w1, 0xDD);
    }
}

/* A panel: rows i < mr of op(A) from row i0, k in [k0, k0 + kc), into ap[k][MR] (rows past mr 0). */
static void pack_a(int ta, const uint16_t *A, int lda, int i0, int mr, int k0, int kc, float *ap) {
    const __mmask16 rows = (__mmask16)((1u << MR) - 1u), valid = (__mmask16)((1u << mr) - 1u);
    if (ta) { /* a(i,k) = A[k·lda + i]: each k a row of memory */
        for (int k = 0; k < kc; k++)
            _mm512_mask_storeu_ps(ap + (size_t)k * MR, rows,
                                  _mm512_maskz_mov_ps(valid, widen16(A + (size_t)(k0 + k) * lda + i0, mr)));
        return;
    }
    __m512 col[16];
    for (int k = 0; k < kc; k += 16) { /* a(i,k) = A[i·lda + k]: transposed 16 columns at a time */
        const int kn = kc - k < 16 ? kc - k : 16;
        transpose16(A + (size_t)i0 * lda + k0 + k, (size_t)lda, mr, kn, col);
        for (int q = 0; q < kn; q++) _mm512_mask_storeu_ps(ap + (size_t)(k + q) * MR, rows, col[q]);
    }
}

/* B panel: columns j < nr of op(B) from column j0, k in [k0, k0 + kc), into bp[k][NR] (columns past nr 0). */
static void pack_b(int tb, const uint16_t *B, int ldb, int j0, int nr, int k0, int kc, float *bp) {
    if (!tb) { /* b(k,j) = B[k·ldb + j]: each k a row of memory */
        const int n0 = nr < 16 ? nr : 16, n1 = nr - n0;
        for (int k = 0; k < kc; k++) {
            const uint16_t *src = B + (size_t)(k0 + k) * ldb + j0;
            _mm512_storeu_ps(bp + (size_t)k * NR, widen16(src, n0));
            _mm512_storeu_ps(bp + (size_t)k * NR + 16, n1 > 0 ? widen16(src + 16, n1) : _mm512_setzero_ps());
        }
        return;
    }
    __m512 col[16];
    for (int h = 0; h < 2; h++) { /* b(k,j) = B[j·ldb + k]: two halves of 16 columns, transposed */
        const int rows = nr - 16 * h;
        for (int k = 0; k < kc; k += 16) {
            const int kn = kc - k < 16 ? kc - k : 16;
            if (rows > 0) transpose16(B + (size_t)(j0 + 16 * h) * ldb + k0 + k, (size_t)ldb, rows < 16 ? rows : 16, kn, col);
            for (int q = 0; q < kn; q++)
                _mm512_storeu_ps(bp + (size_t)(k + q) * NR + 16 * h, rows > 0 ? col[q] : _mm512_setzero_ps());
        }
    }
}

/* c (MR × NR, row stride ldc) = (first ? 0 : c) + Σ_k ap[k][·] ⊗ bp[k][·], one FMA per k in k order. */
static void micro(int kc, const float *ap, const float *bp, float *c, size_t ldc, int first) {
    __m512 acc[MR][2];
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) {
        acc[r][0] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + (size_t)r * ldc);
        acc[r][1] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + (size_t)r * ldc + 16);
    }
    for (int k = 0; k < kc; k++) {
        const __m512 b0 = _mm512_loadu_ps(bp + (size_t)k * NR), b1 = _mm512_loadu_ps(bp + (size_t)k * NR + 16);
#pragma GCC unroll 12
        for (int r = 0; r < MR; r++) {
            const __m512 a = _mm512_set1_ps(ap[(size_t)k * MR + r]);
            acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) {
        _mm512_storeu_ps(c + (size_t)r * ldc, acc[r][0]);
        _mm512_storeu_ps(c + (size_t)r * ldc + 16, acc[r][1]);
    }
}

/* An edge block (mr ≤ MR rows, nr ≤ NR columns of C at c): through a full block in edge[]. */
static void micro_edge(int kc, const float *ap, const float *bp, float *c, size_t ldc, int first, int mr, int nr) {
    float edge[MR * NR];
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < NR; j++) edge[r * NR + j] = first || r >= mr || j >= nr ? 0.0f : c[(size_t)r * ldc + j];
    micro(kc, ap, bp, edge, NR, first);
    for (int r = 0; r < mr; r++) memcpy(c + (size_t)r * ldc, edge + r * NR, (size_t)nr * sizeof(float));
}

void nn_gemm_fma_tile(int ta, int tb, int m, int n, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                      float *t, float *pack) {
    const int np = round_up(n, NR) / NR, mp = round_up(m, MR) / MR;
    for (int k0 = 0; k0 < K; k0 += KC) {
        const int kc = K - k0 < KC ? K - k0 : KC;
        float *bp = pack, *ap = pack + (size_t)np * NR * kc;
        for (int p = 0; p < np; p++)
            pack_b(tb, B, ldb, p * NR, n - p * NR < NR ? n - p * NR : NR, k0, kc, bp + (size_t)p * NR * kc);
        for (int p = 0; p < mp; p++)
            pack_a(ta, A, lda, p * MR, m - p * MR < MR ? m - p * MR : MR, k0, kc, ap + (size_t)p * MR * kc);
        for (int q = 0; q < np; q++)
            for (int p = 0; p < mp; p++) {
                const int mr = m - p * MR < MR ? m - p * MR : MR, nr = n - q * NR < NR ? n - q * NR : NR;
                float *c = t + (size_t)p * MR * n + (size_t)q * NR;
                const float *a = ap + (size_t)p * MR * kc, *b = bp + (size_t)q * NR * kc;
                if (mr == MR && nr == NR) micro(kc, a, b, c, (size_t)n, k0 == 0);
                else micro_edge(kc, a, b, c, (size_t)n, k0 == 0, mr, nr);
            }
    }
}

/* ---------------------------------------------------------------- a whole product, each operand packed once */
#define MG 264            /* rows of C a band holds (22 micro-kernel rows: GPT-2's 256 tokens in one) */
#define NG 768            /* columns of a band (24 panels) */
#define HOLD (384 * 768)  /* floats an operand's band may hold for all of k (1.1 MiB, within a core's L2) */
#define FMA_PAR_MIN (1 << 21) /* multiply-adds below which a product runs on one thread */

/* A product's plan: bands of mg × ng of C (the product's own size where smaller, padded to whole
 * micro-kernel blocks), each over chunks of KC k's (one L1 block: a chunk's packed operands and the
 * band's sums, about 1 MiB, stay in a core's L2, a B panel's chunk in L1). An operand whose band fits
 * HOLD floats for all of K is held whole (ka or kb = K: packed once, and kept while the next bands
 * need the same rows of op(A) or columns of op(B)), else one chunk at a time (ka or kb = KC). */
typedef struct { int mg, ng, chunks, ka, kb; } fma_plan;

static fma_plan plan_of(int M, int N, int K) {
    fma_plan p = {.mg = round_up(M < MG ? M : MG, MR), .ng = round_up(N < NG ? N : NG, NR)};
    if (p.mg == 0) p.mg = MR;
    if (p.ng == 0) p.ng = NR;
    p.chunks = K > 0 ? (K + KC - 1) / KC : 1;
    const int kc = K < KC ? K : KC;
    p.ka = (size_t)p.mg * (size_t)K <= HOLD ? K : kc;
    p.kb = (size_t)p.ng * (size_t)K <= HOLD ? K : kc;
    return p;
}

static size_t thread_floats(const fma_plan *p) {
    return (size_t)p->ng * (size_t)p->kb + (size_t)p->mg * (size_t)p->ka + (size_t)p->mg * (size_t)p->ng + 1;
}

size_t nn_gemm_fma_floats(int M, int N, int K, int nt) {
    const fma_plan p = plan_of(M, N, K);
    return (size_t)(nt > 1 ? nt : 1) * thread_floats(&p);
}

void nn_gemm_fma_band(int M, int N, int *m, int *n) {
    *m = M < MG ? M : MG;
    *n = N < NG ? N : NG;
}

/* One band's chunk: rows [i0, i0 + m), columns [j0, j0 + n), k in [k0, k0 + kc), kc ≤ KC. */
typedef struct { int i0, m, j0, n, k0, kc; } fma_band;

/* The packed panels of a chunk: A's row block p, B's panel q. */
static float *a_chunk(const fma_plan *P, float *ap, const fma_band *b, int p) {
    return ap + (size_t)p * MR * P->ka + (size_t)(P->ka > KC ? b->k0 : 0) * MR;
}
static float *b_chunk(const fma_plan *P, float *bp, const fma_band *b, int q) {
    return bp + (size_t)q * NR * P->kb + (size_t)(P->kb > KC ? b->k0 : 0) * NR;
}

/* A band's chunk: its operands packed (with_a, with_b: 0 where they are already there), then c (row
 * stride ng; whole blocks: the band is padded) += their products, from +0 on the first chunk. */
static void band_chunk(const fma_plan *P, int ta, int tb, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                       const fma_band *b, int with_a, int with_b, float *ap, float *bp, float *c) {
    const int np = (b->n + NR - 1) / NR, mp = (b->m + MR - 1) / MR;
    for (int q = 0; q < np && with_b; q++)
        pack_b(tb, B, ldb, b->j0 + q * NR, b->n - q * NR < NR ? b->n - q * NR : NR, b->k0, b->kc, b_chunk(P, bp, b, q));
    for (int p = 0; p < mp && with_a; p++)
        pack_a(ta, A, lda, b->i0 + p * MR, b->m - p * MR < MR ? b->m - p * MR : MR, b->k0, b->kc, a_chunk(P, ap, b, p));
    for (int q = 0; q < np; q++) {
        const float *bq = b_chunk(P, bp, b, q);
        for (int p = 0; p < mp; p++)
            micro(b->kc, a_chunk(P, ap, b, p), bq, c + (size_t)p * MR * P->ng + (size_t)q * NR, (size_t)P->ng, b->k0 == 0);
    }
}

/* What a thread holds between its parts: its scratch and the bands of op(A) rows and op(B) columns
 * packed there for all of k (-1: none). */
typedef struct { float *scratch; int a_i0, b_j0; } fma_held;

/* C's rows [i0, i1) × columns [j0, j1) on this thread: band by band (at most MG × NG), each band's chunks
 * in k order, then its elements times s (s = 1: left as they are), then ep on the band. */
static void fma_part(const fma_plan *P, int ta, int tb, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                     float s, int i0, int i1, int j0, int j1, nn_tile_fn ep, void *ctx, fma_held *h) {
    float *bp = h->scratch, *ap = bp + (size_t)P->ng * P->kb, *c = ap + (size_t)P->mg * P->ka;
    const int hold_a = P->ka > KC || P->chunks == 1, hold_b = P->kb > KC || P->chunks == 1;
    for (int bi = i0; bi < i1; bi += MG)
        for (int bj = j0; bj < j1; bj += NG) {
            fma_band b = {.i0 = bi, .m = i1 - bi < MG ? i1 - bi : MG, .j0 = bj, .n = j1 - bj < NG ? j1 - bj : NG};
            const int with_a = !hold_a || h->a_i0 != bi, with_b = !hold_b || h->b_j0 != bj;
            for (int ch = 0; ch < P->chunks; ch++) {
                b.k0 = ch * KC;
                b.kc = K - b.k0 < KC ? K - b.k0 : KC;
                band_chunk(P, ta, tb, A, lda, B, ldb, &b, with_a, with_b, ap, bp, c);
            }
            h->a_i0 = hold_a ? bi : -1, h->b_j0 = hold_b ? bj : -1;
            for (int i = 0; i < b.m && s != 1.0f; i++) {
                float *ci = c + (size_t)i * P->ng;
#pragma omp simd
                for (int j = 0; j < b.n; j++) ci[j] = ci[j] * s;
            }
            ep(ctx, c, P->ng, b.i0, b.i0 + b.m, b.j0, b.j0 + b.n);
        }
}

/* The threads take C's longer side in parts of UNIT_N columns or UNIT_M rows, the next free part each
 * (a thread slowed by others' load on a shared machine takes fewer): the split side's operand is packed
 * once for the product. Where the other operand's band is held for all of k, a part spans one band of
 * the other side, the bands in the outer order: a thread's next part finds that band held, so each
 * thread packs each band of the other operand about once (a part whole across a side of several bands
 * would pack them all again for every part: 18 times over at GPT-2's 1024 × 2304 × 768). Where the other
 * operand is packed a k block at a time, for each part again, a part is whole across the other side
 * and a whole band wide, or the side's share of a thread where that is less (GPT-2's 768-column
 * products with K ≥ 2304 are one band: whole, they would run on one thread; each thread packing the
 * other operand again costs 1/part-width of the FLOPs). The threads meet only at the end. */
#define UNIT_N (4 * NR)  /* 128 columns */
#define UNIT_M (11 * MR) /* 132 rows */
void nn_gemm_fma(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                 float s, nn_tile_fn ep, void *ctx, float *scratch, int nt) {
    const fma_plan P = plan_of(M, N, K);
    const int split_m = M > N, side = split_m ? M : N;
    const int held = split_m ? P.kb > KC || P.chunks == 1 : P.ka > KC || P.chunks == 1;
    const int step = split_m ? MR : NR, band = split_m ? MG : NG, share = round_up((side + nt - 1) / (nt > 1 ? nt : 1), step);
    const int unit = held ? (split_m ? UNIT_M : UNIT_N) : share < band ? share : band;
    const int other = split_m ? N : M, oband = split_m ? NG : MG, obands = held ? (other + oband - 1) / oband : 1;
    const int parts = (side + unit - 1) / unit, units = parts * (obands > 0 ? obands : 1);
    const int par = nt > 1 && units > 1 && (double)M * N * K >= FMA_PAR_MIN;
    (void)par; /* read by the OpenMP pragmas only */
#pragma omp parallel num_threads(nt) if (par)
    {
        int me = 0;
#ifdef _OPENMP
        me = omp_get_thread_num();
#endif
        fma_held h = {scratch + (size_t)me * thread_floats(&P), -1, -1};
#pragma omp for schedule(dynamic) nowait
        for (int u = 0; u < units; u++) {
            const int a0 = u % parts * unit, a1 = side - a0 < unit ? side : a0 + unit;
            const int o0 = obands > 1 ? u / parts * oband : 0, o1 = obands > 1 && other - o0 > oband ? o0 + oband : other;
            fma_part(&P, ta, tb, K, A, lda, B, ldb, s, split_m ? a0 : o0, split_m ? a1 : o1, split_m ? o0 : a0,
                     split_m ? o1 : a1, ep, ctx, &h);
        }
    }
}
