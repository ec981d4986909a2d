/* gemm_fp4.c — 4-bit matrix products (nn.h, numerics.md §15 "The 4-bit product"): both operands (after the
 * random Hadamard transform along K when asked) quantized to NVFP4 or MXFP4 by the vector quantizer, their
 * block-scaled values (exact in bf16) multiplied through the bf16 products' door with fp32 sums, and the
 * two tensor factors applied once per sum; and the scalar reference twin of the whole. */
#include "nn.h"

void nn_fp4_ws_free(nn_fp4_ws *ws) {
    for (int i = 0; i < 2; i++) free(ws->v[i]), free(ws->sc[i]), free(ws->enc[i]), free(ws->d[i]), free(ws->h[i]);
    nn_ws_free(&ws->tiles);
    *ws = (nn_fp4_ws){0};
}

collage_fp4_quant nn_fp4_quant_of(const nn_fp4_spec *p, int which, int trans) {
    return (collage_fp4_quant){.recipe = p->recipe, .role = which ? p->rb : p->ra, .k_axis = which ? trans : !trans,
                               .sr = which ? p->sr_b : p->sr_a, .key = p->key, .index0 = which ? NN_FP4_SR_B : 0};
}

static int grow(void **p, size_t *cap, size_t n, size_t size) {
    if (n <= *cap) return 0;
    void *q = realloc(*p, n * size);
    if (!q) return -1;
    *p = q;
    return 0;
}

/* Operand w's buffers for `elems` elements in `blocks` blocks (h too with the transform). */
static int grow_operand(nn_fp4_ws *ws, int w, size_t elems, size_t blocks, int hadamard) {
    if (grow((void **)&ws->v[w], &ws->cap_v[w], elems, 2)) return -1;
    ws->cap_v[w] = elems > ws->cap_v[w] ? elems : ws->cap_v[w];
    if (grow((void **)&ws->sc[w], &ws->cap_s[w], blocks, 1) || grow((void **)&ws->enc[w], &ws->cap_s[w], blocks, 4) ||
        grow((void **)&ws->d[w], &ws->cap_s[w], blocks, 4))
        return -1;
    ws->cap_s[w] = blocks > ws->cap_s[w] ? blocks : ws->cap_s[w];
    if (hadamard) {
        if (grow((void **)&ws->h[w], &ws->cap_h[w], elems, 4)) return -1;
        ws->cap_h[w] = elems > ws->cap_h[w] ? elems : ws->cap_h[w];
    }
    return 0;
}

int nn_gemm_fp4_reserve(nn_fp4_ws *ws, const nn_fp4_spec *p, int ta, int tb, int M, int N, int K, int nt,
                        nn_bf16_path path) {
    const int rows[2] = {ta ? K : M, tb ? N : K}, cols[2] = {ta ? M : K, tb ? K : N};
    for (int w = 0; w < 2; w++) {
        const collage_fp4_quant q = nn_fp4_quant_of(p, w, w ? tb : ta);
        if (grow_operand(ws, w, (size_t)rows[w] * cols[w], collage__fp4_blocks(&q, rows[w], cols[w]), p->hadamard))
            return -1;
    }
    return nn_gemm_bf16_reserve(&ws->tiles, M, N, K, nt, path);
}

/* Operand w of a product: transformed (p->hadamard) into ws->h[w], then quantized into v (ws->v[w] or a
 * weight's copy). */
static collage_status make_operand(const nn_fp4_spec *p, int w, int trans, const uint16_t *X, int rows, int cols,
                                   int ld, nn_fp4_ws *ws, uint16_t *v, nn_fp4_operand *op, int nt) {
    const collage_fp4_quant q = nn_fp4_quant_of(p, w, trans);
    const float *xf = NULL;
    const uint16_t *xb = X;
    if (p->hadamard) {
        collage__fp4_rht(p->signs, 0, NULL, X, rows, cols, ld, q.k_axis, ws->h[w], cols, nt);
        xf = ws->h[w], xb = NULL, ld = cols;
    }
    collage_fp4_tensor t;
    const collage_status st = collage__fp4_quantize_v(&q, xf, xb, rows, cols, ld, NULL, v, ws->sc[w], ws->enc[w],
                                                      ws->d[w], &t, nt);
    *op = (nn_fp4_operand){.v = v, .ld = cols, .dec = t.dec};
    return st;
}

void nn_fp4_wcopy_free(nn_fp4_wcopy *wc) {
    if (!wc) return;
    free(wc->v);
    *wc = (nn_fp4_wcopy){0};
}

int nn_fp4_wcopy_serves(const nn_fp4_layer *L) {
    const nn_fp4_spec f = nn_fp4_layer_spec(L, 0), dx = nn_fp4_layer_spec(L, 1);
    const collage_fp4_quant qf = nn_fp4_quant_of(&f, 1, 1), qx = nn_fp4_quant_of(&dx, 1, 0);
    int brf, bcf, brx, bcx;
    collage__fp4_block_shape(&qf, &brf, &bcf);
    collage__fp4_block_shape(&qx, &brx, &bcx);
    return qf.recipe == qx.recipe && qf.role == qx.role && !qf.sr && !qx.sr && !f.hadamard && !dx.hadamard &&
           brf == brx && bcf == bcx;
}

int nn_fp4_wcopy_alloc(nn_fp4_wcopy *wc, int C, int OC) {
    nn_fp4_wcopy_free(wc);
    return grow((void **)&wc->v, &wc->cap, (size_t)OC * C, 2) ? -1 : (wc->cap = (size_t)OC * C, 0);
}

/* Operand B, a (rows, cols) weight: wc's values when `reuse` and wc holds this matrix (the same values,
 * role and block shape give the same bits: nn_fp4_wcopy_serves), else quantized into wc (which then holds
 * it) or, when wc is NULL, into the scratch. */
static collage_status operand_w(const nn_fp4_spec *p, int trans, const uint16_t *B, int rows, int cols, int ld,
                                nn_fp4_ws *ws, nn_fp4_wcopy *wc, int reuse, nn_fp4_operand *ob, int nt) {
    if (wc && reuse && wc->valid && wc->w == B && wc->rows == rows && wc->cols == cols && wc->ld == ld) {
        *ob = (nn_fp4_operand){.v = wc->v, .ld = cols, .dec = wc->dec};
        return COLLAGE_OK;
    }
    if (!wc) return make_operand(p, 1, trans, B, rows, cols, ld, ws, ws->v[1], ob, nt);
    COLLAGE_ASSERT(wc->cap >= (size_t)rows * cols);
    wc->valid = 0;
    const collage_status st = make_operand(p, 1, trans, B, rows, cols, ld, ws, wc->v, ob, nt);
    if (st != COLLAGE_OK) return st;
    wc->w = B, wc->rows = rows, wc->cols = cols, wc->ld = ld, wc->dec = ob->dec, wc->valid = 1;
    return COLLAGE_OK;
}

collage_status nn_gemm_fp4(const nn_fp4_spec *p, int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                           const uint16_t *B, int ldb, nn_tile_fn ep, void *ctx, nn_fp4_ws *ws, nn_bf16_path path,
                           int nt) {
    return nn_gemm_fp4_w(p, ta, tb, M, N, K, A, lda, B, ldb, ep, ctx, ws, NULL, 0, path, nt);
}

collage_status nn_gemm_fp4_w(const nn_fp4_spec *p, int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                             const uint16_t *B, int ldb, nn_tile_fn ep, void *ctx, nn_fp4_ws *ws, nn_fp4_wcopy *wc,
                             int reuse, nn_bf16_path path, int nt) {
    const double p0 = nn_prof_begin(), t0 = nn_now();
    if (wc && !reuse) wc->valid = 0; /* a new copy is made below, or none is left */
    nn_fp4_operand oa, ob;
    collage_status st = make_operand(p, 0, ta, A, ta ? K : M, ta ? M : K, lda, ws, ws->v[0], &oa, nt);
    if (st == COLLAGE_OK) st = operand_w(p, tb, B, tb ? N : K, tb ? K : N, ldb, ws, wc, reuse, &ob, nt);
    ws->quant_s += nn_now() - t0;
    if (st != COLLAGE_OK) {
        nn_prof_end(NN_PROF_PRODUCTS, p0, 0.0);
        return st;
    }
    nn_gemm_bf16_scaled(ta, tb, M, N, K, oa.v, oa.ld, ob.v, ob.ld, oa.dec * ob.dec, ep, ctx, &ws->tiles, path, nt);
    nn_prof_end(NN_PROF_PRODUCTS, p0, 2.0 * M * N * K);
    return COLLAGE_OK;
}

/* ---------------------------------------------------------------- a linear layer's products */
nn_fp4_spec nn_fp4_layer_spec(const nn_fp4_layer *L, int product) {
    nn_fp4_spec p = {.recipe = L->recipe, .ra = COLLAGE_FP4_ACT, .rb = COLLAGE_FP4_WEIGHT};
    if (product == 0) return p;
    p.ra = COLLAGE_FP4_GRAD, p.sr_a = !L->grad_rn, p.key = collage_rand_key(L->key, (uint64_t)(product - 1));
    if (product == 2) p.rb = COLLAGE_FP4_ACT, p.hadamard = L->hadamard, p.signs = L->signs;
    return p;
}

int nn_fp4_layer_reserve(nn_fp4_ws *ws, const nn_fp4_layer *L, int N, int C, int OC, int nt, nn_bf16_path path) {
    const nn_fp4_spec f = nn_fp4_layer_spec(L, 0), dx = nn_fp4_layer_spec(L, 1), dw = nn_fp4_layer_spec(L, 2);
    if (nn_gemm_fp4_reserve(ws, &f, 0, 1, N, OC, C, nt, path) || nn_gemm_fp4_reserve(ws, &dx, 0, 0, N, C, OC, nt, path))
        return -1;
    return nn_gemm_fp4_reserve(ws, &dw, 1, 0, OC, C, N, nt, path);
}

/* ---------------------------------------------------------------- the scalar twin */
/* Operand w by the scalar quantizer: values fp32(v(code)·d) as fp32 (rows·cols), and *dec. */
static collage_status ref_operand(const nn_fp4_spec *p, int w, int trans, const uint16_t *X, int rows, int cols,
                                  int ld, float *val, float *dec) {
    const collage_fp4_quant q = nn_fp4_quant_of(p, w, trans);
    const size_t n = (size_t)rows * cols, nb = collage__fp4_blocks(&q, rows, cols);
    float *x = malloc(n * 4);
    uint8_t *codes = malloc(n), *sc = malloc(nb);
    collage_status st = COLLAGE_ERR_NOMEM;
    if (x && codes && sc) {
        if (p->hadamard) {
            collage__fp4_rht(p->signs, 0, NULL, X, rows, cols, ld, q.k_axis, x, cols, 1);
        } else {
            for (int r = 0; r < rows; r++)
                for (int c = 0; c < cols; c++) x[(size_t)r * cols + c] = bf16_f32(X[(size_t)r * ld + c]);
        }
        collage_fp4_tensor t;
        st = collage__fp4_quantize(&q, x, rows, cols, cols, codes, sc, &t);
        int br, bc;
        collage__fp4_block_shape(&q, &br, &bc);
        const int gc = (cols + bc - 1) / bc;
        for (int r = 0; st == COLLAGE_OK && r < rows; r++)
            for (int c = 0; c < cols; c++) {
                const float d = collage__fp4_scale_value(q.recipe, sc[(size_t)(r / br) * gc + c / bc]);
                val[(size_t)r * cols + c] = collage_lp_to_f32(COLLAGE_FMT_E2M1, codes[(size_t)r * cols + c]) * d;
            }
        *dec = t.dec;
    }
    free(x), free(codes), free(sc);
    return st;
}

collage_status nn_gemm_fp4_ref(const nn_fp4_spec *p, int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                               const uint16_t *B, int ldb, nn_tile_fn ep, void *ctx) {
    float *va = malloc((size_t)M * K * 4 + 4), *vb = malloc((size_t)K * N * 4 + 4), *C = malloc((size_t)M * N * 4);
    float da = 1.0f, db = 1.0f;
    collage_status st = COLLAGE_ERR_NOMEM;
    if (va && vb && C) {
        st = K > 0 ? ref_operand(p, 0, ta, A, ta ? K : M, ta ? M : K, lda, va, &da) : COLLAGE_OK;
        if (st == COLLAGE_OK && K > 0) st = ref_operand(p, 1, tb, B, tb ? N : K, tb ? K : N, ldb, vb, &db);
        if (st == COLLAGE_OK) {
            const float s = da * db;
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    float P = 0.0f;
                    for (int k = 0; k < K; k++)
                        P = P + (ta ? va[(size_t)k * M + i] : va[(size_t)i * K + k]) *
                                    (tb ? vb[(size_t)j * K + k] : vb[(size_t)k * N + j]);
                    C[(size_t)i * N + j] = P * s;
                }
            ep(ctx, C, N, 0, M, 0, N);
        }
    }
    free(va), free(vb), free(C);
    return st;
}
