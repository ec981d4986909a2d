/* optim_ref.c — the scalar reference of Lion and SGD with momentum (numerics.md §14) for every strategy
 * they can step: each element's update from its gradient and its moment m, in the strategy's
 * arithmetic (fp32, or its 16-bit format with every operation rounded once), then applied by the
 * strategy's weight scheme (collage__scheme_apply_ref, the code AdamW's generic path uses). It is the
 * oracle of any faster path, so clarity wins over speed. */
#include "optim.h"
#include "eft.h"

/* What the lines need of strategy s: θ's, m's and the lines' formats. */
typedef struct {
    collage_word_format wf, mf, arith;
    int sr_states;
    const q_tables *T;
} odesc;

static odesc odesc_of(collage_strategy s) {
    return (odesc){.wf = strategy_word(s, COLLAGE_ROLE_WEIGHTS), .mf = strategy_word(s, COLLAGE_ROLE_M),
                   .arith = strategy_arith(s), .sr_states = strategy_parts_of(s).sr_states, .T = collage__q_tables()};
}

static collage_format fmt16(collage_word_format f) { return f == COLLAGE_WORD_FP16 ? COLLAGE_FMT_FP16 : COLLAGE_FMT_BF16; }
/* A 16-bit or fp32 word's value, and a new value rounded into it (RN). */
static float word_get(collage_word_format f, const void *p, size_t i) {
    return f == COLLAGE_WORD_FP32 ? ((const float *)p)[i] : lp_f32(fmt16(f), ((const uint16_t *)p)[i]);
}
static void word_put(collage_word_format f, void *p, size_t i, float x) {
    if (f == COLLAGE_WORD_FP32) ((float *)p)[i] = x;
    else ((uint16_t *)p)[i] = lp_rn(fmt16(f), x);
}

/* sign(c): ±1, 0 for ±0, NaN for NaN (exact in every format). */
static float sign_of(float c) { return c > 0.0f ? 1.0f : c < 0.0f ? -1.0f : c == 0.0f ? 0.0f : c; }

/* Lion in fp32, each operation rounded to fp32 (§14): c = m·β1 + (1−β1)·g; m = m·β2 + (1−β2)·g;
 * raw = (−lr)·sign(c) − w·(lr·wd), w the master where there is one, else θ. */
static float lion_f32(float g, float *m, float w, float lrwd, const adamw_k *k) {
    if (k->clip) g = g * k->coef;
    const float c = *m * k->b1 + k->omb1 * g;
    *m = *m * k->b2 + k->omb2 * g;
    return k->neg_step * sign_of(c) - w * lrwd;
}

/* SGD in fp32 (§14), PyTorch's order: g += wd·w (L2, where wd ≠ 0); buf = g on the first step, else
 * buf·μ + (1−dampening)·g; d = g + μ·buf (Nesterov) or buf; raw = (−lr)·d [− w·(lr·wd) decoupled].
 * μ = 0: no buffer, d = g. */
static float sgd_f32(float g, float *m, float w, float lrwd, float wd, const adamw_k *k) {
    if (k->clip) g = g * k->coef;
    if (!k->decoupled && wd != 0.0f) g = g + w * wd;
    float d = g;
    if (k->b1 != 0.0f) {
        const float buf = k->first ? g : *m * k->b1 + k->omb1 * g;
        *m = buf;
        d = k->nesterov ? g + k->b1 * buf : buf;
    }
    const float u = k->neg_step * d;
    return k->decoupled ? u - w * lrwd : u;
}

/* Lion in the 16-bit format f (§14): the fp32 lines with every result rounded to f, as AdamW's. */
static uint16_t lion_lp(collage_format f, uint16_t th, uint16_t g, uint16_t *m, float lrwd, const adamw_k *k) {
    if (k->clip) g = lp_rn(f, lp_f32(f, g) * k->coef);
    const uint16_t c = lp_rn(f, lp_f32(f, lp_rn(f, lp_f32(f, *m) * k->b1)) + k->omb1 * lp_f32(f, g));
    *m = lp_rn(f, lp_f32(f, lp_rn(f, lp_f32(f, *m) * k->b2)) + k->omb2 * lp_f32(f, g));
    const uint16_t a = lp_rn(f, k->neg_step * sign_of(lp_f32(f, c)));
    const uint16_t cw = lp_rn(f, lp_f32(f, th) * lrwd);
    return lp_rn(f, lp_f32(f, a) - lp_f32(f, cw));
}

/* SGD in the 16-bit format f (§14). */
static uint16_t sgd_lp(collage_format f, uint16_t th, uint16_t g, uint16_t *m, float lrwd, float wd, const adamw_k *k) {
    if (k->clip) g = lp_rn(f, lp_f32(f, g) * k->coef);
    if (!k->decoupled && wd != 0.0f) g = lp_rn(f, lp_f32(f, g) + lp_f32(f, lp_rn(f, lp_f32(f, th) * wd)));
    uint16_t d = g;
    if (k->b1 != 0.0f) {
        const uint16_t buf = k->first ? g : lp_rn(f, lp_f32(f, lp_rn(f, lp_f32(f, *m) * k->b1)) + k->omb1 * lp_f32(f, g));
        *m = buf;
        d = k->nesterov ? lp_rn(f, lp_f32(f, g) + lp_f32(f, lp_rn(f, lp_f32(f, buf) * k->b1))) : buf;
    }
    const uint16_t a = lp_rn(f, lp_f32(f, d) * k->neg_step);
    return k->decoupled ? lp_rn(f, lp_f32(f, a) - lp_f32(f, lp_rn(f, lp_f32(f, th) * lrwd))) : a;
}

/* The fp32 lines for element i, its moment's fp32 value in *m. */
static float raw_f32(const odesc *D, const adamw_slabs *S, size_t i, float *m, float lrwd, float wd, const adamw_k *k) {
    const float g = word_get(D->wf, S->g, i), w = S->master ? S->master[i] : word_get(D->wf, S->w, i);
    return k->opt == COLLAGE_OPTIM_LION ? lion_f32(g, m, w, lrwd, k) : sgd_f32(g, m, w, lrwd, wd, k);
}

/* Element i's update (m updated in its word). */
static float elem_raw(const odesc *D, const adamw_slabs *S, size_t i, const adamw_k *k) {
    if (D->arith == COLLAGE_WORD_FP32) {
        float m = word_get(D->mf, S->m, i);
        const float raw = raw_f32(D, S, i, &m, k->lrwd, k->wd, k);
        word_put(D->mf, S->m, i, m);
        return raw;
    }
    const collage_format f = fmt16(D->arith);
    const uint16_t th = ((const uint16_t *)S->w)[i], g = ((const uint16_t *)S->g)[i];
    uint16_t *m = &((uint16_t *)S->m)[i];
    return lp_f32(f, k->opt == COLLAGE_OPTIM_LION ? lion_lp(f, th, g, m, k->lrwd, k) : sgd_lp(f, th, g, m, k->lrwd, k->wd, k));
}

#define CHUNK 256 /* elements whose updates are computed, then applied, together */

void collage__optim_block_ref(collage_strategy s, const adamw_slabs *S, size_t a, size_t b, const adamw_k *k,
                              adamw_acc *acc) {
    const odesc D = odesc_of(s);
    float raw[CHUNK];
    for (size_t c = a; c < b; c += CHUNK) {
        const size_t e = b - c < CHUNK ? b : c + CHUNK;
        for (size_t i = c; i < e; i++) raw[i - c] = elem_raw(&D, S, i, k);
        collage__scheme_apply_ref(s, S, c, e, raw, k, acc);
    }
}

/* An 8-bit m's value for element i (the block's scale times its code's value), or a 16-bit / fp32 m's. */
static float m_get(const odesc *D, const adamw_slabs *S, size_t i, uint64_t i0) {
    if (!word_is_q8(D->mf)) return word_get(D->mf, S->m, i);
    const collage_qcode c = collage__word_qcode(D->mf, COLLAGE_ROLE_M);
    return D->T->value[c][((const uint8_t *)S->m)[i]] * S->mscale[(i0 + i) / COLLAGE_QBLOCK - i0 / COLLAGE_QBLOCK];
}

/* One block [a, b) of at most COLLAGE_QBLOCK elements: m read for the block, every element's update from
 * the fp32 lines with its piece's lr·wd and wd, applied per piece, then m written back (an 8-bit m
 * re-quantized as a block: numerics.md §11). *p: the piece holding a, advanced past those ending here. */
static void q8_block(collage_strategy s, const odesc *D, const adamw_slabs *S, size_t a, size_t b, const adamw_piece *P,
                     int np, int *p, const adamw_k *k) {
    float mx[COLLAGE_QBLOCK], raw[COLLAGE_QBLOCK];
    for (size_t i = a; i < b; i++) mx[i - a] = m_get(D, S, i, k->index0);
    for (; *p < np && P[*p].a < b; (*p)++) {
        const adamw_piece *Q = &P[*p];
        const size_t lo = Q->a > a ? Q->a : a, hi = Q->b < b ? Q->b : b;
        for (size_t i = lo; i < hi; i++) raw[i - a] = raw_f32(D, S, i, &mx[i - a], Q->lrwd, Q->wd, k);
        collage__scheme_apply_ref(s, S, lo, hi, &raw[lo - a], k, Q->acc);
        if (Q->b > b) break; /* the piece goes on into the next block */
    }
    if (word_is_q8(D->mf)) {
        const collage_qcode c = collage__word_qcode(D->mf, COLLAGE_ROLE_M);
        float *sc = &S->mscale[(k->index0 + a) / COLLAGE_QBLOCK - k->index0 / COLLAGE_QBLOCK];
        collage_qblock_quantize(c, mx, b - a, (uint8_t *)S->m + a, sc, D->sr_states, q_state_key(k->key, 1), k->index0 + a);
    } else {
        for (size_t i = a; i < b; i++) word_put(D->mf, S->m, i, mx[i - a]);
    }
}

void collage__optim_q8_ref(collage_strategy s, const adamw_slabs *S, const adamw_piece *P, int np, const adamw_k *k) {
    const odesc D = odesc_of(s);
    const size_t end = P[np - 1].b;
    int p = 0;
    for (size_t a = P[0].a; a < end;) {
        const size_t b = a + COLLAGE_QBLOCK < end ? a + COLLAGE_QBLOCK : end;
        q8_block(s, &D, S, a, b, P, np, &p, k);
        a = b;
    }
}
