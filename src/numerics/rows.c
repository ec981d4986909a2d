/* rows.c — the public row conversions: argument checks, run-time choice of the instruction set
 * (AVX-512, AVX2, scalar; COLLAGE_ISA overrides), and OpenMP threading over fixed blocks, so the
 * output never depends on the ISA or the thread count (each element is converted independently). */
#include "internal.h"

#define ROW_BLOCK ((size_t)1 << 16)    /* elements per parallel work item */
#define ROW_PAR_MIN ((size_t)1 << 17)  /* below this, one thread: the fork costs more than it saves */

static int g_isa = -1;     /* resolved collage_isa, -1 = not yet chosen */
static int g_threads = 0;  /* 0 = OpenMP default */

int collage_isa_supported(collage_isa isa) {
    switch (isa) {
    case COLLAGE_ISA_AUTO: case COLLAGE_ISA_SCALAR: return 1;
    case COLLAGE_ISA_AVX2: return collage__cpu_has_avx2();
    case COLLAGE_ISA_AVX512: return collage__cpu_has_avx512();
    default: return 0;
    }
}

const char *collage_isa_name(collage_isa isa) {
    switch (isa) {
    case COLLAGE_ISA_AUTO: return "auto";
    case COLLAGE_ISA_SCALAR: return "scalar";
    case COLLAGE_ISA_AVX2: return "avx2";
    case COLLAGE_ISA_AVX512: return "avx512";
    default: return "unknown";
    }
}

static collage_isa best_isa(void) {
    if (collage__cpu_has_avx512()) return COLLAGE_ISA_AVX512;
    if (collage__cpu_has_avx2()) return COLLAGE_ISA_AVX2;
    return COLLAGE_ISA_SCALAR;
}

collage_status collage_set_isa(collage_isa isa) {
    if ((unsigned)isa > COLLAGE_ISA_AVX512) return COLLAGE_ERR_ARG;
    if (!collage_isa_supported(isa)) return COLLAGE_ERR_UNSUPPORTED;
    g_isa = (int)(isa == COLLAGE_ISA_AUTO ? best_isa() : isa);
    return COLLAGE_OK;
}

collage_isa collage_get_isa(void) {
    if (g_isa < 0) {
        collage_isa isa = best_isa();
        const char *env = getenv("COLLAGE_ISA");
        if (env) {
            for (int i = COLLAGE_ISA_SCALAR; i <= COLLAGE_ISA_AVX512; i++)
                if (strcmp(env, collage_isa_name((collage_isa)i)) == 0 && collage_isa_supported((collage_isa)i))
                    isa = (collage_isa)i;
        }
        g_isa = (int)isa;
    }
    return (collage_isa)g_isa;
}

void collage_set_threads(int n) { g_threads = n > 0 ? n : 0; }
int collage_get_threads(void) { return collage__threads(); }
int collage__threads(void) {
#ifdef _OPENMP
    return g_threads > 0 ? g_threads : omp_get_max_threads();
#else
    return 1;
#endif
}

void collage__zero_par(void *p, size_t bytes) {
    const size_t piece = (size_t)1 << 20;
    const long np = (long)((bytes + piece - 1) / piece);
    const int nt = collage__threads();
    (void)nt; /* unused without OpenMP */
#pragma omp parallel for schedule(static) num_threads(nt) if (np > 4)
    for (long k = 0; k < np; k++) {
        const size_t a = (size_t)k * piece, len = bytes - a < piece ? bytes - a : piece;
        memset((char *)p + a, 0, len);
    }
}

typedef void (*row_fn)(void *dst, const void *src, size_t n, uint64_t key, uint64_t i0);
enum { K_BF16_RN, K_BF16_SR, K_BF16_WIDEN, K_FP16_RN, K_FP16_SR, K_FP16_WIDEN };

/* One block of one kernel on the chosen ISA. SR blocks never straddle a 2^32 index boundary
 * (the random key depends on the high half of the index; run() splits there). */
static void run_block(int kind, collage_isa isa, void *dst, const void *src, size_t n, uint64_t key, uint64_t i0) {
    uint16_t *d16 = dst; const uint16_t *s16 = src; float *d32 = dst; const float *s32 = src;
    switch (kind) {
    case K_BF16_RN:
        if (isa == COLLAGE_ISA_AVX512) collage__bf16_from_f32_avx512(d16, s32, n);
        else if (isa == COLLAGE_ISA_AVX2) collage__bf16_from_f32_avx2(d16, s32, n);
        else for (size_t i = 0; i < n; i++) d16[i] = bf16_rn_bits(s32[i]);
        break;
    case K_BF16_SR:
        if (isa == COLLAGE_ISA_AVX512) collage__bf16_from_f32_sr_avx512(d16, s32, n, key, i0);
        else if (isa == COLLAGE_ISA_AVX2) collage__bf16_from_f32_sr_avx2(d16, s32, n, key, i0);
        else collage_lp_from_f32_sr_row_ref(COLLAGE_FMT_BF16, d16, s32, n, key, i0);
        break;
    case K_BF16_WIDEN:
        if (isa == COLLAGE_ISA_AVX512) collage__bf16_to_f32_avx512(d32, s16, n);
        else if (isa == COLLAGE_ISA_AVX2) collage__bf16_to_f32_avx2(d32, s16, n);
        else for (size_t i = 0; i < n; i++) d32[i] = bf16_f32(s16[i]);
        break;
    case K_FP16_RN:
        if (isa == COLLAGE_ISA_AVX512) collage__fp16_from_f32_avx512(d16, s32, n);
        else if (isa == COLLAGE_ISA_AVX2) collage__fp16_from_f32_avx2(d16, s32, n);
        else collage_lp_from_f32_row_ref(COLLAGE_FMT_FP16, d16, s32, n);
        break;
    case K_FP16_SR:
        if (isa == COLLAGE_ISA_AVX512) collage__fp16_from_f32_sr_avx512(d16, s32, n, key, i0);
        else if (isa == COLLAGE_ISA_AVX2) collage__fp16_from_f32_sr_avx2(d16, s32, n, key, i0);
        else collage_lp_from_f32_sr_row_ref(COLLAGE_FMT_FP16, d16, s32, n, key, i0);
        break;
    case K_FP16_WIDEN:
        if (isa == COLLAGE_ISA_AVX512) collage__fp16_to_f32_avx512(d32, s16, n);
        else if (isa == COLLAGE_ISA_AVX2) collage__fp16_to_f32_avx2(d32, s16, n);
        else collage_lp_to_f32_row_ref(COLLAGE_FMT_FP16, d32, s16, n);
        break;
    }
}

static void run_range(int kind, collage_isa isa, char *dst, size_t dsz, const char *src, size_t ssz, size_t a,
                      size_t b, uint64_t key, uint64_t i0) {
    while (a < b) {
        size_t e = b;
        uint64_t idx = i0 + a;
        uint64_t to_wrap = ((idx >> 32) + 1) * ((uint64_t)1 << 32) - idx; /* ≥ 1 */
        if ((kind == K_BF16_SR || kind == K_FP16_SR) && to_wrap < e - a) e = a + (size_t)to_wrap;
        run_block(kind, isa, dst + a * dsz, src + a * ssz, e - a, key, idx);
        a = e;
    }
}

static collage_status run(int kind, void *dst, size_t dsz, const void *src, size_t ssz, size_t n, uint64_t key,
                          uint64_t i0) {
    if (n == 0) return COLLAGE_OK;
    if (!dst || !src) return COLLAGE_ERR_NULL;
    collage_isa isa = collage_get_isa();
    int nt = collage__threads();
    if (n < ROW_PAR_MIN || nt <= 1) {
        run_range(kind, isa, dst, dsz, src, ssz, 0, n, key, i0);
        return COLLAGE_OK;
    }
    long nblocks = (long)((n + ROW_BLOCK - 1) / ROW_BLOCK);
#pragma omp parallel for schedule(static) num_threads(nt)
    for (long blk = 0; blk < nblocks; blk++) {
        size_t a = (size_t)blk * ROW_BLOCK, b = a + ROW_BLOCK < n ? a + ROW_BLOCK : n;
        run_range(kind, isa, dst, dsz, src, ssz, a, b, key, i0);
    }
    return COLLAGE_OK;
}

collage_status collage_bf16_from_f32_row(collage_bf16 *dst, const float *src, size_t n) {
    return run(K_BF16_RN, dst, 2, src, 4, n, 0, 0);
}
collage_status collage_bf16_from_f32_sr_row(collage_bf16 *dst, const float *src, size_t n, uint64_t key,
                                            uint64_t index0) {
    return run(K_BF16_SR, dst, 2, src, 4, n, key, index0);
}
collage_status collage_bf16_to_f32_row(float *dst, const collage_bf16 *src, size_t n) {
    return run(K_BF16_WIDEN, dst, 4, src, 2, n, 0, 0);
}
collage_status collage_fp16_from_f32_row(uint16_t *dst, const float *src, size_t n) {
    return run(K_FP16_RN, dst, 2, src, 4, n, 0, 0);
}
collage_status collage_fp16_from_f32_sr_row(uint16_t *dst, const float *src, size_t n, uint64_t key,
                                            uint64_t index0) {
    return run(K_FP16_SR, dst, 2, src, 4, n, key, index0);
}
collage_status collage_fp16_to_f32_row(float *dst, const uint16_t *src, size_t n) {
    return run(K_FP16_WIDEN, dst, 4, src, 2, n, 0, 0);
}
