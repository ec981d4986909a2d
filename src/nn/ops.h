/* ops.h — GPT-2's layer kernels (x_forward / x_backward pairs, llm.c's math) and the model's forward and
 * backward passes, written once over the type `real`. A template, not a header: gpt.c includes it twice,
 * with real = float (the model) and real = double (the gradient-check reference), after defining
 * SUF(name), GEMM (cblas_sgemm / cblas_dgemm), R_EXP, R_LOG, R_SQRT, R_MIN, SUF(rnd) and gpt_plan.
 * `#pragma omp simd` marks elementwise loops only (never a sum), so vectorising changes no result.
 *
 * Rounding: SUF(rnd)(bf, v) is v, or in bf16 mode the bf16 nearest to v (float only). Every kernel
 * rounds what it stores as an activation or activation gradient, once per op, as bf16 hardware would.
 * Threads: every loop gives each thread a disjoint output range (rows, or blocks of channels whose
 * sums over rows run in row order), so results are bit-identical for any thread count. Matrix
 * products are a fixed grid of tiles (SUF(gemm)), one single-threaded BLAS call per tile, spread
 * over the same OpenMP threads. Aliasing: none unless stated. */

#ifndef OPS_COL_BLOCK
#define OPS_COL_BLOCK 64  /* columns per block of the column sums (bias, LayerNorm, embedding gradients) */
/* Work below which a loop runs on one thread: every parallel region ends in a barrier, and when the
 * cores are shared with other busy processes each barrier can cost a scheduler time slice. */
#define OPS_PAR_MIN (1 << 16)      /* elements (per-element work: about 1/4 of it for GELU) */
#define OPS_ATT_PAR_MIN (1 << 20)  /* multiply-adds of attention */
#define OPS_GEMM_PAR_MIN (1 << 21) /* multiply-adds of a product */
#define OPS_NBLOCKS(n) (((n) + OPS_COL_BLOCK - 1) / OPS_COL_BLOCK)
#define OPS_GEMM_TILES 8       /* tiles per product, about */
#define OPS_GEMM_MIN_TILE 128  /* rows or columns per tile, at least (a multiple of 64) */
#endif

/* C = op(A)·op(B) + beta·C, row-major (ta, tb: 1 = transposed), as tiles over the larger of M and N
 * whose grid depends on the shape only; each tile is one BLAS call that must run single-threaded
 * (gpt.c sets OpenBLAS to one thread before every pass). So every element of C is the same for any
 * number of OpenMP threads, and the OpenMP threads are the only ones that run. */
static void SUF(gemm)(int ta, int tb, int M, int N, int K, const real *A, int lda, const real *B, int ldb,
                      real beta, real *C, int ldc, int nt) {
    (void)nt; /* read by the OpenMP pragmas only */
    const int split_m = M >= N, dim = split_m ? M : N;
    int bs = (dim + OPS_GEMM_TILES - 1) / OPS_GEMM_TILES;
    bs = (bs + 63) / 64 * 64;
    if (bs < OPS_GEMM_MIN_TILE) bs = OPS_GEMM_MIN_TILE;
    const int nb = (dim + bs - 1) / bs;
    const enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
#pragma omp parallel for schedule(static) num_threads(nt) if (nb > 1 && (double)M * N * K >= OPS_GEMM_PAR_MIN)
    for (int j = 0; j < nb; j++) {
        const int j0 = j * bs, w = dim - j0 < bs ? dim - j0 : bs;
        if (split_m)
            GEMM(CblasRowMajor, TA, TB, w, N, K, (real)1, ta ? A + j0 : A + (size_t)j0 * lda, lda, B, ldb, beta,
                 C + (size_t)j0 * ldc, ldc);
        else
            GEMM(CblasRowMajor, TA, TB, M, w, K, (real)1, A, lda, tb ? B + (size_t)j0 * ldb : B + j0, ldb, beta,
                 C + j0, ldc);
    }
}

/* out[b,t,:] = wte[tok[b,t],:] + wpe[t,:]                                        out (B,T,C) */
static void SUF(encoder_forward)(real *out, const int *tok, const real *wte, const real *wpe,
                                 int B, int T, int C, int bf, int nt) {
    (void)nt; /* read by the OpenMP pragmas only */
    const int N = B * T;
#pragma omp parallel for schedule(static) num_threads(nt) if ((size_t)N * C >= OPS_PAR_MIN)
    for (int n = 0; n < N; n++) {
        real *o = out + (size_t)n * C;
        const real *we = wte + (size_t)tok[n] * C, *wp = wpe + (size_t)(n % T) * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = SUF(rnd)(bf, we[c] + wp[c]);
    }
}

/* dwte[tok[n],:] += dout[n,:], dwpe[t,:] += dout[n,:], in the order n = 0 … N−1 for every element. */
static void SUF(encoder_backward)(real *dwte, real *dwpe, const real *dout, const int *tok,
                                  int B, int T, int C, int nt) {
    (void)nt; /* read by the OpenMP pragmas only */
    const int N = B * T, nb = OPS_NBLOCKS(C);
#pragma omp parallel for schedule(static) num_threads(nt) if ((size_t)N * C >= OPS_PAR_MIN)
    for (int cb = 0; cb < nb; cb++) {
        const int c0 = cb * OPS_COL_BLOCK, c1 = c0 + OPS_COL_BLOCK < C ? c0 + OPS_COL_BLOCK : C;
        for (int n = 0; n < N; n++) {
            const real *d = dout + (size_t)n * C;
            real *gw = dwte + (size_t)tok[n] * C, *gp = dwpe + (size_t)(n % T) * C;
#pragma omp simd
            for (int c = c0; c < c1; c++) { gw[c] += d[c]; gp[c] += d[c]; }
        }
    }
}

/* out = (x − mean) · rstd · w + b per row, rstd = 1/sqrt(var + 1e-5) (two-pass variance).
 * out (N,C), mean (N), rstd (N), inp (N,C). mean and rstd stay unrounded (statistics). */
static void SUF(layernorm_forward)(real *out, real *mean, real *rstd, const real *inp, const real *w,
                                   const real *b, int N, int C, int bf, int nt) {
    (void)nt; /* read by the OpenMP pragmas only */
#pragma omp parallel for schedule(static) num_threads(nt) if ((size_t)N * C >= OPS_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const real *x = inp + (size_t)n * C;
        real *o = out + (size_t)n * C;
        real m = 0, v = 0;
        for (int c = 0; c < C; c++) m += x[c];
        m = m / (real)C;
        for (int c = 0; c < C; c++) { real d = x[c] - m; v += d * d; }
        v = v / (real)C;
        const real s = (real)1 / R_SQRT(v + (real)1e-5);
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = SUF(rnd)(bf, (s * (x[c] - m)) * w[c] + b[c]);
        mean[n] = m;
        rstd[n] = s;
    }
}

/* dw += Σ_n norm·dout, db += Σ_n dout (row order); dinp = dx (accumulate = 0) or dinp + dx (1),
 * dx = rstd · (w·dout − mean(w·dout) − norm · mean(w·dout·norm)). dinp may not alias dout. */
static void SUF(layernorm_backward)(real *dinp, real *dw, real *db, const real *dout, const real *inp,
                                    const real *w, const real *mean, const real *rstd, int N, int C,
                                    int accumulate, int bf, int nt) {
    (void)nt; /* read by the OpenMP pragmas only */
    const int nb = OPS_NBLOCKS(C);
#pragma omp parallel for schedule(static) num_threads(nt) if ((size_t)N * C >= OPS_PAR_MIN)
    for (int cb = 0; cb < nb; cb++) {
        const int c0 = cb * OPS_COL_BLOCK, c1 = c0 + OPS_COL_BLOCK < C ? c0 + OPS_COL_BLOCK : C;
        for (int n = 0; n < N; n++) {
            const real *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
            const real m = mean[n], s = rstd[n];
#pragma omp simd
            for (int c = c0; c < c1; c++) {
                db[c] += d[c];
                dw[c] += ((x[c] - m) * s) * d[c];
            }
        }
    }
#pragma omp parallel for schedule(static) num_threads(nt) if ((size_t)N * C >= OPS_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const real *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
        real *di = dinp + (size_t)n * C;
        const real m = mean[n], s = rstd[n];
        real dm = 0, dnm = 0;
        for (int c = 0; c < C; c++) {
            real dn = w[c] * d[c];
            dm += dn;
            dnm += dn * ((x[c] - m) * s);
        }
        dm = dm / (real)C;
        dnm = dnm / (real)C;
#pragma omp simd
        for (int c = 0; c < C; c++) {
            real dval = ((w[c] * d[c] - dm) - ((x[c] - m) * s) * dnm) * s;
            real r = SUF(rnd)(bf, dval);
            di[c] = accumulate ? SUF(rnd)(bf, di[c] + r) : r;
        }
    }
}

/* out = inp · wᵀ (+ bias): out (N,OC), inp (N,C), w (OC,C), bias (OC) or NULL. */
static void SUF(matmul_forward)(real *out, const real *inp, const real *w, const real *bias,
                                int N, int C, int OC, int bf, int nt) {
    SUF(gemm)(0, 1, N, OC, C, inp, C, w, C, (real)0, out, OC, nt);
    if (!bias && !bf) return;
#pragma omp parallel for schedule(static) num_threads(nt) if ((size_t)N * OC >= OPS_PAR_MIN)
    for (int n = 0; n < N; n++) {
        real *o = out + (size_t)n * OC;
        if (bias) {
#pragma omp simd
            for (int j = 0; j < OC; j++) o[j] = SUF(rnd)(bf, o[j] + bias[j]);
        } else {
#pragma omp simd
            for (int j = 0; j < OC; j++) o[j] = SUF(rnd)(bf, o[j]);
        }
    }
}

/* out = res + (out + bias): the residual add after a projection written into out. out, res (N,C). */
static void SUF(residual_bias_forward)(real *out, const real *res, const real *bias, int N, int C, int bf, int nt) {
    (void)nt; /* read by the OpenMP pragmas only */
#pragma omp parallel for schedule(static) num_threads(nt) if ((size_t)N * C >= OPS_PAR_MIN)
    for (int n = 0; n < N; n++) {
        real *o = out + (size_t)n * C;
        const real *r = res + (size_t)n * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = SUF(rnd)(bf, r[c] + SUF(rnd)(bf, o[c] + bias[c]));
    }
}

/* db[j] += Σ_n dout[n,j] in row order. dout (N,OC). */
static void SUF(bias_backward)(real *db, const real *dout, int N, int OC, int nt) {
    (void)nt; /* read by the OpenMP pragmas only */
    const int nb = OPS_NBLOCKS(OC);
#pragma omp parallel for schedule(static) num_threads(nt) if ((size_t)N * OC >= OPS_PAR_MIN)
    for (int cb = 0; cb < nb; cb++) {
        const int c0 = cb * OPS_COL_BLOCK, c1 = c0 + OPS_COL_BLOCK < OC ? c0 + OPS_COL_BLOCK : OC;
        for (int n = 0; n < N; n++) {
            const real *d = dout + (size_t)n * OC;
#pragma omp simd
            for (int j = c0; j < c1; j++) db[j] += d[j];
        }
    }
}

/* In place: x = rnd(x) over n elements (bf16 mode only). */
static void SUF(round_inplace)(real *x, size_t n, int bf, int nt) {
    (void)nt; /* read by the OpenMP pragmas only */
    if (!bf) return;
    const long nb = (long)((n + 4095) / 4096);
#pragma omp parallel for schedule(static) num_threads(nt) if (n >= OPS_PAR_MIN)
    for (long k = 0; k < nb; k++) {
        size_t a = (size_t)k * 4096, e = a + 4096 < n ? a + 4096 : n;
#pragma omp simd
        for (size_t i = a; i < e; i++) x[i] = SUF(rnd)(bf, x[i]);
    }
}

/* dinp = dout · w (assigned), dw += doutᵀ · inp, db += Σ_n dout (db may be NULL).
 * dinp (N,C), dout (N,OC), inp (N,C), w (OC,C). */
static void SUF(matmul_backward)(real *dinp, real *dw, real *db, const real *dout, const real *inp,
                                 const real *w, int N, int C, int OC, int bf, int nt) {
    SUF(gemm)(0, 0, N, C, OC, dout, OC, w, C, (real)0, dinp, C, nt);
    SUF(round_inplace)(dinp, (size_t)N * C, bf, nt);
    SUF(gemm)(1, 0, OC, C, N, dout, OC, inp, C, (real)1, dw, C, nt);
    if (db) SUF(bias_backward)(db, dout, N, OC, nt);
}

#define OPS_GELU_K ((real)0.7978845608028654) /* sqrt(2/π) */
#define OPS_GELU_A ((real)0.044715)
#define OPS_GELU_EXP_MAX ((real)80) /* e^80 is finite in float: no inf·0 in the backward */

/* GELU, tanh approximation, in the equivalent form 0.5 x (1 + tanh u) = x · σ(2u) = x / (1 + e^{−2u}),
 * u = sqrt(2/π)(x + 0.044715 x³): one exp instead of tanh (no cancellation for x < 0, and the loop
 * vectorises). n elements. */
/* The exponent of the logistic form: −2u, clamped so that e^{−2u} stays finite. */
static inline real SUF(gelu_t)(real x) {
    real t = (real)-2 * OPS_GELU_K * (x + OPS_GELU_A * x * x * x);
    return R_MIN(t, OPS_GELU_EXP_MAX);
}

static void SUF(gelu_forward)(real *out, const real *inp, size_t n, int bf, int nt) {
    (void)nt; /* read by the OpenMP pragmas only */
    const long nb = (long)((n + 4095) / 4096);
#pragma omp parallel for schedule(static) num_threads(nt) if (n >= OPS_PAR_MIN / 4)
    for (long k = 0; k < nb; k++) {
        const size_t a = (size_t)k * 4096, e = a + 4096 < n ? a + 4096 : n;
#pragma omp simd
        for (size_t i = a; i < e; i++) {
            const real x = inp[i];
            out[i] = SUF(rnd)(bf, x / ((real)1 + R_EXP(SUF(gelu_t)(x))));
        }
    }
}

/* In place: d = d · gelu'(x), gelu' = s + 2 x s (1 − s) u', s = σ(2u) = 1/(1 + e), 1 − s = e·s,
 * u' = sqrt(2/π)(1 + 3·0.044715 x²). */
static void SUF(gelu_backward)(real *d, const real *inp, size_t n, int bf, int nt) {
    (void)nt; /* read by the OpenMP pragmas only */
    const long nb = (long)((n + 4095) / 4096);
#pragma omp parallel for schedule(static) num_threads(nt) if (n >= OPS_PAR_MIN / 4)
    for (long k = 0; k < nb; k++) {
        const size_t a = (size_t)k * 4096, e = a + 4096 < n ? a + 4096 : n;
#pragma omp simd
        for (size_t i = a; i < e; i++) {
            const real x = inp[i];
            const real ex = R_EXP(SUF(gelu_t)(x)), sg = (real)1 / ((real)1 + ex);
            const real du = OPS_GELU_K * ((real)1 + (real)3 * OPS_GELU_A * x * x);
            d[i] = SUF(rnd)(bf, (sg + (real)2 * x * sg * (ex * sg) * du) * d[i]);
        }
    }
}

/* Causal multi-head attention over qkv (B,T,3C) = [q | k | v] per row, head h in columns h·hs.
 * att (B,NH,T,T): softmax(q·kᵀ/sqrt(hs)) with zeros above the diagonal; out (B,T,C) = att · v.
 * scr: B·NH·(hs·T + T) scratch (kᵀ per head, so the inner loops run over contiguous t2). */
static void SUF(attention_forward)(real *out, real *att, real *scr, const real *qkv, int B, int T, int C,
                                   int NH, int bf, int nt) {
    (void)nt; /* read by the OpenMP pragmas only */
    const int hs = C / NH, C3 = 3 * C;
    const real scale = (real)1 / R_SQRT((real)hs);
#pragma omp parallel for schedule(static) num_threads(nt) if ((size_t)B * NH * T * T * hs >= OPS_ATT_PAR_MIN)
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH;
        const real *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;
        real *kT = scr + (size_t)bh * ((size_t)hs * T + T);
        for (int t2 = 0; t2 < T; t2++)
            for (int i = 0; i < hs; i++) kT[(size_t)i * T + t2] = base[(size_t)t2 * C3 + C + i];
        for (int t = 0; t < T; t++) {
            const real *q = base + (size_t)t * C3;
            real *row = att + ((size_t)bh * T + t) * T;
            for (int t2 = 0; t2 <= t; t2++) row[t2] = 0;
            for (int i = 0; i < hs; i++) {
                const real qi = q[i], *kr = kT + (size_t)i * T;
#pragma omp simd
                for (int t2 = 0; t2 <= t; t2++) row[t2] += qi * kr[t2];
            }
            real mx = -(real)INFINITY;
            for (int t2 = 0; t2 <= t; t2++) {
                row[t2] = SUF(rnd)(bf, row[t2] * scale);
                if (row[t2] > mx) mx = row[t2];
            }
            real sum = 0;
#pragma omp simd
            for (int t2 = 0; t2 <= t; t2++) row[t2] = R_EXP(row[t2] - mx);
            for (int t2 = 0; t2 <= t; t2++) sum += row[t2];
            const real inv = (real)1 / sum;
            for (int t2 = 0; t2 <= t; t2++) row[t2] = SUF(rnd)(bf, row[t2] * inv);
            for (int t2 = t + 1; t2 < T; t2++) row[t2] = 0;
            real *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
            for (int i = 0; i < hs; i++) o[i] = 0;
            for (int t2 = 0; t2 <= t; t2++) {
                const real a = row[t2], *v = base + (size_t)t2 * C3 + 2 * C;
#pragma omp simd
                for (int i = 0; i < hs; i++) o[i] += a * v[i];
            }
            for (int i = 0; i < hs; i++) o[i] = SUF(rnd)(bf, o[i]);
        }
    }
}

/* dqkv (B,T,3C) assigned from datty (B,T,C), with qkv and att from the forward. Per head and query t:
 * datt = datty·vᵀ, dpre = att ⊙ (datt − Σ att·datt) / sqrt(hs), dq = dpre·k, dk += dpreᵀ·q,
 * dv += attᵀ·datty, sums over t in increasing order. scr as in the forward. */
static void SUF(attention_backward)(real *dqkv, real *scr, const real *datty, const real *qkv, const real *att,
                                    int B, int T, int C, int NH, int bf, int nt) {
    (void)nt; /* read by the OpenMP pragmas only */
    const int hs = C / NH, C3 = 3 * C;
    const real scale = (real)1 / R_SQRT((real)hs);
#pragma omp parallel for schedule(static) num_threads(nt) if ((size_t)B * NH * T * T * hs >= OPS_ATT_PAR_MIN)
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH;
        const real *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;
        real *dbase = dqkv + (size_t)b * T * C3 + (size_t)h * hs;
        real *vT = scr + (size_t)bh * ((size_t)hs * T + T), *row = vT + (size_t)hs * T;
        for (int t2 = 0; t2 < T; t2++) {
            for (int i = 0; i < hs; i++) vT[(size_t)i * T + t2] = base[(size_t)t2 * C3 + 2 * C + i];
            for (int i = 0; i < hs; i++) dbase[(size_t)t2 * C3 + C + i] = dbase[(size_t)t2 * C3 + 2 * C + i] = 0;
        }
        for (int t = 0; t < T; t++) {
            const real *arow = att + ((size_t)bh * T + t) * T;
            const real *dout = datty + ((size_t)b * T + t) * C + (size_t)h * hs;
            const real *q = base + (size_t)t * C3;
            for (int t2 = 0; t2 <= t; t2++) row[t2] = 0;
            for (int i = 0; i < hs; i++) {
                const real di = dout[i], *vr = vT + (size_t)i * T;
#pragma omp simd
                for (int t2 = 0; t2 <= t; t2++) row[t2] += di * vr[t2];
            }
            real s = 0;
            for (int t2 = 0; t2 <= t; t2++) { row[t2] = SUF(rnd)(bf, row[t2]); s += arow[t2] * row[t2]; }
            for (int t2 = 0; t2 <= t; t2++) {
                const real a = arow[t2];
                real *dv = dbase + (size_t)t2 * C3 + 2 * C;
#pragma omp simd
                for (int i = 0; i < hs; i++) dv[i] += a * dout[i];
                row[t2] = SUF(rnd)(bf, SUF(rnd)(bf, a * (row[t2] - s)) * scale);
            }
            real *dq = dbase + (size_t)t * C3;
            for (int i = 0; i < hs; i++) dq[i] = 0;
            for (int t2 = 0; t2 <= t; t2++) {
                const real g = row[t2], *k = base + (size_t)t2 * C3 + C;
                real *dk = dbase + (size_t)t2 * C3 + C;
#pragma omp simd
                for (int i = 0; i < hs; i++) { dq[i] += g * k[i]; dk[i] += g * q[i]; }
            }
            for (int i = 0; i < hs; i++) dq[i] = SUF(rnd)(bf, dq[i]);
        }
        for (int t2 = 0; t2 < T; t2++)
            for (int i = 0; i < hs; i++) {
                real *dk = dbase + (size_t)t2 * C3 + C;
                dk[i] = SUF(rnd)(bf, dk[i]);
                dk[i + C] = SUF(rnd)(bf, dk[i + C]);
            }
    }
}

/* In place: logits (N,Vp) → probabilities (columns ≥ V set to 0); losses[n] = log Σ exp(x − max) −
 * (x[target] − max). Returns the mean loss, summed in row order in double. */
static double SUF(crossentropy_forward)(real *logits, real *losses, const int *tgt, int N, int V, int Vp, int nt) {
    (void)nt; /* read by the OpenMP pragmas only */
#pragma omp parallel for schedule(static) num_threads(nt) if ((size_t)N * V >= OPS_PAR_MIN)
    for (int n = 0; n < N; n++) {
        real *x = logits + (size_t)n * Vp;
        real mx = x[0];
        for (int i = 1; i < V; i++) if (x[i] > mx) mx = x[i];
        const real xt = x[tgt[n]] - mx;
        real sum = 0;
#pragma omp simd
        for (int i = 0; i < V; i++) x[i] = R_EXP(x[i] - mx);
        for (int i = 0; i < V; i++) sum += x[i];
        const real inv = (real)1 / sum;
#pragma omp simd
        for (int i = 0; i < V; i++) x[i] *= inv;
        for (int i = V; i < Vp; i++) x[i] = 0;
        losses[n] = R_LOG(sum) - xt;
    }
    double total = 0;
    for (int n = 0; n < N; n++) total += (double)losses[n];
    return total / (double)N;
}

/* In place: probabilities (N,Vp) → dlogits = (p − onehot(target)) · dloss; columns ≥ V stay 0. */
static void SUF(crossentropy_backward)(real *probs, const int *tgt, int N, int V, int Vp, real dloss, int bf,
                                       int nt) {
    (void)nt; /* read by the OpenMP pragmas only */
#pragma omp parallel for schedule(static) num_threads(nt) if ((size_t)N * V >= OPS_PAR_MIN)
    for (int n = 0; n < N; n++) {
        real *p = probs + (size_t)n * Vp;
        for (int i = 0; i < V; i++) p[i] = SUF(rnd)(bf, (p[i] - (i == tgt[n] ? (real)1 : (real)0)) * dloss);
        for (int i = V; i < Vp; i++) p[i] = 0;
    }
}

/* ------------------------------------------------------------------ the model */
#ifndef OPS_MODEL_MACROS
#define OPS_MODEL_MACROS
#define PW(k, l) (w + P->p[k] + (size_t)(l) * P->pl[k])   /* parameter tensor k of layer l */
#define PG(k, l) (g + P->p[k] + (size_t)(l) * P->pl[k])   /* its gradient */
#define AC(k, l) (a + P->a[k] + (size_t)(l) * P->al[k])   /* activation k of layer l */
#endif

/* Embedding, the L blocks and the final LayerNorm on tok (B,T): fills every activation up to lnf. */
static void SUF(gpt_trunk)(const gpt_plan *P, const real *w, real *a, const int *tok, int B, int T, int bf, int nt) {
    const int C = P->C, N = B * T;
    SUF(encoder_forward)(AC(A_ENC, 0), tok, PW(COLLAGE_GPT_WTE, 0), PW(COLLAGE_GPT_WPE, 0), B, T, C, bf, nt);
    for (int l = 0; l < P->L; l++) {
        const real *res = l ? AC(A_RES3, l - 1) : AC(A_ENC, 0);
        real *ln1 = AC(A_LN1, l), *qkv = AC(A_QKV, l), *atty = AC(A_ATTY, l), *res2 = AC(A_RES2, l);
        real *ln2 = AC(A_LN2, l), *fch = AC(A_FCH, l), *fchg = AC(A_FCH_GELU, l), *res3 = AC(A_RES3, l);
        SUF(layernorm_forward)(ln1, AC(A_LN1_MEAN, l), AC(A_LN1_RSTD, l), res, PW(COLLAGE_GPT_LN1W, l),
                               PW(COLLAGE_GPT_LN1B, l), N, C, bf, nt);
        SUF(matmul_forward)(qkv, ln1, PW(COLLAGE_GPT_QKVW, l), PW(COLLAGE_GPT_QKVB, l), N, C, 3 * C, bf, nt);
        SUF(attention_forward)(atty, AC(A_ATT, l), AC(A_SCR, 0), qkv, B, T, C, P->NH, bf, nt);
        SUF(matmul_forward)(res2, atty, PW(COLLAGE_GPT_ATTPROJW, l), NULL, N, C, C, 0, nt);
        SUF(residual_bias_forward)(res2, res, PW(COLLAGE_GPT_ATTPROJB, l), N, C, bf, nt);
        SUF(layernorm_forward)(ln2, AC(A_LN2_MEAN, l), AC(A_LN2_RSTD, l), res2, PW(COLLAGE_GPT_LN2W, l),
                               PW(COLLAGE_GPT_LN2B, l), N, C, bf, nt);
        SUF(matmul_forward)(fch, ln2, PW(COLLAGE_GPT_FCW, l), PW(COLLAGE_GPT_FCB, l), N, C, 4 * C, bf, nt);
        SUF(gelu_forward)(fchg, fch, (size_t)N * 4 * C, bf, nt);
        SUF(matmul_forward)(res3, fchg, PW(COLLAGE_GPT_FCPROJW, l), NULL, N, 4 * C, C, 0, nt);
        SUF(residual_bias_forward)(res3, res2, PW(COLLAGE_GPT_FCPROJB, l), N, C, bf, nt);
    }
    SUF(layernorm_forward)(AC(A_LNF, 0), AC(A_LNF_MEAN, 0), AC(A_LNF_RSTD, 0), AC(A_RES3, P->L - 1),
                           PW(COLLAGE_GPT_LNFW, 0), PW(COLLAGE_GPT_LNFB, 0), N, C, bf, nt);
}

/* The trunk, logits = lnf · wteᵀ (B,T,Vp) and, with targets, the softmax and the mean loss (else NaN). */
static double SUF(gpt_forward)(const gpt_plan *P, const real *w, real *a, const int *tok, const int *tgt,
                               int B, int T, int bf, int nt) {
    const int N = B * T;
    SUF(gpt_trunk)(P, w, a, tok, B, T, bf, nt);
    SUF(matmul_forward)(AC(A_LOGITS, 0), AC(A_LNF, 0), PW(COLLAGE_GPT_WTE, 0), NULL, N, P->C, P->Vp, bf, nt);
    if (!tgt) return (double)NAN;
    return SUF(crossentropy_forward)(AC(A_LOGITS, 0), AC(A_LOSSES, 0), tgt, N, P->V, P->Vp, nt);
}

/* Gradients of the mean loss of the last gpt_forward (same w, tok, tgt, B, T) added into g. Activation
 * gradients live in the dres, dln, datty, dqkv, dfch buffers; dlogits replace the probabilities. */
static void SUF(gpt_backward)(const gpt_plan *P, const real *w, real *g, real *a, const int *tok, const int *tgt,
                              int B, int T, int bf, int nt) {
    const int C = P->C, N = B * T, L = P->L;
    real *dres = AC(A_DRES, 0), *dln = AC(A_DLN, 0), *datty = AC(A_DATTY, 0), *dqkv = AC(A_DQKV, 0);
    real *dfch = AC(A_DFCH, 0), *logits = AC(A_LOGITS, 0);
    SUF(crossentropy_backward)(logits, tgt, N, P->V, P->Vp, (real)1 / (real)N, bf, nt);
    SUF(matmul_backward)(dln, PG(COLLAGE_GPT_WTE, 0), NULL, logits, AC(A_LNF, 0), PW(COLLAGE_GPT_WTE, 0),
                         N, C, P->Vp, bf, nt);
    SUF(layernorm_backward)(dres, PG(COLLAGE_GPT_LNFW, 0), PG(COLLAGE_GPT_LNFB, 0), dln, AC(A_RES3, L - 1),
                            PW(COLLAGE_GPT_LNFW, 0), AC(A_LNF_MEAN, 0), AC(A_LNF_RSTD, 0), N, C, 0, bf, nt);
    for (int l = L - 1; l >= 0; l--) {
        const real *res = l ? AC(A_RES3, l - 1) : AC(A_ENC, 0);
        /* residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))): dres is d residual3 */
        SUF(matmul_backward)(dfch, PG(COLLAGE_GPT_FCPROJW, l), PG(COLLAGE_GPT_FCPROJB, l), dres,
                             AC(A_FCH_GELU, l), PW(COLLAGE_GPT_FCPROJW, l), N, 4 * C, C, bf, nt);
        SUF(gelu_backward)(dfch, AC(A_FCH, l), (size_t)N * 4 * C, bf, nt);
        SUF(matmul_backward)(dln, PG(COLLAGE_GPT_FCW, l), PG(COLLAGE_GPT_FCB, l), dfch, AC(A_LN2, l),
                             PW(COLLAGE_GPT_FCW, l), N, C, 4 * C, bf, nt);
        SUF(layernorm_backward)(dres, PG(COLLAGE_GPT_LN2W, l), PG(COLLAGE_GPT_LN2B, l), dln, AC(A_RES2, l),
                                PW(COLLAGE_GPT_LN2W, l), AC(A_LN2_MEAN, l), AC(A_LN2_RSTD, l), N, C, 1, bf, nt);
        /* residual2 = residual + attproj(attention(qkv(ln1(residual)))): dres is d residual2 */
        SUF(matmul_backward)(datty, PG(COLLAGE_GPT_ATTPROJW, l), PG(COLLAGE_GPT_ATTPROJB, l), dres,
                             AC(A_ATTY, l), PW(COLLAGE_GPT_ATTPROJW, l), N, C, C, bf, nt);
        SUF(attention_backward)(dqkv, AC(A_SCR, 0), datty, AC(A_QKV, l), AC(A_ATT, l), B, T, C, P->NH, bf, nt);
        SUF(matmul_backward)(dln, PG(COLLAGE_GPT_QKVW, l), PG(COLLAGE_GPT_QKVB, l), dqkv, AC(A_LN1, l),
                             PW(COLLAGE_GPT_QKVW, l), N, C, 3 * C, bf, nt);
        SUF(layernorm_backward)(dres, PG(COLLAGE_GPT_LN1W, l), PG(COLLAGE_GPT_LN1B, l), dln, res,
                                PW(COLLAGE_GPT_LN1W, l), AC(A_LN1_MEAN, l), AC(A_LN1_RSTD, l), N, C, 1, bf, nt);
    }
    SUF(encoder_backward)(PG(COLLAGE_GPT_WTE, 0), PG(COLLAGE_GPT_WPE, 0), dres, tok, B, T, C, nt);
}

/* The trunk on (1,T) and the logits of the last position only, into the first row of logits. */
static void SUF(gpt_last_logits)(const gpt_plan *P, const real *w, real *a, const int *tok, int T, int bf, int nt) {
    SUF(gpt_trunk)(P, w, a, tok, 1, T, bf, nt);
    SUF(matmul_forward)(AC(A_LOGITS, 0), AC(A_LNF, 0) + (size_t)(T - 1) * P->C, PW(COLLAGE_GPT_WTE, 0), NULL,
                        1, P->C, P->Vp, bf, nt);
}

/* this file is instantiated once per real type: release the parameters for the next one */
#undef real
#undef SUF
#undef GEMM
#undef R_EXP
#undef R_MIN
#undef R_LOG
#undef R_SQRT
