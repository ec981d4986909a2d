/* lowp.c — the low-precision formats (bf16, fp16, e4m3, e5m2, e2m1): descriptors, the one generic
 * encoder (RN, saturating RN, SR) and decoder, single operations with one rounding, fma by
 * round-to-odd, counter-based random bits, and the scalar `_ref` row kernels every vectorised row
 * kernel is tested against. */
#include "internal.h"
#include <math.h>

static const collage_format_info FORMATS[COLLAGE_FMT_COUNT] = {
    [COLLAGE_FMT_BF16] = {"bf16", 16, 8, 7, 127, 1, 0x7f7f, 0x7fc0, 3.3895313892515355e38f, 1},
    [COLLAGE_FMT_FP16] = {"fp16", 16, 5, 10, 15, 1, 0x7bff, 0x7e00, 65504.0f, 1},
    [COLLAGE_FMT_E4M3] = {"e4m3", 8, 4, 3, 7, 0, 0x7e, 0x7f, 448.0f, 1},
    [COLLAGE_FMT_E5M2] = {"e5m2", 8, 5, 2, 15, 1, 0x7b, 0x7e, 57344.0f, 1},
    [COLLAGE_FMT_E2M1] = {"e2m1", 4, 2, 1, 1, 0, 0x7, COLLAGE_E2M1_NAN, 6.0f, 0},
};

const char *collage_version(void) { return COLLAGE_VERSION_STRING; }

const char *collage_status_str(collage_status s) {
    switch (s) {
    case COLLAGE_OK: return "ok";
    case COLLAGE_ERR_NULL: return "a required pointer was NULL";
    case COLLAGE_ERR_SIZE: return "a size is zero or inconsistent";
    case COLLAGE_ERR_ARG: return "an argument is out of range";
    case COLLAGE_ERR_NOMEM: return "out of memory";
    case COLLAGE_ERR_IO: return "file could not be opened, read or written";
    case COLLAGE_ERR_FORMAT: return "file has a wrong magic, version, size or content";
    case COLLAGE_ERR_NONFINITE: return "NaN or infinity where a finite value is required";
    case COLLAGE_ERR_UNSUPPORTED: return "not supported by this build or CPU";
    case COLLAGE_ERR_PEER: return "failed on another rank";
    case COLLAGE_ERR_BUSY: return "in use by another process";
    default: return "unknown status";
    }
}

const collage_format_info *collage_format_get(collage_format f) {
    return ((unsigned)f < COLLAGE_FMT_COUNT) ? &FORMATS[f] : NULL;
}

collage_status collage_format_parse(const char *name, collage_format *out) {
    if (!name || !out) return COLLAGE_ERR_NULL;
    for (int i = 0; i < COLLAGE_FMT_COUNT; i++)
        if (strcmp(name, FORMATS[i].name) == 0) { *out = (collage_format)i; return COLLAGE_OK; }
    return COLLAGE_ERR_ARG;
}

/* NaN of format F keeping the sign and the top payload bits of a wider NaN whose fraction is
 * `frac` (frac_bits wide), quiet bit set, as x86's F16C conversions do. e4m3 has one NaN per sign;
 * e2m1 has none, and gives its marker (COLLAGE_E2M1_NAN), which carries no sign. */
static uint16_t nan_from(const collage_format_info *F, int neg, uint64_t frac, int frac_bits) {
    if (!F->has_nan) return F->nan_bits;
    uint16_t sign = (uint16_t)((unsigned)neg << (F->bits - 1));
    if (!F->has_inf) return (uint16_t)(sign | F->nan_bits);
    uint16_t expo = (uint16_t)(((1u << F->exp_bits) - 1u) << F->man_bits);
    uint16_t quiet = (uint16_t)(1u << (F->man_bits - 1));
    uint16_t pay = (uint16_t)(frac >> (frac_bits - F->man_bits));
    return (uint16_t)(sign | expo | quiet | pay);
}

/* What a result beyond max becomes: ±max when saturating or in a format with neither Inf nor NaN
 * (e2m1), else Inf, or the NaN of a format without Inf (e4m3). */
static uint16_t overflow_bits(const collage_format_info *F, int mode) {
    if (mode == LP_SAT || !F->has_nan) return F->max_bits;
    if (F->has_inf) return (uint16_t)(((1u << F->exp_bits) - 1u) << F->man_bits);
    return F->nan_bits;
}

/* Round (-1)^neg · sig · 2^e2 (sig > 0, exact, < 2^64) to F.
 * Contract: RN = nearest, ties to even, with the exponent range unbounded, then overflow per mode;
 * subnormals are rounded on their fixed grid (no flush); SR rounds away from zero iff the dropped
 * fraction, as a 32-bit fixed-point number truncated, plus r reaches 2^32. */
static uint16_t encode(const collage_format_info *F, int neg, uint64_t sig, int e2, int mode, uint32_t r) {
    uint16_t sign = (uint16_t)((unsigned)neg << (F->bits - 1));
    int lz = __builtin_clzll(sig);
    sig <<= lz;            /* now bit 63 set: value = sig · 2^(e2 - lz) */
    int E = e2 - lz + 63;  /* unbiased exponent of the leading bit */
    int p = F->man_bits + 1, emin = 1 - F->bias;
    int d = 64 - p + (E < emin ? emin - E : 0); /* bits to drop */
    uint64_t kept, rem;    /* rem: the dropped bits as a 64-bit fraction of one kept ulp */
    int sticky = 0;
    if (d < 64) { kept = sig >> d; rem = sig << (64 - d); }
    else if (d == 64) { kept = 0; rem = sig; }
    else if (d < 128) { kept = 0; rem = sig >> (d - 64); sticky = (sig << (128 - d)) != 0; }
    else { kept = 0; rem = 0; sticky = 1; }
    int up;
    if (mode == LP_SR) {
        up = ((rem >> 32) + (uint64_t)r) >> 32 != 0;
    } else {
        int half = (int)(rem >> 63);
        int rest = (rem << 1) != 0 || sticky;
        up = half && (rest || (kept & 1));
    }
    kept += (uint64_t)up;
    uint64_t mag;
    if (E >= emin) mag = ((uint64_t)(E + F->bias) << F->man_bits) + (kept - (1ull << F->man_bits));
    else mag = kept; /* subnormal; a carry to 2^man_bits is exactly the smallest normal */
    if (mag > F->max_bits) return (uint16_t)(sign | overflow_bits(F, mode));
    return (uint16_t)(sign | mag);
}

uint16_t collage__lp_enc_f32(collage_format f, float x, int mode, uint32_t r) {
    const collage_format_info *F = &FORMATS[f];
    uint32_t u = f32_bits(x);
    int neg = (int)(u >> 31);
    uint32_t ef = (u >> 23) & 0xffu, mf = u & 0x7fffffu;
    if (ef == 0xffu) {
        if (mf) return nan_from(F, neg, mf, 23);
        /* ±Inf: Inf where the format has it, else NaN (e4m3) or ±max (e2m1); _sat gives ±max */
        uint16_t sign = (uint16_t)((unsigned)neg << (F->bits - 1));
        return (uint16_t)(sign | overflow_bits(F, mode == LP_SAT ? LP_SAT : LP_RN));
    }
    if (ef == 0 && mf == 0) return (uint16_t)((unsigned)neg << (F->bits - 1));
    uint64_t sig = ef ? (mf | 0x800000u) : mf;
    int e2 = (ef ? (int)ef : 1) - 127 - 23;
    return encode(F, neg, sig, e2, mode, r);
}

uint16_t collage__lp_enc_f64(collage_format f, double x, int mode, uint32_t r) {
    const collage_format_info *F = &FORMATS[f];
    uint64_t u = f64_bits(x);
    int neg = (int)(u >> 63);
    uint32_t ef = (uint32_t)((u >> 52) & 0x7ffu);
    uint64_t mf = u & 0xfffffffffffffull;
    if (ef == 0x7ffu) {
        if (mf) return nan_from(F, neg, mf, 52);
        uint16_t sign = (uint16_t)((unsigned)neg << (F->bits - 1));
        return (uint16_t)(sign | overflow_bits(F, mode == LP_SAT ? LP_SAT : LP_RN));
    }
    if (ef == 0 && mf == 0) return (uint16_t)((unsigned)neg << (F->bits - 1));
    uint64_t sig = ef ? (mf | (1ull << 52)) : mf;
    int e2 = (ef ? (int)ef : 1) - 1023 - 52;
    return encode(F, neg, sig, e2, mode, r);
}

/* Exact widening. NaN keeps sign and payload; fp16 and fp8 NaNs come out quiet (as F16C does),
 * bf16 widening is the plain 16-bit shift (as PyTorch does), so bf16 NaN bits survive unchanged.
 * In a format without NaN (e2m1) every value above the codes (COLLAGE_E2M1_NAN among them) is NaN. */
float collage__lp_dec(collage_format f, uint16_t x) {
    const collage_format_info *F = &FORMATS[f];
    if (f == COLLAGE_FMT_BF16) return bf16_f32(x);
    if (!F->has_nan && (x >> F->bits)) return NAN;
    uint32_t sign = (uint32_t)(x >> (F->bits - 1)) << 31;
    uint32_t e = (x >> F->man_bits) & ((1u << F->exp_bits) - 1u);
    uint32_t m = x & ((1u << F->man_bits) - 1u);
    uint32_t emax_field = (1u << F->exp_bits) - 1u;
    int is_nan = F->has_inf ? (e == emax_field && m)
                            : F->has_nan && e == emax_field && m == (1u << F->man_bits) - 1u;
    if (is_nan) return bits_f32(sign | 0x7fc00000u | (m << (23 - F->man_bits)));
    if (F->has_inf && e == emax_field) return bits_f32(sign | 0x7f800000u);
    if (e == 0) { /* zero or subnormal: m · 2^(emin - man), exact in fp32 */
        float v = ldexpf((float)m, 1 - F->bias - F->man_bits);
        return sign ? -v : v;
    }
    return bits_f32(sign | ((e - (uint32_t)F->bias + 127u) << 23) | (m << (23 - F->man_bits)));
}

/* ------------------------------------------------------------------ generic public API */
#define FMT_OK(f) ((unsigned)(f) < COLLAGE_FMT_COUNT)

float collage_lp_to_f32(collage_format f, uint16_t x) { return FMT_OK(f) ? lp_f32(f, x) : NAN; }
uint16_t collage_lp_from_f32(collage_format f, float x) { return FMT_OK(f) ? lp_rn(f, x) : 0; }
uint16_t collage_lp_from_f32_sat(collage_format f, float x) {
    return FMT_OK(f) ? collage__lp_enc_f32(f, x, LP_SAT, 0) : 0;
}
uint16_t collage_lp_from_f32_sr(collage_format f, float x, uint32_t r) {
    if (!FMT_OK(f)) return 0;
    if (f == COLLAGE_FMT_BF16) return bf16_sr_bits(x, r);
    return collage__lp_enc_f32(f, x, LP_SR, r);
}
uint16_t collage_lp_from_f64(collage_format f, double x) {
    return FMT_OK(f) ? collage__lp_enc_f64(f, x, LP_RN, 0) : 0;
}
int collage_lp_isnan(collage_format f, uint16_t x) { return FMT_OK(f) && isnan(lp_f32(f, x)); }

/* fma with one rounding: a·b is exact in double (≤ 22 significant bits); p + c is computed exactly
 * as s + e by TwoSum; s is then rounded to odd (53 ≥ p + 2 bits), so the final RN is correct. */
static uint16_t lp_fma_impl(collage_format f, uint16_t a, uint16_t b, uint16_t c) {
    /* NaN operands: the first NaN of (a, b, c), quieted, so every entry point agrees on the bits */
    uint16_t in[3] = {a, b, c};
    for (int i = 0; i < 3; i++)
        if (isnan(lp_f32(f, in[i]))) return collage__lp_enc_f32(f, lp_f32(f, in[i]), LP_RN, 0);
    double p = (double)lp_f32(f, a) * (double)lp_f32(f, b);
    double cc = (double)lp_f32(f, c);
    double s = p + cc;
    if (isfinite(s) && s != 0.0) {
        double bb = s - p, aa = s - bb;
        double e = (p - aa) + (cc - bb);
        uint64_t u = f64_bits(s);
        if (e != 0.0 && !(u & 1u)) u += ((s > 0.0) == (e > 0.0)) ? 1 : (uint64_t)-1;
        s = bits_f64(u);
    }
    return collage__lp_enc_f64(f, s, LP_RN, 0);
}
uint16_t collage_lp_fma(collage_format f, uint16_t a, uint16_t b, uint16_t c) {
    return FMT_OK(f) ? lp_fma_impl(f, a, b, c) : 0;
}

collage_bf16 collage_bf16_fma(collage_bf16 a, collage_bf16 b, collage_bf16 c) {
    return (collage_bf16){lp_fma_impl(COLLAGE_FMT_BF16, a.bits, b.bits, c.bits)};
}
float collage_bf16_to_f32(collage_bf16 x) { return bf16_f32(x.bits); }
collage_bf16 collage_bf16_from_f32(float x) { return (collage_bf16){bf16_rn_bits(x)}; }
collage_bf16 collage_bf16_from_f32_sr(float x, uint32_t r) { return (collage_bf16){bf16_sr_bits(x, r)}; }
collage_bf16 collage_bf16_from_f64(double x) {
    return (collage_bf16){collage__lp_enc_f64(COLLAGE_FMT_BF16, x, LP_RN, 0)};
}

/* ------------------------------------------------------------------ random bits */
/* Contract: a pure function of (key, index); rand_bits is a keyed bijection of index_lo. */
uint32_t collage_rand32(uint64_t key, uint64_t index) {
    return rand_bits(rand_k1(key, (uint32_t)(index >> 32)), rand_k2(key), (uint32_t)index);
}
uint64_t collage_rand_key(uint64_t seed, uint64_t stream) {
    /* splitmix64 of the pair: distinct (seed, stream) give unrelated keys */
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + stream + 0x632be59bd9b4e019ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ------------------------------------------------------------------ scalar reference rows */
collage_status collage_lp_from_f32_row_ref(collage_format f, uint16_t *dst, const float *src, size_t n) {
    if (!FMT_OK(f)) return COLLAGE_ERR_ARG;
    if (n && (!dst || !src)) return COLLAGE_ERR_NULL;
    for (size_t i = 0; i < n; i++) dst[i] = collage__lp_enc_f32(f, src[i], LP_RN, 0);
    return COLLAGE_OK;
}
collage_status collage_lp_from_f32_sr_row_ref(collage_format f, uint16_t *dst, const float *src, size_t n,
                                              uint64_t key, uint64_t index0) {
    if (!FMT_OK(f)) return COLLAGE_ERR_ARG;
    if (n && (!dst || !src)) return COLLAGE_ERR_NULL;
    for (size_t i = 0; i < n; i++)
        dst[i] = collage__lp_enc_f32(f, src[i], LP_SR, collage_rand32(key, index0 + i));
    return COLLAGE_OK;
}
collage_status collage_lp_to_f32_row_ref(collage_format f, float *dst, const uint16_t *src, size_t n) {
    if (!FMT_OK(f)) return COLLAGE_ERR_ARG;
    if (n && (!dst || !src)) return COLLAGE_ERR_NULL;
    for (size_t i = 0; i < n; i++) dst[i] = collage__lp_dec(f, src[i]);
    return COLLAGE_OK;
}
