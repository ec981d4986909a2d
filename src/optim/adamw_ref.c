/* adamw_ref.c — the scalar reference step of AdamW, Lion and SGD for every strategy: the element lines
 * of adamw_elem.h (numerics.md §6, §11, §14, written there once for the host and the device) run over
 * the slabs element by element, and the 8-bit moments re-quantized per block by qcode.c. The vector
 * kernels and the CUDA step must match it bit for bit (weights and every state word); it is the oracle,
 * so clarity wins over speed here. */
#include <pthread.h>

#include "adamw_impl.h"
#include "adamw_elem.h"
#include "optim.h"

/* The strategy's description; Lion and SGD keep no v. Every strategy of the table has its lines there. */
static ce_desc desc_of(collage_strategy s, int opt) {
    ce_desc D;
    const collage_status st = ce_desc_of(s, &D);
    COLLAGE_ASSERT(st == COLLAGE_OK);
    return opt == COLLAGE_OPTIM_ADAMW ? D : ce_desc_no_v(D);
}
static ce_ptrs ptrs_of(const adamw_slabs *S) {
    ce_ptrs P = {.w = S->w, .g = S->g, .m = S->m, .v = S->v, .comp = S->comp, .dv = S->dv, .master = S->master,
                 .mscale = S->mscale, .vscale = S->vscale, .corr = S->corr};
    return P;
}
/* The step's scalars with the block's (or piece's) lr·wd and wd. */
static ce_k k_of(const adamw_k *k, float lrwd, float wd) {
    ce_k K = {.b1 = k->b1, .omb1 = k->omb1, .b2 = k->b2, .omb2 = k->omb2, .eps = k->eps, .neg_step = k->neg_step,
              .lrwd = lrwd, .eco = k->eco, .b2hi = k->b2hi, .b2lo = k->b2lo, .h2hi = k->h2hi, .h2lo = k->h2lo, .key = k->key,
              .opt = k->opt, .wd = wd, .first = k->first, .nesterov = k->nesterov, .decoupled = k->decoupled};
    return K;
}
static ce_coef coef_of(const adamw_k *k) {
    ce_coef c = {.coef = k->coef, .clip = k->clip};
    return c;
}
static void acc_add(adamw_acc *acc, const ce_terms *t) {
    if (!acc || t->d == 0.0) return;
    acc->dot += t->de * t->d;
    acc->dot_state += t->ds * t->d;
    acc->nn += t->d * t->d;
    acc->nonzero++;
    acc->lost += t->de == 0.0;
}

/* Elements [a, b) of a strategy without 8-bit moments, one at a time: load, ce_step (AdamW) or
 * ce_optim_step (Lion, SGD), store. */
static void block(collage_strategy s, const adamw_slabs *S, size_t a, size_t b, const adamw_k *k, adamw_acc *acc) {
    const ce_desc D = desc_of(s, k->opt);
    COLLAGE_ASSERT(!ce_desc_q8(&D));
    const ce_ptrs P = ptrs_of(S);
    const ce_k K = k_of(k, k->lrwd, k->wd);
    const ce_coef c = coef_of(k);
    for (size_t i = a; i < b; i++) {
        ce_state e = ce_load(&D, &P, i);
        ce_terms t;
        const uint32_t g = ce_load_word(D.wf, P.g, i);
        if (k->opt == COLLAGE_OPTIM_ADAMW) ce_step(&D, &e, g, &K, c, k->index0 + i, &t);
        else ce_optim_step(&D, &e, g, &K, c, k->index0 + i, &t);
        ce_store(&D, &P, i, &e);
        acc_add(acc, &t);
    }
}

void collage__adamw_block_ref(collage_strategy s, const adamw_slabs *S, size_t a, size_t b, const adamw_k *k,
                              adamw_acc *acc) {
    COLLAGE_ASSERT(k->opt == COLLAGE_OPTIM_ADAMW);
    block(s, S, a, b, k, acc);
}
void collage__optim_block_ref(collage_strategy s, const adamw_slabs *S, size_t a, size_t b, const adamw_k *k,
                              adamw_acc *acc) {
    COLLAGE_ASSERT(k->opt != COLLAGE_OPTIM_ADAMW);
    block(s, S, a, b, k, acc);
}

/* ------------------------------------------------------------------ 8-bit moments (numerics.md §11) */
/* The codes' values as adamw_elem.h reads them, built once. */
static ce_qtab g_qtab;
static pthread_once_t g_qtab_once = PTHREAD_ONCE_INIT;
static void qtab_build(void) { ce_qtab_fill(&g_qtab); }
static const ce_qtab *qtab(void) {
    pthread_once(&g_qtab_once, qtab_build);
    return &g_qtab;
}

/* The block scale of element i of an 8-bit word's scales sc (element 0's slab index i0). */
static float scale_at(const float *sc, size_t i, uint64_t i0) {
    return sc ? sc[(i0 + i) / COLLAGE_QBLOCK - i0 / COLLAGE_QBLOCK] : 0.0f;
}

/* An 8-bit moment's block [a, b) from its new fp32 values x[0, b − a): scale and codes (the block's
 * first element a is the shard's element; its slab index k->index0 + a is a multiple of 256). */
static void q8_store(const ce_desc *D, int q, int role, uint8_t *codes, float *scales, size_t a, size_t b,
                     const float *x, const adamw_k *k) {
    float *sc = &scales[(k->index0 + a) / COLLAGE_QBLOCK - k->index0 / COLLAGE_QBLOCK];
    collage_qblock_quantize((collage_qcode)q, x, b - a, codes + a, sc, D->sr_states, ce_q_state_key(k->key, role),
                            k->index0 + a);
}

/* One block [a, b) of COLLAGE_QBLOCK elements (fewer at the shard's end): the moments' new fp32 values
 * for the whole block, then the update of every element from them with its piece's lr·wd (and wd), a
 * moment that is not 8-bit stored into its word there; each 8-bit moment re-quantized as a block at the
 * end. *p: the piece holding a, advanced past those that end in the block. */
static void q8_block(const ce_desc *D, const adamw_slabs *S, size_t a, size_t b, const adamw_piece *Pc, int np, int *p,
                     const adamw_k *k) {
    const ce_ptrs P = ptrs_of(S);
    const ce_qtab *T = qtab();
    const ce_coef c = coef_of(k);
    const int adamw = k->opt == COLLAGE_OPTIM_ADAMW;
    float mx[COLLAGE_QBLOCK], vx[COLLAGE_QBLOCK], raw[COLLAGE_QBLOCK];
    for (size_t i = a; i < b; i++) {
        const ce_state e = ce_load(D, &P, i);
        const float ms = scale_at(S->mscale, i, k->index0), vs = scale_at(S->vscale, i, k->index0);
        if (adamw) {
            const ce_k K = k_of(k, k->lrwd, k->wd);
            ce_q8_moments(D, T, &e, ce_load_word(D->wf, P.g, i), ms, vs, &K, c, &mx[i - a], &vx[i - a]);
        } else {
            mx[i - a] = ce_moment_get(T, D->mf, D->mq, e.m, 0, 0, ms);
        }
    }
    for (; *p < np && Pc[*p].a < b; (*p)++) {
        const adamw_piece *Q = &Pc[*p];
        const ce_k K = k_of(k, Q->lrwd, Q->wd);
        for (size_t i = Q->a > a ? Q->a : a; i < (Q->b < b ? Q->b : b); i++) {
            ce_state e = ce_load(D, &P, i);
            ce_terms t;
            if (adamw) {
                ce_q8_update(D, &e, &mx[i - a], vx[i - a], &K, k->index0 + i, &t);
            } else {
                raw[i - a] = ce_optim_f32(D, &e, ce_load_word(D->wf, P.g, i), &mx[i - a], &K, c);
                t.d = (double)raw[i - a];
                const float err = ce_apply(D, &e, raw[i - a], &K, k->index0 + i, &t);
                if (D->w == COLLAGE_SCHEME_ECO) mx[i - a] = ce_line_eco_feed(mx[i - a], err, 1.0f, &K); /* SGD's buffer */
                if (D->mq < 0) e.m = ce_word_put(D->mf, mx[i - a]);
            }
            ce_store(D, &P, i, &e);
            acc_add(Q->acc, &t);
        }
        if (Q->b > b) break; /* the piece goes on into the next block */
    }
    if (D->mq >= 0) q8_store(D, D->mq, 1, S->m, S->mscale, a, b, mx, k);
    if (D->vq >= 0) q8_store(D, D->vq, 2, S->v, S->vscale, a, b, vx, k);
}

/* The pieces' blocks in order. */
static void q8_steps(collage_strategy s, const adamw_slabs *S, const adamw_piece *P, int np, const adamw_k *k) {
    const ce_desc D = desc_of(s, k->opt);
    const size_t end = P[np - 1].b;
    int p = 0;
    for (size_t a = P[0].a; a < end;) {
        const size_t b = a + COLLAGE_QBLOCK < end ? a + COLLAGE_QBLOCK : end;
        q8_block(&D, S, a, b, P, np, &p, k);
        a = b;
    }
}
void collage__adamw_q8_ref(collage_strategy s, const adamw_slabs *S, const adamw_piece *P, int np, const adamw_k *k) {
    COLLAGE_ASSERT(k->opt == COLLAGE_OPTIM_ADAMW);
    q8_steps(s, S, P, np, k);
}
void collage__optim_q8_ref(collage_strategy s, const adamw_slabs *S, const adamw_piece *P, int np, const adamw_k *k) {
    COLLAGE_ASSERT(k->opt != COLLAGE_OPTIM_ADAMW);
    q8_steps(s, S, P, np, k);
}

/* The second half of an 8-bit strategy's element i (the vector kernels' odd elements): ce_q8_update
 * from its moments' new fp32 values, with lr·wd; *m takes ECO's feedback. */
void collage__adamw_q8_elem_ref(collage_strategy s, const adamw_slabs *S, size_t i, float *m, float v, float lrwd,
                                const adamw_k *k, adamw_acc *acc) {
    const ce_desc D = desc_of(s, COLLAGE_OPTIM_ADAMW);
    const ce_ptrs P = ptrs_of(S);
    const ce_k K = k_of(k, lrwd, k->wd);
    ce_state e = ce_load(&D, &P, i);
    ce_terms t;
    ce_q8_update(&D, &e, m, v, &K, k->index0 + i, &t);
    ce_store_weights(&D, &P, i, &e); /* the moments are the caller's to store */
    acc_add(acc, &t);
}
