/* fp8q.c — fp8 compute's quantization (fp8q.h, numerics.md §13): the recipes' block shapes and scales, the
 * quantizer of a bf16 tensor (amax per block, then saturating round to nearest of each scaled element with
 * lowp.c's encoder), and delayed scaling's amax histories with their bytes for checkpoints. */
#include "fp8q.h"
#include <float.h>
#include <math.h>

#define FP8Q_NAME(x) x##_ref
#include "fp8q_kernel.inc"
#undef FP8Q_NAME

/* The quantizer's loops for the ISA in force (collage_get_isa): fp8q_kernel.inc built for it. */
typedef struct {
    unsigned (*amax)(const uint16_t *x, int ld, int r0, int r1, int c0, int c1);
    void (*colmax)(const uint16_t *x, int ld, int r0, int r1, int c0, int c1, uint16_t *m);
    void (*run)(int e5m2, const uint16_t *x, int n, float s, float inv, uint8_t *codes, uint16_t *vals, int dequant);
    void (*run_cols)(int e5m2, const uint16_t *x, int n, const float *s, const float *inv, uint8_t *codes,
                     uint16_t *vals, int dequant);
} fp8q_kernels;

#define FP8Q_KERNELS(S) \
    (fp8q_kernels){collage__fp8q_amax##S, collage__fp8q_colmax##S, collage__fp8q_run##S, collage__fp8q_run_cols##S}
static fp8q_kernels kernels(void) {
    switch (collage_get_isa()) {
    case COLLAGE_ISA_AVX512: return FP8Q_KERNELS(_avx512);
    case COLLAGE_ISA_AVX2: return FP8Q_KERNELS(_avx2);
    default: return FP8Q_KERNELS(_ref);
    }
}

void collage__fp8q_sat_row(collage_isa isa, collage_format f, const float *y, int n, uint8_t *codes) {
    const int e5m2 = f == COLLAGE_FMT_E5M2;
    if (isa == COLLAGE_ISA_AVX512) collage__fp8q_sat_row_avx512(e5m2, y, n, codes);
    else if (isa == COLLAGE_ISA_AVX2) collage__fp8q_sat_row_avx2(e5m2, y, n, codes);
    else collage__fp8q_sat_row_ref(e5m2, y, n, codes);
}

static const char *const RECIPE_NAMES[COLLAGE_FP8_RECIPE_COUNT] = {"delayed", "current", "block", "mxfp8"};

const char *collage__fp8_recipe_name(collage_fp8_recipe r) {
    return (unsigned)r < COLLAGE_FP8_RECIPE_COUNT ? RECIPE_NAMES[r] : NULL;
}

collage_status collage__fp8_recipe_parse(const char *name, collage_fp8_recipe *out) {
    if (!name || !out) return COLLAGE_ERR_NULL;
    for (int i = 0; i < COLLAGE_FP8_RECIPE_COUNT; i++)
        if (!strcmp(name, RECIPE_NAMES[i])) return *out = (collage_fp8_recipe)i, COLLAGE_OK;
    return COLLAGE_ERR_ARG;
}

collage_format collage__fp8_format(collage_fp8_role role, int e4m3_all) {
    return role == COLLAGE_FP8_GRAD && !e4m3_all ? COLLAGE_FMT_E5M2 : COLLAGE_FMT_E4M3;
}

static int is_fp8(collage_format f) { return f == COLLAGE_FMT_E4M3 || f == COLLAGE_FMT_E5M2; }

void collage__fp8_block_shape(const collage_fp8_quant *q, int rows, int cols, int *br, int *bc) {
    int along = q->recipe == COLLAGE_FP8_MXFP8 ? COLLAGE_FP8_MX : COLLAGE_FP8_TILE, across = 1;
    if (q->recipe == COLLAGE_FP8_DELAYED || q->recipe == COLLAGE_FP8_CURRENT) {
        *br = rows, *bc = cols;
        return;
    }
    if (q->recipe == COLLAGE_FP8_BLOCK && q->role == COLLAGE_FP8_WEIGHT) across = COLLAGE_FP8_TILE;
    *br = q->k_axis ? across : along;
    *bc = q->k_axis ? along : across;
}

size_t collage__fp8_blocks(const collage_fp8_quant *q, int rows, int cols) {
    int br, bc;
    collage__fp8_block_shape(q, rows, cols, &br, &bc);
    return (size_t)((rows + br - 1) / br) * (size_t)((cols + bc - 1) / bc);
}

/* MXFP8's exponent range: every q·2^E a bf16 value. The lowest bit of a code is 2^(1−bias−man) (e4m3 2^-9,
 * e5m2 2^-16) and must stay at or above bf16's 2^-133; the largest value F = 1.75·2^Ef times 2^E must
 * stay at or below bf16's largest (1.9921875·2^127), i.e. Ef + E ≤ 127. */
static void mx_range(collage_format f, int *lo, int *hi) {
    const collage_format_info *F = collage_format_get(f);
    *lo = -133 - (1 - F->bias - F->man_bits);
    *hi = 127 - ilogbf(F->max_value);
}

/* A format's MXFP8 constants: the clamps, and F = (1 + mf·2^-23)·2^ef (F is a normal fp32 value). */
typedef struct { int lo, hi, ef; uint32_t mf; } mx_consts;
static mx_consts mx_of(collage_format f) {
    mx_consts c;
    const float F = collage_format_get(f)->max_value;
    mx_range(f, &c.lo, &c.hi);
    c.ef = ilogbf(F), c.mf = f32_bits(F) & 0x7fffffu;
    return c;
}

/* The least E with a ≤ F·2^E, exactly: a = m·2^Ea (m in [1, 2)), F = mF·2^Ef, so E = Ea − Ef, plus 1
 * when m > mF; for a normal a, m > mF compares the fractions' bits as integers. Clamped to mx_range. */
static int mx_exponent_of(const mx_consts *c, float a) {
    if (a == 0.0f) return c->lo;
    const uint32_t u = f32_bits(a);
    int e;
    if (u >> 23) {
        e = (int)(u >> 23) - 127 - c->ef + ((u & 0x7fffffu) > c->mf);
    } else { /* subnormal */
        const int ea = ilogbf(a);
        e = ea - c->ef + (ldexpf(a, -ea) > bits_f32(0x3f800000u | c->mf));
    }
    return e < c->lo ? c->lo : e > c->hi ? c->hi : e;
}

/* 2^e for e in fp32's normal range. */
static inline float pow2f(int e) { return bits_f32((uint32_t)(127 + e) << 23); }

static float fp32_div(float a, float b) { return a / b; }

void collage__fp8_block_scale(const collage_fp8_quant *q, float amax, float *s, float *inv) {
    const float F = collage_format_get(q->fmt)->max_value;
    switch (q->recipe) {
    case COLLAGE_FP8_MXFP8: {
        const mx_consts c = mx_of(q->fmt);
        const int e = mx_exponent_of(&c, amax);
        *s = pow2f(-e), *inv = pow2f(e);
        return;
    }
    case COLLAGE_FP8_DELAYED:
        *s = q->scale, *inv = fp32_div(1.0f, q->scale);
        return;
    default: /* CURRENT, BLOCK */
        if (amax == 0.0f) { *s = *inv = 1.0f; return; }
        *s = fp32_div(F, amax);
        if (isinf(*s)) *s = FLT_MAX;
        *inv = q->recipe == COLLAGE_FP8_BLOCK ? fp32_div(amax, F) : fp32_div(1.0f, *s);
    }
}

/* Block row b's amaxes (blocks br × bc, gc to a grid row) into am[0 … gc), with K's blocks one column wide
 * (bc = 1) taken a row at a time over COLMAX_CHUNK columns; returns their largest bits. */
#define COLMAX_CHUNK 1024
static unsigned amax_block_row(const fp8q_kernels *k, const uint16_t *x, int ld, int r0, int r1, int cols, int bc,
                               float *am) {
    unsigned top = 0;
    if (bc == 1) {
        uint16_t m[COLMAX_CHUNK];
        for (int c0 = 0; c0 < cols; c0 += COLMAX_CHUNK) {
            const int n = cols - c0 < COLMAX_CHUNK ? cols - c0 : COLMAX_CHUNK;
            memset(m, 0, (size_t)n * sizeof *m);
            k->colmax(x, ld, r0, r1, c0, c0 + n, m);
            for (int c = 0; c < n; c++) am[c0 + c] = bf16_f32(m[c]), top = m[c] > top ? m[c] : top;
        }
        return top;
    }
    for (int c0 = 0, g = 0; c0 < cols; c0 += bc, g++) {
        const unsigned a = k->amax(x, ld, r0, r1, c0, c0 + bc < cols ? c0 + bc : cols);
        am[g] = bf16_f32((uint16_t)a), top = a > top ? a : top;
    }
    return top;
}

/* Every block's amax bits into am (row-major over the grid): block rows shared among the threads, or, for
 * one block row, its rows (a per-tensor recipe, with a max reduction: exact in any order) or its column
 * chunks (one row of 1 × K blocks). Returns the largest. */
static unsigned amax_grid(const fp8q_kernels *k, const uint16_t *x, int ld, int rows, int cols, int br, int bc,
                          float *am, int nt) {
    const int gr = (rows + br - 1) / br, gc = (cols + bc - 1) / bc;
    unsigned top = 0;
    (void)nt; /* OpenMP off */
    if (gr == 1 && gc == 1) {
#pragma omp parallel for schedule(static) num_threads(nt) reduction(max : top) if (rows >= 64)
        for (int r = 0; r < rows; r++) {
            const unsigned a = k->amax(x, ld, r, r + 1, 0, cols);
            top = a > top ? a : top;
        }
        am[0] = bf16_f32((uint16_t)top);
        return top;
    }
#pragma omp parallel for schedule(static) num_threads(nt) reduction(max : top) if (gr > 1)
    for (int b = 0; b < gr; b++) {
        const int r0 = b * br, r1 = r0 + br < rows ? r0 + br : rows;
        const unsigned a = amax_block_row(k, x, ld, r0, r1, cols, bc, am + (size_t)b * gc);
        top = a > top ? a : top;
    }
    return top;
}

/* Each block's s and inv from its amax (in s), collage__fp8_block_scale's values; MXFP8's with the format's
 * constants found once. Blocks are independent: any share among the threads gives the same values. */
static void block_scales(const collage_fp8_quant *q, size_t nb, float *s, float *inv, int nt) {
    (void)nt; /* OpenMP off */
    if (q->recipe != COLLAGE_FP8_MXFP8) {
#pragma omp parallel for schedule(static) num_threads(nt) if (nb >= 16384)
        for (size_t b = 0; b < nb; b++) collage__fp8_block_scale(q, s[b], &s[b], &inv[b]);
        return;
    }
    const mx_consts c = mx_of(q->fmt);
#pragma omp parallel for schedule(static) num_threads(nt) if (nb >= 16384)
    for (size_t b = 0; b < nb; b++) {
        const int e = mx_exponent_of(&c, s[b]);
        s[b] = pow2f(-e), inv[b] = pow2f(e);
    }
}

static collage_status check_quant(const collage_fp8_quant *q, int dequant) {
    if ((unsigned)q->recipe >= COLLAGE_FP8_RECIPE_COUNT || !is_fp8(q->fmt) || (unsigned)q->role > COLLAGE_FP8_GRAD)
        return COLLAGE_ERR_ARG;
    if (q->recipe == COLLAGE_FP8_DELAYED && !(isfinite(q->scale) && q->scale > 0.0f)) return COLLAGE_ERR_ARG;
    if (dequant && q->recipe != COLLAGE_FP8_MXFP8) return COLLAGE_ERR_ARG;
    return COLLAGE_OK;
}

uint8_t collage__fp8_sat(collage_format f, float y) { return (uint8_t)sat_fp8(y, f == COLLAGE_FMT_E5M2).code; }

/* A row's codes and values: block g's scale for columns [g·bc, g·bc + bc); blocks one column wide take
 * each column's own. */
static void quantize_row(const fp8q_kernels *k, const collage_fp8_quant *q, const uint16_t *x, int cols, int bc,
                         const float *s, const float *inv, uint8_t *codes, uint16_t *vals, int dequant) {
    const int e5m2 = q->fmt == COLLAGE_FMT_E5M2;
    if (bc == 1) {
        k->run_cols(e5m2, x, cols, s, inv, codes, vals, dequant);
        return;
    }
    for (int c0 = 0, g = 0; c0 < cols; c0 += bc, g++) {
        const int n = cols - c0 < bc ? cols - c0 : bc;
        k->run(e5m2, x + c0, n, s[g], inv[g], codes ? codes + c0 : NULL, vals ? vals + c0 : NULL, dequant);
    }
}

collage_status collage__fp8_quantize(const collage_fp8_quant *q, const uint16_t *x, int rows, int cols, int ld,
                                     uint8_t *codes, uint16_t *vals, int dequant, float *s, float *inv, float *amax,
                                     int nt) {
    if (!q || !x || !s || !inv) return COLLAGE_ERR_NULL;
    collage_status st = check_quant(q, dequant);
    if (st != COLLAGE_OK) return st;
    if (rows < 1 || cols < 1 || ld < cols) return COLLAGE_ERR_SIZE;
    int br, bc;
    collage__fp8_block_shape(q, rows, cols, &br, &bc);
    const int gc = (cols + bc - 1) / bc;
    const size_t nb = collage__fp8_blocks(q, rows, cols);
    const fp8q_kernels k = kernels();
    const unsigned top = amax_grid(&k, x, ld, rows, cols, br, bc, s, nt); /* s holds the amaxes first */
    if (top >= 0x7f80u) return COLLAGE_ERR_NONFINITE;
    block_scales(q, nb, s, inv, nt);
#pragma omp parallel for schedule(static) num_threads(nt) if ((size_t)rows * cols >= 32768)
    for (int r = 0; r < rows; r++) {
        const size_t g0 = (size_t)(r / br) * gc;
        quantize_row(&k, q, x + (size_t)r * ld, cols, bc, s + g0, inv + g0, codes ? codes + (size_t)r * cols : NULL,
                     vals ? vals + (size_t)r * cols : NULL, dequant);
    }
    if (amax) *amax = bf16_f32((uint16_t)top);
    return COLLAGE_OK;
}

/* ---------------------------------------------------------------- delayed scaling's state */
struct collage__fp8_scaling {
    int slots, history, margin, pos;  /* pos: the history entry the next step writes */
    uint64_t steps;
    uint8_t *fmt;                     /* per slot */
    float *scale, *cur;               /* per slot */
    float *hist;                      /* (slots, history) */
};

collage__fp8_scaling *collage__fp8_scaling_create(const collage_format *fmts, int slots, int history, int margin) {
    if (!fmts || slots < 1 || history < 1 || margin < 0 || margin > 64) return NULL;
    if ((size_t)slots * (size_t)history > ((size_t)1 << 32)) return NULL;
    for (int i = 0; i < slots; i++)
        if (!is_fp8(fmts[i])) return NULL;
    collage__fp8_scaling *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->slots = slots, st->history = history, st->margin = margin;
    st->fmt = malloc((size_t)slots);
    st->scale = malloc((size_t)slots * sizeof(float));
    st->cur = calloc((size_t)slots, sizeof(float));
    st->hist = calloc((size_t)slots * (size_t)history, sizeof(float));
    if (!st->fmt || !st->scale || !st->cur || !st->hist) { collage__fp8_scaling_free(st); return NULL; }
    for (int i = 0; i < slots; i++) st->fmt[i] = (uint8_t)fmts[i], st->scale[i] = 1.0f;
    return st;
}

void collage__fp8_scaling_free(collage__fp8_scaling *st) {
    if (!st) return;
    free(st->fmt), free(st->scale), free(st->cur), free(st->hist);
    free(st);
}

int collage__fp8_scaling_slots(const collage__fp8_scaling *st) { return st->slots; }
float collage__fp8_scaling_scale(const collage__fp8_scaling *st, int slot) {
    COLLAGE_ASSERT(slot >= 0 && slot < st->slots);
    return st->scale[slot];
}
float *collage__fp8_scaling_current(collage__fp8_scaling *st) { return st->cur; }
uint64_t collage__fp8_scaling_steps(const collage__fp8_scaling *st) { return st->steps; }

void collage__fp8_scaling_record(collage__fp8_scaling *st, int slot, float amax) {
    COLLAGE_ASSERT(slot >= 0 && slot < st->slots);
    if (isfinite(amax) && amax > st->cur[slot]) st->cur[slot] = amax;
}

void collage__fp8_scaling_discard(collage__fp8_scaling *st) {
    memset(st->cur, 0, (size_t)st->slots * sizeof(float));
}

void collage__fp8_scaling_step(collage__fp8_scaling *st) {
    for (int i = 0; i < st->slots; i++) {
        float *h = st->hist + (size_t)i * st->history;
        h[st->pos] = st->cur[i];
        float m = 0.0f;
        for (int j = 0; j < st->history; j++) m = h[j] > m ? h[j] : m;
        if (m > 0.0f && isfinite(m)) {
            float sf = fp32_div(collage_format_get((collage_format)st->fmt[i])->max_value, m);
            sf = ldexpf(sf, -st->margin);
            st->scale[i] = isinf(sf) ? FLT_MAX : sf;
        }
        st->cur[i] = 0.0f;
    }
    st->pos = (st->pos + 1) % st->history;
    st->steps++;
}

/* ---------------------------------------------------------------- bytes */
static const char SCAL_MAGIC[8] = {'C', 'L', 'F', '8', 'S', 'C', 'A', 'L'};
#define SCAL_VERSION 1u
#define SCAL_HEAD 40 /* magic, version, slots, history, margin, pos, steps (u64), reserved */

size_t collage__fp8_scaling_bytes(const collage__fp8_scaling *st) {
    return SCAL_HEAD + (size_t)st->slots * (1 + 4 + 4 + 4 * (size_t)st->history);
}

static unsigned char *put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
    return p + 4;
}
static uint32_t get32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

collage_status collage__fp8_scaling_save(const collage__fp8_scaling *st, void *buf, size_t cap) {
    if (!st || !buf) return COLLAGE_ERR_NULL;
    if (cap < collage__fp8_scaling_bytes(st)) return COLLAGE_ERR_SIZE;
    unsigned char *p = buf;
    memcpy(p, SCAL_MAGIC, 8), p += 8;
    p = put32(p, SCAL_VERSION), p = put32(p, (uint32_t)st->slots), p = put32(p, (uint32_t)st->history);
    p = put32(p, (uint32_t)st->margin), p = put32(p, (uint32_t)st->pos);
    p = put32(p, (uint32_t)st->steps), p = put32(p, (uint32_t)(st->steps >> 32)), p = put32(p, 0);
    for (int i = 0; i < st->slots; i++) {
        *p++ = st->fmt[i];
        p = put32(p, f32_bits(st->scale[i])), p = put32(p, f32_bits(st->cur[i]));
        for (int j = 0; j < st->history; j++) p = put32(p, f32_bits(st->hist[(size_t)i * st->history + j]));
    }
    return COLLAGE_OK;
}

static int amax_ok(float a) { return isfinite(a) && a >= 0.0f; }

/* The first thing wrong with buf as a state of st's shape, or NULL. */
static const char *scaling_problem(const collage__fp8_scaling *st, const unsigned char *p, size_t len) {
    if (len < SCAL_HEAD || memcmp(p, SCAL_MAGIC, 8)) return "not an fp8 scaling state (magic)";
    if (get32(p + 8) != SCAL_VERSION) return "unknown version of the fp8 scaling state";
    if (get32(p + 12) != (uint32_t)st->slots || get32(p + 16) != (uint32_t)st->history)
        return "its slots or history length differ from the model's";
    if (get32(p + 20) != (uint32_t)st->margin) return "its margin differs from the run's";
    if (get32(p + 24) >= (uint32_t)st->history || get32(p + 36) != 0) return "its position is out of range";
    if (len != collage__fp8_scaling_bytes(st)) return "its size is not that of its slots and history";
    const unsigned char *q = p + SCAL_HEAD;
    for (int i = 0; i < st->slots; i++, q += 9 + 4 * (size_t)st->history) {
        if (q[0] != st->fmt[i]) return "a slot's format differs from the model's";
        const float s = bits_f32(get32(q + 1));
        if (!(isfinite(s) && s > 0.0f)) return "a scale is not finite and positive";
        if (!amax_ok(bits_f32(get32(q + 5)))) return "an amax is not finite and >= 0";
        for (int j = 0; j < st->history; j++)
            if (!amax_ok(bits_f32(get32(q + 9 + 4 * (size_t)j)))) return "an amax is not finite and >= 0";
    }
    return NULL;
}

collage_status collage__fp8_scaling_load(collage__fp8_scaling *st, const void *buf, size_t len, char *err,
                                         size_t cap) {
    if (!st || !buf) return COLLAGE_ERR_NULL;
    const unsigned char *p = buf;
    const char *bad = scaling_problem(st, p, len);
    if (bad) return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "fp8 scaling state: %s", bad);
    st->pos = (int)get32(p + 24);
    st->steps = (uint64_t)get32(p + 28) | (uint64_t)get32(p + 32) << 32;
    const unsigned char *q = p + SCAL_HEAD;
    for (int i = 0; i < st->slots; i++, q += 9 + 4 * (size_t)st->history) {
        st->scale[i] = bits_f32(get32(q + 1)), st->cur[i] = bits_f32(get32(q + 5));
        for (int j = 0; j < st->history; j++)
            st->hist[(size_t)i * st->history + j] = bits_f32(get32(q + 9 + 4 * (size_t)j));
    }
    return COLLAGE_OK;
}
