/* collage.h — the one public header of libcollage.
 * Exact low-precision arithmetic (bf16, fp16, fp8 e4m3/e5m2), error-free transforms and
 * multi-component floats (MCF) for training in pure 16-bit floating point (Collage, Yu et al. 2024).
 * Semantics are fixed to the bit by docs/numerics.md: one low-precision op = the op in fp32, rounded once. */
#ifndef COLLAGE_H
#define COLLAGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COLLAGE_VERSION_MAJOR 0
#define COLLAGE_VERSION_MINOR 1
#define COLLAGE_VERSION_PATCH 0
#define COLLAGE_VERSION_STRING "0.1.0"
const char *collage_version(void);

/* ---------------------------------------------------------------- status codes */
typedef enum {
    COLLAGE_OK = 0,
    COLLAGE_ERR_NULL,        /* a required pointer argument was NULL */
    COLLAGE_ERR_SIZE,        /* a size or count is zero, negative or inconsistent */
    COLLAGE_ERR_ARG,         /* an argument is out of its domain (unknown enum, bad value) */
    COLLAGE_ERR_NOMEM,       /* allocation failed */
    COLLAGE_ERR_IO,          /* a file could not be opened, read or written */
    COLLAGE_ERR_FORMAT,      /* a file has the wrong magic, version, size or content */
    COLLAGE_ERR_NONFINITE,   /* a NaN or infinity where a finite value is required */
    COLLAGE_ERR_UNSUPPORTED, /* the build or the CPU lacks the feature asked for */
    COLLAGE_ERR_PEER,        /* a collective call failed on another rank (that rank has the message) */
    COLLAGE_ERR_BUSY,        /* another process holds it (a run folder's lock) */
    COLLAGE_STATUS_COUNT
} collage_status;
const char *collage_status_str(collage_status s);

/* ---------------------------------------------------------------- bf16 scalars */
/* bf16 is a struct so it can never be used as an integer by mistake. */
typedef struct { uint16_t bits; } collage_bf16;
/* A multi-component float: the unevaluated sum hi + lo. Normalised when RN(hi + lo) == hi. */
typedef struct { collage_bf16 hi, lo; } collage_mcf;

float        collage_bf16_to_f32(collage_bf16 x);                 /* exact */
collage_bf16 collage_bf16_from_f32(float x);                      /* RN, ties to even, numerics.md §1-3 */
collage_bf16 collage_bf16_from_f32_sr(float x, uint32_t r);       /* SR: up iff frac·2^32 + r ≥ 2^32 */
collage_bf16 collage_bf16_from_f64(double x);                     /* RN of a double, one rounding */
collage_bf16 collage_bf16_add(collage_bf16 a, collage_bf16 b);    /* RN(fp32(a) + fp32(b)) */
collage_bf16 collage_bf16_sub(collage_bf16 a, collage_bf16 b);
collage_bf16 collage_bf16_mul(collage_bf16 a, collage_bf16 b);
collage_bf16 collage_bf16_div(collage_bf16 a, collage_bf16 b);
collage_bf16 collage_bf16_sqrt(collage_bf16 a);
collage_bf16 collage_bf16_fma(collage_bf16 a, collage_bf16 b, collage_bf16 c); /* RN(a·b + c), one rounding */

/* Error-free transforms (numerics.md §4-5). Each returns (hi, lo) with hi + lo == the exact result
 * whenever no intermediate overflows (and, for fast_two_sum, when |a| ≥ |b| or a == 0). TwoSum's
 * inner s ⊖ a can overflow within a few ulps of the largest finite value even though a + b is finite
 * (Boldo, Graillat, Muller 2017); lo is then NaN. TwoProd is exact when a·b − hi is representable;
 * where fp32(a·b) underflows, lo follows numerics.md's formula RN(fp32(a·b) − hi), signed zero included. */
collage_mcf  collage_two_sum(collage_bf16 a, collage_bf16 b);      /* no precondition */
collage_mcf  collage_fast_two_sum(collage_bf16 a, collage_bf16 b); /* needs |a| ≥ |b| or a == 0 */
collage_mcf  collage_two_prod(collage_bf16 a, collage_bf16 b);     /* hi = a ⊗ b, lo = RN(a·b − hi) */
collage_mcf  collage_mcf_grow(collage_mcf x, collage_bf16 d);      /* Collage's weight update */
collage_mcf  collage_mcf_grow_addcmul(collage_mcf x, collage_bf16 t1, collage_bf16 t2, float c);
collage_mcf  collage_mcf_mul(collage_mcf x, collage_mcf b);        /* corrected MultMC */
collage_mcf  collage_mcf_mul_v1(collage_mcf x, collage_mcf b);     /* the published, in-place MultMC:
                                                                      exists only to reproduce the paper */
collage_mcf  collage_mcf_split(double beta);                       /* (RN(β), RN(β − RN(β))) */
double       collage_mcf_to_f64(collage_mcf x);                    /* hi + lo, exact in double */

/* ---------------------------------------------------------------- generic formats */
/* One descriptor per format; every generic routine takes one, values travel as raw bits (uint16_t,
 * fp8 in the low byte, e2m1 in the low nibble). The bf16 functions above are the same arithmetic
 * specialised for speed. */
typedef enum {
    COLLAGE_FMT_BF16 = 0,  /* 1-8-7,  bias 127, p = 8,  IEEE-like */
    COLLAGE_FMT_FP16,      /* 1-5-10, bias 15,  p = 11, IEEE binary16 */
    COLLAGE_FMT_E4M3,      /* 1-4-3,  bias 7,   p = 4,  OCP "FN": no Inf, NaN = S.1111.111, max 448 */
    COLLAGE_FMT_E5M2,      /* 1-5-2,  bias 15,  p = 3,  IEEE-like, max 57344 */
    COLLAGE_FMT_E2M1,      /* 1-2-1,  bias 1,   p = 2,  OCP FP4: ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}, no Inf, no NaN */
    COLLAGE_FMT_COUNT
} collage_format;

typedef struct {
    const char *name;     /* "bf16", "fp16", "e4m3", "e5m2", "e2m1" */
    int bits;             /* total width: 16, 8 or 4 */
    int exp_bits;         /* exponent field width */
    int man_bits;         /* stored fraction bits (precision p = man_bits + 1) */
    int bias;             /* exponent bias */
    int has_inf;          /* 1: exponent all-ones with zero fraction is ±Inf (IEEE-like) */
    uint16_t max_bits;    /* bit pattern of the largest finite positive value */
    uint16_t nan_bits;    /* canonical positive quiet NaN; e2m1: COLLAGE_E2M1_NAN, a marker, not a code */
    float max_value;      /* largest finite value */
    int has_nan;          /* 0: no code is a NaN (e2m1), so overflow, ±Inf and NaN get the rules below */
} collage_format_info;

/* e2m1 has neither Inf nor NaN. Every conversion to it saturates: a finite value beyond ±6 and ±Inf
 * become ±6 (RN, _sat and SR alike: the OCP MX conversion). A NaN has no code: it converts to
 * COLLAGE_E2M1_NAN, a value outside the 16 codes that no 4-bit field can hold; collage_lp_to_f32 and
 * collage_lp_isnan read every value above 0xF as NaN, so a NaN stays visible through the operations
 * (0/0 and the √ of a negative give it too; x/0 for x ≠ 0 gives ±6). Callers that store codes check
 * collage_lp_isnan first, as the fp4 block quantizers do (they refuse NaN and ±Inf with a status). */
#define COLLAGE_E2M1_NAN 0x10u

const collage_format_info *collage_format_get(collage_format f); /* NULL for an unknown format */
collage_status collage_format_parse(const char *name, collage_format *out);

typedef struct { uint16_t hi, lo; } collage_lp_pair;  /* generic MCF: value hi + lo */

float    collage_lp_to_f32(collage_format f, uint16_t x);                   /* exact */
uint16_t collage_lp_from_f32(collage_format f, float x);                    /* RN; overflow → Inf (e4m3: NaN,
                                                                               e2m1: ±6) */
uint16_t collage_lp_from_f32_sat(collage_format f, float x);                /* RN; overflow → ±max */
uint16_t collage_lp_from_f32_sr(collage_format f, float x, uint32_t r);     /* SR */
uint16_t collage_lp_from_f64(collage_format f, double x);                   /* RN, one rounding */
uint16_t collage_lp_add(collage_format f, uint16_t a, uint16_t b);
uint16_t collage_lp_sub(collage_format f, uint16_t a, uint16_t b);
uint16_t collage_lp_mul(collage_format f, uint16_t a, uint16_t b);
uint16_t collage_lp_div(collage_format f, uint16_t a, uint16_t b);
uint16_t collage_lp_sqrt(collage_format f, uint16_t a);
uint16_t collage_lp_fma(collage_format f, uint16_t a, uint16_t b, uint16_t c);
collage_lp_pair collage_lp_two_sum(collage_format f, uint16_t a, uint16_t b);
collage_lp_pair collage_lp_fast_two_sum(collage_format f, uint16_t a, uint16_t b);
collage_lp_pair collage_lp_two_prod(collage_format f, uint16_t a, uint16_t b);
collage_lp_pair collage_lp_grow(collage_format f, collage_lp_pair x, uint16_t d);
collage_lp_pair collage_lp_grow_addcmul(collage_format f, collage_lp_pair x, uint16_t t1, uint16_t t2, float c);
collage_lp_pair collage_lp_mcf_mul(collage_format f, collage_lp_pair x, collage_lp_pair b);
collage_lp_pair collage_lp_mcf_mul_v1(collage_format f, collage_lp_pair x, collage_lp_pair b);
collage_lp_pair collage_lp_split(collage_format f, double beta);
int      collage_lp_isnan(collage_format f, uint16_t x);

/* ---------------------------------------------------------------- random bits */
/* Counter-based: the same (key, index) always gives the same 32 bits, in any thread order. */
uint32_t collage_rand32(uint64_t key, uint64_t index);
uint64_t collage_rand_key(uint64_t seed, uint64_t stream);   /* e.g. stream = training step */

/* ---------------------------------------------------------------- row kernels */
/* Hot conversions over arrays, vectorised (AVX-512, AVX2, scalar) and chosen at run time; threaded
 * with OpenMP over fixed blocks, so results never depend on the kernel or the thread count.
 * Element i of an SR row uses r = collage_rand32(key, index0 + i). dst and src must not overlap. */
collage_status collage_bf16_from_f32_row(collage_bf16 *dst, const float *src, size_t n);
collage_status collage_bf16_from_f32_sr_row(collage_bf16 *dst, const float *src, size_t n,
                                            uint64_t key, uint64_t index0);
collage_status collage_bf16_to_f32_row(float *dst, const collage_bf16 *src, size_t n);
collage_status collage_fp16_from_f32_row(uint16_t *dst, const float *src, size_t n);
collage_status collage_fp16_from_f32_sr_row(uint16_t *dst, const float *src, size_t n,
                                            uint64_t key, uint64_t index0);
collage_status collage_fp16_to_f32_row(float *dst, const uint16_t *src, size_t n);
/* Any format, scalar, one thread: the reference the fast rows are tested against. */
collage_status collage_lp_from_f32_row_ref(collage_format f, uint16_t *dst, const float *src, size_t n);
collage_status collage_lp_from_f32_sr_row_ref(collage_format f, uint16_t *dst, const float *src, size_t n,
                                              uint64_t key, uint64_t index0);
collage_status collage_lp_to_f32_row_ref(collage_format f, float *dst, const uint16_t *src, size_t n);

/* Which instruction set the row kernels use. COLLAGE_ISA_AUTO = best the CPU supports (default;
 * the environment variable COLLAGE_ISA=scalar|avx2|avx512 overrides it at first use). */
typedef enum { COLLAGE_ISA_AUTO = 0, COLLAGE_ISA_SCALAR, COLLAGE_ISA_AVX2, COLLAGE_ISA_AVX512 } collage_isa;
collage_status collage_set_isa(collage_isa isa);  /* COLLAGE_ERR_UNSUPPORTED if the CPU lacks it */
collage_isa    collage_get_isa(void);
const char    *collage_isa_name(collage_isa isa);
int            collage_isa_supported(collage_isa isa);
/* Threads used by the library's parallel kernels (0 = OpenMP's default). */
void collage_set_threads(int n);
int  collage_get_threads(void);


/* ---------------------------------------------------------------- 8-bit block codes */
/* An 8-bit code per element and one fp32 scale per block of COLLAGE_QBLOCK elements (numerics.md §11):
 * the dynamic (tree) code of bitsandbytes, signed for values of either sign and unsigned for values
 * ≥ 0, whose 256 values run from −1 (signed) or 0 to 1 with the block's largest magnitude as scale;
 * and fp8 e4m3 with the block's largest magnitude scaled to 448. Quantization rounds to nearest (or
 * stochastically), every step written out in numerics.md, so that every implementation gives the same
 * bits. */
#define COLLAGE_QBLOCK 256
typedef enum {
    COLLAGE_QCODE_DYN_SIGNED = 0, /* 0, +1 and ±127 magnitudes in seven decades: 1 byte + scale */
    COLLAGE_QCODE_DYN_UNSIGNED,   /* 0, 1 and 254 magnitudes in seven decades: values ≥ 0 only */
    COLLAGE_QCODE_E4M3,           /* fp8 e4m3 (OCP FN), scale = absmax / 448 */
    COLLAGE_QCODE_COUNT
} collage_qcode;
const char *collage_qcode_name(collage_qcode c);              /* "int8", "uint8", "e4m3" */
/* The value of code q at scale 1 (the dynamic codes: in [−1, 1], increasing with q; e4m3: its value,
 * NaN for its two NaN codes). NaN for an unknown code. */
float    collage_qcode_value(collage_qcode c, uint8_t q);
uint8_t  collage_qcode_zero(collage_qcode c);                 /* the code of 0 (signed dynamic: 127) */
/* One block of n ≤ COLLAGE_QBLOCK values: *scale and the n codes q (numerics.md §11). sr = 0: to
 * nearest; sr = 1: stochastically, element i with the bits collage_rand32(key, index0 + i). A NaN or
 * Inf in x gives scale NaN or Inf and zero codes; a block whose largest magnitude is below 2^-100 is
 * stored as zeros (scale 0). */
collage_status collage_qblock_quantize(collage_qcode c, const float *x, size_t n, uint8_t *q, float *scale, int sr,
                                       uint64_t key, uint64_t index0);
/* x[i] = fp32(value(q[i]) · scale), exactly as the optimizer reads its 8-bit states. */
collage_status collage_qblock_dequantize(collage_qcode c, const uint8_t *q, float scale, size_t n, float *x);
/* Rows: n values in blocks of COLLAGE_QBLOCK (the last one partial), scales[ceil(n / 256)]; vectorised
 * (AVX-512, AVX2) and threaded over blocks, bit-identical to the _ref twins (scalar, one thread) for any
 * ISA and thread count. Element i of a row uses the stochastic bits of index0 + i. */
collage_status collage_qrow_quantize(collage_qcode c, const float *x, size_t n, uint8_t *q, float *scales, int sr,
                                     uint64_t key, uint64_t index0);
collage_status collage_qrow_quantize_ref(collage_qcode c, const float *x, size_t n, uint8_t *q, float *scales, int sr,
                                         uint64_t key, uint64_t index0);
collage_status collage_qrow_dequantize(collage_qcode c, const uint8_t *q, const float *scales, size_t n, float *x);
collage_status collage_qrow_dequantize_ref(collage_qcode c, const uint8_t *q, const float *scales, size_t n, float *x);

/* ---------------------------------------------------------------- AdamW and its precision strategies */
/* One formula (numerics.md §6), many ways to store and apply it. A strategy is a weight scheme × a
 * first-moment format × a second-moment format. The presets below have names; every other combination
 * is spelled "PRESET+m=FORMAT,v=FORMAT" (either part may be left out, ",q=sr" re-quantizes 8-bit
 * states stochastically), e.g. "collage-light+m=int8,v=int8", and numbered
 * COLLAGE_STRATEGY_COMPOSED + … (collage_strategy_compose). Gradients have the weights' format: bf16,
 * fp16 (uint16_t, IEEE half) or fp32. */
typedef enum {
    COLLAGE_FP32 = 0,            /* θ, m, v fp32; fp32 gradients                          16 B/param */
    COLLAGE_BF16,                /* θ, m, v bf16: updates below half an ulp are lost         8 */
    COLLAGE_LIGHT,               /* "collage-light": (θ, δθ) MCF updated with Grow          10 */
    COLLAGE_PLUS,                /* "collage-plus": light + (v, δv) MCF, β2 split            12 */
    COLLAGE_BF16_FP32_STATES,    /* θ bf16; m, v fp32                                       12 */
    COLLAGE_BF16_MASTER,         /* θ bf16; fp32 master, m, v (standard mixed precision)    16 */
    COLLAGE_BF16_KAHAN,          /* θ, Kahan buffer c, m, v bf16                             10 */
    COLLAGE_BF16_SR,             /* θ, m, v bf16; θ updated by stochastic rounding            8 */
    COLLAGE_BF16_REMAINDER,      /* θ bf16 + 16-bit remainder = an exact fp32 master        10 */
    COLLAGE_PLUS_V1,             /* "collage-plus-v1": the published code, in-place MultMC
                                    bug included; only for comparison with the paper         12 */
    COLLAGE_FP16,                /* θ, m, v fp16 (IEEE half), fp16 arithmetic                 8 */
    COLLAGE_FP16_LIGHT,          /* "fp16-collage-light": (θ, δθ) fp16 MCF, m, v fp16        10 */
    COLLAGE_FP16_PLUS,           /* "fp16-collage-plus": fp16-collage-light + (v, δv)        12 */
    COLLAGE_FP16_MASTER,         /* θ fp16; fp32 master, m, v (fp16 mixed precision)         16 */
    COLLAGE_BF16_C8,             /* "bf16-c8": θ bf16 + a correction byte e (θ and e: the kept
                                    value to 16 significant bits); m, v bf16                  9 */
    COLLAGE_ECO,                 /* "eco": θ, m, v bf16; θ by stochastic rounding, its rounding error
                                    fed back into m (ECO, Nikdan et al. 2026); AdamW and SGD   8 */
    COLLAGE_STRATEGY_COUNT       /* the presets; composed strategies are numbered from
                                    COLLAGE_STRATEGY_COMPOSED */
} collage_strategy;
const char    *collage_strategy_name(collage_strategy s);   /* "fp32", "collage-light+m=int8,v=int8", … */
/* A preset's name or alias, or a composition "PRESET+m=F,v=F[,q=sr]" (F: fp32, bf16, mcf, fp16,
 * fp16-mcf, int8, e4m3; mcf and fp16-mcf for v only). A composition that equals a preset is that
 * preset. COLLAGE_ERR_ARG for anything else; collage_strategy_parse_error says why. */
collage_status collage_strategy_parse(const char *name, collage_strategy *out);
/* Why the last collage_strategy_parse on this thread failed ("'m=mcf': mcf is a second-moment format
 * only"); "" after a success. */
const char    *collage_strategy_parse_error(void);
int            collage_strategy_is_fp32(collage_strategy s); /* weights and gradients are float */
int            collage_strategy_is_fp16(collage_strategy s); /* weights and gradients are IEEE half */
int            collage_strategy_valid(collage_strategy s);   /* a preset or a valid composition */

/* The parts of a strategy. */
typedef enum {
    COLLAGE_SCHEME_FP32 = 0,     /* θ fp32, θ = θ + raw */
    COLLAGE_SCHEME_BF16,         /* θ bf16, θ = RN(θ + raw) */
    COLLAGE_SCHEME_MCF,          /* (θ, δθ) bf16, Grow: Collage's compensation */
    COLLAGE_SCHEME_SR,           /* θ bf16, stochastic rounding */
    COLLAGE_SCHEME_KAHAN,        /* θ and Kahan's c bf16 */
    COLLAGE_SCHEME_REMAINDER,    /* θ bf16 and a 16-bit remainder: an exact fp32 master */
    COLLAGE_SCHEME_MASTER,       /* θ bf16 and an fp32 master */
    COLLAGE_SCHEME_FP16,         /* θ fp16, θ = RN(θ + raw) */
    COLLAGE_SCHEME_FP16_MCF,     /* (θ, δθ) fp16, Grow */
    COLLAGE_SCHEME_FP16_MASTER,  /* θ fp16 and an fp32 master */
    COLLAGE_SCHEME_C8,           /* θ bf16 and a correction byte: the kept value rounded to 16 bits */
    COLLAGE_SCHEME_ECO,          /* θ bf16 by SR, its rounding error fed back into the first moment */
    COLLAGE_SCHEME_COUNT
} collage_weight_scheme;
typedef enum {
    COLLAGE_MOMENT_FP32 = 0,
    COLLAGE_MOMENT_BF16,
    COLLAGE_MOMENT_MCF,          /* a bf16 pair (hi, lo): collage-plus's v; second moment only */
    COLLAGE_MOMENT_FP16,
    COLLAGE_MOMENT_FP16_MCF,     /* an fp16 pair; second moment only */
    COLLAGE_MOMENT_INT8,         /* the dynamic code (signed for m, unsigned for v), per-block scale */
    COLLAGE_MOMENT_E4M3,         /* fp8 e4m3, per-block absmax scale */
    COLLAGE_MOMENT_COUNT
} collage_moment_format;
typedef struct {
    collage_weight_scheme weights;
    collage_moment_format m, v;
    int sr_states;               /* 1: 8-bit states re-quantized stochastically (else to nearest) */
} collage_composition;
#define COLLAGE_STRATEGY_COMPOSED 0x10000
/* The strategy of composition c: the preset it equals, or COLLAGE_STRATEGY_COMPOSED + weights·256 +
 * m·16 + v (+ 4096 with sr_states); this number is what state files store. COLLAGE_ERR_ARG for a
 * combination with no meaning (a pair format for m, sr_states without an 8-bit state). */
collage_status collage_strategy_compose(const collage_composition *c, collage_strategy *out);
/* The parts of strategy s (collage-plus-v1: those of collage-plus; it differs in its MultMC only). */
collage_status collage_strategy_parts(collage_strategy s, collage_composition *out);
const char    *collage_weight_scheme_name(collage_weight_scheme w); /* "collage-light", "bf16-sr", … */
const char    *collage_moment_format_name(collage_moment_format f); /* "int8", "mcf", … */

/* The strategy table: what each strategy stores, word by word. Every part of the library (allocation,
 * state files, the step, the memory report) reads its answers from this table, and so may a caller. */
typedef enum {
    COLLAGE_WORD_NONE = 0, /* the strategy has no such word */
    COLLAGE_WORD_FP32,     /* IEEE binary32, 4 bytes */
    COLLAGE_WORD_BF16,     /* bfloat16, 2 bytes */
    COLLAGE_WORD_FP16,     /* IEEE binary16, 2 bytes */
    COLLAGE_WORD_INT16,    /* a signed 16-bit integer, 2 bytes (bf16-remainder's remainder) */
    COLLAGE_WORD_INT8,     /* the dynamic 8-bit code (collage_qcode: signed for m, unsigned for v) per
                              element and one fp32 scale per block of `block` elements: 1 + 4/block bytes */
    COLLAGE_WORD_E4M3,     /* an fp8 e4m3 code per element and one fp32 scale per block */
    COLLAGE_WORD_BYTE,     /* a signed byte per element, no scale (bf16-c8's correction e), 1 byte */
    COLLAGE_WORD_FORMAT_COUNT
} collage_word_format;

/* What a word holds. The state file stores a strategy's words in this order. */
typedef enum {
    COLLAGE_ROLE_WEIGHTS = 0,   /* θ: the slab the model reads (the gradient has its format) */
    COLLAGE_ROLE_M,             /* first moment */
    COLLAGE_ROLE_V,             /* second moment (its high word when there is a δv) */
    COLLAGE_ROLE_COMPENSATION,  /* δθ: the kept weight is the MCF θ + δθ */
    COLLAGE_ROLE_KAHAN,         /* c: Kahan's running compensation, the kept weight is θ + c */
    COLLAGE_ROLE_REMAINDER,     /* the low 16 bits that make θ an fp32 master (θ's bits + remainder) */
    COLLAGE_ROLE_DV,            /* δv: the kept second moment is the MCF v + δv */
    COLLAGE_ROLE_MASTER,        /* fp32 master weights; θ is their rounding */
    COLLAGE_ROLE_CORRECTION,    /* e: the kept value's fp32 bits are θ's bits·2^16 + e·2^8 (bf16-c8) */
    COLLAGE_ROLE_COUNT
} collage_word_role;

typedef struct {
    collage_word_format format; /* COLLAGE_WORD_NONE where the strategy has no word of this role */
    int block;                  /* 8-bit words: elements per scale (COLLAGE_QBLOCK); 0 for the others */
    double bytes;               /* per parameter, scales included */
    int derived;                /* 1: the step writes it from the other words without reading it */
} collage_state_word;

typedef struct {
    const char *name;           /* "collage-light" */
    const char *alias;          /* a short name collage_strategy_parse accepts too ("light"), or NULL */
    collage_word_format arith;  /* what AdamW's lines round to: COLLAGE_WORD_FP32, _BF16 or _FP16 */
    collage_state_word word[COLLAGE_ROLE_COUNT]; /* by role */
    const char *keeps_update_in; /* where an update too small to move θ is kept ("its compensation word
                                    δθ"); NULL: such an update is lost */
    collage_composition parts;  /* the weight scheme and the moments' formats */
} collage_strategy_info;
/* The table's row of s (a preset or a composition); NULL for an unknown strategy. */
const collage_strategy_info *collage_strategy_get(collage_strategy s);
const char    *collage_word_role_name(collage_word_role r);     /* "θ", "m", "v", "δθ", "c", … */
const char    *collage_word_format_name(collage_word_format f); /* "fp32", "bf16", "fp16", "int16", "int8", "e4m3" */

/* The update rule: an optimizer computes each element's update from its gradient and its moments; the
 * strategy's weight scheme applies it (numerics.md §6 "Applying raw", §14). Lion and SGD keep one
 * moment, m (Lion's momentum, SGD's momentum buffer), in the strategy's m format; the strategy's v
 * word is not allocated, and a strategy whose v is a pair (collage-plus's (v, δv)) is refused. */
typedef enum {
    COLLAGE_OPTIM_ADAMW = 0,  /* AdamW (numerics.md §6): m, v, bias correction, decoupled decay */
    COLLAGE_OPTIM_LION,       /* Lion (Chen et al. 2023, §14): update ±lr from sign(β1·m + (1−β1)·g) */
    COLLAGE_OPTIM_SGD,        /* SGD with momentum, PyTorch's semantics (§14): L2 or decoupled decay */
    COLLAGE_OPTIM_COUNT
} collage_optimizer;
/* The table of optimizers: one row each. */
typedef struct {
    const char *name;        /* "adamw", "lion", "sgd" */
    int has_v;               /* 1: it keeps the second moment (the strategy's v word) */
    double beta1, beta2;     /* what config.beta1, beta2 = 0 stand for (SGD: unused) */
    const char *m_is;        /* what its m word holds, for messages */
} collage_optimizer_info;
const collage_optimizer_info *collage_optimizer_get(collage_optimizer o); /* NULL for an unknown one */
const char    *collage_optimizer_name(collage_optimizer o);               /* "?" for an unknown one */
collage_status collage_optimizer_parse(const char *name, collage_optimizer *out); /* COLLAGE_ERR_ARG if unknown */
/* COLLAGE_OK when optimizer o can step strategy s; else COLLAGE_ERR_ARG and why (a sentence naming
 * both) in why[cap] (may be NULL). */
collage_status collage_optimizer_check(collage_optimizer o, collage_strategy s, char *why, size_t cap);

/* A named range of the parameter slab with its own weight decay (0 for biases and norms). */
typedef struct {
    const char *name;       /* copied at create time */
    size_t offset, count;   /* elements [offset, offset + count) */
    double weight_decay;
} collage_param_group;

typedef struct {
    collage_strategy strategy;
    size_t n;                         /* parameters */
    double beta1, beta2, eps;         /* 0 → 0.9, 0.999, 1e-8. The fp16 lines (fp16, fp16-collage-*) need an
                                         eps that is not 0 in fp16 (≥ 2^-25; 1e-4 is usual): else
                                         COLLAGE_ERR_ARG */
    double weight_decay;              /* for elements in no group */
    const collage_param_group *groups;/* optional, disjoint ranges; copied */
    int n_groups;
    double clip;                      /* clip the global gradient norm to this (0 = no clipping) */
    int skip_nonfinite;               /* NaN/Inf gradient: skip the step, state untouched, report */
    int edq;                          /* measure effective descent quality (numerics.md §7) each step */
    uint64_t seed;                    /* stochastic rounding stream (bf16-sr, q=sr) */
    void *params;                     /* optional: the caller's weight slab (bf16, or float for fp32);
                                         NULL = the optimizer allocates and owns it */
    /* Sharding (ZeRO-1): the optimizer holds elements [index0, index0 + n) of a slab of `total`
     * elements (0, 0: the whole slab, index0 = 0, total = n). params, grads and every state word
     * are the shard's n elements; groups stay in the slab's coordinates and are clipped to the
     * shard; bf16-sr draws its random bits by slab index. Shards of one slab, stepped with the
     * whole slab's Σg² (collage_adamw_step_sumsq), give the whole slab's step bit for bit. A strategy
     * with 8-bit states scales them per block of COLLAGE_QBLOCK slab elements: its shards start at a
     * multiple of COLLAGE_QBLOCK and end at one or at the slab's end (COLLAGE_ERR_SIZE otherwise;
     * collage_shard_bounds gives such shards). */
    size_t index0, total;
    /* Optional: the caller's slabs for the other state words, by role (m, v, δθ, …; n elements each,
     * in the format the strategy's row gives; NULL = allocated, zeroed and owned by the optimizer;
     * words[COLLAGE_ROLE_WEIGHTS] is ignored, params is θ). A caller that keeps the state itself
     * (the Python package keeps each word in a tensor of its own) hands it over without a copy, keeps
     * it alive and in place for the optimizer's life, and restores the step count with
     * collage_adamw_set_steps when it builds an optimizer over words that already hold a state. */
    void *words[COLLAGE_ROLE_COUNT];
    /* The update rule (0: AdamW). Lion reads beta1, beta2 (0 → 0.9, 0.99) and weight_decay (decoupled);
     * SGD reads momentum μ in [0, 1), dampening in [0, 1], nesterov (needs μ > 0 and dampening 0) and
     * decoupled (0: L2, g + wd·θ enters the buffer as in PyTorch; 1: θ·lr·wd is subtracted beside the
     * update). eps is unused by both. The state file records these; load refuses another. */
    collage_optimizer optimizer;
    double momentum, dampening;
    int nesterov, decoupled;
} collage_adamw_config;

typedef struct {
    double edq;              /* ⟨Δ_eff, Δ⟩ / ‖Δ‖: effective step projected on the intended one */
    double edq_ratio;        /* ⟨Δ_eff, Δ⟩ / ‖Δ‖²: 1 when nothing is lost */
    double lost;             /* fraction of nonzero intended updates that left w unchanged */
    double edq_state;        /* the same, on the full kept value (θ + δθ, master, θ + c, …) */
    double edq_state_ratio;
    double update_norm;      /* ‖Δ‖ */
    uint64_t updates;        /* #{Δ ≠ 0} */
    /* The sums the figures above come from (in double; counts exact), so that the EDQ of pieces
     * (shards of a slab) combine: Σ Δ_eff·Δ, Σ Δ_state·Δ, Σ Δ², #{Δ ≠ 0, w unchanged}. */
    double sum_dot, sum_dot_state, sum_nn;
    uint64_t lost_count;
} collage_edq;
/* The EDQ of the union of k disjoint pieces: their sums added in the order given (so the result is
 * deterministic for a fixed order), then the figures recomputed. */
collage_edq    collage_edq_combine(const collage_edq *parts, int k);

typedef struct {
    uint64_t step;           /* steps taken so far (after this one) */
    int skipped;             /* 1: non-finite gradient, nothing changed */
    double grad_norm;        /* global L2 norm of the gradient before clipping (NaN if not computed) */
    double clip_coef;        /* factor applied to the gradient (1 = none) */
    collage_edq edq;         /* whole slab, when config.edq */
    int tie_free;            /* 1: the step's scalars (step size, lr·wd of every group, eps, clipping
                                factor) were proved to meet no bf16 tie, and the vector kernels took
                                their shorter roundings: the same results, fewer instructions; 2: for
                                collage-plus(-v1), bf16(β2) too; 0: the usual roundings somewhere */
} collage_step_stats;

/* Bytes of training state per parameter, by kind (numerics.md §6 table, gradient included): the table's
 * words added up, compensation = δθ, c or the remainder, plus δv. */
typedef struct {
    double weights, compensation, m, v, master, grad, total;
} collage_memory;

typedef struct collage_adamw collage_adamw;
collage_status collage_adamw_create(const collage_adamw_config *cfg, collage_adamw **out);
void           collage_adamw_free(collage_adamw *opt);                       /* NULL is fine */
void          *collage_adamw_params(collage_adamw *opt);   /* the weight slab the model reads */
size_t         collage_adamw_size(const collage_adamw *opt);
collage_strategy collage_adamw_strategy(const collage_adamw *opt);
collage_optimizer collage_adamw_optimizer(const collage_adamw *opt);
uint64_t       collage_adamw_steps(const collage_adamw *opt);
collage_memory collage_adamw_memory(const collage_adamw *opt);
collage_memory collage_strategy_memory(collage_strategy s);
/* The bytes optimizer o keeps with strategy s: the strategy's, less v where o has none. */
collage_memory collage_optimizer_memory(collage_optimizer o, collage_strategy s);
/* The slab of the state word of role r (n elements in the format of the strategy's row: the caller's
 * where config.words or config.params gave it), NULL where the strategy has no such word. Reading or
 * writing it between steps is allowed; collage_adamw_kept_f64 reads the kept value through the roles. */
void          *collage_adamw_word(collage_adamw *opt, collage_word_role r);
/* Restore what a state file carries besides the words: the steps taken (the bias correction and the
 * bf16-sr stream of the next step follow from it) and whether the kept value's words are set
 * (synced = 1; 0: the next step starts from θ alone, zero compensation and master = θ, as a fresh
 * optimizer's first step does). For a caller that keeps the words itself (config.words). */
collage_status collage_adamw_set_steps(collage_adamw *opt, uint64_t steps, int synced);
/* Whether the kept value's words are set (see collage_adamw_set_steps). */
int            collage_adamw_synced(const collage_adamw *opt);
/* Set the full kept value from fp32 weights: θ = RN(w) and the compensation word holds w − θ
 * (master = w exactly, remainder exact). Without it, the first step starts from θ alone. */
collage_status collage_adamw_set_weights_f32(collage_adamw *opt, const float *w, size_t n);
/* The full value the strategy keeps, per element, as double (θ + δθ, the master, θ + c, …). */
collage_status collage_adamw_kept_f64(const collage_adamw *opt, double *out, size_t n);
/* One AdamW step with learning rate lr. grads: the weights' format: bf16 (collage_bf16 *), fp16
 * (uint16_t *, IEEE half) or float (`fp32`).
 * Returns COLLAGE_ERR_NONFINITE (state untouched, stats->skipped = 1) for a NaN/Inf gradient when
 * skip_nonfinite is set. stats may be NULL. */
collage_status collage_adamw_step(collage_adamw *opt, const void *grads, double lr, collage_step_stats *stats);
/* Σ g² of grads over this optimizer's elements, in double, summed exactly as collage_adamw_step
 * sums it (fixed blocks, in order); +Inf or NaN when an element is not finite. */
collage_status collage_adamw_grad_sumsq(const collage_adamw *opt, const void *grads, double *sumsq);
/* Σ x² per chunk of a slab of n bf16 (bf16 == 1; collage_bf16 *), fp16 (bf16 == 2; uint16_t IEEE half) or
 * fp32 (bf16 == 0) elements: out[c] is the sum
 * over [c·chunk, min(n, (c + 1)·chunk)), c < ceil(n / chunk). Each square is exact and each chunk is
 * summed in double in one fixed order (16 interleaved partial sums, then a pairwise tree), threaded
 * over chunks: the same bits for any thread count. A NaN/Inf element makes its chunk's sum non-finite.
 * For a data-parallel trainer: each process sums its chunks, the chunk sums are gathered and added in
 * chunk order, and the total goes to collage_adamw_step_sumsq. */
collage_status collage_sumsq_chunks(const void *x, int bf16, size_t n, size_t chunk, double *out);
/* collage_sumsq_chunks of k slabs (xs[j] of ns[j] elements, all bf16 or all fp32) in one parallel loop
 * over all their chunks: out holds slab 0's ceil(ns[0] / chunk) sums, then slab 1's, and so on, each
 * bit for bit what collage_sumsq_chunks gives it (for the tensors of one model: one team of threads
 * rather than one per tensor). An empty slab adds no chunk (its pointer may be NULL). */
collage_status collage_sumsq_chunks_many(const void *const *xs, const size_t *ns, int k, int bf16, size_t chunk,
                                         double *out);
/* collage_adamw_step with the gradient's Σg² given by the caller: for a shard whose clipping needs
 * the norm of the whole slab (summed across processes). A non-finite grad_sumsq means a NaN/Inf
 * somewhere in the slab (skipped when skip_nonfinite). Contract: collage_adamw_step(opt, g, lr) ==
 * collage_adamw_step_sumsq(opt, g, lr, s) with s from collage_adamw_grad_sumsq(opt, g), bit for bit. */
collage_status collage_adamw_step_sumsq(collage_adamw *opt, const void *grads, double lr, double grad_sumsq,
                                        collage_step_stats *stats);
/* Step k optimizers at once, the tensors of one model each with an optimizer over its own memory: the
 * same as collage_adamw_step_sumsq(opts[j], grads[j], lr[j], grad_sumsq, &stats[j]) for j = 0 … k − 1,
 * bit for bit, with all their blocks in one parallel loop (one team of threads a step rather than one
 * per tensor, each of which costs up to milliseconds on a busy machine). grad_sumsq is the Σg² of all
 * of them (e.g. collage_sumsq_chunks of each gradient, the chunk sums added in order; NaN when none
 * clips or skips). stats: k entries, or NULL. An argument error (NULL, a negative lr, an optimizer given
 * twice) changes nothing; COLLAGE_ERR_NONFINITE when an optimizer with skip_nonfinite skipped its step
 * (its stats say so; the others stepped). More than COLLAGE_STEP_MANY_MAX are stepped in batches. */
#define COLLAGE_STEP_MANY_MAX 256
collage_status collage_adamw_step_many(collage_adamw *const *opts, const void *const *grads, const double *lr, int k,
                                       double grad_sumsq, collage_step_stats *stats);
/* The scalar reference step (one thread, no SIMD): bit-identical to collage_adamw_step by contract. */
collage_status collage_adamw_step_ref(collage_adamw *opt, const void *grads, double lr, collage_step_stats *stats);
/* EDQ on or off from the next step on (config.edq is the initial setting): e.g. measure it every k-th
 * step only. It changes no state word: the update is the same with EDQ on or off. */
collage_status collage_adamw_set_edq(collage_adamw *opt, int on);
/* Loss scaling: the gradients of the following steps come multiplied by `scale` (a finite positive
 * number, normally a power of two; 1 by default). The step divides them by it, folded into the
 * clipping factor (numerics.md §6): Σg², the gradient norm and clipping are those of g / scale. */
collage_status collage_adamw_set_grad_scale(collage_adamw *opt, double scale);
/* The vector kernels' bf16 loops round the lines with a step scalar (step size, lr·wd, eps, clipping
 * factor) half up, two instructions instead of four, where the step proves that no bf16 operand meets
 * a tie with those scalars (collage_step_stats.tie_free): the same bits, a 3-11% shorter step. The
 * proof costs a few µs per distinct scalar, so it is tried only where the optimizer holds at least
 * min_elements elements: COLLAGE_TIE_PROOF_MIN by default, 0 for every size, SIZE_MAX for none. */
#define COLLAGE_TIE_PROOF_MIN ((size_t)1 << 20)
collage_status collage_adamw_set_tie_proof(collage_adamw *opt, size_t min_elements);
/* Per-group EDQ of the last step (group -1: elements in no group). */
collage_status collage_adamw_group_edq(const collage_adamw *opt, int group, collage_edq *out);
int            collage_adamw_n_groups(const collage_adamw *opt);
const char    *collage_adamw_group_name(const collage_adamw *opt, int group);
/* Every state word (weights included) to a file, atomically (temporary name, fsync, rename), and
 * back; load validates magic, version, strategy, size, group layout, β1 and β2 (which give m and v
 * their meaning) and a checksum before it touches any state. lr, weight decay, eps and clipping
 * may differ on resume. */
collage_status collage_adamw_save(const collage_adamw *opt, const char *path);
collage_status collage_adamw_load(collage_adamw *opt, const char *path);
/* Re-sharding: from a state saved by an optimizer over any range of the same slab (same strategy,
 * total, groups, β1, β2), load the elements that range shares with this optimizer's; the others are
 * untouched. *copied (may be NULL) = their count (0 is not an error). Validates the whole file
 * (checksum included) first. Loading the parts that cover this optimizer's range gives the state
 * collage_adamw_load would give from the whole. The step count and stream come from the file. */
collage_status collage_adamw_load_part(collage_adamw *opt, const char *path, size_t *copied);
/* After a failed load or save: a message naming the file and the problem. */
const char    *collage_adamw_error(const collage_adamw *opt);

#ifdef __cplusplus
}
#endif
#endif /* COLLAGE_H */
