/* collage.h — the one public header of libcollage.
 * Exact low-precision arithmetic (bf16, fp16, fp8 e4m3/e5m2), error-free transforms and
 * multi-component floats (MCF) for training in pure 16-bit floating point (Collage, Yu et al. 2024).
 * Semantics are fixed to the bit by NUMERICS.md: one low-precision op = the op in fp32, rounded once. */
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
    COLLAGE_STATUS_COUNT
} collage_status;
const char *collage_status_str(collage_status s);

/* ---------------------------------------------------------------- bf16 scalars */
/* bf16 is a struct so it can never be used as an integer by mistake. */
typedef struct { uint16_t bits; } collage_bf16;
/* A multi-component float: the unevaluated sum hi + lo. Normalised when RN(hi + lo) == hi. */
typedef struct { collage_bf16 hi, lo; } collage_mcf;

float        collage_bf16_to_f32(collage_bf16 x);                 /* exact */
collage_bf16 collage_bf16_from_f32(float x);                      /* RN, ties to even, NUMERICS §1 */
collage_bf16 collage_bf16_from_f32_sr(float x, uint32_t r);       /* SR: up iff frac·2^32 + r ≥ 2^32 */
collage_bf16 collage_bf16_from_f64(double x);                     /* RN of a double, one rounding */
collage_bf16 collage_bf16_add(collage_bf16 a, collage_bf16 b);    /* RN(fp32(a) + fp32(b)) */
collage_bf16 collage_bf16_sub(collage_bf16 a, collage_bf16 b);
collage_bf16 collage_bf16_mul(collage_bf16 a, collage_bf16 b);
collage_bf16 collage_bf16_div(collage_bf16 a, collage_bf16 b);
collage_bf16 collage_bf16_sqrt(collage_bf16 a);
collage_bf16 collage_bf16_fma(collage_bf16 a, collage_bf16 b, collage_bf16 c); /* RN(a·b + c), one rounding */

/* Error-free transforms (NUMERICS §2). Each returns (hi, lo) with hi + lo == the exact result
 * whenever no overflow occurs (and, for fast_two_sum, when |a| ≥ |b| or a == 0). */
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
 * fp8 in the low byte). The bf16 functions above are the same arithmetic specialised for speed. */
typedef enum {
    COLLAGE_FMT_BF16 = 0,  /* 1-8-7,  bias 127, p = 8,  IEEE-like */
    COLLAGE_FMT_FP16,      /* 1-5-10, bias 15,  p = 11, IEEE binary16 */
    COLLAGE_FMT_E4M3,      /* 1-4-3,  bias 7,   p = 4,  OCP "FN": no Inf, NaN = S.1111.111, max 448 */
    COLLAGE_FMT_E5M2,      /* 1-5-2,  bias 15,  p = 3,  IEEE-like, max 57344 */
    COLLAGE_FMT_COUNT
} collage_format;

typedef struct {
    const char *name;     /* "bf16", "fp16", "e4m3", "e5m2" */
    int bits;             /* total width: 16 or 8 */
    int exp_bits;         /* exponent field width */
    int man_bits;         /* stored fraction bits (precision p = man_bits + 1) */
    int bias;             /* exponent bias */
    int has_inf;          /* 1: exponent all-ones with zero fraction is ±Inf (IEEE-like) */
    uint16_t max_bits;    /* bit pattern of the largest finite positive value */
    uint16_t nan_bits;    /* canonical positive quiet NaN */
    float max_value;      /* largest finite value */
} collage_format_info;

const collage_format_info *collage_format_get(collage_format f); /* NULL for an unknown format */
collage_status collage_format_parse(const char *name, collage_format *out);

typedef struct { uint16_t hi, lo; } collage_lp_pair;  /* generic MCF: value hi + lo */

float    collage_lp_to_f32(collage_format f, uint16_t x);                   /* exact */
uint16_t collage_lp_from_f32(collage_format f, float x);                    /* RN; overflow → Inf (e4m3: NaN) */
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

#ifdef __cplusplus
}
#endif
#endif /* COLLAGE_H */
