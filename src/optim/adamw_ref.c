/* adamw_ref.c — the scalar reference AdamW step for every strategy, written line by line from
 * numerics.md §6 with the single operations of eft.h. The vectorised kernels must match it bit for bit
 * (weights and every state word); it is the oracle, so clarity wins over speed here. */
#include "adamw_impl.h"
#include "eft.h"
#include "optim.h"

#define BF COLLAGE_FMT_BF16
static inline float F(uint16_t b) { return bf16_f32(b); }
static inline uint16_t R(float x) { return bf16_rn_bits(x); }

/* Low-precision path: m, v bf16 (v as (v, δv) when dv != NULL), raw a bf16 value.
 * m = m ⊗ β1; m = RN(fp32(m) + fp32(fp32(1−β1)·g)); v likewise (plus: MultMC then GrowAddcmul);
 * den = √v ⊕ eps; raw = ((m ⊗ (−step)) ⊘ den) ⊖ (θ ⊗ (lr·wd)). */
static uint16_t lp_raw(uint16_t th, uint16_t g, uint16_t *m, uint16_t *v, uint16_t *dv, int v1, const adamw_k *k) {
    if (k->clip) g = R(F(g) * k->coef);
    uint16_t mm = R(F(*m) * k->b1);
    mm = R(F(mm) + k->omb1 * F(g));
    *m = mm;
    uint16_t vh;
    if (dv) {
        collage_lp_pair x = {*v, *dv}, beta = {k->b2hi, k->b2lo};
        x = v1 ? lp_mcf_mul_v1_(BF, x, beta) : lp_mcf_mul_(BF, x, beta);
        x = lp_grow_addcmul_(BF, x, g, g, k->omb2);
        *v = vh = x.hi;
        *dv = x.lo;
    } else {
        vh = R(F(*v) * k->b2);
        vh = R(F(vh) + k->omb2 * (F(g) * F(g)));
        *v = vh;
    }
    uint16_t den = R(F(R(sqrtf(F(vh)))) + k->eps);
    uint16_t a = R(F(mm) * k->neg_step);
    uint16_t b = R(F(a) / F(den));
    uint16_t c = R(F(th) * k->lrwd);
    return R(F(b) - F(c));
}

/* fp32 path: the same lines in fp32, each operation rounded to fp32 (no contraction). w_decay is the
 * value the decay multiplies: the fp32 master where one exists, else θ. */
static float f32_raw(float w_decay, float g, float *m, float *v, const adamw_k *k) {
    if (k->clip) g = g * k->coef;
    float mm = *m * k->b1 + k->omb1 * g;
    float vv = *v * k->b2 + k->omb2 * (g * g);
    *m = mm;
    *v = vv;
    float den = sqrtf(vv) + k->eps;
    return (mm * k->neg_step) / den - w_decay * k->lrwd;
}

static inline void acc_add(adamw_acc *acc, double d, double d_eff, double d_state) {
    if (d == 0.0) return;
    acc->dot += d_eff * d;
    acc->dot_state += d_state * d;
    acc->nn += d * d;
    acc->nonzero++;
    acc->lost += d_eff == 0.0;
}

void collage__adamw_block_ref(collage_strategy s, const adamw_slabs *S, size_t a, size_t b, const adamw_k *k,
                              adamw_acc *acc) {
    if (!ADAMW_OWN_CASES(s)) { collage__adamw_generic_ref(s, S, a, b, k, acc); return; }
    uint16_t *w16 = S->w, *m16 = S->m, *v16 = S->v, *cp = S->comp;
    const uint16_t *g16 = S->g;
    float *w32 = S->w, *m32 = S->m, *v32 = S->v, *ms = S->master;
    const float *g32 = S->g;
    const int has_dv = strategy_has(s, COLLAGE_ROLE_DV); /* collage's second moment (v, δv) */
    for (size_t i = a; i < b; i++) {
        double d = 0, de = 0, ds = 0; /* intended, effective, effective on the kept value */
        switch (s) {
        case COLLAGE_FP32: {
            float old = w32[i], raw = f32_raw(old, g32[i], &m32[i], &v32[i], k);
            w32[i] = old + raw;
            d = (double)raw; de = ds = (double)w32[i] - (double)old;
            break;
        }
        case COLLAGE_BF16_FP32_STATES: {
            uint16_t old = w16[i];
            float raw = f32_raw(F(old), F(g16[i]), &m32[i], &v32[i], k);
            w16[i] = R(F(old) + raw);
            d = (double)raw; de = ds = (double)F(w16[i]) - (double)F(old);
            break;
        }
        case COLLAGE_BF16_MASTER: {
            uint16_t old = w16[i];
            float mold = ms[i], raw = f32_raw(mold, F(g16[i]), &m32[i], &v32[i], k);
            ms[i] = mold + raw;
            w16[i] = R(ms[i]);
            d = (double)raw; de = (double)F(w16[i]) - (double)F(old); ds = (double)ms[i] - (double)mold;
            break;
        }
        case COLLAGE_BF16:
        case COLLAGE_BF16_SR: {
            uint16_t old = w16[i], raw = lp_raw(old, g16[i], &m16[i], &v16[i], NULL, 0, k);
            if (s == COLLAGE_BF16) w16[i] = lp_add_(BF, old, raw);
            else w16[i] = bf16_sr_bits(F(old) + F(raw), collage_rand32(k->key, k->index0 + i));
            d = (double)F(raw); de = ds = (double)F(w16[i]) - (double)F(old);
            break;
        }
        case COLLAGE_LIGHT:
        case COLLAGE_PLUS:
        case COLLAGE_PLUS_V1: {
            uint16_t old = w16[i], cold = cp[i];
            uint16_t raw = lp_raw(old, g16[i], &m16[i], &v16[i], has_dv ? &S->dv[i] : NULL,
                                  s == COLLAGE_PLUS_V1, k);
            collage_lp_pair x = lp_grow_(BF, (collage_lp_pair){old, cold}, raw);
            w16[i] = x.hi; cp[i] = x.lo;
            d = (double)F(raw); de = (double)F(x.hi) - (double)F(old);
            ds = de + ((double)F(x.lo) - (double)F(cold));
            break;
        }
        case COLLAGE_BF16_KAHAN: {
            uint16_t old = w16[i], cold = cp[i];
            uint16_t raw = lp_raw(old, g16[i], &m16[i], &v16[i], NULL, 0, k);
            uint16_t c = lp_add_(BF, cold, raw);
            uint16_t th = lp_add_(BF, old, c);
            c = lp_add_(BF, c, lp_sub_(BF, old, th));
            w16[i] = th; cp[i] = c;
            d = (double)F(raw); de = (double)F(th) - (double)F(old);
            ds = de + ((double)F(c) - (double)F(cold));
            break;
        }
        case COLLAGE_BF16_REMAINDER: {
            uint16_t old = w16[i];
            float mold = rem_join(old, cp[i]);
            uint16_t raw = lp_raw(old, g16[i], &m16[i], &v16[i], NULL, 0, k);
            float mnew = mold + F(raw);
            w16[i] = rem_theta(mnew);
            cp[i] = rem_low(mnew, w16[i]);
            d = (double)F(raw); de = (double)F(w16[i]) - (double)F(old); ds = (double)mnew - (double)mold;
            break;
        }
        default: COLLAGE_ASSERT(!"unknown strategy");
        }
        if (acc) acc_add(acc, d, de, ds);
    }
}

/* ------------------------------------------------------------------ the generic path */
/* Every strategy from its parts (numerics.md §6, "Composed strategies"): the moments in their words'
 * formats, read into fp32 (dequantized) where the lines round to fp32, or kept in the 16-bit format
 * where the lines round to it; the update applied by the weight scheme. The presets' cases above are
 * these same lines for their parts (test_compose checks it bit for bit); composed strategies and the
 * fp16 presets come here. */
typedef struct {
    collage_weight_scheme w;
    collage_word_format wf, mf, vf, arith; /* θ's, m's, v's (hi word) formats, the lines' rounding */
    collage_format tf;                     /* θ's 16-bit format (its δθ and rounding) */
    int v_pair, v1;
    uint64_t key_m, key_v;                 /* stochastic re-quantization of m and v (q=sr) */
    int sr_states;
    const q_tables *T;
} gdesc;

static gdesc gdesc_of(collage_strategy s, const adamw_k *k) {
    collage_composition p = strategy_parts_of(s);
    gdesc D = {.w = p.weights, .wf = strategy_word(s, COLLAGE_ROLE_WEIGHTS), .mf = strategy_word(s, COLLAGE_ROLE_M),
               .vf = strategy_word(s, COLLAGE_ROLE_V), .arith = strategy_arith(s), .v_pair = strategy_has(s, COLLAGE_ROLE_DV),
               .v1 = s == COLLAGE_PLUS_V1, .sr_states = p.sr_states, .T = collage__q_tables()};
    D.tf = D.wf == COLLAGE_WORD_FP16 ? COLLAGE_FMT_FP16 : COLLAGE_FMT_BF16;
    D.key_m = q_state_key(k->key, 1);
    D.key_v = q_state_key(k->key, 2);
    return D;
}

static collage_format fmt_of(collage_word_format f) { return f == COLLAGE_WORD_FP16 ? COLLAGE_FMT_FP16 : COLLAGE_FMT_BF16; }

/* A 16-bit or fp32 word's value (not an 8-bit one). */
static float word_get(collage_word_format f, const void *p, size_t i) {
    return f == COLLAGE_WORD_FP32 ? ((const float *)p)[i] : lp_f32(fmt_of(f), ((const uint16_t *)p)[i]);
}
static void word_put(collage_word_format f, void *p, size_t i, float x) {
    if (f == COLLAGE_WORD_FP32) ((float *)p)[i] = x;
    else ((uint16_t *)p)[i] = lp_rn(fmt_of(f), x);
}

/* A moment's value in fp32: its word, the pair hi + lo (one fp32 addition), or code × scale. */
static float moment_get(const gdesc *D, collage_word_format f, const void *p, const uint16_t *lo, const float *sc,
                        size_t i, size_t i0, int role) {
    if (word_is_q8(f)) {
        const collage_qcode c = collage__word_qcode(f, (collage_word_role)role);
        return D->T->value[c][((const uint8_t *)p)[i]] * sc[(i0 + i) / COLLAGE_QBLOCK - i0 / COLLAGE_QBLOCK];
    }
    float x = word_get(f, p, i);
    return lo ? x + lp_f32(fmt_of(f), lo[i]) : x;
}
/* A moment's new fp32 value into its word (8-bit words: by the block, q8_store): RN, or the pair
 * hi = RN(x), lo = RN(x − hi). */
static void moment_put(collage_word_format f, void *p, uint16_t *lo, size_t i, float x) {
    word_put(f, p, i, x);
    if (lo) lo[i] = lp_rn(fmt_of(f), x - lp_f32(fmt_of(f), ((const uint16_t *)p)[i]));
}

/* Low-precision path in format f (lp_raw in f): m, v (and (v, δv)) of format f, raw a value of f. */
static uint16_t lp_raw_fmt(collage_format f, uint16_t th, uint16_t g, uint16_t *m, uint16_t *v, uint16_t *dv, int v1,
                           const adamw_k *k) {
    if (f == COLLAGE_FMT_BF16) return lp_raw(th, g, m, v, dv, v1, k);
    if (k->clip) g = lp_rn(f, lp_f32(f, g) * k->coef);
    uint16_t mm = lp_rn(f, lp_f32(f, *m) * k->b1);
    mm = lp_rn(f, lp_f32(f, mm) + k->omb1 * lp_f32(f, g));
    *m = mm;
    uint16_t vh;
    if (dv) {
        collage_lp_pair x = {*v, *dv}, beta = {k->h2hi, k->h2lo};
        x = lp_mcf_mul_(f, x, beta);
        x = lp_grow_addcmul_(f, x, g, g, k->omb2);
        *v = vh = x.hi;
        *dv = x.lo;
    } else {
        vh = lp_rn(f, lp_f32(f, *v) * k->b2);
        vh = lp_rn(f, lp_f32(f, vh) + k->omb2 * (lp_f32(f, g) * lp_f32(f, g)));
        *v = vh;
    }
    uint16_t den = lp_rn(f, lp_f32(f, lp_rn(f, sqrtf(lp_f32(f, vh)))) + k->eps);
    uint16_t a = lp_rn(f, lp_f32(f, mm) * k->neg_step);
    uint16_t b = lp_rn(f, lp_f32(f, a) / lp_f32(f, den));
    uint16_t c = lp_rn(f, lp_f32(f, th) * k->lrwd);
    return lp_rn(f, lp_f32(f, b) - lp_f32(f, c));
}

/* The fp32 path's moment lines (f32_raw's first two) and its update (its last two), apart: an 8-bit
 * moment is re-quantized by the block between them, and the update reads the fp32 values. */
static void f32_moments(float g, float *m, float *v, const adamw_k *k) {
    if (k->clip) g = g * k->coef;
    *m = *m * k->b1 + k->omb1 * g;
    *v = *v * k->b2 + k->omb2 * (g * g);
}
static float f32_update(float wdec, float m, float v, float lrwd, const adamw_k *k) {
    float den = sqrtf(v) + k->eps;
    return (m * k->neg_step) / den - wdec * lrwd;
}

/* The value the fp32 path's decay multiplies: the master where the scheme has one, else θ. */
static float decay_base(const gdesc *D, const adamw_slabs *S, size_t i) {
    return S->master ? S->master[i] : word_get(D->wf, S->w, i);
}

/* θ (and its compensation or master) += raw by the weight scheme; EDQ's Δ_eff in *de, Δ_state in *ds. */
static void apply_raw(const gdesc *D, const adamw_slabs *S, size_t i, float raw, const adamw_k *k, double *de,
                      double *ds) {
    const collage_format f = D->tf;
    uint16_t *w16 = S->w, *cp = S->comp;
    if (D->w == COLLAGE_SCHEME_FP32) {
        float *w32 = S->w, old = w32[i];
        w32[i] = old + raw;
        *de = *ds = (double)w32[i] - (double)old;
        return;
    }
    const uint16_t old = w16[i];
    const float th = lp_f32(f, old);
    switch (D->w) {
    case COLLAGE_SCHEME_SR: w16[i] = bf16_sr_bits(th + raw, collage_rand32(k->key, k->index0 + i)); break;
    case COLLAGE_SCHEME_MCF:
    case COLLAGE_SCHEME_FP16_MCF: { /* Grow((θ, δθ), raw), its lines with raw in fp32 */
        const uint16_t cold = cp[i], s = lp_rn(f, th + raw);
        const uint16_t e = lp_rn(f, raw - lp_f32(f, lp_sub_(f, s, old)));
        const uint16_t r = lp_add_(f, cold, e), m2 = lp_add_(f, s, r);
        w16[i] = m2;
        cp[i] = lp_sub_(f, r, lp_sub_(f, m2, s));
        *ds = (double)lp_f32(f, cp[i]) - (double)lp_f32(f, cold);
        break;
    }
    case COLLAGE_SCHEME_KAHAN: {
        const uint16_t cold = cp[i], c = lp_rn(f, lp_f32(f, cold) + raw), t = lp_add_(f, old, c);
        w16[i] = t;
        cp[i] = lp_add_(f, c, lp_sub_(f, old, t));
        *ds = (double)lp_f32(f, cp[i]) - (double)lp_f32(f, cold);
        break;
    }
    case COLLAGE_SCHEME_REMAINDER: {
        const float mold = rem_join(old, cp[i]), mnew = mold + raw;
        w16[i] = rem_theta(mnew);
        cp[i] = rem_low(mnew, w16[i]);
        *ds = (double)mnew - (double)mold;
        break;
    }
    case COLLAGE_SCHEME_C8: { /* q = join(θ, e) exactly; q' = RN16(q + raw); θ', e' its split (c8.h) */
        const float qold = c8_join(old, S->corr[i]), qnew = c8_add(qold, raw);
        w16[i] = c8_theta(qnew);
        S->corr[i] = c8_byte(qnew, w16[i]);
        *ds = (double)qnew - (double)qold;
        break;
    }
    case COLLAGE_SCHEME_MASTER:
    case COLLAGE_SCHEME_FP16_MASTER: {
        const float mold = S->master[i];
        S->master[i] = mold + raw;
        w16[i] = lp_rn(f, S->master[i]);
        *ds = (double)S->master[i] - (double)mold;
        break;
    }
    default: w16[i] = lp_rn(f, th + raw); break; /* bf16, fp16 */
    }
    *de = (double)lp_f32(f, w16[i]) - (double)th;
    if (D->w == COLLAGE_SCHEME_BF16 || D->w == COLLAGE_SCHEME_FP16 || D->w == COLLAGE_SCHEME_SR) *ds = *de;
    else if (D->w == COLLAGE_SCHEME_MCF || D->w == COLLAGE_SCHEME_FP16_MCF || D->w == COLLAGE_SCHEME_KAHAN) *ds += *de;
}

/* One element of a strategy without 8-bit states. */
static void generic_elem(const gdesc *D, const adamw_slabs *S, size_t i, const adamw_k *k, adamw_acc *acc) {
    float raw;
    if (D->arith == COLLAGE_WORD_FP32) {
        float g = word_get(D->wf, S->g, i), m = moment_get(D, D->mf, S->m, NULL, NULL, i, 0, COLLAGE_ROLE_M);
        float v = moment_get(D, D->vf, S->v, D->v_pair ? S->dv : NULL, NULL, i, 0, COLLAGE_ROLE_V);
        f32_moments(g, &m, &v, k);
        raw = f32_update(decay_base(D, S, i), m, v, k->lrwd, k);
        moment_put(D->mf, S->m, NULL, i, m);
        moment_put(D->vf, S->v, D->v_pair ? S->dv : NULL, i, v);
    } else {
        const collage_format f = fmt_of(D->arith);
        uint16_t *m16 = S->m, *v16 = S->v;
        raw = lp_f32(f, lp_raw_fmt(f, ((const uint16_t *)S->w)[i], ((const uint16_t *)S->g)[i], &m16[i], &v16[i],
                                   D->v_pair ? &S->dv[i] : NULL, D->v1, k));
    }
    double de = 0, ds = 0;
    apply_raw(D, S, i, raw, k, &de, &ds);
    if (acc) acc_add(acc, (double)raw, de, ds);
}

void collage__adamw_generic_ref(collage_strategy s, const adamw_slabs *S, size_t a, size_t b, const adamw_k *k,
                                adamw_acc *acc) {
    const gdesc D = gdesc_of(s, k);
    for (size_t i = a; i < b; i++) generic_elem(&D, S, i, k, acc);
}

/* The weight scheme alone, for the other optimizers' updates (optim.h). */
void collage__scheme_apply_ref(collage_strategy s, const adamw_slabs *S, size_t a, size_t b, const float *raw,
                               const adamw_k *k, adamw_acc *acc) {
    const gdesc D = gdesc_of(s, k);
    for (size_t i = a; i < b; i++) {
        double de = 0, ds = 0;
        apply_raw(&D, S, i, raw[i - a], k, &de, &ds);
        if (acc) acc_add(acc, (double)raw[i - a], de, ds);
    }
}

/* An 8-bit moment's block [a, b) from its new fp32 values x[0, b − a): scale and codes (the block's
 * first element a is the shard's element; its slab index k->index0 + a is a multiple of 256). */
static void q8_store(const gdesc *D, collage_word_format f, int role, uint8_t *codes, float *scales, size_t a, size_t b,
                     const float *x, const adamw_k *k) {
    const collage_qcode c = collage__word_qcode(f, (collage_word_role)role);
    const uint64_t key = role == COLLAGE_ROLE_M ? D->key_m : D->key_v;
    float *sc = &scales[(k->index0 + a) / COLLAGE_QBLOCK - k->index0 / COLLAGE_QBLOCK];
    collage_qblock_quantize(c, x, b - a, codes + a, sc, D->sr_states, key, k->index0 + a);
}

/* One block [a, b) of COLLAGE_QBLOCK elements (fewer at the shard's end): the moments' new fp32 values
 * for the whole block, each 8-bit moment re-quantized as a block, then the update of every element from
 * the fp32 values with its piece's lr·wd. *p: the piece holding a, advanced past those that end in the
 * block. */
static void q8_block(const gdesc *D, const adamw_slabs *S, size_t a, size_t b, const adamw_piece *P, int np, int *p,
                     const adamw_k *k) {
    float mx[COLLAGE_QBLOCK], vx[COLLAGE_QBLOCK];
    for (size_t i = a; i < b; i++) {
        float g = word_get(D->wf, S->g, i);
        mx[i - a] = moment_get(D, D->mf, S->m, NULL, S->mscale, i, k->index0, COLLAGE_ROLE_M);
        vx[i - a] = moment_get(D, D->vf, S->v, D->v_pair ? S->dv : NULL, S->vscale, i, k->index0, COLLAGE_ROLE_V);
        f32_moments(g, &mx[i - a], &vx[i - a], k);
    }
    for (; *p < np && P[*p].a < b; (*p)++) {
        const adamw_piece *Q = &P[*p];
        for (size_t i = Q->a > a ? Q->a : a; i < (Q->b < b ? Q->b : b); i++) {
            float raw = f32_update(decay_base(D, S, i), mx[i - a], vx[i - a], Q->lrwd, k);
            double de = 0, ds = 0;
            apply_raw(D, S, i, raw, k, &de, &ds);
            if (Q->acc) acc_add(Q->acc, (double)raw, de, ds);
        }
        if (Q->b > b) break; /* the piece goes on into the next block */
    }
    if (word_is_q8(D->mf)) q8_store(D, D->mf, COLLAGE_ROLE_M, S->m, S->mscale, a, b, mx, k);
    else for (size_t i = a; i < b; i++) moment_put(D->mf, S->m, NULL, i, mx[i - a]);
    if (word_is_q8(D->vf)) q8_store(D, D->vf, COLLAGE_ROLE_V, S->v, S->vscale, a, b, vx, k);
    else for (size_t i = a; i < b; i++) moment_put(D->vf, S->v, D->v_pair ? S->dv : NULL, i, vx[i - a]);
}

void collage__adamw_q8_elem_ref(collage_strategy s, const adamw_slabs *S, size_t i, float m, float v, float lrwd,
                                const adamw_k *k, adamw_acc *acc) {
    const gdesc D = gdesc_of(s, k);
    const float raw = f32_update(decay_base(&D, S, i), m, v, lrwd, k);
    double de = 0, ds = 0;
    apply_raw(&D, S, i, raw, k, &de, &ds);
    if (acc) acc_add(acc, (double)raw, de, ds);
}

void collage__adamw_q8_ref(collage_strategy s, const adamw_slabs *S, const adamw_piece *P, int np, const adamw_k *k) {
    const gdesc D = gdesc_of(s, k);
    const size_t end = P[np - 1].b;
    int p = 0;
    for (size_t a = P[0].a; a < end;) {
        size_t b = a + COLLAGE_QBLOCK < end ? a + COLLAGE_QBLOCK : end;
        q8_block(&D, S, a, b, P, np, &p, k);
        a = b;
    }
}
