/* test_mpfr.c — MPFR oracle tests for the low-precision core (docs/numerics.md §1-5, §9): conversions from
 * fp32 and double, decoding, the single operations + − × ÷ √ fma and the error-free transforms of
 * bf16, fp16, e4m3, e5m2 and e2m1, each against MPFR emulating the format exactly (precision p, subnormals
 * by mpfr_subnormalize, overflow per numerics.md §1-3). fp8 and e2m1 are tested exhaustively (fma: every
 * triple), bf16 and fp16 on large random samples mixed with edge classes, plus the numerics.md §9 vectors;
 * e2m1's RN from every bf16 pattern and its SR's probabilities exactly (§15); the 8-bit dynamic code's
 * values and thresholds (§11). */
#include "collage.h"
#include "harness.h"

#include <math.h>
#include <mpfr.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------ sizes and tolerances */
/* Correct rounding leaves no slack: every result must equal the oracle's bits (0 ulp). NaN results
 * are only checked to be NaN (payloads are not specified); NaN conversions keep the sign. */
#define N_CONV_F32      (1u << 22) /* random fp32 inputs per format (half uniform bits, half in range) */
#define N_CONV_F64      (1u << 21) /* random double inputs per format */
#define N_NAN_INPUTS    4096u      /* random NaN payloads per format and input type */
#define N_OPS           1000000u   /* random operand sets per 16-bit format: one of each op */
#define N_EFT           1000000u   /* random pairs per 16-bit format for TwoSum, TwoProd, Fast2Sum */
#define FMA_C_QUICK     32u        /* fp8 fma under COLLAGE_TEST_QUICK: every (a, b), this many random c;
                                      otherwise every (a, b, c) */
#define EDGE_PERCENT    10u        /* share of operands drawn from the edge classes */
#define RELATED_PERCENT 45u        /* share of second operands drawn close in exponent to the first */
#define MIN_FAST2SUM_INEXACT 1u    /* broken Fast2Sum precondition must show at least this many errors */
#define EXACT_PREC      640        /* bits: a sum, product or fma of format values is exact (bf16 a·b + c
                                      spans 2^-266 to 2^257, 523 bits); each ternary value checks it */

static unsigned long long g_seed = 0x5eedc011a9e2024ull;
static unsigned g_div = 1; /* COLLAGE_TEST_QUICK divides the random sample counts by 8 */

/* Aborts on an inconsistency of the oracle itself: that is a bug in this file, not in the library. */
#define ORACLE_ASSERT(c)                                                                  \
    do {                                                                                  \
        if (!(c)) {                                                                       \
            fprintf(stderr, "oracle assertion failed: %s (%s:%d)\n", #c, __FILE__, __LINE__); \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

/* ------------------------------------------------------------------ the formats, from first principles */
/* The oracle's own description of each format: nothing here is read from the library, so the
 * descriptors it publishes are checked against it (test_format_descriptors). */
typedef struct {
    collage_format f;
    const char *name;
    int bits, exp_bits, man_bits, bias, has_inf, has_nan;
    /* derived by fmt_init */
    int p;                   /* precision in bits */
    mpfr_exp_t emin;         /* MPFR exponent (significand in [1/2, 1)) of the smallest subnormal */
    uint16_t mask, sign_bit, man_mask, exp_field_max, min_normal, one, max_bits, inf_bits, qnan_bits,
        quiet_bit;
    double max_value;
    unsigned top;            /* the last carrier value the exhaustive loops take: the mask, or e2m1's NaN marker */
} fmt_spec;

static fmt_spec SPECS[COLLAGE_FMT_COUNT] = {
    {.f = COLLAGE_FMT_BF16, .name = "bf16", .bits = 16, .exp_bits = 8, .man_bits = 7, .bias = 127, .has_inf = 1, .has_nan = 1},
    {.f = COLLAGE_FMT_FP16, .name = "fp16", .bits = 16, .exp_bits = 5, .man_bits = 10, .bias = 15, .has_inf = 1, .has_nan = 1},
    {.f = COLLAGE_FMT_E4M3, .name = "e4m3", .bits = 8, .exp_bits = 4, .man_bits = 3, .bias = 7, .has_inf = 0, .has_nan = 1},
    {.f = COLLAGE_FMT_E5M2, .name = "e5m2", .bits = 8, .exp_bits = 5, .man_bits = 2, .bias = 15, .has_inf = 1, .has_nan = 1},
    {.f = COLLAGE_FMT_E2M1, .name = "e2m1", .bits = 4, .exp_bits = 2, .man_bits = 1, .bias = 1, .has_inf = 0, .has_nan = 0},
};

static double enc_value(const fmt_spec *S, uint16_t x);

static void fmt_init(fmt_spec *S) {
    S->p = S->man_bits + 1;
    /* smallest subnormal 2^(1 - bias - man_bits) = 0.5 · 2^(2 - bias - man_bits) */
    S->emin = 2 - S->bias - S->man_bits;
    S->mask = (uint16_t)((1u << S->bits) - 1u);
    S->sign_bit = (uint16_t)(1u << (S->bits - 1));
    S->man_mask = (uint16_t)((1u << S->man_bits) - 1u);
    S->exp_field_max = (uint16_t)((1u << S->exp_bits) - 1u);
    S->min_normal = (uint16_t)(1u << S->man_bits);
    S->one = (uint16_t)((unsigned)S->bias << S->man_bits);
    if (S->has_inf) {
        S->inf_bits = (uint16_t)((unsigned)S->exp_field_max << S->man_bits);
        S->max_bits = (uint16_t)(S->inf_bits - 1u);
        S->quiet_bit = (uint16_t)(1u << (S->man_bits - 1));
        S->qnan_bits = (uint16_t)(S->inf_bits | S->quiet_bit);
    } else if (S->has_nan) { /* OCP FN: the all-ones pattern is the NaN, everything below it is finite */
        S->inf_bits = 0;
        S->qnan_bits = (uint16_t)(S->mask >> 1);
        S->max_bits = (uint16_t)(S->qnan_bits - 1u);
        S->quiet_bit = 0;
    } else { /* e2m1: every code finite; a NaN converts to the marker, the first value above the codes */
        S->inf_bits = 0;
        S->qnan_bits = (uint16_t)(S->mask + 1u);
        S->max_bits = (uint16_t)(S->mask >> 1);
        S->quiet_bit = 0;
    }
    S->top = S->has_nan ? S->mask : S->qnan_bits;
    S->max_value = enc_value(S, S->max_bits);
}

static int enc_isnan(const fmt_spec *S, uint16_t x) {
    if (!S->has_nan) return x > S->mask;
    uint16_t mag = (uint16_t)(x & (S->mask >> 1));
    if (!S->has_inf) return mag == S->qnan_bits;
    return mag > S->inf_bits;
}
static int enc_isinf(const fmt_spec *S, uint16_t x) {
    return S->has_inf && (x & (S->mask >> 1)) == S->inf_bits;
}
static int enc_neg(const fmt_spec *S, uint16_t x) { return (x & S->sign_bit) != 0; }

/* Contract: the exact value of encoding x, from its fields alone (every value of these formats is a
 * double): NaN for NaN encodings, ±Inf for infinities, ±0 with its sign. */
static double enc_value(const fmt_spec *S, uint16_t x) {
    unsigned e = (x >> S->man_bits) & S->exp_field_max;
    unsigned m = x & S->man_mask;
    double v;
    if (enc_isnan(S, x)) return enc_neg(S, x) ? -nan("") : nan("");
    if (enc_isinf(S, x)) v = HUGE_VAL;
    else if (e == 0) v = ldexp((double)m, 1 - S->bias - S->man_bits);
    else v = ldexp((double)(m | (1u << S->man_bits)), (int)e - S->bias - S->man_bits);
    return enc_neg(S, x) ? -v : v;
}

/* Contract: the bits of v, which must be ±0 or a finite nonzero value of the format's grid with
 * |v| ≤ max (the oracle asserts it). Independent of the library: frexp splits the fields. */
static uint16_t enc_from_exact(const fmt_spec *S, double v) {
    uint16_t sign = signbit(v) ? S->sign_bit : 0;
    double a = fabs(v), q;
    if (a == 0.0) return sign;
    int e, emin_n = 1 - S->bias;
    (void)frexp(a, &e);
    int E = e - 1; /* a in [2^E, 2^(E+1)) */
    unsigned field;
    if (E >= emin_n) { field = (unsigned)(E + S->bias); q = ldexp(a, S->man_bits - E) - ldexp(1.0, S->man_bits); }
    else { field = 0; q = ldexp(a, S->man_bits - emin_n); }
    ORACLE_ASSERT(q == floor(q) && q >= 0.0 && q < ldexp(1.0, S->man_bits));
    ORACLE_ASSERT(field <= S->exp_field_max && a <= S->max_value);
    return (uint16_t)(sign | (field << S->man_bits) | (unsigned)q);
}

/* ------------------------------------------------------------------ the MPFR oracle */
static mpfr_t g_r[COLLAGE_FMT_COUNT]; /* one p-bit scratch per format */
static mpfr_t g_max[COLLAGE_FMT_COUNT];
static mpfr_t g_a, g_b, g_c, g_x, g_y, g_z; /* EXACT_PREC scratch */
static mpfr_exp_t g_emin_wide;

/* Format values into MPFR, exactly (NaN, ±Inf, ±0 included). */
static void enc_to_mpfr(const fmt_spec *S, mpfr_ptr out, uint16_t x) {
    double v = enc_value(S, x);
    if (isnan(v)) mpfr_set_nan(out);
    else ORACLE_ASSERT(mpfr_set_d(out, v, MPFR_RNDN) == 0);
}

typedef struct {
    uint16_t rn;  /* RN: nearest, ties to even; overflow → ±Inf (e4m3: NaN, e2m1: ±max) */
    uint16_t sat; /* the same with overflow (and ±Inf) → ±max */
    int inexact;  /* the rounded value differs from the exact one (overflow included) */
    int overflow; /* the value rounded with an unbounded exponent exceeds max (e2m1 then saturates) */
} rounded;

/* What overflow and ±Inf give under RN: Inf, the NaN of a format without Inf, or ±max without either. */
static uint16_t rn_overflow(const fmt_spec *S) {
    return S->has_inf ? S->inf_bits : S->has_nan ? S->qnan_bits : S->max_bits;
}

/* Contract: the encoding of r, a p-bit value already rounded with the format's subnormal grid and an
 * unbounded exponent above, t its ternary value. Overflow (IEEE rule) iff |r| > max. */
static rounded finish(const fmt_spec *S, mpfr_srcptr r, int t) {
    rounded o = {0, 0, 0, 0};
    uint16_t sign = mpfr_signbit(r) ? S->sign_bit : 0;
    if (mpfr_nan_p(r)) {
        o.rn = o.sat = S->has_nan ? (uint16_t)(sign | S->qnan_bits) : S->qnan_bits; /* e2m1's marker: no sign */
    } else if (mpfr_inf_p(r)) {
        o.rn = (uint16_t)(sign | rn_overflow(S));
        o.sat = (uint16_t)(sign | S->max_bits);
    } else if (mpfr_cmpabs(r, g_max[S->f]) > 0) {
        o.rn = (uint16_t)(sign | rn_overflow(S));
        o.sat = (uint16_t)(sign | S->max_bits);
        o.inexact = o.overflow = 1;
    } else {
        o.rn = o.sat = enc_from_exact(S, mpfr_get_d(r, MPFR_RNDN)); /* p bits: exact in double */
        o.inexact = t != 0;
    }
    return o;
}

/* Contract: RN of the exact value x (any precision, any exponent) to format S as numerics.md §1-3 says:
 * nearest with ties to even on the p-bit grid, subnormals on their fixed grid (no flush), overflow iff
 * the value rounded with an unbounded exponent exceeds max. One rounding: mpfr_set rounds to p bits,
 * then check_range/subnormalize re-round with the ternary value, which MPFR defines to avoid double
 * rounding. NaN → canonical NaN with x's sign. oracle_round_mode rounds with rnd instead (RNDZ: the
 * neighbour toward zero). */
static rounded oracle_round_mode(const fmt_spec *S, mpfr_srcptr x, mpfr_rnd_t rnd) {
    mpfr_ptr r = g_r[S->f];
    int t = mpfr_set(r, x, rnd);
    if (mpfr_regular_p(r)) {
        mpfr_set_emin(S->emin);
        t = mpfr_check_range(r, t, rnd);
        t = mpfr_subnormalize(r, t, rnd);
        mpfr_set_emin(g_emin_wide);
    }
    return finish(S, r, t);
}
static rounded oracle_round(const fmt_spec *S, mpfr_srcptr x) { return oracle_round_mode(S, x, MPFR_RNDN); }

/* Contract: RN(a / b) and RN(√a) for format values a, b, computed by MPFR directly at precision p
 * under the format's emin with subnormalize (a correctly rounded oracle; the quotient and the root
 * have no finite exact form). The operands are format values, hence inside that exponent range. */
static rounded oracle_div(const fmt_spec *S, mpfr_srcptr a, mpfr_srcptr b) {
    mpfr_ptr r = g_r[S->f];
    mpfr_set_emin(S->emin);
    int t = mpfr_div(r, a, b, MPFR_RNDN);
    t = mpfr_subnormalize(r, t, MPFR_RNDN);
    mpfr_set_emin(g_emin_wide);
    return finish(S, r, t);
}
static rounded oracle_sqrt(const fmt_spec *S, mpfr_srcptr a) {
    mpfr_ptr r = g_r[S->f];
    mpfr_set_emin(S->emin);
    int t = mpfr_sqrt(r, a, MPFR_RNDN);
    t = mpfr_subnormalize(r, t, MPFR_RNDN);
    mpfr_set_emin(g_emin_wide);
    return finish(S, r, t);
}

/* Exact a op b at EXACT_PREC into out; the ternary value proves exactness. */
static void exact_add(mpfr_ptr out, mpfr_srcptr a, mpfr_srcptr b) {
    ORACLE_ASSERT(mpfr_add(out, a, b, MPFR_RNDN) == 0);
}
static void exact_sub(mpfr_ptr out, mpfr_srcptr a, mpfr_srcptr b) {
    ORACLE_ASSERT(mpfr_sub(out, a, b, MPFR_RNDN) == 0);
}
static void exact_mul(mpfr_ptr out, mpfr_srcptr a, mpfr_srcptr b) {
    ORACLE_ASSERT(mpfr_mul(out, a, b, MPFR_RNDN) == 0);
}

/* ------------------------------------------------------------------ random inputs */
static void seed_test(unsigned long long id) { h_seed(g_seed ^ (id * 0x9e3779b97f4a7c15ull)); }
static unsigned pct(void) { return h_rand32() % 100u; }

/* One value of an edge class: ±0, subnormals (min, max, any), min normal and its neighbour, max and
 * its neighbour, ±Inf, NaN, powers of two, 1 and its neighbours, the lowest and the highest binade. */
static uint16_t rnd_edge(const fmt_spec *S) {
    uint16_t s = (h_rand32() & 1u) ? S->sign_bit : 0;
    unsigned r = h_rand32(), top = S->has_inf ? S->exp_field_max - 1u : S->exp_field_max;
    unsigned field;
    switch (h_rand32() % 15u) {
    case 0: return s;
    case 1: return (uint16_t)(s | 1u);
    case 2: return (uint16_t)(s | S->man_mask);
    case 3: return (uint16_t)(s | (r & S->man_mask));
    case 4: return (uint16_t)(s | S->min_normal);
    case 5: return (uint16_t)(s | (S->min_normal + 1u));
    case 6: return (uint16_t)(s | S->max_bits);
    case 7: return (uint16_t)(s | (S->max_bits - 1u));
    case 8: return (uint16_t)(s | (S->has_inf ? S->inf_bits : S->max_bits));
    case 9: return (uint16_t)(s | (S->has_inf ? (S->inf_bits | 1u | (r & S->man_mask)) : S->qnan_bits));
    case 10: field = 1u + r % top; return (uint16_t)(s | (field << S->man_bits));
    case 11: return (uint16_t)(s | (S->one + (r % 3u) - 1u));
    case 12: return (uint16_t)(s | ((1u + r % 2u) << S->man_bits) | ((r >> 8) & S->man_mask));
    case 13: return (uint16_t)(s | (top << S->man_bits) | ((r >> 8) & S->man_mask));
    default: return (uint16_t)(s | ((2u << S->man_bits) - 1u)); /* largest value of the lowest binade */
    }
}

static unsigned exp_field(const fmt_spec *S, uint16_t x) { return (x >> S->man_bits) & S->exp_field_max; }

/* A random value whose exponent field is within ±spread of `field` (clamped), any sign, a random
 * significand that is often short (trailing zeros make exact results, ties and cancellation). */
static uint16_t rnd_near_field(const fmt_spec *S, int field, int spread) {
    int top = S->has_inf ? (int)S->exp_field_max - 1 : (int)S->exp_field_max;
    int e = field + (int)(h_rand32() % (unsigned)(2 * spread + 1)) - spread;
    e = e < 0 ? 0 : e > top ? top : e;
    unsigned m = h_rand32() & S->man_mask;
    if (h_rand32() & 1u) m &= ~((1u << (h_rand32() % (unsigned)(S->man_bits + 1))) - 1u) & S->man_mask;
    uint16_t s = (h_rand32() & 1u) ? S->sign_bit : 0;
    return (uint16_t)(s | ((unsigned)e << S->man_bits) | m);
}

static uint16_t rnd_operand(const fmt_spec *S) {
    return pct() < EDGE_PERCENT ? rnd_edge(S) : (uint16_t)(h_rand32() & S->mask);
}
/* b for (a, b): edge, uniform, or close to a in exponent (cancellation, ties, near-1 quotients). */
static uint16_t rnd_second(const fmt_spec *S, uint16_t a) {
    unsigned u = pct();
    if (u < EDGE_PERCENT) return rnd_edge(S);
    if (u < EDGE_PERCENT + RELATED_PERCENT) return rnd_near_field(S, (int)exp_field(S, a), S->p + 2);
    return (uint16_t)(h_rand32() & S->mask);
}
/* c for fma(a, b, c): edge, uniform, or close in exponent to a·b (cancellation in a·b + c). */
static uint16_t rnd_addend(const fmt_spec *S, uint16_t a, uint16_t b) {
    unsigned u = pct();
    if (u < EDGE_PERCENT) return rnd_edge(S);
    if (u < EDGE_PERCENT + RELATED_PERCENT) {
        int ea = (int)exp_field(S, a), eb = (int)exp_field(S, b);
        return rnd_near_field(S, (ea ? ea : 1) + (eb ? eb : 1) - S->bias, 2 * S->p + 2);
    }
    return (uint16_t)(h_rand32() & S->mask);
}

static uint32_t f32u(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static float u32f(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
static uint64_t f64u(double x) { uint64_t u; memcpy(&u, &x, 8); return u; }
static double u64f(uint64_t u) { double x; memcpy(&x, &u, 8); return x; }

/* The exact value one step above the largest finite one (where the next binade or the NaN code
 * would be): with max it brackets the overflow threshold. */
static double above_max(const fmt_spec *S) {
    return S->max_value + ldexp(1.0, (int)exp_field(S, S->max_bits) - S->bias - S->man_bits);
}
/* The value of the neighbour above the positive finite encoding x (above_max for max). */
static double upper_neighbour(const fmt_spec *S, uint16_t x) {
    return x == S->max_bits ? above_max(S) : enc_value(S, (uint16_t)(x + 1u));
}

/* ------------------------------------------------------------------ 0. the oracle and the descriptors */
typedef struct { int f; double x; uint16_t rn; } known;

/* Hand-derived values (not computed by this file or the library) pin the oracle's conventions. */
static void test_oracle_selfcheck(void) {
    static const known K[] = {
        {COLLAGE_FMT_BF16, 0x1p-133, 0x0001},  /* smallest subnormal */
        {COLLAGE_FMT_BF16, 0x1p-134, 0x0000},  /* half of it: tie to even 0 */
        {COLLAGE_FMT_BF16, 0x1.8p-134, 0x0001},
        {COLLAGE_FMT_BF16, 0x1.8p-133, 0x0002}, /* 1.5 subnormal ulps: tie to even 2 */
        {COLLAGE_FMT_BF16, 0x1.fcp-127, 0x007f}, /* largest subnormal */
        {COLLAGE_FMT_BF16, 0x1.fep-127, 0x0080}, /* tie above it goes to the smallest normal */
        {COLLAGE_FMT_BF16, 0x1.fep127, 0x7f7f},  /* max = 3.3895e38 */
        {COLLAGE_FMT_BF16, 0x1.ffp127, 0x7f80},  /* tie between max and 2^128: even is 2^128, Inf */
        {COLLAGE_FMT_BF16, 0x1.feffffp127, 0x7f7f},
        {COLLAGE_FMT_BF16, -0x1.0p-200, 0x8000},
        {COLLAGE_FMT_BF16, 200.0, 0x4348},
        {COLLAGE_FMT_BF16, 0x1.99999ap-4, 0x3dcd}, /* fp32(0.1) */
        {COLLAGE_FMT_FP16, 0x1p-24, 0x0001},
        {COLLAGE_FMT_FP16, 0x1p-25, 0x0000},
        {COLLAGE_FMT_FP16, 0x1.000002p-25, 0x0001},
        {COLLAGE_FMT_FP16, 65504.0, 0x7bff},
        {COLLAGE_FMT_FP16, 65519.0, 0x7bff},
        {COLLAGE_FMT_FP16, 65520.0, 0x7c00},
        {COLLAGE_FMT_FP16, -65520.0, 0xfc00},
        {COLLAGE_FMT_FP16, 0x1p-14, 0x0400},
        {COLLAGE_FMT_E4M3, 448.0, 0x7e},
        {COLLAGE_FMT_E4M3, 464.0, 0x7e},   /* tie to even mantissa 110 */
        {COLLAGE_FMT_E4M3, 464.5, 0x7f},   /* above: overflow, NaN */
        {COLLAGE_FMT_E4M3, -500.0, 0xff},
        {COLLAGE_FMT_E4M3, 0x1p-9, 0x01},
        {COLLAGE_FMT_E4M3, 0x1p-10, 0x00},
        {COLLAGE_FMT_E4M3, 0x1.8p-9, 0x02},
        {COLLAGE_FMT_E4M3, 0x1p-6, 0x08},
        {COLLAGE_FMT_E4M3, 1.0, 0x38},
        {COLLAGE_FMT_E5M2, 57344.0, 0x7b},
        {COLLAGE_FMT_E5M2, 61439.0, 0x7b},
        {COLLAGE_FMT_E5M2, 61440.0, 0x7c}, /* tie: even is 2^16, Inf */
        {COLLAGE_FMT_E5M2, 0x1p-16, 0x01},
        {COLLAGE_FMT_E5M2, 0x1p-17, 0x00},
        {COLLAGE_FMT_E5M2, 1.0, 0x3c},
        {COLLAGE_FMT_E2M1, 0.25, 0x0},  /* the ties of ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}: to the even code */
        {COLLAGE_FMT_E2M1, 0.75, 0x2},
        {COLLAGE_FMT_E2M1, 1.25, 0x2},
        {COLLAGE_FMT_E2M1, 1.75, 0x4},
        {COLLAGE_FMT_E2M1, 2.5, 0x4},
        {COLLAGE_FMT_E2M1, 3.5, 0x6},
        {COLLAGE_FMT_E2M1, 5.0, 0x6},
        {COLLAGE_FMT_E2M1, 0x1.000002p-2, 0x1}, /* just above a tie */
        {COLLAGE_FMT_E2M1, 6.0, 0x7},
        {COLLAGE_FMT_E2M1, 6.9, 0x7},
        {COLLAGE_FMT_E2M1, 7.0, 0x7},   /* the tie with 8 overflows: saturates */
        {COLLAGE_FMT_E2M1, -1e30, 0xf},
        {COLLAGE_FMT_E2M1, -0.1, 0x8},
        {COLLAGE_FMT_E2M1, 0x1p-149, 0x0},
    };
    for (size_t i = 0; i < sizeof K / sizeof K[0]; i++) {
        const fmt_spec *S = &SPECS[K[i].f];
        mpfr_set_d(g_x, K[i].x, MPFR_RNDN);
        rounded o = oracle_round(S, g_x);
        CHECK(o.rn == K[i].rn, "%s oracle(%a) = 0x%04x want 0x%04x", S->name, K[i].x, o.rn, K[i].rn);
    }
    CHECK(SPECS[COLLAGE_FMT_BF16].max_value == 0x1.fep127, "bf16 max %a", SPECS[0].max_value);
    CHECK(SPECS[COLLAGE_FMT_E4M3].max_value == 448.0, "e4m3 max %a", SPECS[2].max_value);
    CHECK(SPECS[COLLAGE_FMT_E5M2].max_value == 57344.0, "e5m2 max %a", SPECS[3].max_value);
    CHECK(SPECS[COLLAGE_FMT_FP16].max_value == 65504.0, "fp16 max %a", SPECS[1].max_value);
    CHECK(SPECS[COLLAGE_FMT_E2M1].max_value == 6.0 && SPECS[COLLAGE_FMT_E2M1].qnan_bits == COLLAGE_E2M1_NAN,
          "e2m1 max %a, NaN marker 0x%x", SPECS[COLLAGE_FMT_E2M1].max_value, SPECS[COLLAGE_FMT_E2M1].qnan_bits);
    /* Every finite encoding rounds to itself, exactly; every midpoint to its even neighbour. */
    for (int f = 0; f < COLLAGE_FMT_COUNT; f++) {
        const fmt_spec *S = &SPECS[f];
        for (unsigned x = 0; x <= S->mask; x++) {
            if (enc_isnan(S, (uint16_t)x) || enc_isinf(S, (uint16_t)x)) continue;
            mpfr_set_d(g_x, enc_value(S, (uint16_t)x), MPFR_RNDN);
            rounded o = oracle_round(S, g_x);
            CHECK(o.rn == x && !o.inexact, "%s oracle round trip 0x%04x -> 0x%04x", S->name, x, o.rn);
            if (x & S->sign_bit) continue;
            double mid = 0.5 * (enc_value(S, (uint16_t)x) + upper_neighbour(S, (uint16_t)x));
            mpfr_set_d(g_x, mid, MPFR_RNDN);
            o = oracle_round(S, g_x);
            uint16_t want = (x & 1u) ? (uint16_t)(x + 1u) : (uint16_t)x;
            if (want > S->max_bits) want = rn_overflow(S);
            CHECK(o.rn == want && o.inexact, "%s oracle midpoint above 0x%04x -> 0x%04x", S->name, x, o.rn);
        }
    }
}

static void test_format_descriptors(void) {
    for (int f = 0; f < COLLAGE_FMT_COUNT; f++) {
        const fmt_spec *S = &SPECS[f];
        const collage_format_info *I = collage_format_get(S->f);
        CHECK(I != NULL, "%s: no descriptor", S->name);
        if (!I) continue;
        CHECK(strcmp(I->name, S->name) == 0 && I->bits == S->bits && I->exp_bits == S->exp_bits &&
                  I->man_bits == S->man_bits && I->bias == S->bias && I->has_inf == S->has_inf &&
                  I->has_nan == S->has_nan,
              "%s: descriptor fields differ", S->name);
        CHECK(I->max_bits == S->max_bits && I->nan_bits == S->qnan_bits, "%s: max 0x%04x nan 0x%04x", S->name,
              I->max_bits, I->nan_bits);
        CHECK((double)I->max_value == S->max_value, "%s: max_value %a", S->name, (double)I->max_value);
    }
    CHECK(collage_format_get(COLLAGE_FMT_COUNT) == NULL, "unknown format has a descriptor");
}

/* ------------------------------------------------------------------ 1. conversions */
/* Checks RN, saturating RN (and for bf16 the bf16 entry point) of one fp32 value. */
static void check_f32(const fmt_spec *S, float x) {
    uint32_t u = f32u(x);
    uint16_t rn = collage_lp_from_f32(S->f, x), sat = collage_lp_from_f32_sat(S->f, x);
    if (S->f == COLLAGE_FMT_BF16)
        CHECK(collage_bf16_from_f32(x).bits == rn, "bf16_from_f32(0x%08x) = 0x%04x, lp gives 0x%04x", u,
              collage_bf16_from_f32(x).bits, rn);
    if (isnan(x) && !S->has_nan) {
        uint16_t sr = collage_lp_from_f32_sr(S->f, x, h_rand32());
        CHECK(rn == S->qnan_bits && sat == S->qnan_bits && sr == S->qnan_bits,
              "%s from_f32(NaN 0x%08x) = 0x%04x, _sat 0x%04x, _sr 0x%04x: want the marker 0x%04x", S->name, u, rn, sat,
              sr, S->qnan_bits);
        return;
    }
    if (isnan(x)) {
        int neg = (int)(u >> 31);
        CHECK(collage_lp_isnan(S->f, rn) && enc_neg(S, rn) == neg && (rn & S->quiet_bit) == S->quiet_bit,
              "%s from_f32(NaN 0x%08x) = 0x%04x: not a quiet NaN of the same sign", S->name, u, rn);
        CHECK(collage_lp_isnan(S->f, sat) && enc_neg(S, sat) == neg && (sat & S->quiet_bit) == S->quiet_bit,
              "%s from_f32_sat(NaN 0x%08x) = 0x%04x: not a quiet NaN of the same sign", S->name, u, sat);
        return;
    }
    mpfr_set_flt(g_x, x, MPFR_RNDN);
    rounded o = oracle_round(S, g_x);
    CHECK(rn == o.rn, "%s from_f32(0x%08x = %a) = 0x%04x want 0x%04x", S->name, u, (double)x, rn, o.rn);
    CHECK(sat == o.sat, "%s from_f32_sat(0x%08x = %a) = 0x%04x want 0x%04x", S->name, u, (double)x, sat, o.sat);
}

static void check_f64(const fmt_spec *S, double x) {
    uint64_t u = f64u(x);
    uint16_t rn = collage_lp_from_f64(S->f, x);
    if (S->f == COLLAGE_FMT_BF16)
        CHECK(collage_bf16_from_f64(x).bits == rn, "bf16_from_f64(0x%016llx) differs from lp",
              (unsigned long long)u);
    if (isnan(x) && !S->has_nan) {
        CHECK(rn == S->qnan_bits, "%s from_f64(NaN 0x%016llx) = 0x%04x: want the marker", S->name,
              (unsigned long long)u, rn);
        return;
    }
    if (isnan(x)) {
        CHECK(collage_lp_isnan(S->f, rn) && enc_neg(S, rn) == (int)(u >> 63) && (rn & S->quiet_bit) == S->quiet_bit,
              "%s from_f64(NaN 0x%016llx) = 0x%04x: not a quiet NaN of the same sign", S->name,
              (unsigned long long)u, rn);
        return;
    }
    ORACLE_ASSERT(mpfr_set_d(g_x, x, MPFR_RNDN) == 0);
    rounded o = oracle_round(S, g_x);
    CHECK(rn == o.rn, "%s from_f64(0x%016llx = %a) = 0x%04x want 0x%04x", S->name, (unsigned long long)u, x, rn,
          o.rn);
}

/* fp32 biased exponent range that covers the format from below its smallest subnormal to above its
 * overflow threshold, clamped to fp32's finite exponents. */
static void f32_exp_window(const fmt_spec *S, int *lo, int *hi) {
    int l = 127 + (1 - S->bias - S->man_bits) - 3, h = 127 + S->bias + 3;
    *lo = l < 0 ? 0 : l;
    *hi = h > 254 ? 254 : h;
}

/* Ties (with an even and with an odd lower neighbour, every one of them), the neighbours themselves,
 * one fp32 ulp either side of each, for both signs: covers the subnormal/normal boundary, the
 * largest finite values and the overflow threshold. */
static void conv_f32_ties(const fmt_spec *S) {
    for (unsigned x = 0; x <= S->max_bits; x++) {
        double lo = enc_value(S, (uint16_t)x), mid = 0.5 * (lo + upper_neighbour(S, (uint16_t)x));
        float pts[2] = {(float)lo, (float)mid};
        ORACLE_ASSERT((double)pts[0] == lo && (double)pts[1] == mid);
        for (int k = 0; k < 2; k++)
            for (int s = 0; s < 2; s++) {
                float v = s ? -pts[k] : pts[k];
                check_f32(S, v);
                check_f32(S, nextafterf(v, INFINITY));
                check_f32(S, nextafterf(v, -INFINITY));
            }
    }
}

static void conv_f32_specials(const fmt_spec *S) {
    static const uint32_t SPECIAL[] = {
        0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x007fffffu, 0x807fffffu, 0x00800000u,
        0x00400000u, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7f800001u, 0xff800001u,
        0x7fc00000u, 0xffc00000u, 0x7fffffffu, 0xffffffffu, 0x7fa00000u, 0x3f800000u, 0x477fe000u,
        0x477ff000u, 0x477fefffu, 0x43e80000u, 0x43e80001u, 0x43e7ffffu, 0x47700000u, 0x47800000u,
    };
    for (size_t i = 0; i < sizeof SPECIAL / sizeof SPECIAL[0]; i++) check_f32(S, u32f(SPECIAL[i]));
    for (unsigned i = 0; i < N_NAN_INPUTS; i++) { /* NaNs: both signs, quiet and signalling payloads */
        uint32_t pay = h_rand32() & 0x7fffffu;
        check_f32(S, u32f((h_rand32() & 0x80000000u) | 0x7f800000u | (pay ? pay : 1u)));
    }
    for (unsigned i = 0; i < N_NAN_INPUTS; i++) /* fp32 subnormals */
        check_f32(S, u32f((h_rand32() & 0x807fffffu)));
}

static void test_conv_f32(void) {
    seed_test(1);
    for (int f = 0; f < COLLAGE_FMT_COUNT; f++) {
        const fmt_spec *S = &SPECS[f];
        int elo, ehi;
        f32_exp_window(S, &elo, &ehi);
        conv_f32_specials(S);
        conv_f32_ties(S);
        for (unsigned i = 0; i < N_CONV_F32 / g_div; i++) {
            uint32_t u = h_rand32();
            if (i & 1u) { /* in the format's range, often with a short significand */
                uint32_t e = (uint32_t)elo + h_rand32() % (uint32_t)(ehi - elo + 1);
                uint32_t m = u & 0x7fffffu;
                if (h_rand32() & 1u) m &= ~((1u << (h_rand32() % 24u)) - 1u);
                u = (u & 0x80000000u) | (e << 23) | m;
            }
            check_f32(S, u32f(u));
        }
    }
}

/* Doubles: ties and the values a double rounding through fp32 would get wrong (a tie ± one double
 * ulp, ± far below an fp32 ulp), beyond fp32's range and below its subnormals, random values. */
static void test_conv_f64(void) {
    seed_test(2);
    static const double SPECIAL[] = {0.0,    1e-300,  0x1p-1074, 0x1p-150,
                                     0x1.8p-150, 1e300, 0x1p128,  0x1.fffffffffffffp1023};
    for (int f = 0; f < COLLAGE_FMT_COUNT; f++) {
        const fmt_spec *S = &SPECS[f];
        for (size_t i = 0; i < sizeof SPECIAL / sizeof SPECIAL[0]; i++) {
            check_f64(S, SPECIAL[i]);
            check_f64(S, -SPECIAL[i]);
        }
        check_f64(S, HUGE_VAL);
        check_f64(S, -HUGE_VAL);
        for (unsigned i = 0; i < N_NAN_INPUTS; i++) {
            uint64_t pay = h_rand64() & 0xfffffffffffffull;
            check_f64(S, u64f((h_rand64() & 0x8000000000000000ull) | 0x7ff0000000000000ull | (pay ? pay : 1u)));
        }
        for (unsigned x = 0; x <= S->max_bits; x++) {
            double lo = enc_value(S, (uint16_t)x), mid = 0.5 * (lo + upper_neighbour(S, (uint16_t)x));
            double pts[7] = {mid, nextafter(mid, HUGE_VAL), nextafter(mid, -HUGE_VAL), mid * (1.0 + 0x1p-40),
                             mid * (1.0 - 0x1p-40), lo, nextafter(lo, HUGE_VAL)};
            for (int k = 0; k < 7; k++) {
                check_f64(S, pts[k]);
                check_f64(S, -pts[k]);
            }
        }
        int elo = 1023 + (1 - S->bias - S->man_bits) - 3, ehi = 1023 + S->bias + 3;
        for (unsigned i = 0; i < N_CONV_F64 / g_div; i++) {
            uint64_t u = h_rand64();
            if (i & 1u) {
                uint64_t e = (uint64_t)elo + h_rand32() % (uint32_t)(ehi - elo + 1);
                uint64_t m = u & 0xfffffffffffffull;
                if (h_rand32() & 1u) m &= ~((1ull << (h_rand32() % 53u)) - 1u);
                u = (u & 0x8000000000000000ull) | (e << 52) | m;
            }
            check_f64(S, u64f(u));
        }
    }
}

/* ------------------------------------------------------------------ 2. decode */
static void test_decode(void) {
    mpfr_t v;
    mpfr_init2(v, 64);
    for (int f = 0; f < COLLAGE_FMT_COUNT; f++) {
        const fmt_spec *S = &SPECS[f];
        for (unsigned x = 0; x <= S->mask; x++) {
            float got = collage_lp_to_f32(S->f, (uint16_t)x);
            int neg = enc_neg(S, (uint16_t)x);
            unsigned e = (x >> S->man_bits) & S->exp_field_max, m = x & S->man_mask;
            int is_nan = S->has_inf ? (e == S->exp_field_max && m)
                                    : S->has_nan && e == S->exp_field_max && m == S->man_mask;
            CHECK(collage_lp_isnan(S->f, (uint16_t)x) == is_nan, "%s isnan(0x%04x)", S->name, x);
            if (S->f == COLLAGE_FMT_BF16)
                CHECK(f32u(collage_bf16_to_f32((collage_bf16){(uint16_t)x})) == f32u(got),
                      "bf16_to_f32(0x%04x) differs from lp", x);
            if (is_nan) {
                CHECK(isnan(got) && (signbit(got) != 0) == neg, "%s decode(0x%04x) = 0x%08x: want NaN, sign %d",
                      S->name, x, f32u(got), neg);
                continue;
            }
            /* the value from the fields, in MPFR: (-1)^s · (e ? 2^man + m : m) · 2^(max(e,1) - bias - man) */
            if (S->has_inf && e == S->exp_field_max) mpfr_set_inf(v, 1);
            else mpfr_set_ui_2exp(v, e ? m + (1u << S->man_bits) : m,
                                  (mpfr_exp_t)((e ? (int)e : 1) - S->bias - S->man_bits), MPFR_RNDN);
            if (neg) mpfr_neg(v, v, MPFR_RNDN);
            mpfr_set_flt(g_x, got, MPFR_RNDN);
            CHECK(mpfr_equal_p(g_x, v) && (signbit(got) != 0) == neg, "%s decode(0x%04x) = %a want %a", S->name, x,
                  (double)got, mpfr_get_d(v, MPFR_RNDN));
            CHECK(mpfr_cmp_d(v, enc_value(S, (uint16_t)x)) == 0, "oracle: enc_value(0x%04x) disagrees", x);
        }
    }
    /* a format without NaN codes (e2m1) reads every carrier value above its codes as NaN */
    for (int f = 0; f < COLLAGE_FMT_COUNT; f++) {
        const fmt_spec *S = &SPECS[f];
        if (S->has_nan) continue;
        int bad = 0;
        for (unsigned x = S->mask + 1u; x <= 0xffffu; x++)
            bad += !isnan(collage_lp_to_f32(S->f, (uint16_t)x)) || !collage_lp_isnan(S->f, (uint16_t)x);
        CHECK(bad == 0, "%s: %d carrier values above the codes not read as NaN", S->name, bad);
    }
    mpfr_clear(v);
}

/* ------------------------------------------------------------------ 3. single operations */
/* The bf16 entry points must give the generic routine's bits. NaN payloads are unspecified
 * (numerics.md §1-3), so two NaNs that differ only in payload or sign are counted, not failed. */
static unsigned long g_wrapper_nan_payload_diffs;
static int wrapper_agrees(const fmt_spec *S, uint16_t wrapped, uint16_t generic) {
    if (wrapped == generic) return 1;
    if (enc_isnan(S, wrapped) && enc_isnan(S, generic)) { g_wrapper_nan_payload_diffs++; return 1; }
    return 0;
}
static void report_wrapper_nans(void) {
    printf("    bf16 entry points vs generic: %lu results both NaN with different payload or sign\n",
           g_wrapper_nan_payload_diffs);
    g_wrapper_nan_payload_diffs = 0;
}

/* got must be the oracle's bits, or any NaN when the oracle's result is NaN. */
static void check_result(const fmt_spec *S, const char *op, uint16_t got, rounded want, uint16_t a, uint16_t b,
                         uint16_t c) {
    if (enc_isnan(S, want.rn))
        CHECK(collage_lp_isnan(S->f, got), "%s %s(0x%04x, 0x%04x, 0x%04x) = 0x%04x want NaN", S->name, op, a, b, c,
              got);
    else
        CHECK(got == want.rn, "%s %s(0x%04x, 0x%04x, 0x%04x) = 0x%04x want 0x%04x", S->name, op, a, b, c, got,
              want.rn);
}

static void check_binops(const fmt_spec *S, uint16_t a, uint16_t b) {
    enc_to_mpfr(S, g_a, a);
    enc_to_mpfr(S, g_b, b);
    exact_add(g_x, g_a, g_b); /* NaN and Inf operands give NaN or Inf, with ternary 0 too */
    check_result(S, "add", collage_lp_add(S->f, a, b), oracle_round(S, g_x), a, b, 0);
    exact_sub(g_x, g_a, g_b);
    check_result(S, "sub", collage_lp_sub(S->f, a, b), oracle_round(S, g_x), a, b, 0);
    exact_mul(g_x, g_a, g_b);
    check_result(S, "mul", collage_lp_mul(S->f, a, b), oracle_round(S, g_x), a, b, 0);
    check_result(S, "div", collage_lp_div(S->f, a, b), oracle_div(S, g_a, g_b), a, b, 0);
    if (S->f == COLLAGE_FMT_BF16) {
        collage_bf16 A = {a}, B = {b};
        CHECK(wrapper_agrees(S, collage_bf16_add(A, B).bits, collage_lp_add(S->f, a, b)),
              "bf16_add(0x%04x, 0x%04x) != lp", a, b);
        CHECK(wrapper_agrees(S, collage_bf16_sub(A, B).bits, collage_lp_sub(S->f, a, b)),
              "bf16_sub(0x%04x, 0x%04x) != lp", a, b);
        CHECK(wrapper_agrees(S, collage_bf16_mul(A, B).bits, collage_lp_mul(S->f, a, b)),
              "bf16_mul(0x%04x, 0x%04x) != lp", a, b);
        CHECK(wrapper_agrees(S, collage_bf16_div(A, B).bits, collage_lp_div(S->f, a, b)),
              "bf16_div(0x%04x, 0x%04x) != lp", a, b);
    }
}

static void check_sqrt(const fmt_spec *S, uint16_t a) {
    enc_to_mpfr(S, g_a, a);
    check_result(S, "sqrt", collage_lp_sqrt(S->f, a), oracle_sqrt(S, g_a), a, 0, 0);
    if (S->f == COLLAGE_FMT_BF16)
        CHECK(wrapper_agrees(S, collage_bf16_sqrt((collage_bf16){a}).bits, collage_lp_sqrt(S->f, a)),
              "bf16_sqrt(0x%04x) != lp", a);
}

/* fma: RN(a·b + c), the exact value rounded once. g_a and g_b must already hold a and b. */
static void check_fma(const fmt_spec *S, uint16_t a, uint16_t b, uint16_t c) {
    enc_to_mpfr(S, g_c, c);
    int t = mpfr_fma(g_x, g_a, g_b, g_c, MPFR_RNDN);
    ORACLE_ASSERT(t == 0);
    check_result(S, "fma", collage_lp_fma(S->f, a, b, c), oracle_round(S, g_x), a, b, c);
    if (S->f == COLLAGE_FMT_BF16)
        CHECK(wrapper_agrees(S, collage_bf16_fma((collage_bf16){a}, (collage_bf16){b}, (collage_bf16){c}).bits,
                             collage_lp_fma(S->f, a, b, c)),
              "bf16_fma(0x%04x, 0x%04x, 0x%04x) != lp", a, b, c);
}

/* The formats small enough to take every operand (fp8, and e2m1 with its NaN marker as an operand too). */
static int exhaustive_format(int f) { return SPECS[f].bits <= 8; }

static void test_ops_small_exhaustive(void) {
    seed_test(3);
    for (int f = 0; f < COLLAGE_FMT_COUNT; f++) {
        if (!exhaustive_format(f)) continue;
        const fmt_spec *S = &SPECS[f];
        for (unsigned a = 0; a <= S->top; a++) {
            check_sqrt(S, (uint16_t)a);
            for (unsigned b = 0; b <= S->top; b++) check_binops(S, (uint16_t)a, (uint16_t)b);
        }
    }
}

static void test_fma_small(void) {
    seed_test(4);
    for (int f = 0; f < COLLAGE_FMT_COUNT; f++) {
        if (!exhaustive_format(f)) continue;
        const fmt_spec *S = &SPECS[f];
        for (unsigned a = 0; a <= S->top; a++)
            for (unsigned b = 0; b <= S->top; b++) {
                enc_to_mpfr(S, g_a, (uint16_t)a);
                enc_to_mpfr(S, g_b, (uint16_t)b);
                if (g_div > 1 && S->bits == 8)
                    for (unsigned k = 0; k < FMA_C_QUICK; k++) {
                        uint16_t c = (k & 1u) ? rnd_addend(S, (uint16_t)a, (uint16_t)b)
                                              : (uint16_t)(h_rand32() & S->mask);
                        check_fma(S, (uint16_t)a, (uint16_t)b, c);
                    }
                else
                    for (unsigned c = 0; c <= S->top; c++) check_fma(S, (uint16_t)a, (uint16_t)b, (uint16_t)c);
            }
    }
}

static void test_ops_random_16(void) {
    seed_test(5);
    for (int f = COLLAGE_FMT_BF16; f <= COLLAGE_FMT_FP16; f++) {
        const fmt_spec *S = &SPECS[f];
        for (unsigned i = 0; i < N_OPS / g_div; i++) {
            uint16_t a = rnd_operand(S), b = rnd_second(S, a);
            check_binops(S, a, b);
            check_sqrt(S, a);
            enc_to_mpfr(S, g_a, a);
            enc_to_mpfr(S, g_b, b);
            check_fma(S, a, b, rnd_addend(S, a, b));
        }
    }
    report_wrapper_nans();
}

/* ------------------------------------------------------------------ 4. error-free transforms */
typedef struct {
    unsigned long sum_spurious_overflow; /* TwoSum: a + b finite but an intermediate overflowed */
    unsigned long prod_unrepresentable;  /* TwoProd: a·b − hi not representable, exactness not asserted */
    unsigned long prod_lo_zero_sign;     /* TwoProd: RN(fp32(a·b) − hi) and RN(a·b − hi) are zeros of
                                            opposite sign (a·b underflowed fp32) */
    unsigned long f2s_exact_checked, f2s_broken, f2s_broken_inexact;
} eft_counts;

static mpfr_t g_f32, g_u, g_v; /* fp32 scratch (24 bits); EXACT_PREC scratch for the intermediates */

static int finite_enc(const fmt_spec *S, uint16_t x) { return !enc_isnan(S, x) && !enc_isinf(S, x); }

/* Contract: out = fp32(x), the IEEE binary32 RN of the exact x (subnormals from 2^-149, overflow to
 * ±Inf), as MPFR emulates binary32: precision 24, emin −148, emax 128, subnormalize. */
static void round_f32(mpfr_ptr out, mpfr_srcptr x) {
    int t = mpfr_set(g_f32, x, MPFR_RNDN);
    mpfr_exp_t emax = mpfr_get_emax();
    mpfr_set_emin(-148);
    mpfr_set_emax(128);
    t = mpfr_check_range(g_f32, t, MPFR_RNDN);
    (void)mpfr_subnormalize(g_f32, t, MPFR_RNDN);
    mpfr_set_emin(g_emin_wide);
    mpfr_set_emax(emax);
    ORACLE_ASSERT(mpfr_set(out, g_f32, MPFR_RNDN) == 0);
}

/* hi + lo == exact (value in g_x), both finite; uses g_y, g_z. */
static int pair_is_exact(const fmt_spec *S, collage_lp_pair r) {
    if (!finite_enc(S, r.hi) || !finite_enc(S, r.lo)) return 0;
    enc_to_mpfr(S, g_y, r.hi);
    enc_to_mpfr(S, g_z, r.lo);
    exact_add(g_y, g_y, g_z);
    return mpfr_equal_p(g_y, g_x);
}

/* Contract: RN(x + sy·y) for format values x, y (sy = ±1), by the oracle; uses g_u, g_v. */
static rounded oracle_addsub(const fmt_spec *S, uint16_t x, uint16_t y, int sy) {
    enc_to_mpfr(S, g_u, x);
    enc_to_mpfr(S, g_v, y);
    if (sy < 0) exact_sub(g_u, g_u, g_v);
    else exact_add(g_u, g_u, g_v);
    return oracle_round(S, g_u);
}

/* A result that overflowed: ±Inf or NaN, or e2m1's saturated ±max. */
static int overflowed(const fmt_spec *S, rounded r) { return !finite_enc(S, r.rn) || r.overflow; }

/* Whether one of TwoSum's intermediates (numerics.md §4-5: b' = s ⊖ a, a' = s ⊖ b', a ⊖ a', b ⊖ b')
 * overflows although s = a ⊕ b is finite: 2Sum's known spurious overflow (Boldo, Graillat, Muller
 * 2017), e.g. s ⊖ a rounding up past max when |a| is small and s is near −max. */
static int two_sum_intermediate_overflows(const fmt_spec *S, uint16_t a, uint16_t b, uint16_t s) {
    rounded bv = oracle_addsub(S, s, a, -1);
    if (overflowed(S, bv)) return 1;
    rounded av = oracle_addsub(S, s, bv.rn, -1);
    if (overflowed(S, av)) return 1;
    return overflowed(S, oracle_addsub(S, a, av.rn, -1)) || overflowed(S, oracle_addsub(S, b, bv.rn, -1));
}

/* TwoSum: hi = RN(a + b) always; when that does not overflow, hi + lo = a + b exactly, unless an
 * intermediate overflowed (counted, the first few printed). */
static void check_two_sum(const fmt_spec *S, uint16_t a, uint16_t b, eft_counts *n) {
    collage_lp_pair r = collage_lp_two_sum(S->f, a, b);
    if (S->f == COLLAGE_FMT_BF16) {
        collage_mcf m = collage_two_sum((collage_bf16){a}, (collage_bf16){b});
        CHECK(wrapper_agrees(S, m.hi.bits, r.hi) && wrapper_agrees(S, m.lo.bits, r.lo),
              "two_sum(0x%04x, 0x%04x) != lp", a, b);
    }
    enc_to_mpfr(S, g_a, a);
    enc_to_mpfr(S, g_b, b);
    exact_add(g_x, g_a, g_b);
    rounded hi = oracle_round(S, g_x);
    check_result(S, "two_sum.hi", r.hi, hi, a, b, 0);
    if (!finite_enc(S, a) || !finite_enc(S, b) || overflowed(S, hi)) return;
    if (pair_is_exact(S, r)) return;
    if (two_sum_intermediate_overflows(S, a, b, hi.rn)) {
        if (n->sum_spurious_overflow++ < 3)
            printf("    %s two_sum(0x%04x, 0x%04x) = (0x%04x, 0x%04x): a + b finite, an intermediate overflows\n",
                   S->name, a, b, r.hi, r.lo);
        return;
    }
    CHECK(0, "%s two_sum(0x%04x, 0x%04x) = (0x%04x, 0x%04x): hi + lo != a + b", S->name, a, b, r.hi, r.lo);
}

/* TwoProd: hi = RN(a·b); when hi is finite, lo = RN(fp32(a·b) − hi) to the bit (numerics.md §4-5), which
 * is RN(a·b − hi) except for the sign of a zero when a·b underflows fp32 (counted); hi + lo = a·b
 * exactly whenever a·b − hi is representable (not always, in the underflow range: counted). */
static void check_two_prod(const fmt_spec *S, uint16_t a, uint16_t b, eft_counts *n) {
    collage_lp_pair r = collage_lp_two_prod(S->f, a, b);
    if (S->f == COLLAGE_FMT_BF16) {
        collage_mcf m = collage_two_prod((collage_bf16){a}, (collage_bf16){b});
        CHECK(wrapper_agrees(S, m.hi.bits, r.hi) && wrapper_agrees(S, m.lo.bits, r.lo),
              "two_prod(0x%04x, 0x%04x) != lp", a, b);
    }
    enc_to_mpfr(S, g_a, a);
    enc_to_mpfr(S, g_b, b);
    exact_mul(g_x, g_a, g_b);
    rounded hi = oracle_round(S, g_x);
    check_result(S, "two_prod.hi", r.hi, hi, a, b, 0);
    if (!finite_enc(S, a) || !finite_enc(S, b) || overflowed(S, hi)) return;
    enc_to_mpfr(S, g_y, hi.rn);
    round_f32(g_u, g_x);
    exact_sub(g_z, g_u, g_y); /* fp32(a·b) − hi */
    rounded lo_spec = oracle_round(S, g_z);
    check_result(S, "two_prod.lo", r.lo, lo_spec, a, b, 0);
    exact_sub(g_z, g_x, g_y); /* the exact error a·b − hi */
    rounded lo = oracle_round(S, g_z);
    if (lo.rn != lo_spec.rn) {
        int zeros = (lo.rn & ~S->sign_bit) == 0 && (lo_spec.rn & ~S->sign_bit) == 0;
        CHECK(zeros, "%s two_prod(0x%04x, 0x%04x): RN(fp32(ab) - hi) = 0x%04x but RN(ab - hi) = 0x%04x", S->name, a,
              b, lo_spec.rn, lo.rn);
        n->prod_lo_zero_sign += (unsigned long)zeros;
    }
    if (lo.inexact) { n->prod_unrepresentable++; return; }
    CHECK(pair_is_exact(S, r), "%s two_prod(0x%04x, 0x%04x) = (0x%04x, 0x%04x): hi + lo != a·b", S->name, a, b,
          r.hi, r.lo);
}

/* Fast2Sum: with |a| ≥ |b| or a = 0 (and a + b not overflowing) exact; otherwise count the inexact. */
static void check_fast_two_sum(const fmt_spec *S, uint16_t a, uint16_t b, eft_counts *n) {
    collage_lp_pair r = collage_lp_fast_two_sum(S->f, a, b);
    if (S->f == COLLAGE_FMT_BF16) {
        collage_mcf m = collage_fast_two_sum((collage_bf16){a}, (collage_bf16){b});
        CHECK(wrapper_agrees(S, m.hi.bits, r.hi) && wrapper_agrees(S, m.lo.bits, r.lo),
              "fast_two_sum(0x%04x, 0x%04x) != lp", a, b);
    }
    if (!finite_enc(S, a) || !finite_enc(S, b)) return;
    enc_to_mpfr(S, g_a, a);
    enc_to_mpfr(S, g_b, b);
    exact_add(g_x, g_a, g_b);
    rounded hi = oracle_round(S, g_x);
    check_result(S, "fast_two_sum.hi", r.hi, hi, a, b, 0);
    if (overflowed(S, hi)) return;
    if (mpfr_zero_p(g_a) || mpfr_cmpabs(g_a, g_b) >= 0) {
        n->f2s_exact_checked++;
        CHECK(pair_is_exact(S, r), "%s fast_two_sum(0x%04x, 0x%04x) = (0x%04x, 0x%04x): hi + lo != a + b", S->name,
              a, b, r.hi, r.lo);
    } else {
        n->f2s_broken++;
        n->f2s_broken_inexact += !pair_is_exact(S, r);
    }
}

static void check_eft_pair(const fmt_spec *S, uint16_t a, uint16_t b, eft_counts *n) {
    check_two_sum(S, a, b, n);
    check_two_prod(S, a, b, n);
    check_fast_two_sum(S, a, b, n);
}

static void report_eft(const fmt_spec *S, const eft_counts *n) {
    printf("    %s: two_sum spurious intermediate overflows %lu; two_prod exactness skipped %lu times (a·b − hi "
           "not representable), lo zero of the other sign %lu; fast_two_sum exact checked %lu, precondition "
           "broken %lu (inexact %lu)\n",
           S->name, n->sum_spurious_overflow, n->prod_unrepresentable, n->prod_lo_zero_sign, n->f2s_exact_checked,
           n->f2s_broken, n->f2s_broken_inexact);
    CHECK(n->f2s_broken_inexact >= MIN_FAST2SUM_INEXACT, "%s: broken Fast2Sum precondition never inexact", S->name);
}

static void test_eft_small_exhaustive(void) {
    for (int f = 0; f < COLLAGE_FMT_COUNT; f++) {
        if (!exhaustive_format(f)) continue;
        const fmt_spec *S = &SPECS[f];
        eft_counts n = {0, 0, 0, 0, 0, 0};
        for (unsigned a = 0; a <= S->top; a++)
            for (unsigned b = 0; b <= S->top; b++) check_eft_pair(S, (uint16_t)a, (uint16_t)b, &n);
        report_eft(S, &n);
    }
    report_wrapper_nans();
}

static void test_eft_random_16(void) {
    seed_test(6);
    for (int f = COLLAGE_FMT_BF16; f <= COLLAGE_FMT_FP16; f++) {
        const fmt_spec *S = &SPECS[f];
        eft_counts n = {0, 0, 0, 0, 0, 0};
        for (unsigned i = 0; i < N_EFT / g_div; i++) {
            uint16_t a = rnd_operand(S), b = rnd_second(S, a);
            check_eft_pair(S, a, b, &n); /* (a, b) and (b, a): the Fast2Sum precondition holds for one */
            check_fast_two_sum(S, b, a, &n);
        }
        report_eft(S, &n);
    }
    report_wrapper_nans();
}

/* ------------------------------------------------------------------ 5. e2m1 (numerics.md §15) */
#define N_SR_RANDOM_R   6u         /* random words checked on either side of each SR threshold */
#define N_E2M1_SR_F32   (1u << 17) /* random fp32 inputs of e2m1's SR, around its range */

/* SR of a finite fp32 x to e2m1 against its exact probability (numerics.md §2): lo the e2m1 value toward
 * zero from x, hi its neighbour away from zero, F = floor(2^32 · (|x| − |lo|) / (|hi| − |lo|)); SR gives
 * hi iff r ≥ T = 2^32 − F, and ±6 for |x| ≥ 6 (saturation). The rounding is that threshold on r, so over
 * all 2^32 words exactly F give hi: the probability is F / 2^32. Checked on r = 0, 1, 2^31 − 1, 2^32 − 1,
 * T − 1, T, T + 1 and random words; returns whether the probability lies strictly between 0 and 1. */
static int check_sr_exact(const fmt_spec *S, float x) {
    const uint16_t sign = signbit(x) ? S->sign_bit : 0;
    uint16_t lo, hi;
    uint64_t F = 0;
    mpfr_set_flt(g_x, x, MPFR_RNDN);
    rounded rz = oracle_round_mode(S, g_x, MPFR_RNDZ);
    if (rz.overflow || (rz.rn & ~S->sign_bit) == S->max_bits) {
        lo = hi = (uint16_t)(sign | S->max_bits);
    } else {
        lo = rz.rn, hi = (uint16_t)(lo + 1u);
        const double gap = enc_value(S, (uint16_t)(hi & ~S->sign_bit)) - enc_value(S, (uint16_t)(lo & ~S->sign_bit));
        ORACLE_ASSERT(mpfr_abs(g_y, g_x, MPFR_RNDN) == 0 && mpfr_sub_d(g_y, g_y, fabs(enc_value(S, lo)), MPFR_RNDN) == 0);
        ORACLE_ASSERT(mpfr_div_d(g_y, g_y, gap, MPFR_RNDN) == 0); /* gap is a power of two */
        mpfr_mul_2ui(g_y, g_y, 32, MPFR_RNDN);
        F = mpfr_get_ui(g_y, MPFR_RNDZ);
    }
    const uint64_t T = (1ull << 32) - F;
    uint64_t rs[7 + 2 * N_SR_RANDOM_R] = {0, 1, 0x7fffffffu, 0xffffffffu, T - 1, T, T + 1};
    for (unsigned k = 0; k < N_SR_RANDOM_R; k++) { /* random words below and at or above T */
        rs[7 + 2 * k] = T ? (uint64_t)h_rand32() % T : 0;
        rs[8 + 2 * k] = T + (F ? (uint64_t)h_rand32() % F : 0);
    }
    for (size_t k = 0; k < sizeof rs / sizeof rs[0]; k++) {
        if (rs[k] > 0xffffffffull) continue;
        const uint16_t got = collage_lp_from_f32_sr(S->f, x, (uint32_t)rs[k]), want = rs[k] >= T ? hi : lo;
        CHECK(got == want, "%s SR(%a, r 0x%08x) = 0x%x want 0x%x (P(away) = %llu / 2^32)", S->name, (double)x,
              (unsigned)rs[k], got, want, (unsigned long long)F);
    }
    return F != 0;
}

/* Every bf16 pattern widened to fp32 (exactly: a 16-bit shift) and rounded to e2m1: RN and saturating RN
 * against MPFR, NaN to the marker, and SR's probability exact. bf16 → e2m1 is this composition: one
 * rounding, since the widening is exact. */
static void test_e2m1_from_bf16(void) {
    seed_test(7);
    const fmt_spec *S = &SPECS[COLLAGE_FMT_E2M1];
    unsigned long inexact_sr = 0;
    for (uint32_t b = 0; b <= 0xffffu; b++) {
        const float x = collage_bf16_to_f32((collage_bf16){(uint16_t)b});
        CHECK(f32u(x) == b << 16, "bf16 0x%04x widened to 0x%08x", b, f32u(x));
        check_f32(S, x);
        if (isfinite(x)) inexact_sr += (unsigned long)check_sr_exact(S, x);
    }
    printf("    %lu bf16 inputs with an SR probability strictly between 0 and 1\n", inexact_sr);
    CHECK(inexact_sr > 1000, "only %lu inputs between two e2m1 values", inexact_sr);
}

/* SR from fp32 at every e2m1 value and midpoint, a quarter and three quarters of each gap, ±1 and ±2 fp32
 * ulps around each, both signs; fp32 subnormals and random inputs around e2m1's range; ±Inf saturates. */
static void test_e2m1_sr_f32(void) {
    seed_test(8);
    const fmt_spec *S = &SPECS[COLLAGE_FMT_E2M1];
    for (unsigned x = 0; x <= S->max_bits; x++) {
        const double lo = enc_value(S, (uint16_t)x), gap = upper_neighbour(S, (uint16_t)x) - lo;
        for (int q = 0; q < 4; q++) {
            float v = (float)(lo + 0.25 * q * gap);
            for (int s = 0; s < 2; s++, v = -v) {
                float u = v, d = v;
                for (int k = 0; k < 3; k++, u = nextafterf(u, INFINITY), d = nextafterf(d, -INFINITY)) {
                    check_sr_exact(S, u);
                    check_sr_exact(S, d);
                }
            }
        }
    }
    for (unsigned i = 0; i < N_NAN_INPUTS; i++) check_sr_exact(S, u32f(h_rand32() & 0x807fffffu));
    int elo, ehi;
    f32_exp_window(S, &elo, &ehi);
    for (unsigned i = 0; i < N_E2M1_SR_F32 / g_div; i++) {
        uint32_t e = (uint32_t)elo + h_rand32() % (uint32_t)(ehi - elo + 1);
        check_sr_exact(S, u32f((h_rand32() & 0x807fffffu) | (e << 23)));
    }
    CHECK(collage_lp_from_f32_sr(S->f, INFINITY, 0) == S->max_bits &&
              collage_lp_from_f32_sr(S->f, -INFINITY, 0xffffffffu) == (S->sign_bit | S->max_bits),
          "e2m1 SR(±Inf) does not saturate");
}

/* ------------------------------------------------------------------ 6. numerics.md §9 vectors */
static void test_numerics_vectors(void) {
    collage_bf16 b200 = collage_bf16_from_f32(200.0f), b01 = collage_bf16_from_f32(0.1f);
    CHECK(b200.bits == 0x4348, "bf16(200) = 0x%04x", b200.bits);
    CHECK(b01.bits == 0x3dcd, "bf16(0.1) = 0x%04x", b01.bits);
    CHECK(collage_bf16_add(b200, b01).bits == 0x4348, "0x4348 + 0x3DCD = 0x%04x", collage_bf16_add(b200, b01).bits);
    collage_mcf f = collage_fast_two_sum(b200, b01);
    CHECK(f.hi.bits == 0x4348 && f.lo.bits == 0x3dcd, "Fast2Sum(200, 0x3DCD) = (0x%04x, 0x%04x)", f.hi.bits,
          f.lo.bits);
    static const struct { double beta; uint16_t hi, lo; } SPLIT[] = {
        {0.9, 0x3f66, 0x3acd}, {0.95, 0x3f73, 0x3a4d}, {0.99, 0x3f7d, 0x3ae1}, {0.999, 0x3f80, 0xba83}};
    const fmt_spec *S = &SPECS[COLLAGE_FMT_BF16];
    for (int i = 0; i < 4; i++) {
        collage_mcf m = collage_mcf_split(SPLIT[i].beta);
        CHECK(m.hi.bits == SPLIT[i].hi && m.lo.bits == SPLIT[i].lo, "split(%g) = (0x%04x, 0x%04x)", SPLIT[i].beta,
              m.hi.bits, m.lo.bits);
        collage_lp_pair p = collage_lp_split(COLLAGE_FMT_BF16, SPLIT[i].beta);
        CHECK(p.hi == m.hi.bits && p.lo == m.lo.bits, "lp_split(%g) differs from mcf_split", SPLIT[i].beta);
        /* the oracle agrees: hi = RN(β), lo = RN(β − hi) */
        mpfr_set_d(g_x, SPLIT[i].beta, MPFR_RNDN);
        rounded hi = oracle_round(S, g_x);
        mpfr_sub_d(g_x, g_x, enc_value(S, hi.rn), MPFR_RNDN);
        rounded lo = oracle_round(S, g_x);
        CHECK(hi.rn == SPLIT[i].hi && lo.rn == SPLIT[i].lo, "oracle split(%g) = (0x%04x, 0x%04x)", SPLIT[i].beta,
              hi.rn, lo.rn);
    }
    /* Fast2Sum with its precondition broken: bf16(1/3) = 0x3EAB, 100 = 0x42C8, 100.5 = 0x42C9,
     * −0.166015625 = 0xBE2A. */
    CHECK(enc_value(S, 0x3eab) == 0.333984375 && enc_value(S, 0x42c9) == 100.5 && enc_value(S, 0xbe2a) == -0.166015625,
          "the vector's constants");
    collage_bf16 third = collage_bf16_from_f32(1.0f / 3.0f), hundred = {0x42c8};
    CHECK(third.bits == 0x3eab, "bf16(1/3) = 0x%04x", third.bits);
    f = collage_fast_two_sum(third, hundred);
    CHECK(f.hi.bits == 0x42c9 && f.lo.bits == 0x0000, "Fast2Sum(1/3, 100) = (0x%04x, 0x%04x) want (0x42C9, 0)",
          f.hi.bits, f.lo.bits);
    collage_mcf t = collage_two_sum(third, hundred);
    CHECK(t.hi.bits == 0x42c9 && t.lo.bits == 0xbe2a, "TwoSum(1/3, 100) = (0x%04x, 0x%04x) want (0x42C9, 0xBE2A)",
          t.hi.bits, t.lo.bits);
    collage_bf16 c256 = {0x4380}, one = {0x3f80};
    CHECK(collage_bf16_add(c256, one).bits == 0x4380, "256 + 1 = 0x%04x", collage_bf16_add(c256, one).bits);
}

/* ------------------------------------------------------------------ main */
/* The dynamic 8-bit code (numerics.md §11): every value is the fp32 nearest to its rational
 * (2n + 18j + 9) / (20n·10^(6−e)), and every threshold the fp32 nearest to the midpoint of two
 * neighbouring values. */
static void test_qcode_values(void) {
    mpfr_t q, a;
    mpfr_inits2(200, q, a, (mpfr_ptr)0);
    for (int u = 0; u < 2; u++) {
        const collage_qcode c = u ? COLLAGE_QCODE_DYN_UNSIGNED : COLLAGE_QCODE_DYN_SIGNED;
        int k = 0, bad = 0;
        for (int e = 0; e <= 6; e++) {
            const long n = 1L << (e + u);
            for (long j = 0; j < n; j++, k++) {
                long den = 20 * n;
                for (int d = 0; d < 6 - e; d++) den *= 10;
                mpfr_set_si(q, 2 * n + 18 * j + 9, MPFR_RNDN);
                mpfr_div_si(q, q, den, MPFR_RNDN); /* one rounding at 200 bits: exact where the quotient is an
                                                      fp32 midpoint (dyadic), else never on its wrong side */
                const float want = mpfr_get_flt(q, MPFR_RNDN);
                const float got = collage_qcode_value(c, (uint8_t)(u ? 1 + k : 128 + k));
                if (memcmp(&want, &got, 4) && bad++ < 5)
                    CHECK(0, "%s magnitude %d (e %d, j %ld): %a, MPFR %a", collage_qcode_name(c), k, e, j, (double)got, (double)want);
            }
        }
        for (int i = 0; i + 1 < 256; i++) { /* the thresholds quantization compares with: test_compose's */
            mpfr_set_flt(q, collage_qcode_value(c, (uint8_t)i), MPFR_RNDN);
            mpfr_set_flt(a, collage_qcode_value(c, (uint8_t)(i + 1)), MPFR_RNDN);
            mpfr_add(q, q, a, MPFR_RNDN);
            mpfr_div_2ui(q, q, 1, MPFR_RNDN);
            const float t = mpfr_get_flt(q, MPFR_RNDN);
            const float below = nextafterf(t, -INFINITY), vals[2] = {t, below};
            for (int w = 0; w < 2; w++) { /* t takes the lower code, the next fp32 above it the upper */
                float x[2] = {1.0f, vals[w]}, sc;
                uint8_t code[2];
                collage_qblock_quantize(c, x, 2, code, &sc, 0, 0, 0);
                if (code[1] != i && bad++ < 5) CHECK(0, "%s: %a (threshold %d or below) -> code %d", collage_qcode_name(c), (double)vals[w], i, code[1]);
            }
            float x[2] = {1.0f, nextafterf(t, INFINITY)}, sc;
            uint8_t code[2];
            collage_qblock_quantize(c, x, 2, code, &sc, 0, 0, 0);
            if (code[1] != i + 1 && bad++ < 5) CHECK(0, "%s: %a (above threshold %d) -> code %d", collage_qcode_name(c), (double)x[1], i, code[1]);
        }
        CHECK(bad == 0, "%s: %d values or thresholds off", collage_qcode_name(c), bad);
    }
    mpfr_clears(q, a, (mpfr_ptr)0);
}

int main(void) {
    const char *s = getenv("COLLAGE_TEST_SEED");
    if (s && *s) g_seed = strtoull(s, NULL, 0);
    if (getenv("COLLAGE_TEST_QUICK")) g_div = 8;
    printf("test_mpfr: seed 0x%llx (COLLAGE_TEST_SEED overrides), MPFR %s%s\n", g_seed, mpfr_get_version(),
           g_div > 1 ? ", COLLAGE_TEST_QUICK: random sample counts / 8" : "");

    g_emin_wide = mpfr_get_emin();
    for (int f = 0; f < COLLAGE_FMT_COUNT; f++) {
        fmt_init(&SPECS[f]);
        mpfr_init2(g_r[f], SPECS[f].p);
        mpfr_init2(g_max[f], SPECS[f].p);
        ORACLE_ASSERT(mpfr_set_d(g_max[f], SPECS[f].max_value, MPFR_RNDN) == 0);
        ORACLE_ASSERT(SPECS[f].emin - 1 > mpfr_get_emin_min());
    }
    mpfr_inits2(EXACT_PREC, g_a, g_b, g_c, g_x, g_y, g_z, g_u, g_v, (mpfr_ptr)0);
    mpfr_init2(g_f32, 24);

    RUN(test_oracle_selfcheck);
    RUN(test_format_descriptors);
    RUN(test_conv_f32);
    RUN(test_conv_f64);
    RUN(test_decode);
    RUN(test_ops_small_exhaustive);
    RUN(test_fma_small);
    RUN(test_ops_random_16);
    RUN(test_eft_small_exhaustive);
    RUN(test_eft_random_16);
    RUN(test_e2m1_from_bf16);
    RUN(test_e2m1_sr_f32);
    RUN(test_numerics_vectors);
    RUN(test_qcode_values);

    mpfr_clears(g_a, g_b, g_c, g_x, g_y, g_z, g_u, g_v, g_f32, (mpfr_ptr)0);
    for (int f = 0; f < COLLAGE_FMT_COUNT; f++) {
        mpfr_clear(g_r[f]);
        mpfr_clear(g_max[f]);
    }
    mpfr_free_cache();
    return h_end();
}
