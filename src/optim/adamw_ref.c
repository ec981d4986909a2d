/* adamw_ref.c — the scalar reference AdamW step for every strategy, written line by line from
 * numerics.md §6 with the single operations of eft.h. The vectorised kernels must match it bit for bit
 * (weights and every state word); it is the oracle, so clarity wins over speed here. */
#include "adamw_impl.h"
#include "eft.h"

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
