/* internal.h — what the library's files share and the public header does not show:
 * bit casts, the bf16 fast paths (static inline so hot loops inline them), the generic encoder,
 * the assert macro and OpenMP shims. Not installed; never included by users. */
#ifndef COLLAGE_INTERNAL_H
#define COLLAGE_INTERNAL_H

#include "collage.h"
#include "collage_data.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define COLLAGE_ASSERT(c)                                                              \
    do {                                                                               \
        if (!(c)) {                                                                    \
            fprintf(stderr, "collage: assertion failed: %s (%s:%d)\n", #c, __FILE__, __LINE__); \
            abort();                                                                   \
        }                                                                              \
    } while (0)

static inline uint32_t f32_bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static inline float bits_f32(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
static inline uint64_t f64_bits(double x) { uint64_t u; memcpy(&u, &x, 8); return u; }
static inline double bits_f64(uint64_t u) { double x; memcpy(&x, &u, 8); return x; }

/* bf16 RN of an fp32 value. Exact contract: the bf16 nearest to x, ties to even; subnormals kept;
 * overflow to ±Inf by the carry into the exponent; NaN → quiet NaN keeping sign and top payload. */
static inline uint16_t bf16_rn_bits(float x) {
    uint32_t u = f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
/* bf16 SR: up (away from zero) iff the 16 dropped bits + the top 16 bits of r carry. Exact contract:
 * P(away) = dropped/2^16 for uniform r; Inf unchanged (dropped bits are 0); NaN as in RN. */
static inline uint16_t bf16_sr_bits(float x, uint32_t r) {
    uint32_t u = f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    if ((u & 0x7fffffffu) == 0x7f800000u) return (uint16_t)(u >> 16);
    return (uint16_t)((u + (r >> 16)) >> 16);
}
static inline float bf16_f32(uint16_t b) { return bits_f32((uint32_t)b << 16); }

/* Rounding modes of the generic encoder. */
enum { LP_RN = 0, LP_SAT = 1, LP_SR = 2 };

/* Generic encoder: round the fp32 value x to format f (mode LP_RN, LP_SAT or LP_SR with bits r). */
uint16_t collage__lp_enc_f32(collage_format f, float x, int mode, uint32_t r);
uint16_t collage__lp_enc_f64(collage_format f, double x, int mode, uint32_t r);
float    collage__lp_dec(collage_format f, uint16_t x);

/* fp16 RN of an fp32 value, the generic encoder's result by a shorter road (tests/test_mpfr checks it
 * against MPFR): ties to even, subnormals kept (below 2^-14 the value times 2^24, an exact scaling,
 * rounded to an integer by the 2^23 shift), ±Inf from 65520 up, NaN quiet with the top 10 bits of its
 * payload. */
static inline uint16_t fp16_rn_bits(float x) {
    const uint32_t u = f32_bits(x), a = u & 0x7fffffffu;
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) return (uint16_t)(sign | (((a + 0xfffu + ((a >> 13) & 1u)) >> 13) - (112u << 10)));
    return (uint16_t)(sign | (uint16_t)((bits_f32(a) * 0x1p24f + 8388608.0f) - 8388608.0f));
}
/* fp16 to fp32, exact (NaN: quiet, its payload in the top fraction bits, as the generic decoder). */
static inline float fp16_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 31) return bits_f32(sign | (m ? 0x7fc00000u : 0x7f800000u) | (m << 13));
    if (e == 0) return bits_f32(sign | f32_bits((float)m * 0x1p-24f));
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* Format-generic single operations, specialised by the compiler when f is a constant. */
static inline uint16_t lp_rn(collage_format f, float x) {
    return f == COLLAGE_FMT_BF16 ? bf16_rn_bits(x) : f == COLLAGE_FMT_FP16 ? fp16_rn_bits(x) : collage__lp_enc_f32(f, x, LP_RN, 0);
}
static inline float lp_f32(collage_format f, uint16_t x) {
    return f == COLLAGE_FMT_BF16 ? bf16_f32(x) : f == COLLAGE_FMT_FP16 ? fp16_f32(x) : collage__lp_dec(f, x);
}

/* Counter-based random bits (see rand32 in lowp.c). lowbias32 (C. Wellons' hash-prospector) is a
 * bijection of 32-bit words with low avalanche bias; one keyed round is enough for rounding noise and
 * keeps SR conversions at memory speed. */
static inline uint32_t lowbias32(uint32_t x) {
    x ^= x >> 16; x *= 0x7feb352du;
    x ^= x >> 15; x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}
/* The part of the key that depends on the high half of the index, shared by a whole row. */
static inline uint32_t rand_k1(uint64_t key, uint32_t index_hi) {
    return lowbias32((uint32_t)key ^ lowbias32(index_hi + 0x9e3779b9u));
}
static inline uint32_t rand_k2(uint64_t key) { return (uint32_t)(key >> 32) * 0x9e3779b9u; }
static inline uint32_t rand_bits(uint32_t k1, uint32_t k2, uint32_t index_lo) {
    return lowbias32((index_lo ^ k1) + k2);
}

/* Atomic files (collage_atomic_*) are public: collage_data.h. On this thread, with on = 1, a commit
 * syncs the file but not its folder: for files written into a folder that the caller syncs itself
 * before renaming it into place (a checkpoint). */
void collage__atomic_defer_dir_sync(int on);
/* The end of an atomic file's writing: written (every write succeeded), the file committed
 * (collage_atomic_commit); else COLLAGE_ERR_IO with "cannot write 'PATH': errno's message" in err (errno
 * as the failed write left it) and the temporary file removed. */
collage_status collage__atomic_finish(collage_atomic_file *af, int written, char *err, size_t cap);

/* A status with a one-line message in err (cap bytes; err may be NULL). */
collage_status collage__fail(char *err, size_t cap, collage_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The whole file, malloc'd, with a NUL after its len bytes. */
collage_status collage__read_file(const char *path, char **buf, size_t *len, char *err, size_t cap);

/* mkdir -p: path and every missing folder above it; 0, or -1 with errno (ENOTDIR: a file is there). */
int collage__mkdir_p(const char *path);

/* The 64-bit checksum of checkpoint files (checksum.c): a stream of bytes in any pieces gives the
 * same value as the whole at once. Any change confined to one aligned 8-byte word of the stream is
 * always detected; other changes with probability 1 - 2^-64 or so. Part of the file format of
 * train.state: never change the function. */
typedef struct {
    uint64_t lane[4], len;
    unsigned char buf[32];
    size_t nbuf;
} collage__sum64_state;
void     collage__sum64_init(collage__sum64_state *s);
void     collage__sum64_add(collage__sum64_state *s, const void *data, size_t n);
uint64_t collage__sum64_end(const collage__sum64_state *s);
uint64_t collage__sum64(const void *data, size_t n);
/* The checksum and size of a whole file; COLLAGE_ERR_IO with a message naming it. */
collage_status collage__sum64_file(const char *path, uint64_t *sum, uint64_t *size, char *err, size_t cap);
/* A file of a checkpoint folder checked against the size and checksum its train.state records
 * (src/train/run_ckpt.c): every reader of a model file calls it first, so that no caller reads a
 * damaged or swapped one. A file in a folder without a train.state, or one it does not list (the older
 * layout lists none), passes; a train.state that cannot be read fails, naming it and the file. */
collage_status collage__checkpoint_check_file(const char *path, char *err, size_t cap);

/* Threads for library kernels. */
int collage__threads(void);
/* memset(p, 0, bytes) over collage__threads() threads in fixed 1 MiB pieces: one core's stores reach
 * about half the bandwidth that two reach, and a gradient slab is cleared every step. */
void collage__zero_par(void *p, size_t bytes);

/* Row kernels per ISA (lowp_x86.c). Each converts n elements; no threading inside. */
void collage__bf16_from_f32_avx2(uint16_t *dst, const float *src, size_t n);
void collage__bf16_from_f32_avx512(uint16_t *dst, const float *src, size_t n);
void collage__bf16_from_f32_sr_avx2(uint16_t *dst, const float *src, size_t n, uint64_t key, uint64_t i0);
void collage__bf16_from_f32_sr_avx512(uint16_t *dst, const float *src, size_t n, uint64_t key, uint64_t i0);
void collage__bf16_to_f32_avx2(float *dst, const uint16_t *src, size_t n);
void collage__bf16_to_f32_avx512(float *dst, const uint16_t *src, size_t n);
void collage__fp16_from_f32_avx2(uint16_t *dst, const float *src, size_t n);
void collage__fp16_from_f32_avx512(uint16_t *dst, const float *src, size_t n);
void collage__fp16_from_f32_sr_avx2(uint16_t *dst, const float *src, size_t n, uint64_t key, uint64_t i0);
void collage__fp16_from_f32_sr_avx512(uint16_t *dst, const float *src, size_t n, uint64_t key, uint64_t i0);
void collage__fp16_to_f32_avx2(float *dst, const uint16_t *src, size_t n);
void collage__fp16_to_f32_avx512(float *dst, const uint16_t *src, size_t n);
/* Σ x² of x[a, b) in double, in a fixed order (adamw.c: the contract). kind: x holds fp32 values (0),
 * bf16 bits (1) or fp16 bits (2). */
double collage__sumsq(const void *x, int kind, size_t a, size_t b);         /* the chosen ISA */
double collage__sumsq_ref(const void *x, int kind, size_t a, size_t b);     /* scalar twin */
void collage__sumsq16_avx2(const void *x, int kind, size_t a, size_t groups, double l[16]);
void collage__sumsq16_avx512(const void *x, int kind, size_t a, size_t groups, double l[16]);
int  collage__cpu_has_avx2(void);
int  collage__cpu_has_avx512(void);

#endif
