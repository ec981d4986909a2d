/* gemm_fp8.c — fp8 matrix products (nn.h, numerics.md §13): both operands quantized by a recipe (fp8q.c),
 * their fp8 values (exact in bf16) multiplied through the bf16 products' door with fp32 sums, and the
 * blocks' scales applied in fp32 per K block; and the scalar reference twin of the whole. */
#include "nn.h"

void nn_fp8_ws_free(nn_fp8_ws *ws) {
    for (int i = 0; i < 2; i++) free(ws->v[i]), free(ws->s[i]), free(ws->inv[i]);
    nn_ws_free(&ws->tiles);
    *ws = (nn_fp8_ws){0};
}

collage_fp8_quant nn_fp8_quant_of(const nn_fp8_spec *p, int which, int trans) {
    const collage_fp8_role role = which ? p->rb : p->ra;
    collage_fp8_quant q = {.recipe = p->recipe, .fmt = collage__fp8_format(role, p->e4m3_all), .role = role,
                           .k_axis = which ? trans : !trans, .scale = 1.0f};
    if (p->recipe == COLLAGE_FP8_DELAYED && p->scaling)
        q.scale = collage__fp8_scaling_scale(p->scaling, which ? p->slot_b : p->slot_a);
    return q;
}

/* The K length of an operand's blocks (0: dequantized, no scale left to apply). */
static int k_block(const nn_fp8_operand *op, int k_axis) { return op->dequant ? 0 : k_axis ? op->bc : op->br; }

static int grow16(uint16_t **p, size_t *cap, size_t n) {
    if (n <= *cap) return 0;
    uint16_t *q = realloc(*p, n * sizeof *q);
    if (!q) return -1;
    *p = q, *cap = n;
    return 0;
}

/* s and inv grow together (n floats each); cap changes once both have. */
static int grow_scales(float **s, float **inv, size_t *cap, size_t n) {
    if (n <= *cap) return 0;
    float *q = realloc(*s, n * sizeof *q);
    if (!q) return -1;
    *s = q;
    if (!(q = realloc(*inv, n * sizeof *q))) return -1;
    *inv = q, *cap = n;
    return 0;
}

/* nn_gemm_fp8_reserve; b_in_copy: operand B is a weight quantized into its copy, not into ws. */
static int reserve(nn_fp8_ws *ws, const nn_fp8_spec *p, int ta, int tb, int M, int N, int K, int nt,
                   nn_bf16_path path, int b_in_copy) {
    const int rows[2] = {ta ? K : M, tb ? N : K}, cols[2] = {ta ? M : K, tb ? K : N};
    int kb = K;
    for (int w = 0; w < 2; w++) {
        const collage_fp8_quant q = nn_fp8_quant_of(p, w, w ? tb : ta);
        if (!(w && b_in_copy) &&
            (grow16(&ws->v[w], &ws->cap_v[w], (size_t)rows[w] * cols[w]) ||
             grow_scales(&ws->s[w], &ws->inv[w], &ws->cap_s[w], collage__fp8_blocks(&q, rows[w], cols[w]))))
            return -1;
        int br, bc;
        collage__fp8_block_shape(&q, rows[w], cols[w], &br, &bc);
        const int ext = q.k_axis ? bc : br;
        kb = ext < kb ? ext : kb;
    }
    if (p->recipe == COLLAGE_FP8_MXFP8) return nn_gemm_bf16_reserve(&ws->tiles, M, N, K, nt, path);
    return nn_gemm_bf16_kblocks_reserve(&ws->tiles, M, N, kb, nt, path);
}

int nn_gemm_fp8_reserve(nn_fp8_ws *ws, const nn_fp8_spec *p, int ta, int tb, int M, int N, int K, int nt,
                        nn_bf16_path path) {
    return reserve(ws, p, ta, tb, M, N, K, nt, path, 0);
}

collage_status nn_fp8_operand_make(nn_fp8_operand *op, const collage_fp8_quant *q, const uint16_t *X, int rows, int cols,
                                   int ld, uint16_t *v, float *s, float *inv, float *amax, int nt) {
    const int dequant = q->recipe == COLLAGE_FP8_MXFP8;
    const collage_status st = collage__fp8_quantize(q, X, rows, cols, ld, NULL, v, dequant, s, inv, amax, nt);
    if (st != COLLAGE_OK) return st;
    int br, bc;
    collage__fp8_block_shape(q, rows, cols, &br, &bc);
    *op = (nn_fp8_operand){.v = v, .ld = cols, .inv = inv, .br = br, .bc = bc, .gc = (cols + bc - 1) / bc,
                           .dequant = dequant};
    return COLLAGE_OK;
}

/* The factor of the block holding stored element (r, c). */
static inline float inv_at(const nn_fp8_operand *op, int r, int c) {
    return op->inv[(size_t)(r / op->br) * op->gc + (size_t)(c / op->bc)];
}

typedef struct {
    const nn_fp8_operand *A, *B;
    int ta, tb;
    nn_tile_fn ep;
    void *ctx;
} fold_ctx;

/* c = fp32(P·s) at k0 = 0, else fp32(c + fp32(P·s)), s = fp32(ia·ib) (nn_gemm_fp8_q's contract); the
 * columns' factors ib are looked up once per FOLD_CHUNK columns, the rows' once per row. */
#define FOLD_CHUNK 256
static void fold_scaled(void *p, const float *part, int ldp, float *acc, int lda, int i0, int i1, int j0, int j1,
                        int k0) {
    const fold_ctx *f = p;
    float ib[FOLD_CHUNK];
    for (int c0 = j0; c0 < j1; c0 += FOLD_CHUNK) {
        const int n = j1 - c0 < FOLD_CHUNK ? j1 - c0 : FOLD_CHUNK;
        for (int j = 0; j < n; j++) ib[j] = f->tb ? inv_at(f->B, c0 + j, k0) : inv_at(f->B, k0, c0 + j);
        for (int i = i0; i < i1; i++) {
            const float ia = f->ta ? inv_at(f->A, k0, i) : inv_at(f->A, i, k0);
            const float *pi = part + (size_t)(i - i0) * ldp + (c0 - j0);
            float *ci = acc + (size_t)(i - i0) * lda + (c0 - j0);
            if (k0 == 0)
                for (int j = 0; j < n; j++) ci[j] = pi[j] * (ia * ib[j]);
            else
                for (int j = 0; j < n; j++) ci[j] = ci[j] + pi[j] * (ia * ib[j]);
        }
    }
}

static void ep_forward(void *p, const float *t, int ldt, int i0, int i1, int j0, int j1) {
    const fold_ctx *f = p;
    f->ep(f->ctx, t, ldt, i0, i1, j0, j1);
}

void nn_gemm_fp8_q(int ta, int tb, int M, int N, int K, const nn_fp8_operand *A, const nn_fp8_operand *B, nn_tile_fn ep,
                   void *ctx, nn_ws *tiles, nn_bf16_path path, int nt) {
    COLLAGE_ASSERT(A->dequant == B->dequant);
    if (A->dequant) {
        nn_gemm_bf16(ta, tb, M, N, K, A->v, A->ld, B->v, B->ld, ep, ctx, tiles, path, nt);
        return;
    }
    const int ka = k_block(A, !ta), kb = k_block(B, tb);
    const int kstep = ka < kb ? ka : kb;
    COLLAGE_ASSERT(kstep > 0 && (ka >= K || ka % kstep == 0) && (kb >= K || kb % kstep == 0));
    fold_ctx f = {.A = A, .B = B, .ta = ta, .tb = tb, .ep = ep, .ctx = ctx};
    nn_gemm_bf16_kblocks(ta, tb, M, N, K, kstep, A->v, A->ld, B->v, B->ld, fold_scaled, ep_forward, &f, tiles, path, nt);
}

int nn_fp8_wcopy_alloc(nn_fp8_wcopy *wc, const nn_fp8_layer *L, int C, int OC) {
    nn_fp8_wcopy_free(wc);
    const nn_fp8_spec fwd = {.recipe = L->recipe, .e4m3_all = L->e4m3_all, .ra = COLLAGE_FP8_ACT, .rb = COLLAGE_FP8_WEIGHT};
    const collage_fp8_quant q = nn_fp8_quant_of(&fwd, 1, 1);
    if (!grow16(&wc->v, &wc->cap_v, (size_t)OC * C) &&
        !grow_scales(&wc->s, &wc->inv, &wc->cap_s, collage__fp8_blocks(&q, OC, C)))
        return 0;
    nn_fp8_wcopy_free(wc);
    return -1;
}

/* Operand B, a (rows, cols) weight, quantized by q: wc's copy when `reuse` and wc holds this matrix's
 * quantization by q (the same values, format, block shape and scale give the same bits), its amax recorded
 * again; else quantized into wc (which then holds it; its buffers hold the matrix: nn_fp8_wcopy_alloc)
 * or, when wc is NULL, into the scratch. */
static collage_status operand_b(nn_fp8_operand *ob, const collage_fp8_quant *q, const uint16_t *B, int rows, int cols,
                                int ld, nn_fp8_ws *ws, nn_fp8_wcopy *wc, int reuse, float *amb, int nt) {
    int br, bc;
    collage__fp8_block_shape(q, rows, cols, &br, &bc);
    if (wc && reuse && wc->valid && wc->w == B && wc->rows == rows && wc->cols == cols && wc->ld == ld &&
        wc->fmt == q->fmt && wc->br == br && wc->bc == bc && f32_bits(wc->scale) == f32_bits(q->scale) &&
        wc->op.dequant == (q->recipe == COLLAGE_FP8_MXFP8)) {
        *ob = wc->op, *amb = wc->amax;
        return COLLAGE_OK;
    }
    if (!wc) return nn_fp8_operand_make(ob, q, B, rows, cols, ld, ws->v[1], ws->s[1], ws->inv[1], amb, nt);
    COLLAGE_ASSERT(wc->cap_v >= (size_t)rows * cols && wc->cap_s >= collage__fp8_blocks(q, rows, cols));
    wc->valid = 0;
    const collage_status st = nn_fp8_operand_make(ob, q, B, rows, cols, ld, wc->v, wc->s, wc->inv, amb, nt);
    if (st != COLLAGE_OK) return st;
    wc->op = *ob, wc->w = B, wc->rows = rows, wc->cols = cols, wc->ld = ld, wc->fmt = q->fmt, wc->br = br;
    wc->bc = bc, wc->scale = q->scale, wc->amax = *amb, wc->valid = 1;
    return COLLAGE_OK;
}

collage_status nn_gemm_fp8_w(const nn_fp8_spec *p, int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                             const uint16_t *B, int ldb, nn_tile_fn ep, void *ctx, nn_fp8_ws *ws, nn_fp8_wcopy *wc,
                             int reuse, nn_bf16_path path, int nt) {
    const collage_fp8_quant qa = nn_fp8_quant_of(p, 0, ta), qb = nn_fp8_quant_of(p, 1, tb);
    COLLAGE_ASSERT(ws->cap_v[0] >= (size_t)M * K && ws->cap_s[0] >= collage__fp8_blocks(&qa, ta ? K : M, ta ? M : K) &&
                   (wc || (ws->cap_v[1] >= (size_t)K * N && ws->cap_s[1] >= collage__fp8_blocks(&qb, tb ? N : K, tb ? K : N))));
    if (wc && !reuse) wc->valid = 0; /* a new copy is made below, or none is left */
    nn_fp8_operand oa, ob;
    float ama, amb;
    const double p0 = nn_prof_begin(); /* the quantization and the product (nn.h: profiling) */
    const double t0 = nn_now();
    collage_status st = nn_fp8_operand_make(&oa, &qa, A, ta ? K : M, ta ? M : K, lda, ws->v[0], ws->s[0], ws->inv[0],
                                            &ama, nt);
    if (st == COLLAGE_OK) st = operand_b(&ob, &qb, B, tb ? N : K, tb ? K : N, ldb, ws, wc, reuse, &amb, nt);
    ws->quant_s += nn_now() - t0;
    if (st != COLLAGE_OK) {
        nn_prof_end(NN_PROF_PRODUCTS, p0, 0.0);
        return st;
    }
    if (p->recipe == COLLAGE_FP8_DELAYED && p->scaling) {
        collage__fp8_scaling_record(p->scaling, p->slot_a, ama);
        collage__fp8_scaling_record(p->scaling, p->slot_b, amb);
    }
    nn_gemm_fp8_q(ta, tb, M, N, K, &oa, &ob, ep, ctx, &ws->tiles, path, nt);
    nn_prof_end(NN_PROF_PRODUCTS, p0, 2.0 * M * N * K);
    return COLLAGE_OK;
}

collage_status nn_gemm_fp8(const nn_fp8_spec *p, int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                           const uint16_t *B, int ldb, nn_tile_fn ep, void *ctx, nn_fp8_ws *ws, nn_bf16_path path,
                           int nt) {
    return nn_gemm_fp8_w(p, ta, tb, M, N, K, A, lda, B, ldb, ep, ctx, ws, NULL, 0, path, nt);
}

void nn_fp8_wcopy_free(nn_fp8_wcopy *wc) {
    if (!wc) return;
    free(wc->v), free(wc->s), free(wc->inv);
    *wc = (nn_fp8_wcopy){0};
}

void nn_fp8_slot_formats(collage_format *fmts, int layers, int e4m3_all) {
    for (int l = 0; l < layers; l++) {
        fmts[3 * l] = collage__fp8_format(COLLAGE_FP8_ACT, e4m3_all);
        fmts[3 * l + 1] = collage__fp8_format(COLLAGE_FP8_WEIGHT, e4m3_all);
        fmts[3 * l + 2] = collage__fp8_format(COLLAGE_FP8_GRAD, e4m3_all);
    }
}

int nn_fp8_layer_reserve(nn_fp8_ws *ws, const nn_fp8_layer *L, int N, int C, int OC, int nt, nn_bf16_path path) {
    const nn_fp8_spec fwd = {.recipe = L->recipe, .e4m3_all = L->e4m3_all, .ra = COLLAGE_FP8_ACT, .rb = COLLAGE_FP8_WEIGHT},
                      din = {.recipe = L->recipe, .e4m3_all = L->e4m3_all, .ra = COLLAGE_FP8_GRAD, .rb = COLLAGE_FP8_WEIGHT},
                      dw = {.recipe = L->recipe, .e4m3_all = L->e4m3_all, .ra = COLLAGE_FP8_GRAD, .rb = COLLAGE_FP8_ACT};
    const int copy = L->wc != NULL;
    if (reserve(ws, &fwd, 0, 1, N, OC, C, nt, path, copy) || reserve(ws, &din, 0, 0, N, C, OC, nt, path, copy))
        return -1;
    return reserve(ws, &dw, 1, 0, OC, C, N, nt, path, 0);
}

/* ---------------------------------------------------------------- the scalar twin */
/* Element (i, k) of op(X) for a stored operand of row stride ld. */
static inline float op_at(const nn_fp8_operand *o, int trans, int i, int k) {
    return bf16_f32(trans ? o->v[(size_t)k * o->ld + i] : o->v[(size_t)i * o->ld + k]);
}

/* C (M,N, packed) = nn_gemm_fp8_q's contract, element by element: each K block's P = Σ fl(a·b) in k order
 * from +0 (the reference sgemm's sum), folded with fp32(ia·ib) as there; dequantized operands: one block. */
static void product_ref(int ta, int tb, int M, int N, int K, const nn_fp8_operand *A, const nn_fp8_operand *B,
                        float *C) {
    const int ka = A->dequant ? K : k_block(A, !ta), kb = B->dequant ? K : k_block(B, tb);
    const int kstep = ka < kb ? ka : kb;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float c = 0.0f;
            for (int k0 = 0; k0 < K; k0 += kstep) {
                const int k1 = k0 + kstep < K ? k0 + kstep : K;
                float P = 0.0f;
                for (int k = k0; k < k1; k++) P = P + op_at(A, ta, i, k) * op_at(B, !tb, j, k);
                if (A->dequant) { c = P; continue; }
                const float ia = ta ? inv_at(A, k0, i) : inv_at(A, i, k0);
                const float s = ia * (tb ? inv_at(B, j, k0) : inv_at(B, k0, j));
                c = k0 == 0 ? P * s : c + P * s;
            }
            C[(size_t)i * N + j] = c;
        }
}

collage_status nn_gemm_fp8_ref(const nn_fp8_spec *p, int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                               const uint16_t *B, int ldb, nn_tile_fn ep, void *ctx) {
    const collage_fp8_quant qa = nn_fp8_quant_of(p, 0, ta), qb = nn_fp8_quant_of(p, 1, tb);
    const size_t na = collage__fp8_blocks(&qa, ta ? K : M, ta ? M : K), nb = collage__fp8_blocks(&qb, tb ? N : K, tb ? K : N);
    uint16_t *va = malloc((size_t)M * K * 2), *vb = malloc((size_t)K * N * 2);
    float *sa = malloc(na * 4), *ia = malloc(na * 4), *sb = malloc(nb * 4), *ib = malloc(nb * 4);
    float *C = malloc((size_t)M * N * 4);
    collage_status st = COLLAGE_ERR_NOMEM;
    if (va && vb && sa && ia && sb && ib && C) {
        nn_fp8_operand oa, ob;
        float ama, amb;
        st = nn_fp8_operand_make(&oa, &qa, A, ta ? K : M, ta ? M : K, lda, va, sa, ia, &ama, 1);
        if (st == COLLAGE_OK) st = nn_fp8_operand_make(&ob, &qb, B, tb ? N : K, tb ? K : N, ldb, vb, sb, ib, &amb, 1);
        if (st == COLLAGE_OK) {
            if (p->recipe == COLLAGE_FP8_DELAYED && p->scaling) {
                collage__fp8_scaling_record(p->scaling, p->slot_a, ama);
                collage__fp8_scaling_record(p->scaling, p->slot_b, amb);
            }
            product_ref(ta, tb, M, N, K, &oa, &ob, C);
            ep(ctx, C, N, 0, M, 0, N);
        }
    }
    free(va), free(vb), free(sa), free(ia), free(sb), free(ib), free(C);
    return st;
}
