/* nn.h — the layer ops of the library's models (llm.c's math): forward/backward pairs over flat arrays,
 * compiled once per real type (ops.inc, instantiated by ops_f32.c and ops_f64.c), the matrix products'
 * one door (gemm.c), the guard that keeps OpenBLAS single-threaded for the length of a library call,
 * the profile a model's calls fill (prof.c), and the scalar helpers the kernels inline. Private to the
 * library and its tests.
 *
 * Conventions of every op (llm.c's): arguments go outputs, inputs, sizes; shapes in the comments are
 * row-major, e.g. (B,T,C); a backward adds (+=) into weight gradients and assigns activation gradients
 * unless its comment says otherwise. Aliasing: none unless stated.
 * bf: 1 emulates bf16 hardware in the float ops: every stored activation and activation gradient is
 * rounded to the nearest bf16 (nn_rnd_f32), once per op; products and sums stay fp32; 2 does the same
 * with fp16 (IEEE half) storage. The double ops
 * take bf and ignore it. nt: the OpenMP threads (collage_set_threads). Every loop gives each thread a
 * disjoint output range and sums run in a fixed order, so results are bit-identical for any nt and
 * with OpenMP off. */
#ifndef COLLAGE_NN_H
#define COLLAGE_NN_H

#include "internal.h"
#include "fp8q.h"
#include "fp4q.h"
#include <math.h>
/* The ops pass generic vectors (ops.inc: SUF(vec)) between static inline functions only, so no ABI is
 * involved; the compilers' note that an AVX-512-sized vector is passed differently without AVX-512 is
 * moot (clang 14 makes it an error under -Werror in the baseline build of ops_bf16.c). */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"
#elif defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- scalar helpers (inlined in hot loops) */
/* Branch-free selects: a where m is all ones, else b. Under GCC's default -ftrapping-math a float `?:`
 * is control flow that blocks vectorisation; masks on the bits are not, and give the same values. */
static inline float nn_sel_f32(uint32_t m, float a, float b) { return bits_f32((m & f32_bits(a)) | (~m & f32_bits(b))); }
static inline uint32_t nn_lt_f32(float a, float b) { return 0u - (uint32_t)(a < b); }

/* bf = 1: the bf16 nearest to v (RN, ties to even, NaN kept quiet: bf16_rn_bits); bf = 2: the fp16 (IEEE
 * half) nearest to v as a float (RN, ties to even, its subnormals, ±Inf from 65520 up, NaN kept quiet:
 * collage_lp_from_f32's fp16); bf = 0: v. Branch-free, with the format's constants chosen from bf (loop
 * invariant, so hoisted): the bf16 lines are the same instructions as before fp16 came, plus the few
 * selects fp16 needs. Below 2^-14 fp16's grid is 2^-24, which (|v| + 0.5) − 0.5 rounds to. */
static inline float nn_rnd_f32(int bf, float v) {
    const uint32_t u = f32_bits(v), a = u & 0x7fffffffu;
    const uint32_t h = 0u - (uint32_t)(bf == 2), sh = 16u - (h & 3u), keep = ~0u << sh;
    const uint32_t rn = (u + (~keep >> 1) + ((u >> sh) & 1u)) & keep, nan = (u | 0x00400000u) & keep;
    const uint32_t is_nan = 0u - (uint32_t)(a > 0x7f800000u), on = 0u - (uint32_t)(bf != 0);
    const float half = bits_f32(h & 0x3f000000u); /* 0.5 for fp16, 0 otherwise */
    const uint32_t sub = f32_bits((bits_f32(a) + half) - half) | (u & 0x80000000u);
    const uint32_t is_sub = h & (0u - (uint32_t)(a < 0x38800000u));
    const uint32_t is_inf = h & ~is_nan & (0u - (uint32_t)((rn & 0x7fffffffu) >= 0x47800000u));
    const uint32_t r = (is_sub & sub) | (is_inf & ((u & 0x80000000u) | 0x7f800000u)) | (~is_sub & ~is_inf & rn);
    return bits_f32((on & ((is_nan & nan) | (~is_nan & r))) | (~on & u));
}
static inline double nn_rnd_f64(int bf, double v) { (void)bf; return v; }
static inline float nn_min_f32(float a, float b) { return nn_sel_f32(nn_lt_f32(b, a), b, a); } /* NaN a: a */
static inline double nn_min_f64(double a, double b) { return b < a ? b : a; }

/* e^x in float without a libm call, so loops over it vectorise and give the same bits in every build
 * and with every libm. x = k·ln2 + r (Cody–Waite: ln2 = L2HI + L2LO, k·L2HI exact for |k| < 2^9),
 * |r| ≤ ln2/2 + ε, e^r by its degree-7 Taylor polynomial (truncation < 6e-9 relative), times 2^k as
 * two exact scalings 2^(k>>1)·2^(k−(k>>1)) so no factor leaves the normal range. Error ≤ 2 ulp
 * (test_gpt measures it against exp in double). Result 0 below −87.33654 (where e^x < 2^−126, the
 * subnormals are flushed), +Inf above 88.72283, NaN for NaN. */
static inline float nn_exp_f32(float x) {
    const float L2HI = 0.693145751953125f, L2LO = 1.428606765330187e-6f, SHIFTER = 12582912.0f;
    float xc = nn_sel_f32(nn_lt_f32(x, -87.5f), -87.5f, x);
    xc = nn_sel_f32(nn_lt_f32(88.8f, xc), 88.8f, xc);
    xc = nn_sel_f32(0u - (uint32_t)(x != x), 0.0f, xc); /* keep the integer conversion below defined */
    const float kf = (xc * 1.44269504088896341f + SHIFTER) - SHIFTER; /* nearest integer, |k| ≤ 129 */
    const float r = (xc - kf * L2HI) - kf * L2LO;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const int32_t k = (int32_t)kf, k1 = k >> 1, k2 = k - k1;
    float y = (p * bits_f32((uint32_t)(k1 + 127) << 23)) * bits_f32((uint32_t)(k2 + 127) << 23);
    y = nn_sel_f32(nn_lt_f32(x, -87.33654f), 0.0f, y);
    y = nn_sel_f32(nn_lt_f32(88.72283f, x), (float)INFINITY, y);
    return nn_sel_f32(0u - (uint32_t)(x != x), x, y);
}

/* dst[0..n) = src[0..n) (bf16 bits) with stores that bypass the cache where dst is 16-byte aligned: for
 * results written once and next read long after (a weight gradient, read by the optimizer after the
 * whole backward), they skip reading each line before writing it, which halves the traffic of the
 * write. nn_stream_fence() makes them visible to the other threads; call it before the data is read. */
#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
static inline void nn_copy_stream(uint16_t *dst, const uint16_t *src, size_t n) {
    size_t i = 0;
    for (; i < n && ((uintptr_t)(dst + i) & 15u); i++) dst[i] = src[i];
    for (; i + 8 <= n; i += 8) _mm_stream_si128((__m128i *)(void *)(dst + i), _mm_loadu_si128((const __m128i *)(const void *)(src + i)));
    for (; i < n; i++) dst[i] = src[i];
}
static inline void nn_stream_fence(void) { _mm_sfence(); }
#else
static inline void nn_copy_stream(uint16_t *dst, const uint16_t *src, size_t n) { memcpy(dst, src, n * sizeof *dst); }
static inline void nn_stream_fence(void) {}
#endif

/* ---------------------------------------------------------------- the matrix products' one door (gemm.c) */
/* The kernels a product can run on (one table in gemm.c). An fp32 product is one of the sgemm kernels;
 * a product of bf16 operands with fp32 sums is oneDNN's bf16 GEMM, or its operands widened to fp32
 * (exact) and multiplied by the sgemm kernel in use, which gives that kernel's bits on the widened
 * matrices (the bf16-emulated model's values). Each kernel's bits depend on the kernel and the CPU
 * (OpenBLAS's and oneDNN's pick their code from the CPU; NN_SGEMM_REF is gemm_ref.c's fixed order, the
 * same bits on every x86-64 CPU); never on the thread count (docs/numerics.md §10). */
typedef enum { NN_SGEMM_OPENBLAS = 0, NN_SGEMM_ONEDNN, NN_SGEMM_REF, NN_SGEMM_COUNT } nn_sgemm;
typedef enum { NN_BF16_WIDEN = 0, NN_BF16_ONEDNN, NN_BF16_FMA, NN_BF16_COUNT } nn_bf16_path;
/* A model's products: the sgemm kernel of its fp32 products (and of the widening path), and the path of
 * its bf16 products. */
typedef struct { nn_sgemm f32; nn_bf16_path bf16; } nn_products;
const char *nn_sgemm_name(nn_sgemm k);           /* "openblas", "onednn", "ref"; NULL if out of range */
const char *nn_sgemm_label(nn_sgemm k);          /* "OpenBLAS sgemm (SkylakeX kernels)", … */
int         nn_sgemm_available(nn_sgemm k);      /* 1: in this build on this CPU */
const char *nn_bf16_name(nn_bf16_path p);        /* "onednn", "widen", "fma" */
const char *nn_bf16_label(nn_bf16_path p);       /* "oneDNN bf16 GEMM (AVX512_BF16)", "widened to fp32 sgemm" */
int         nn_bf16_available(nn_bf16_path p);   /* oneDNN's: the build has oneDNN and the CPU bf16 instructions */
/* "fp32=K,bf16=P" (either part may be left out; K: openblas | onednn | ref | auto, P: onednn | widen |
 * auto), or "ref" alone (fp32=ref,bf16=widen: the same bits on every CPU). *f32, *bf16: the kernel, or
 * -1 for auto (or not given). 0, or -1 with a message naming the part that is wrong. */
int nn_products_parse(const char *spec, int *f32, int *bf16, char *err, size_t cap);
/* Pin the products of the models created from now on (spec as above; NULL: unpin, the environment's
 * again). 0, or -1 with a message (nothing changed). */
int nn_products_pin(const char *spec, char *err, size_t cap);
/* This thread's pin, over the process's (a run resuming with the kernels it recorded); NULL: none. */
int nn_products_pin_thread(const char *spec, char *err, size_t cap);
/* The pin in force: nn_products_pin_thread's, else nn_products_pin's, else the environment's COLLAGE_GEMM (COLLAGE_BF16_GEMM=widen
 * pins bf16 to the widening path, as before). -1 where a part is auto. */
void nn_products_pinned(int *f32, int *bf16);

/* C = op(A)·op(B) + beta·C, row-major (ta, tb: 1 = transposed; op(A) (M,K), op(B) (K,N), C (M,N)), as a
 * grid of tiles over the larger of M and N that depends on the shape only; each tile is one
 * single-threaded call of the sgemm kernel in use (nn_blas_begin's, else the pinned one, else OpenBLAS),
 * the tiles spread over nt OpenMP threads. Every element of C is the same for any nt. C may not alias
 * A, B. nn_gemm_f64: OpenBLAS's dgemm, the same grid. */
void nn_gemm_f32(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float beta,
                 float *C, int ldc, int nt);
void nn_gemm_f64(int ta, int tb, int M, int N, int K, const double *A, int lda, const double *B, int ldb,
                 double beta, double *C, int ldc, int nt);
/* One call of kernel k on the calling thread alone (the tiles' unit; gemm_ref.c's contract for REF). */
void nn_sgemm_call(nn_sgemm k, int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                   float beta, float *C, int ldc);
/* The reference sgemm (gemm_ref.c): every C element is s = Σ_k fl(a_ik·b_kj) summed in k order from +0, each product and sum rounded once to fp32 (no fused multiply-add), then C = s where
 * beta = 0 (C not read), else fl(fl(beta·C) + s). The same bits on every CPU; the AVX-512 build vectorises
 * across columns only, so it gives the baseline build's bits. */
void nn_sgemm_ref(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float beta,
                  float *C, int ldc);
void nn_sgemm_ref_avx512(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                         float beta, float *C, int ldc);

/* Scratch for the tiles of a product (fp32), grown by nn_gemm_bf16_reserve, owned by the caller. */
typedef struct { float *p; size_t cap; } nn_ws;
void nn_ws_free(nn_ws *ws);
/* Grows ws for an (M,N,K) product on nt threads; 0, or -1 when out of memory (ws unchanged). */
int  nn_gemm_bf16_reserve(nn_ws *ws, int M, int N, int K, int nt, nn_bf16_path path);
/* The epilogue of a tile: C[i0..i1) × [j0..j1) of the product is tile (fp32, row stride ldt). Tiles are
 * disjoint; they run on several threads at once. */
typedef void (*nn_tile_fn)(void *ctx, const float *tile, int ldt, int i0, int i1, int j0, int j1);
/* The product op(A)·op(B) (op(A) (M,K), op(B) (K,N), row-major bf16 bits, ta/tb: 1 = transposed) in the
 * tiles of the path's grid (the widening path: nn_gemm_f32's, with the sgemm kernel in use), each
 * computed by one thread in fp32 and handed to ep. Every element is the same for any nt; K = 0: every
 * element +0. ws: reserved for (M,N,K,nt,path). */
void nn_gemm_bf16(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                  nn_tile_fn ep, void *ctx, nn_ws *ws, nn_bf16_path path, int nt);
/* As nn_gemm_bf16, each element of a tile fp32(c · s) before ep gets it (s = 1: nn_gemm_bf16's tiles): one
 * product scaled once per sum (the 4-bit door's tensor factors). */
void nn_gemm_bf16_scaled(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                         float s, nn_tile_fn ep, void *ctx, nn_ws *ws, nn_bf16_path path, int nt);

/* A K block's fold: part (fp32, row stride ldp) is the tile C[i0..i1) × [j0..j1) of the product over
 * K = [k0, k0 + kb) alone; fold it into acc (row stride lda), which holds the earlier blocks' fold
 * (nothing yet when k0 = 0). Tiles are disjoint; they run on several threads at once. */
typedef void (*nn_fold_fn)(void *ctx, const float *part, int ldp, float *acc, int lda, int i0, int i1, int j0, int j1,
                           int k0);
/* As nn_gemm_bf16, with K cut into blocks of kb (the last one shorter): each tile's product over each K
 * block, in k0 order, is computed as nn_gemm_bf16 computes a tile (the same kernel and grid, K = the
 * block's length, the block's columns of op(A) and rows of op(B)), and handed to fold with the tile's
 * accumulator; then ep gets the accumulator. Every element is the same for any nt.
 * ws: reserved by nn_gemm_bf16_kblocks_reserve for (M,N,min(kb,K),nt,path). */
int  nn_gemm_bf16_kblocks_reserve(nn_ws *ws, int M, int N, int kb, int nt, nn_bf16_path path);
void nn_gemm_bf16_kblocks(int ta, int tb, int M, int N, int K, int kb, const uint16_t *A, int lda, const uint16_t *B,
                          int ldb, nn_fold_fn fold, nn_tile_fn ep, void *ctx, nn_ws *ws, nn_bf16_path path, int nt);

/* ---------------------------------------------------------------- fp4 products (gemm_fp4.c, numerics.md §15) */
/* An operand quantized by a 4-bit recipe: each element's E2M1 value times its block's scale value (exact in
 * bf16) in the operand's stored layout (row stride ld), and the tensor's factor dec (NVFP4: fp32(1/enc) of
 * its tensor scale; MXFP4: 1). */
typedef struct {
    const uint16_t *v;
    int ld;
    float dec;
} nn_fp4_operand;
/* A 4-bit product's settings: the recipe, what A and B are to it (NVFP4 gives a weight 16×16 blocks),
 * which of them are rounded stochastically (the gradients), the key of their SR words (A's element i uses
 * collage_rand32(key, i), B's collage_rand32(key, 2^48 + i), i its index in the stored layout), and whether
 * both operands take the random Hadamard transform along K first (signs: its mask). */
typedef struct {
    collage_fp4_recipe recipe;
    collage_fp4_role ra, rb;
    int sr_a, sr_b;
    uint64_t key;
    int hadamard;
    uint16_t signs;
} nn_fp4_spec;
#define NN_FP4_SR_B ((uint64_t)1 << 48) /* operand B's first SR index */
/* Scratch of a 4-bit product: both operands' values, block scales, factors, Hadamard-transformed inputs
 * (fp32) and the tiles; the seconds its products spent quantizing (and transforming), summed. */
typedef struct {
    uint16_t *v[2];
    uint8_t *sc[2];
    float *enc[2], *d[2], *h[2];
    size_t cap_v[2], cap_s[2], cap_h[2];
    nn_ws tiles;
    double quant_s;
} nn_fp4_ws;
void nn_fp4_ws_free(nn_fp4_ws *ws);
/* Grows ws for op(A) (M,K) · op(B) (K,N) under p on nt threads; 0, or -1 when out of memory. */
int  nn_gemm_fp4_reserve(nn_fp4_ws *ws, const nn_fp4_spec *p, int ta, int tb, int M, int N, int K, int nt,
                         nn_bf16_path path);
/* The quantization of operand `which` (0: A, 1: B; stored transposed when trans) under p. */
collage_fp4_quant nn_fp4_quant_of(const nn_fp4_spec *p, int which, int trans);
/* C = op(A)·op(B) (op(A) (M,K), op(B) (K,N), row-major bf16 bits) on 4-bit operands (numerics.md §15
 * "The 4-bit product"): each operand transformed along K when p->hadamard (collage__fp4_rht), quantized
 * by collage__fp4_quantize_v, its values v·d multiplied through the bf16 door (nn_gemm_bf16_scaled: fp32
 * sums, the door's kernel and order), and each sum P scaled once: c = fp32(P · fp32(dec_a · dec_b)); the
 * tiles go to ep. Every element is the same for any nt. COLLAGE_ERR_NONFINITE: NaN or Inf in
 * A or B, ep never called. ws: reserved by nn_gemm_fp4_reserve. */
collage_status nn_gemm_fp4(const nn_fp4_spec *p, int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                           const uint16_t *B, int ldb, nn_tile_fn ep, void *ctx, nn_fp4_ws *ws, nn_bf16_path path,
                           int nt);
/* nn_gemm_fp4's scalar twin: the scalar quantizer (fp4q.c) on the widened (or transformed, one thread)
 * operands, each value fp32(v(code)·d) from its code and scale byte, each sum P = Σ fl(a·b) in k order from
 * +0 (the reference sgemm's), c = fp32(P · fp32(dec_a · dec_b)); one call of ep with the whole result.
 * Bit for bit nn_gemm_fp4 on the reference sgemm (widening path). Allocates its scratch (a reference). */
collage_status nn_gemm_fp4_ref(const nn_fp4_spec *p, int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                               const uint16_t *B, int ldb, nn_tile_fn ep, void *ctx);

/* ---------------------------------------------------------------- fp8 products (gemm_fp8.c, numerics.md §13) */
/* An operand quantized by a recipe: its fp8 values held in bf16 in the operand's stored layout (row
 * stride ld), its blocks' dequantization factors (row-major over a grid of br × bc blocks, gc blocks to a
 * grid row), or, with dequant, the dequantized values q·inv themselves (MXFP8: exact in bf16). */
typedef struct {
    const uint16_t *v;
    int ld;
    const float *inv;
    int br, bc, gc;
    int dequant;
} nn_fp8_operand;

/* How a product's operands are quantized: the recipe, the roles of A and B (their formats: e4m3, or e5m2
 * for a gradient unless e4m3_all; the block recipe gives a weight 128×128 blocks), and for DELAYED the
 * scaling state and the slots of A and B (their scales are read, their amaxes recorded). */
typedef struct {
    collage_fp8_recipe recipe;
    int e4m3_all;
    collage_fp8_role ra, rb;
    collage__fp8_scaling *scaling;
    int slot_a, slot_b;
} nn_fp8_spec;

/* Scratch of an fp8 product: both operands' values and scales, and the tiles; the seconds its products
 * have spent quantizing (a benchmark's phase). */
typedef struct {
    uint16_t *v[2];
    float *s[2], *inv[2];
    size_t cap_v[2], cap_s[2];
    nn_ws tiles;
    double quant_s;
} nn_fp8_ws;
void nn_fp8_ws_free(nn_fp8_ws *ws);
/* Grows ws for the (M,N,K) product of spec p on nt threads; 0, or -1 when out of memory. */
int  nn_gemm_fp8_reserve(nn_fp8_ws *ws, const nn_fp8_spec *p, int ta, int tb, int M, int N, int K, int nt,
                         nn_bf16_path path);
/* The quantization of operand `which` (0: A, its K along a row unless ta; 1: B, its K down a column unless
 * tb) under p: the recipe, the role's format, the K axis, a delayed slot's scale in force. */
collage_fp8_quant nn_fp8_quant_of(const nn_fp8_spec *p, int which, int trans);
/* Quantizes the stored matrix X (rows, cols, row stride ld) with q into op, its values and scales in
 * v, s, inv (rows·cols, and collage__fp8_blocks floats each); amax: the tensor's, or NULL.
 * collage__fp8_quantize's statuses (COLLAGE_ERR_NONFINITE: NaN or Inf in X, op not made). */
collage_status nn_fp8_operand_make(nn_fp8_operand *op, const collage_fp8_quant *q, const uint16_t *X, int rows, int cols,
                                   int ld, uint16_t *v, float *s, float *inv, float *amax, int nt);
/* C = op(A)·op(B) of quantized operands (shapes as nn_gemm_bf16), handed to ep in tiles as fp32 values:
 *   dequantized operands (MXFP8): the bf16 product of the dequantized values, one nn_gemm_bf16;
 *   else, with kb the operands' block length along K (K for the per-tensor recipes, 128 for BLOCK): for
 *   each K block [k0, k0 + kb), P = the bf16 product door's fp32 sums of the fp8 values over the block,
 *   s = fp32(ia·ib) (the blocks' factors of row i of op(A) and column j of op(B)), and
 *   c = fp32(P·s) for k0 = 0, then c = fp32(c + fp32(P·s)).
 * Every element is the same for any nt. tiles: reserved by nn_gemm_fp8_reserve. */
void nn_gemm_fp8_q(int ta, int tb, int M, int N, int K, const nn_fp8_operand *A, const nn_fp8_operand *B, nn_tile_fn ep,
                   void *ctx, nn_ws *tiles, nn_bf16_path path, int nt);
/* Quantizes A and B by p (nn_fp8_quant_of, nn_fp8_operand_make), records their amaxes in the delayed
 * state (only when both are finite), then nn_gemm_fp8_q. COLLAGE_ERR_NONFINITE: NaN or Inf in A or B,
 * ep never called and the state untouched (the caller skips the step). */
collage_status nn_gemm_fp8(const nn_fp8_spec *p, int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                           const uint16_t *B, int ldb, nn_tile_fn ep, void *ctx, nn_fp8_ws *ws, nn_bf16_path path,
                           int nt);
/* A weight's fp8 copy kept from the forward product of a step for the backward one (dX = dY·W) of the same
 * step (numerics.md §13, "A linear layer in fp8"): its values and blocks' factors, and what it was made
 * from (the matrix's address and shape, the format, block shape and scale), which must all match for the
 * copy to stand for a new quantization; the amax it recorded. Its buffers: nn_fp8_wcopy_alloc. */
typedef struct {
    uint16_t *v;
    float *s, *inv;
    size_t cap_v, cap_s;
    nn_fp8_operand op;
    const uint16_t *w;
    int rows, cols, ld, br, bc;
    collage_format fmt;
    float scale, amax;
    int valid;
} nn_fp8_wcopy;
void nn_fp8_wcopy_free(nn_fp8_wcopy *wc); /* its buffers; NULL is fine */
/* nn_gemm_fp8 with B a layer's weight and wc its copy (NULL: none; else allocated for B by
 * nn_fp8_wcopy_alloc, asserted): reuse = 0 quantizes B into wc (the copy for a later product of the
 * step); reuse = 1 takes wc's copy
 * where it is B's quantization under p, its amax recorded again, else quantizes as reuse = 0. The same
 * bits as nn_gemm_fp8 as long as the weight's values do not change between the two products. */
collage_status nn_gemm_fp8_w(const nn_fp8_spec *p, int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                             const uint16_t *B, int ldb, nn_tile_fn ep, void *ctx, nn_fp8_ws *ws, nn_fp8_wcopy *wc,
                             int reuse, nn_bf16_path path, int nt);
/* nn_gemm_fp8's scalar twin: the same quantization on one thread, each block's sum P = Σ fl(a·b) in k order
 * from +0 in fp32 (the reference sgemm's order), the same folds; ep is called once with the whole (M,N)
 * result. Allocates its scratch (a reference, not a step's call). Bit for bit nn_gemm_fp8 with the
 * widening path on the reference sgemm (COLLAGE_GEMM=ref). */
collage_status nn_gemm_fp8_ref(const nn_fp8_spec *p, int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                               const uint16_t *B, int ldb, nn_tile_fn ep, void *ctx);

/* Seconds the products of shapes take on one thread with these kernels (bf16 = 0: fp32 products on
 * f32; 1: bf16 products on path, widening with f32), estimated from one timed tile of each product
 * (the best of reps runs) times its tiles and its count; stops early and returns INFINITY once past
 * limit seconds. */
typedef struct { int ta, tb, M, N, K, count; } nn_shape;
double nn_products_seconds(const nn_shape *shapes, int n, int bf16, nn_sgemm f32, nn_bf16_path path, int reps,
                           double limit);

/* collage's own bf16 product (gemm_fma.c, AVX-512): one tile t (m,n) (row stride n) = op(A)·op(B) of bf16
 * operands, each element one fused multiply-add per k in k order from +0 (docs/numerics.md §10), with
 * pack (nn_gemm_fma_pack_floats(m, n, K) floats) for the operands' widened panels. K > 0. nn_gemm_fma_ref
 * (gemm.c) computes the same values in plain C: its twin, for the tests. */
size_t nn_gemm_fma_pack_floats(int m, int n, int K);
/* The same product whole (gemm.c's door on the fma path): C (M,N) = op(A)·op(B), each element then
 * fp32(c · s) (s = 1: c), the same values for any nt (the contract is blocking-free), ep called on parts of C (disjoint, together all of it) from the
 * thread that computed them, each part at its row stride. The threads take C's longer side in parts of
 * 128 columns or 132 rows, the next free part each, and run them in bands (at most 264 rows × 768
 * columns) over k blocks of 256 in their own scratch: the split side's operand is packed once for the
 * product, the other's band, where it fits 384 × 768 floats for all of k, once for each thread (else a k
 * block at a time); they meet only at the end. scratch: nn_gemm_fma_floats(M, N, K, nt) floats, bounded
 * whatever the shape. K ≥ 0. nn_gemm_fma_band gives a band's rows and columns (what the products'
 * measurement times). */
size_t nn_gemm_fma_floats(int M, int N, int K, int nt);
void   nn_gemm_fma(int ta, int tb, int M, int N, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                   float s, nn_tile_fn ep, void *ctx, float *scratch, int nt);
void   nn_gemm_fma_band(int M, int N, int *m, int *n);
void   nn_gemm_fma_tile(int ta, int tb, int m, int n, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                        float *t, float *pack);
void   nn_gemm_fma_ref(int ta, int tb, int m, int n, int K, const uint16_t *A, int lda, const uint16_t *B, int ldb,
                       float *t);

/* The kernel every library call that reaches a product brackets its work with: nn_blas_begin sets the
 * sgemm kernel of this thread's products (returned value: the one it replaces, for nn_blas_end) and keeps
 * OpenBLAS's process-wide thread count at 1 from the first begin until the last end (calls may nest and
 * run on several threads at once), then the caller's value again. The products also keep it themselves,
 * so a call that does not bracket still gets single-threaded tiles. */
int  nn_blas_begin(nn_sgemm k);
void nn_blas_end(int token);
/* What OpenBLAS runs on: its core type (openblas_get_corename) and whether it is below what this CPU
 * offers (an AVX2 or AVX-512 CPU on SSE kernels: a build that does not know the CPU). The kernel type
 * to set in OPENBLAS_CORETYPE before OpenBLAS loads is written to want (NULL where it is not below). */
const char *nn_openblas_core(void);
int         nn_openblas_below(const char **want);

/* Seconds on the monotonic clock (prof.c): the products' timing, the profile and the peak loops. */
double nn_now(void);

/* ---------------------------------------------------------------- profiling (prof.c) */
/* Where a model's calls spend their time. The model object makes its nn_prof this thread's for the
 * length of each call it profiles (nn_prof_swap); the products' doors (nn_gemm_f32, _f64, _bf16,
 * _bf16_kblocks, nn_gemm_fp8_w) and the attention ops then add the wall time from their entry to their
 * exit (the epilogues of the tiles included), read on the calling thread, never on the OpenMP workers,
 * and the products their FLOPs (2·M·N·K). A timed call inside another (fp8's bf16 product inside its
 * door) adds nothing: the outermost counts. With no profile set (the default) no clock is read. */
typedef enum { NN_PROF_PRODUCTS, NN_PROF_ATTENTION, NN_PROF_KINDS } nn_prof_kind;
typedef struct {
    double s[NN_PROF_KINDS], flops[NN_PROF_KINDS];
    long long calls[NN_PROF_KINDS];
    int depth; /* timed calls open, on the thread whose profile this is */
} nn_prof;
nn_prof *nn_prof_swap(nn_prof *p);    /* this thread's profile becomes p (NULL: none); returns the one before */
double   nn_prof_begin(void);         /* at a timed call's entry: its start, for nn_prof_end (0: none read) */
void     nn_prof_end(nn_prof_kind k, double t0, double flops); /* at its exit */

/* ---------------------------------------------------------------- layer ops */
/* Each op exists as _f32 (float), _f64 (double; bf ignored) and _bf16 (bf16 storage: act = uint16_t bf16
 * bits, computed in float, every stored value rounded once; bf ignored, always on), from one source
 * (ops.inc). `act` arrays hold activations, activation gradients and weights; `real` arrays hold
 * statistics, scratch and weight-gradient sums. Contracts:
 *
 * encoder_forward: out[b,t,:] = wte[tok[b,t],:] + wpe[t,:].  out (B,T,C); tok (B,T), each in
 *   [0, rows of wte); wte (Vp,C); wpe (≥T,C).
 * encoder_backward: dwte[tok[n],:] += dout[n,:] (dwte may be NULL), dwpe[t,:] += dout[n,:], in the order
 *   n = 0 … B·T−1 for every element.  dwte (Vp,C), dwpe (≥T,C); dout (B,T,C); tok (B,T).
 * layernorm_forward: per row out = (x − mean)·rstd·w + b, rstd = 1/sqrt(var + 1e-5) (two-pass variance).
 *   out (N,C), mean (N), rstd (N) unrounded; inp (N,C), w (C), b (C).
 * layernorm_backward: dw += Σ_n norm·dout, db += Σ_n dout (row order); dinp = rnd(dx) (accumulate = 0)
 *   or rnd(dinp + rnd(dx)) (1), dx = rstd·(w·dout − mean(w·dout) − norm·mean(w·dout·norm)).
 *   dinp (N,C), dw (C), db (C); dout (N,C), inp (N,C), w (C), mean (N), rstd (N). dinp ≠ dout.
 * bias_backward: db[j] += Σ_n dout[n,j] in row order.  db (OC); dout (N,OC).
 * gelu_forward: tanh approximation, as x·σ(2u) = x / (1 + e^{−2u}), u = sqrt(2/π)(x + 0.044715 x³).
 *   out (n); inp (n).
 * gelu_backward: in place d = rnd(d·gelu'(x)).  d (n); inp (n), the forward's input.
 * attention_forward: causal multi-head, head h in columns h·hs of each of q, k, v (hs = C/NH):
 *   att = softmax(q·kᵀ/sqrt(hs)) with zeros above the diagonal, out = att·v.  out (B,T,C),
 *   att (B,NH,T,T), scr nn_attention_scratch(B,T,C,NH) reals; qkv (B,T,3C) = [q | k | v] per row.
 * attention_backward: dqkv assigned from datty, with qkv and att of the forward.  dqkv (B,T,3C), scr as
 *   in the forward; datty (B,T,C), qkv (B,T,3C), att (B,NH,T,T).
 * crossentropy_forward: in place logits (N,Vp) → probabilities over the first V columns (columns ≥ V
 *   set to 0); losses (N): log Σ exp(x − max) − (x[target] − max); tgt (N) in [0,V). Returns the mean
 *   loss, summed in row order in double. The probabilities are not rounded (fp32 softmax in bf16 too).
 * crossentropy_backward: dlogits = rnd((p − onehot(target))·dloss), columns ≥ V 0, from the
 *   probabilities (N,Vp); dlogits (N,Vp) may be probs itself where act is real. */
static inline size_t nn_attention_scratch(int B, int T, int C, int NH) {
    const size_t hs = (size_t)(C / NH), ld = ((size_t)T + 63) / 64 * 64; /* ops.inc: OPS_ATT_SCR */
    return (size_t)B * (size_t)NH * ((hs + (size_t)T + 3) * ld + 2 * hs);
}
#define NN_LAYER_OPS(S, real, act)                                                                            \
    void nn_encoder_forward##S(act *out, const int *tok, const act *wte, const act *wpe, int B, int T, int C,  \
                               int bf, int nt);                                                               \
    void nn_encoder_backward##S(real *dwte, real *dwpe, const act *dout, const int *tok, int B, int T, int C,  \
                                int nt);                                                                      \
    void nn_layernorm_forward##S(act *out, real *mean, real *rstd, const act *inp, const act *w, const act *b, \
                                 int N, int C, int bf, int nt);                                               \
    void nn_layernorm_backward##S(act *dinp, real *dw, real *db, const act *dout, const act *inp, const act *w, \
                                  const real *mean, const real *rstd, int N, int C, int accumulate, int bf,    \
                                  int nt);                                                                    \
    void nn_bias_backward##S(real *db, const act *dout, int N, int OC, int nt);                               \
    void nn_gelu_forward##S(act *out, const act *inp, size_t n, int bf, int nt);                              \
    void nn_gelu_backward##S(act *d, const act *inp, size_t n, int bf, int nt);                               \
    void nn_attention_forward##S(act *out, act *att, real *scr, const act *qkv, int B, int T, int C, int NH,   \
                                 int bf, int nt);                                                             \
    void nn_attention_backward##S(act *dqkv, real *scr, const act *datty, const act *qkv, const act *att,      \
                                  int B, int T, int C, int NH, int bf, int nt);                               \
    double nn_crossentropy_forward##S(real *logits, real *losses, const int *tgt, int N, int V, int Vp, int nt); \
    void nn_crossentropy_backward##S(act *dlogits, const real *probs, const int *tgt, int N, int V, int Vp,    \
                                     real dloss, int bf, int nt);
NN_LAYER_OPS(_f32, float, float)
NN_LAYER_OPS(_f64, double, double)
NN_LAYER_OPS(_bf16, float, uint16_t)
/* The bf16 ops, matmul_bf16.c and gpt2_bf16.c are also compiled with AVX-512 (…_avx512.c: the same
 * source, every name suffixed by NN_BF16_NAME); the same values, the loops 16 lanes wide. */
NN_LAYER_OPS(_bf16_avx512, float, uint16_t)
#define NN_CAT_(a, b) a##b
#define NN_CAT(a, b) NN_CAT_(a, b)
#ifdef NN_BF16_BUILD_AVX512
#define NN_BF16_NAME(name) NN_CAT(name, _avx512)
#else
#define NN_BF16_NAME(name) name
#endif

/* The products of the float and double models (a grid of sgemm / dgemm tiles):
 * matmul_forward: out = rnd(inp·wᵀ (+ bias)).  out (N,OC); inp (N,C), w (OC,C), bias (OC) or NULL.
 * matmul_backward: dinp = rnd(dout·w) (assigned), dw += doutᵀ·inp, db += Σ_n dout (db may be NULL).
 *   dinp (N,C), dw (OC,C), db (OC); dout (N,OC), inp (N,C), w (OC,C).
 * residual_bias_forward: the residual add after a projection written into out: out = rnd(res + rnd(out +
 *   bias)).  out (N,C) in place; res (N,C), bias (C).
 * round_inplace: x = rnd(x) (bf16 mode only; nothing when bf = 0).  x (n). */
#define NN_REAL_PRODUCTS(S, real)                                                                             \
    void nn_matmul_forward##S(real *out, const real *inp, const real *w, const real *bias, int N, int C, int OC, \
                              int bf, int nt);                                                                \
    void nn_matmul_backward##S(real *dinp, real *dw, real *db, const real *dout, const real *inp, const real *w, \
                               int N, int C, int OC, int bf, int nt);                                         \
    void nn_residual_bias_forward##S(real *out, const real *res, const real *bias, int N, int C, int bf, int nt); \
    void nn_round_inplace##S(real *x, size_t n, int bf, int nt);
NN_REAL_PRODUCTS(_f32, float)
NN_REAL_PRODUCTS(_f64, double)

/* The products of the bf16 model (matmul_bf16.c): bf16 operands, fp32 sums, one rounding where the
 * float model in bf16 mode rounds. ws: reserved (nn_gemm_bf16_reserve) for the product's shape.
 * matmul_forward_bf16: out = rnd(inp·wᵀ + bias), or with res: out = rnd(res + rnd(inp·wᵀ + bias)).
 *   out (N,OC); inp (N,C), w (OC,C), bias (OC) or NULL, res (N,OC) or NULL. out may not alias res.
 * matmul_logits_bf16: out = rnd(inp·wᵀ) as floats (the input of the fp32 softmax).  out (N,OC).
 * matmul_backward_input_bf16: dinp = rnd(dout·w).  dinp (N,C); dout (N,OC), w (OC,C).
 * matmul_backward_weight_bf16: dw = rnd(doutᵀ·inp + S) (add = 0) or rnd(dw + (doutᵀ·inp + S)) (add = 1),
 *   S[tok[n],:] += dtok[n,:] for n = 0 … ntok−1 in order (tok NULL: S = 0; the embedding's gradient).
 *   dw (OC,C) bf16; dout (N,OC), inp (N,C); tok (ntok) in [0,OC), dtok (ntok,C). */
#define NN_BF16_PRODUCTS(S)                                                                                   \
    void nn_matmul_forward_bf16##S(uint16_t *out, const uint16_t *inp, const uint16_t *w, const uint16_t *bias,  \
                                   const uint16_t *res, int N, int C, int OC, nn_ws *ws, nn_bf16_path path, int nt); \
    void nn_matmul_logits_bf16##S(float *out, const uint16_t *inp, const uint16_t *w, int N, int C, int OC,      \
                                  nn_ws *ws, nn_bf16_path path, int nt);                                        \
    void nn_matmul_backward_input_bf16##S(uint16_t *dinp, const uint16_t *dout, const uint16_t *w, int N, int C,  \
                                          int OC, nn_ws *ws, nn_bf16_path path, int nt);                        \
    void nn_matmul_backward_weight_bf16##S(uint16_t *dw, int add, const uint16_t *dout, const uint16_t *inp,     \
                                           int N, int C, int OC, const int *tok, const uint16_t *dtok, int ntok, \
                                           nn_ws *ws, nn_bf16_path path, int nt);
NN_BF16_PRODUCTS()
NN_BF16_PRODUCTS(_avx512)

/* The same four ops on fp8 products (numerics.md §13: "A linear layer in fp8"): each quantizes its two
 * operands by the layer's recipe (nn_gemm_fp8), the input and weight in e4m3, the incoming gradient in
 * e5m2 (e4m3 with e4m3_all), and stores through the bf16 op's epilogue. The backward is straight-through:
 * dinp = rnd(Q(dout)·Q(w)), dw from Q(dout)ᵀ·Q(inp). Delayed scaling reads and records the layer's three
 * slots: slot (its input), slot + 1 (its weight), slot + 2 (its incoming gradient). ws: reserved by
 * nn_fp8_layer_reserve. COLLAGE_ERR_NONFINITE: NaN or Inf in an operand, nothing stored, nothing
 * recorded (the step is to be skipped). */
typedef struct {
    collage_fp8_recipe recipe;
    int e4m3_all;
    collage__fp8_scaling *scaling; /* DELAYED: the model's state */
    int slot;
    nn_fp8_wcopy *wc;              /* the weight's copy from the forward, for backward_input; or NULL */
} nn_fp8_layer;
/* Allocates wc's buffers (what it held freed) for the weight (OC, C) of layer L as L's forward quantizes
 * it: OC·C values, and two floats per block of L's recipe (one block for the per-tensor recipes, 128×128
 * blocks for BLOCK); MXFP8 quantizes a weight along each K, so no copy serves its two products and its
 * layers take none. 0, or -1 when out of memory (wc then holds nothing). */
int  nn_fp8_wcopy_alloc(nn_fp8_wcopy *wc, const nn_fp8_layer *L, int C, int OC);
/* The formats of a model's delayed slots, `layers` linear layers of three slots each. */
void nn_fp8_slot_formats(collage_format *fmts, int layers, int e4m3_all);
/* Grows ws for the three products of a linear layer of (N, C) → (N, OC) on nt threads; 0, or -1. A layer
 * with a weight copy (L->wc) quantizes its weight into the copy, so ws holds no room for it. */
int  nn_fp8_layer_reserve(nn_fp8_ws *ws, const nn_fp8_layer *L, int N, int C, int OC, int nt, nn_bf16_path path);
#define NN_FP8_PRODUCTS(S)                                                                                    \
    collage_status nn_matmul_forward_fp8##S(uint16_t *out, const uint16_t *inp, const uint16_t *w,              \
                                            const uint16_t *bias, const uint16_t *res, int N, int C, int OC,    \
                                            const nn_fp8_layer *L, nn_fp8_ws *ws, nn_bf16_path path, int nt);   \
    collage_status nn_matmul_logits_fp8##S(float *out, const uint16_t *inp, const uint16_t *w, int N, int C,     \
                                           int OC, const nn_fp8_layer *L, nn_fp8_ws *ws, nn_bf16_path path,     \
                                           int nt);                                                             \
    collage_status nn_matmul_backward_input_fp8##S(uint16_t *dinp, const uint16_t *dout, const uint16_t *w,     \
                                                   int N, int C, int OC, const nn_fp8_layer *L, nn_fp8_ws *ws,  \
                                                   nn_bf16_path path, int nt);                                  \
    collage_status nn_matmul_backward_weight_fp8##S(uint16_t *dw, int add, const uint16_t *dout,                \
                                                    const uint16_t *inp, int N, int C, int OC, const int *tok,  \
                                                    const uint16_t *dtok, int ntok, const nn_fp8_layer *L,      \
                                                    nn_fp8_ws *ws, nn_bf16_path path, int nt);
NN_FP8_PRODUCTS()
NN_FP8_PRODUCTS(_avx512)

/* The same four ops on 4-bit products (numerics.md §15 "The model in fp4"): each quantizes its two operands
 * by the layer's recipe (nn_gemm_fp4): the input and the weight to nearest, the incoming gradient
 * stochastically (SR words from the layer's key: dX's with collage_rand_key(key, 0), dW's with
 * collage_rand_key(key, 1)); dW's two inputs take the random Hadamard transform along the tokens when
 * the layer's recipe asks. The backward is straight-through: dinp = rnd(Q(dout)·Q(w)), dw from
 * Q(R·dout)ᵀ·Q(R·inp). ws: reserved by nn_fp4_layer_reserve. COLLAGE_ERR_NONFINITE: NaN or Inf in an
 * operand, nothing stored (the step is to be skipped). */
/* A linear layer's weight as its forward quantized it, kept for the layer's dX product (numerics.md §15):
 * the values v·d (bf16, the weight's (OC, C) layout), the tensor factor dec, and which matrix (w, rows,
 * cols, ld) they are of; valid 0 when they stand for none. Its buffer: nn_fp4_wcopy_alloc. */
typedef struct {
    uint16_t *v;
    size_t cap;
    const uint16_t *w;
    int rows, cols, ld, valid;
    float dec;
} nn_fp4_wcopy;
void nn_fp4_wcopy_free(nn_fp4_wcopy *wc); /* its buffer; NULL is fine */
typedef struct {
    collage_fp4_recipe recipe;
    int hadamard;
    int grad_rn; /* the incoming gradient quantized with RN instead of SR (an ablation of the recipe) */
    uint16_t signs;
    uint64_t key;
    nn_fp4_wcopy *wc; /* the weight's copy from the forward, for backward_input; or NULL */
} nn_fp4_layer;
/* Whether the forward's quantization of a weight serves the layer's dX product bit for bit: the same
 * role, no SR and no transform in both, and the same block shape along either K (NVFP4's 16×16 weight
 * blocks; MXFP4's 1×32 blocks follow K, so not). */
int  nn_fp4_wcopy_serves(const nn_fp4_layer *L);
/* Allocates wc's buffer (what it held freed) for a weight of OC·C values; 0, or -1 when out of memory
 * (wc then holds nothing). */
int  nn_fp4_wcopy_alloc(nn_fp4_wcopy *wc, int C, int OC);
/* nn_gemm_fp4 with B a layer's weight and wc its copy (NULL: none; else allocated for B, asserted):
 * reuse = 0 quantizes B into wc (the copy for the layer's dX product); reuse = 1 takes wc's values when
 * wc holds this matrix (w, rows, cols, ld), else quantizes into wc. Only for a p under which wc's
 * quantization is B's (nn_fp4_wcopy_serves): the bits are nn_gemm_fp4's. */
collage_status nn_gemm_fp4_w(const nn_fp4_spec *p, int ta, int tb, int M, int N, int K, const uint16_t *A, int lda,
                             const uint16_t *B, int ldb, nn_tile_fn ep, void *ctx, nn_fp4_ws *ws, nn_fp4_wcopy *wc,
                             int reuse, nn_bf16_path path, int nt);
/* Grows ws for the three products of a linear layer of (N, C) → (N, OC) on nt threads; 0, or -1. */
int  nn_fp4_layer_reserve(nn_fp4_ws *ws, const nn_fp4_layer *L, int N, int C, int OC, int nt, nn_bf16_path path);
/* The spec of one of a layer's products: 0 forward (Y = X·Wᵀ), 1 dX = dY·W, 2 dW = dYᵀ·X. */
nn_fp4_spec nn_fp4_layer_spec(const nn_fp4_layer *L, int product);
#define NN_FP4_PRODUCTS(S)                                                                                    \
    collage_status nn_matmul_forward_fp4##S(uint16_t *out, const uint16_t *inp, const uint16_t *w,              \
                                            const uint16_t *bias, const uint16_t *res, int N, int C, int OC,    \
                                            const nn_fp4_layer *L, nn_fp4_ws *ws, nn_bf16_path path, int nt);   \
    collage_status nn_matmul_logits_fp4##S(float *out, const uint16_t *inp, const uint16_t *w, int N, int C,     \
                                           int OC, const nn_fp4_layer *L, nn_fp4_ws *ws, nn_bf16_path path,     \
                                           int nt);                                                             \
    collage_status nn_matmul_backward_input_fp4##S(uint16_t *dinp, const uint16_t *dout, const uint16_t *w,     \
                                                   int N, int C, int OC, const nn_fp4_layer *L, nn_fp4_ws *ws,  \
                                                   nn_bf16_path path, int nt);                                  \
    collage_status nn_matmul_backward_weight_fp4##S(uint16_t *dw, int add, const uint16_t *dout,                \
                                                    const uint16_t *inp, int N, int C, int OC, const int *tok,  \
                                                    const uint16_t *dtok, int ntok, const nn_fp4_layer *L,      \
                                                    nn_fp4_ws *ws, nn_bf16_path path, int nt);
NN_FP4_PRODUCTS()
NN_FP4_PRODUCTS(_avx512)

#endif
