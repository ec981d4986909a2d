/* test_adamw_elem — the CUDA step's driver around the element lines (src/optim/adamw_elem.h), compiled
 * here for the host, against libcollage's step bit for bit. The element lines themselves are the
 * library's scalar reference (adamw_ref.c runs ce_step, ce_q8_update): there is no second scalar version
 * to hold equal, so what this checks is everything the device does around them — every preset and a set
 * of compositions (8-bit ones included) stepped as the kernels step them: tensors of ranges, blocks of
 * 2^14, 8 elements loaded and stored 16 bytes at a time, Σg² per chunk in order, clipping, EDQ per block
 * in element order, 8-bit moments re-quantized per block of 256 by ce_q_code (not qcode.c) — against the
 * library's reference step (collage_adamw_step_sumsq on COLLAGE_ISA_SCALAR) over groups, an odd shard
 * offset and special values; the 8-bit codes and e4m3 against qcode.c; the descriptions against the
 * strategy table; the nvcc flags of the Makefile. */
#include "adamw_elem.h"
#include "adamw_impl.h"
#include "harness.h"

#define SEED 37u

/* The same double: the same bits, or both NaN (a NaN's sign comes from the order of the operands of an
 * addition of two NaNs, which the compiler may commute: numerics.md does not specify it). */
static int same_f64(double a, double b) { return f64_bits(a) == f64_bits(b) || (isnan(a) && isnan(b)); }

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float urand(void) { return (float)(rnd() & 0xffffff) / 16777216.0f; }

/* ------------------------------------------------------------------ the presets and compositions */
static const collage_composition COMPOSED[] = {
    {COLLAGE_SCHEME_MCF, COLLAGE_MOMENT_INT8, COLLAGE_MOMENT_INT8, 0},
    {COLLAGE_SCHEME_MCF, COLLAGE_MOMENT_INT8, COLLAGE_MOMENT_INT8, 1},
    {COLLAGE_SCHEME_SR, COLLAGE_MOMENT_E4M3, COLLAGE_MOMENT_E4M3, 1},
    {COLLAGE_SCHEME_MASTER, COLLAGE_MOMENT_INT8, COLLAGE_MOMENT_FP32, 0},
    {COLLAGE_SCHEME_KAHAN, COLLAGE_MOMENT_BF16, COLLAGE_MOMENT_E4M3, 0},
    {COLLAGE_SCHEME_REMAINDER, COLLAGE_MOMENT_FP32, COLLAGE_MOMENT_MCF, 0},
    {COLLAGE_SCHEME_BF16, COLLAGE_MOMENT_E4M3, COLLAGE_MOMENT_MCF, 0},
    {COLLAGE_SCHEME_MCF, COLLAGE_MOMENT_FP32, COLLAGE_MOMENT_BF16, 0},
    {COLLAGE_SCHEME_FP16_MCF, COLLAGE_MOMENT_FP16, COLLAGE_MOMENT_FP32, 0},
    {COLLAGE_SCHEME_C8, COLLAGE_MOMENT_INT8, COLLAGE_MOMENT_INT8, 0},
    {COLLAGE_SCHEME_ECO, COLLAGE_MOMENT_INT8, COLLAGE_MOMENT_INT8, 0},
    {COLLAGE_SCHEME_ECO, COLLAGE_MOMENT_FP32, COLLAGE_MOMENT_BF16, 0},
};
#define N_COMPOSED ((int)(sizeof COMPOSED / sizeof COMPOSED[0]))

/* Strategy j of the list: the presets, then the compositions. */
static collage_strategy strategy_at(int j) {
    if (j < COLLAGE_STRATEGY_COUNT) return (collage_strategy)j;
    collage_strategy s = COLLAGE_STRATEGY_COUNT;
    collage_strategy_compose(&COMPOSED[j - COLLAGE_STRATEGY_COUNT], &s);
    return s;
}
#define N_STRATEGIES (COLLAGE_STRATEGY_COUNT + N_COMPOSED)

/* Whether adamw_elem.h has the lines of s's parts; where not, says so (the CUDA step refuses s). */
static int lines_known(collage_strategy s, const collage_strategy_info *R) {
    ce_desc D;
    if (ce_desc_of(s, &D) == COLLAGE_OK) return 1;
    printf("    %s: a part adamw_elem.h has no lines for: not checked here, refused by the CUDA step\n", R->name);
    return 0;
}

static void test_desc_matches_table(void) {
    for (int j = 0; j < N_STRATEGIES; j++) {
        const collage_strategy s = strategy_at(j);
        const collage_strategy_info *R = collage_strategy_get(s);
        ce_desc D = {0};
        CHECK(R != NULL, "strategy %d", (int)s);
        if (!R || !lines_known(s, R)) continue;
        CHECK(ce_desc_of(s, &D) == COLLAGE_OK, "%s: its description", R->name);
        CHECK(D.wf == (int)R->word[COLLAGE_ROLE_WEIGHTS].format && D.mf == (int)R->word[COLLAGE_ROLE_M].format &&
                  D.vf == (int)R->word[COLLAGE_ROLE_V].format && D.arith == (int)R->arith &&
                  D.v_pair == (R->word[COLLAGE_ROLE_DV].format != COLLAGE_WORD_NONE) &&
                  ce_has_master(D.w) == (R->word[COLLAGE_ROLE_MASTER].format != COLLAGE_WORD_NONE),
              "%s: the description's words differ from the table's row", R->name);
        if (D.mq >= 0) CHECK(D.mq == (int)collage__word_qcode((collage_word_format)D.mf, COLLAGE_ROLE_M), "%s m", R->name);
        if (D.vq >= 0) CHECK(D.vq == (int)collage__word_qcode((collage_word_format)D.vf, COLLAGE_ROLE_V), "%s v", R->name);
    }
}

/* ------------------------------------------------------------------ conversions and codes */
static float special_f32(int i) {
    static const uint32_t S[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x007fffffu, 0x00800000u,
                                 0x3f800000u, 0xbf800000u, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u,
                                 0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x3f808000u, 0x3f818000u, 0x477ff000u,
                                 0x477fefffu, 0x38800000u, 0x387fffffu, 0x33800000u, 0x43e00000u, 0xc3e00000u};
    return ce_bits_f32(S[i % (int)(sizeof S / sizeof S[0])]);
}

static void test_conversions(void) {
    for (uint64_t u = 0; u < (1ull << 32); u += 65521) { /* a stride prime to every field width */
        const float x = ce_bits_f32((uint32_t)u);
        const uint32_t r = rnd();
        CHECK(ce_bf16_rn(x) == collage_lp_from_f32(COLLAGE_FMT_BF16, x), "bf16 RN of %08x", (unsigned)u);
        CHECK(ce_bf16_sr(x, r) == collage_lp_from_f32_sr(COLLAGE_FMT_BF16, x, r), "bf16 SR of %08x", (unsigned)u);
        CHECK(ce_fp16_rn(x) == collage_lp_from_f32(COLLAGE_FMT_FP16, x), "fp16 RN of %08x", (unsigned)u);
    }
    for (uint32_t h = 0; h < 65536; h++) {
        const float a = ce_fp16_f32((uint16_t)h), b = collage_lp_to_f32(COLLAGE_FMT_FP16, (uint16_t)h);
        CHECK(ce_f32_bits(a) == ce_f32_bits(b), "fp16 %04x widened", (unsigned)h);
    }
    for (int i = 0; i < 100000; i++) {
        const uint64_t key = ((uint64_t)rnd() << 32) | rnd(), index = ((uint64_t)rnd() << 32) | rnd();
        CHECK(ce_rand32(key, index) == collage_rand32(key, index), "rand32(%llx, %llx)", (unsigned long long)key,
              (unsigned long long)index);
    }
}

static void test_codes(void) {
    ce_qtab T;
    ce_qtab_fill(&T);
    const q_tables *Q = collage__q_tables();
    for (int c = 0; c < COLLAGE_QCODE_COUNT; c++)
        for (int q = 0; q < 256; q++)
            CHECK(ce_f32_bits(T.value[c][q]) == f32_bits(Q->value[c][q]), "code %d value %d", c, q);
    for (int u = 0; u < 2; u++)
        for (int q = 0; q < 255; q++) CHECK(ce_f32_bits(T.thr[u][q]) == f32_bits(Q->thr[u][q]), "threshold %d %d", u, q);
    /* e4m3 over every fp32 pattern of magnitude ≤ 448 at a prime stride, RN (saturating) and SR */
    for (uint64_t u = 0; u < (1ull << 32); u += 4099) {
        const float x = ce_bits_f32((uint32_t)u);
        if (!(fabsf(x) <= 448.0f)) continue;
        const uint32_t r = rnd();
        CHECK(ce_e4m3(x, 0, 0) == collage_lp_from_f32_sat(COLLAGE_FMT_E4M3, x), "e4m3 RN of %08x", (unsigned)u);
        CHECK(ce_e4m3(x, 1, r) == collage_lp_from_f32_sr(COLLAGE_FMT_E4M3, x, r), "e4m3 SR of %08x r %08x", (unsigned)u,
              (unsigned)r);
    }
    /* every code: random values, the values and thresholds themselves and their neighbours */
    for (int c = 0; c < COLLAGE_QCODE_COUNT; c++) {
        const float span = c == COLLAGE_QCODE_E4M3 ? 500.0f : 1.2f;
        for (int i = 0; i < 200000; i++) {
            float y = (2.0f * urand() - 1.0f) * span;
            if (i % 4 == 1) y = nextafterf(T.value[c][rnd() & 255], (rnd() & 1) ? 2.0f : -2.0f);
            if (i % 4 == 2 && c != COLLAGE_QCODE_E4M3) y = T.thr[c == COLLAGE_QCODE_DYN_UNSIGNED][rnd() % 255];
            if (i % 4 == 3) y = T.value[c][rnd() & 255];
            const uint32_t r = rnd();
            CHECK(ce_q_code(&T, c, y, 0, 0) == collage__q_code_rn(Q, (collage_qcode)c, y), "code %d RN of %a", c, (double)y);
            CHECK(ce_q_code(&T, c, y, 1, r) == collage__q_code_sr(Q, (collage_qcode)c, y, r), "code %d SR of %a", c,
                  (double)y);
        }
    }
}

/* ------------------------------------------------------------------ the step as the kernels take it */
/* A tensor of the kernels' step: a range of the optimizer's shard with its own lr·wd and words. */
typedef struct {
    ce_ptrs P;
    size_t n;
    uint64_t index0;
    ce_k k;
    int group; /* the optimizer's group of the range (n_groups: none), for the EDQ sums */
} tensor;

/* The Σg² of the tensors: per tensor, chunks of CE_BLOCK from its element 0, each the tree of its 16
 * lanes; the chunk sums added in order from 0 (the CUDA reduction's order). */
static double tensors_sumsq(const ce_desc *D, const tensor *t, int k) {
    double sum = 0;
    for (int j = 0; j < k; j++)
        for (size_t a = 0; a < t[j].n; a += CE_BLOCK) {
            const size_t b = t[j].n - a > CE_BLOCK ? a + CE_BLOCK : t[j].n;
            double l[16];
            for (int lane = 0; lane < 16; lane++) l[lane] = ce_sumsq_lane(D->wf, t[j].P.g, a, b, lane);
            sum += ce_sumsq_tree(l);
        }
    return sum;
}

/* Block [a, b) of a tensor of a strategy without 8-bit moments, its elements in order: 8 at a time where
 * every slab of the tensor starts on 16 bytes (ce_load8, the kernel's plain step), the rest one by one. */
static void block_plain(const ce_desc *D, const tensor *t, size_t a, size_t b, ce_coef c, ce_acc *acc) {
    if (ce_vec_ok(D, &t->P))
        for (; b - a >= CE_VEC; a += CE_VEC) {
            ce_state s[CE_VEC];
            uint32_t g[CE_VEC];
            ce_load8(D, &t->P, a, s, g);
            for (int k = 0; k < CE_VEC; k++) {
                ce_terms e;
                ce_step(D, &s[k], g[k], &t->k, c, t->index0 + a + (size_t)k, &e);
                ce_acc_add(acc, &e);
            }
            ce_store8(D, &t->P, a, s);
        }
    for (size_t i = a; i < b; i++) {
        ce_state s = ce_load(D, &t->P, i);
        ce_terms e;
        ce_step(D, &s, ce_load_word(D->wf, t->P.g, i), &t->k, c, t->index0 + i, &e);
        ce_store(D, &t->P, i, &s);
        ce_acc_add(acc, &e);
    }
}

/* An 8-bit moment's block [a, b) from its new values x: scale and codes (qcode.c collage_qblock_quantize),
 * the reduction the kernel does across the threads of a block. */
static void q8_store(const ce_qtab *T, int code, int sr, uint64_t key, void *codes, float *scales, size_t a, size_t b,
                     uint64_t index0, const float *x) {
    float amax = 0.0f, scale, recip;
    int has_nan = 0;
    for (size_t i = a; i < b; i++) {
        const float v = fabsf(x[i - a]);
        has_nan |= v != v;
        amax = v > amax ? v : amax;
    }
    const int live = ce_q_scale(code, amax, has_nan, &scale, &recip);
    scales[a / CE_QBLOCK] = scale;
    for (size_t i = a; i < b; i++)
        ((uint8_t *)codes)[i] = live ? ce_q_code(T, code, x[i - a] * recip, sr, ce_rand32(key, index0 + i)) : ce_q_zero(code);
}

/* Block [a, b) of a tensor of an 8-bit strategy: tiles of 256 (the moments of the whole tile, the updates,
 * then each 8-bit moment re-quantized), as the kernel's three phases. */
static void block_q8(const ce_desc *D, const ce_qtab *T, const tensor *t, size_t a, size_t b, ce_coef c, ce_acc *acc) {
    for (size_t ta = a; ta < b; ta += CE_QBLOCK) {
        const size_t tb = b - ta > CE_QBLOCK ? ta + CE_QBLOCK : b;
        float mx[CE_QBLOCK], vx[CE_QBLOCK];
        for (size_t i = ta; i < tb; i++) {
            const ce_state s = ce_load(D, &t->P, i);
            const float ms = D->mq >= 0 ? t->P.mscale[i / CE_QBLOCK] : 0.0f, vs = D->vq >= 0 ? t->P.vscale[i / CE_QBLOCK] : 0.0f;
            ce_q8_moments(D, T, &s, ce_load_word(D->wf, t->P.g, i), ms, vs, &t->k, c, &mx[i - ta], &vx[i - ta]);
        }
        for (size_t i = ta; i < tb; i++) {
            ce_state s = ce_load(D, &t->P, i);
            ce_terms e;
            ce_q8_update(D, &s, &mx[i - ta], vx[i - ta], &t->k, t->index0 + i, &e);
            ce_store(D, &t->P, i, &s);
            ce_acc_add(acc, &e);
        }
        if (D->mq >= 0)
            q8_store(T, D->mq, D->sr_states, ce_q_state_key(t->k.key, 1), t->P.m, t->P.mscale, ta, tb, t->index0, mx);
        if (D->vq >= 0)
            q8_store(T, D->vq, D->sr_states, ce_q_state_key(t->k.key, 2), t->P.v, t->P.vscale, ta, tb, t->index0, vx);
    }
}

/* The whole step of the tensors (the kernels' order); per block EDQ sums into acc (blocks in tensor
 * order), their count returned. */
static int tensors_step(const ce_desc *D, const ce_qtab *T, const tensor *t, int k, ce_coef c, ce_acc *acc, int *group) {
    int nb = 0;
    for (int j = 0; j < k; j++) {
        const size_t nbj = ce_n_blocks(ce_desc_q8(D), t[j].index0, t[j].n);
        for (size_t r = 0; r < nbj; r++, nb++) {
            size_t a, b;
            ce_block_range(ce_desc_q8(D), t[j].index0, t[j].n, r, &a, &b);
            memset(&acc[nb], 0, sizeof acc[nb]);
            group[nb] = t[j].group;
            if (ce_desc_q8(D)) block_q8(D, T, &t[j], a, b, c, &acc[nb]);
            else block_plain(D, &t[j], a, b, c, &acc[nb]);
        }
    }
    return nb;
}

/* ------------------------------------------------------------------ the comparison */
#define NG 3
typedef struct {
    size_t n, index0, total;
    collage_param_group groups[NG];
} layout;

/* A word's bytes for n elements in the library's layout (8-bit: codes padded to 64 bytes, then scales). */
static size_t word_bytes(collage_word_format f, size_t n) {
    if (f == COLLAGE_WORD_INT8 || f == COLLAGE_WORD_E4M3) return ((n + 63) & ~(size_t)63) + (n + 255) / 256 * 4;
    return n * (f == COLLAGE_WORD_FP32 ? 4 : f == COLLAGE_WORD_BYTE ? 1 : 2);
}

/* Ranges of the shard in offset order (the groups clipped to it and the gaps between them) as tensors over
 * the words in `words`. Returns their count. */
static int make_tensors(const ce_desc *D, collage_strategy s, const layout *L, void *const *words, const void *g,
                        double lr, double wd_default, uint64_t t_step, tensor *out) {
    size_t cut[2 * NG + 2];
    int nc = 0;
    cut[nc++] = 0;
    for (int G = 0; G < NG; G++) { /* the groups are given in offset order */
        size_t ga = L->groups[G].offset, gb = ga + L->groups[G].count;
        ga = ga < L->index0 ? 0 : ga - L->index0;
        gb = gb < L->index0 ? 0 : gb - L->index0;
        cut[nc++] = ga < L->n ? ga : L->n;
        cut[nc++] = gb < L->n ? gb : L->n;
    }
    cut[nc++] = L->n;
    int k = 0;
    for (int c = 0; c + 1 < nc; c++) {
        const size_t a = cut[c], b = cut[c + 1];
        if (a == b) continue;
        const int G = c % 2 ? c / 2 : NG; /* odd cuts start a group */
        tensor *T = &out[k++];
        const size_t wsz = D->wf == COLLAGE_WORD_FP32 ? 4 : 2;
        T->n = b - a;
        T->index0 = L->index0 + a;
        T->group = G;
        T->k = ce_k_make(lr, 0.9, 0.95, D->tf == COLLAGE_FMT_FP16 && D->arith != COLLAGE_WORD_FP32 ? 1e-4 : 1e-8,
                         G < NG ? L->groups[G].weight_decay : wd_default, t_step, SEED);
        T->P.w = (char *)words[COLLAGE_ROLE_WEIGHTS] + a * wsz;
        T->P.g = (const char *)g + a * wsz;
        for (int r = COLLAGE_ROLE_M; r <= COLLAGE_ROLE_V; r++) {
            const collage_word_format f = collage_strategy_get(s)->word[r].format;
            char *p = (char *)words[r];
            const int q8 = f == COLLAGE_WORD_INT8 || f == COLLAGE_WORD_E4M3;
            void *codes = p + a * (q8 ? 1 : (f == COLLAGE_WORD_FP32 ? 4 : 2));
            float *scales = q8 ? (float *)(p + ((L->n + 63) & ~(size_t)63)) + a / 256 : NULL;
            if (r == COLLAGE_ROLE_M) { T->P.m = codes; T->P.mscale = scales; }
            else { T->P.v = codes; T->P.vscale = scales; }
        }
        uint16_t *comp = words[COLLAGE_ROLE_COMPENSATION] ? words[COLLAGE_ROLE_COMPENSATION]
                         : words[COLLAGE_ROLE_KAHAN]      ? words[COLLAGE_ROLE_KAHAN]
                                                          : words[COLLAGE_ROLE_REMAINDER];
        T->P.comp = comp ? comp + a : NULL;
        T->P.dv = words[COLLAGE_ROLE_DV] ? (uint16_t *)words[COLLAGE_ROLE_DV] + a : NULL;
        T->P.master = words[COLLAGE_ROLE_MASTER] ? (float *)words[COLLAGE_ROLE_MASTER] + a : NULL;
        T->P.corr = words[COLLAGE_ROLE_CORRECTION] ? (int8_t *)words[COLLAGE_ROLE_CORRECTION] + a : NULL;
    }
    return k;
}

/* Random gradients in θ's format with the special values of test_adamw (±0, subnormals, large), and a
 * NaN or Inf at one place when bad. */
static void fill_grad(const ce_desc *D, void *g, size_t n, int bad) {
    for (size_t i = 0; i < n; i++) {
        float x = (2.0f * urand() - 1.0f) * 0.05f;
        if (i % 97 == 3) x = special_f32((int)(i / 97) % 8); /* ±0, subnormals, the least normal, ±1 */
        if (i % 97 == 5) x = ce_bits_f32(0x00010000u * (uint32_t)(i % 7)); /* bf16 subnormals */
        if (bad && i == n / 2) x = (i & 1) ? (float)INFINITY : (float)NAN;
        if (!bad && !isfinite(x)) x = 0.0f;
        ce_store_word(D->wf, g, i, ce_word_put(D->wf, x));
    }
}

/* θ's special values at a few places: ±0, subnormals, the largest values. */
static void poke_weights(const ce_desc *D, void *w, size_t n) {
    for (size_t i = 11; i < n; i += 89) {
        const float x = special_f32((int)(i / 89) % 8);
        if (isfinite(x)) ce_store_word(D->wf, w, i, ce_word_put(D->wf, x));
    }
}

/* One strategy over layout L: the library's scalar reference and the kernels' functions from the same
 * state for `steps` steps (clipping, EDQ, groups), every word and the EDQ sums bit for bit; then a step
 * with a NaN or Inf in the gradient, skipped by both. */
static void compare_strategy(collage_strategy s, const layout *L, int steps, double clip) {
    const collage_strategy_info *R = collage_strategy_get(s);
    ce_desc D = {0};
    ce_desc_of(s, &D);
    ce_qtab T;
    ce_qtab_fill(&T);
    const int fp16 = D.tf == COLLAGE_FMT_FP16 && D.arith != COLLAGE_WORD_FP32;
    void *ref[COLLAGE_ROLE_COUNT] = {0}, *dev[COLLAGE_ROLE_COUNT] = {0};
    size_t bytes[COLLAGE_ROLE_COUNT] = {0};
    for (int r = 0; r < COLLAGE_ROLE_COUNT; r++) {
        if (!R->word[r].format) continue;
        bytes[r] = word_bytes(R->word[r].format, L->n);
        ref[r] = calloc(1, bytes[r]);
        dev[r] = calloc(1, bytes[r]);
    }
    const double wd = 0.1;
    collage_adamw_config cfg = {.strategy = s, .n = L->n, .beta1 = 0.9, .beta2 = 0.95, .eps = fp16 ? 1e-4 : 1e-8,
                                .weight_decay = wd, .groups = L->groups, .n_groups = NG, .clip = clip,
                                .skip_nonfinite = 1, .edq = 1, .seed = SEED, .params = ref[COLLAGE_ROLE_WEIGHTS],
                                .index0 = L->index0, .total = L->total};
    for (int r = 1; r < COLLAGE_ROLE_COUNT; r++) cfg.words[r] = ref[r];
    collage_adamw *o = NULL;
    CHECK(collage_adamw_create(&cfg, &o) == COLLAGE_OK, "%s: create", R->name);
    if (!o) return;
    float *w0 = malloc(L->n * sizeof *w0);
    for (size_t i = 0; i < L->n; i++) w0[i] = (2.0f * urand() - 1.0f) * 0.5f;
    collage_adamw_set_weights_f32(o, w0, L->n);
    poke_weights(&D, ref[COLLAGE_ROLE_WEIGHTS], L->n);
    void *g = malloc(L->n * 4);
    const double lr = 1e-3;
    fill_grad(&D, g, L->n, 0);
    collage_adamw_step_ref(o, g, lr, NULL); /* a first step: moments, compensation and scales not zero */
    for (int r = 0; r < COLLAGE_ROLE_COUNT; r++) if (ref[r]) memcpy(dev[r], ref[r], bytes[r]);
    tensor ts[2 * NG + 1];
    ce_acc acc[64];
    int grp[64];
    for (int step = 0; step <= steps; step++) {
        const int bad = step == steps;
        fill_grad(&D, g, L->n, bad);
        const uint64_t t = collage_adamw_steps(o) + 1;
        const int k = make_tensors(&D, s, L, dev, g, lr, wd, t, ts);
        const double sumsq = tensors_sumsq(&D, ts, k);
        double own = 0;
        collage_adamw_grad_sumsq(o, g, &own);
        if (!ce_desc_q8(&D)) /* the library's blocks are the tensors' chunks (8-bit: they end on slab multiples) */
            CHECK(f64_bits(own) == f64_bits(sumsq) || (isnan(own) && isnan(sumsq)), "%s: Σg² %a, the library's %a",
                  R->name, sumsq, own);
        collage_step_stats st;
        const collage_status rs = collage_adamw_step_sumsq(o, g, lr, sumsq, &st);
        double gnorm, coef;
        int skip;
        const ce_coef c = ce_clip(sumsq, clip, 1, 1.0, &gnorm, &coef, &skip);
        CHECK(skip == (rs == COLLAGE_ERR_NONFINITE) && skip == bad, "%s step %d: skipped %d, the library %d", R->name,
              step, skip, (int)rs);
        CHECK(f64_bits(gnorm) == f64_bits(st.grad_norm) && f64_bits(coef) == f64_bits(st.clip_coef),
              "%s step %d: norm %a factor %a, the library's %a %a", R->name, step, gnorm, coef, st.grad_norm, st.clip_coef);
        CHECK(bad || coef < 1.0, "%s step %d: clipping (factor %g) was to trigger", R->name, step, coef);
        if (skip) continue;
        const int nb = tensors_step(&D, &T, ts, k, c, acc, grp);
        /* EDQ: each group's blocks in order, then the groups in their index order (adamw.c step_end) */
        double gs[NG + 1][3] = {{0}}, tot[3] = {0};
        uint64_t gl[NG + 1][2] = {{0}}, tl = 0, tn = 0;
        for (int b = 0; b < nb; b++) {
            gs[grp[b]][0] += acc[b].dot; gs[grp[b]][1] += acc[b].dot_state; gs[grp[b]][2] += acc[b].nn;
            gl[grp[b]][0] += acc[b].lost; gl[grp[b]][1] += acc[b].nonzero;
        }
        for (int G = 0; G <= NG; G++) {
            tot[0] += gs[G][0]; tot[1] += gs[G][1]; tot[2] += gs[G][2];
            tl += gl[G][0]; tn += gl[G][1];
        }
        CHECK(same_f64(tot[0], st.edq.sum_dot) && same_f64(tot[1], st.edq.sum_dot_state) &&
                  same_f64(tot[2], st.edq.sum_nn) && tl == st.edq.lost_count && tn == st.edq.updates,
              "%s step %d: EDQ sums %a %a %a %llu %llu, the library's %a %a %a %llu %llu", R->name, step, tot[0], tot[1],
              tot[2], (unsigned long long)tl, (unsigned long long)tn, st.edq.sum_dot, st.edq.sum_dot_state, st.edq.sum_nn,
              (unsigned long long)st.edq.lost_count, (unsigned long long)st.edq.updates);
        for (int r = 0; r < COLLAGE_ROLE_COUNT; r++) {
            if (!ref[r]) continue;
            size_t at = 0;
            while (at < bytes[r] && ((char *)ref[r])[at] == ((char *)dev[r])[at]) at++;
            CHECK(at == bytes[r], "%s step %d: word %s differs at byte %zu of %zu", R->name, step,
                  collage_word_role_name((collage_word_role)r), at, bytes[r]);
        }
    }
    collage_adamw_free(o);
    for (int r = 0; r < COLLAGE_ROLE_COUNT; r++) { free(ref[r]); free(dev[r]); }
    free(w0);
    free(g);
}

/* Groups at odd places with a gap before, between and after them, on a shard whose element 0 is an odd
 * slab index (bf16-sr's keys), two blocks and more; the 8-bit strategies' groups and shard on multiples of
 * 256 (each tensor keeps its blocks of scales), the shard not on a multiple of 2^14; the other strategies
 * on that layout too, where every range's slabs start on 16 bytes (the 8-element loads). */
static void test_every_strategy(void) {
    const layout odd = {.n = 40000, .index0 = 1001, .total = 50000,
                        .groups = {{"a", 1500, 777, 0.0}, {"b", 3001, 17000, 0.3}, {"c", 30000, 9000, 0.05}}};
    const layout q8 = {.n = 40192, .index0 = 1024, .total = 50000,
                       .groups = {{"a", 1536, 768, 0.0}, {"b", 3072, 17152, 0.3}, {"c", 30208, 8960, 0.05}}};
    for (int j = 0; j < N_STRATEGIES; j++) {
        const collage_strategy s = strategy_at(j);
        ce_desc D = {0};
        if (ce_desc_of(s, &D) != COLLAGE_OK) continue; /* test_desc_matches_table said which */
        compare_strategy(s, ce_desc_q8(&D) ? &q8 : &odd, 3, 0.05);
        if (!ce_desc_q8(&D)) compare_strategy(s, &q8, 2, 0.05); /* every range on 16 bytes: 8 at a time */
    }
}

/* The CUDA build's nvcc flags keep every operation rounded once: NVCC_NUMERICS has no contraction
 * (--fmad=false), IEEE division and square root, no flush of subnormals; NVCC_FLAGS takes it and the host
 * side's -ffp-contract=off; the .cu rule compiles with NVCC_FLAGS; no line of the Makefile that sets an
 * nvcc variable (continuations included) turns fast math or contraction on. */
static void test_nvcc_flags(void) {
    FILE *f = fopen("Makefile", "r");
    CHECK(f != NULL, "the Makefile is read from the repository's root");
    if (!f) return;
    char line[4096], numerics[4096] = "", flags[8192] = "";
    int cont = 0, in_flags = 0, rule_uses_flags = 0; /* cont: this line continues an nvcc variable's */
    while (fgets(line, sizeof line, f)) {
        const size_t len = strlen(line);
        const int ends_cont = len >= 2 && line[len - 2] == '\\' && line[len - 1] == '\n';
        if (cont || !strncmp(line, "NVCC", 4) || !strncmp(line, "CUDA_ARCH", 9)) {
            const char *never[] = {"use_fast_math", "fmad=true", "ftz=true", "prec-div=false", "prec-sqrt=false",
                                   "ffast-math", "fp-contract=fast", "Ofast"};
            for (int i = 0; i < 8; i++) CHECK(strstr(line, never[i]) == NULL, "the Makefile's nvcc flags have %s: %s", never[i], line);
            if (!cont) in_flags = !strncmp(line, "NVCC_FLAGS", 10);
            if (in_flags) strncat(flags, line, sizeof flags - strlen(flags) - 1);
            cont = ends_cont;
        }
        if (!strncmp(line, "NVCC_NUMERICS", 13)) snprintf(numerics, sizeof numerics, "%s", line);
        if (strstr(line, "$(NVCC) $(NVCC_FLAGS) -c")) rule_uses_flags = 1;
    }
    fclose(f);
    CHECK(numerics[0], "the Makefile defines NVCC_NUMERICS");
    const char *need[] = {"--fmad=false", "-ftz=false", "-prec-div=true", "-prec-sqrt=true"};
    for (int i = 0; i < 4; i++) CHECK(strstr(numerics, need[i]) != NULL, "NVCC_NUMERICS lacks %s: %s", need[i], numerics);
    CHECK(strstr(flags, "$(NVCC_NUMERICS)") && strstr(flags, "-ffp-contract=off"),
          "NVCC_FLAGS must take $(NVCC_NUMERICS) and the host compiler's -ffp-contract=off: %s", flags);
    CHECK(rule_uses_flags, "the .cu files are compiled with $(NVCC) $(NVCC_FLAGS)");
}

int main(void) {
    printf("seed %u\n", SEED);
    collage_set_isa(COLLAGE_ISA_SCALAR); /* the scalar reference: its EDQ sums are double in element order */
    RUN(test_desc_matches_table);
    RUN(test_conversions);
    RUN(test_codes);
    RUN(test_every_strategy);
    RUN(test_nvcc_flags);
    return h_end();
}
