/* test_rows.c — the vectorised row conversions agree bit for bit with their scalar `_ref` twins on
 * every one of the 2^32 fp32 bit patterns (RN and SR, bf16 and fp16), on every 16-bit pattern when
 * widening, on every ISA this CPU has, and independently of the thread count and of row alignment.
 * SR is checked on every sign and exponent with 1/8 of the fractions (its random bits are a pure
 * function of the index, tested separately); COLLAGE_TEST_QUICK=1 (sanitizer runs) does the same for
 * RN with 2/16 of the fractions (the smallest and the largest), and SR on even exponents only. The reference runs on two threads to keep the suite short. */
#include "collage.h"
#include "harness.h"
#include <string.h>

#define CHUNK ((size_t)1 << 19)
#define NSUB 8
#define SR_KEY 0x5eed1234abcdull

static float *g_src;
static uint16_t *g_ref, *g_vec;
static int g_quick;

static void fill_chunk(uint64_t base) {
    uint32_t *u = (uint32_t *)g_src;
    for (size_t i = 0; i < CHUNK; i++) u[i] = (uint32_t)(base + i);
}

/* Compare a row kernel against its reference on all fp32 patterns with every available SIMD ISA. */
typedef collage_status (*conv_fn)(uint16_t *dst, const float *src, size_t n, uint64_t i0);
static collage_status bf16_rn(uint16_t *d, const float *s, size_t n, uint64_t i0) {
    (void)i0; return collage_bf16_from_f32_row((collage_bf16 *)d, s, n);
}
static collage_status bf16_sr(uint16_t *d, const float *s, size_t n, uint64_t i0) {
    return collage_bf16_from_f32_sr_row((collage_bf16 *)d, s, n, SR_KEY, i0);
}
static collage_status fp16_rn(uint16_t *d, const float *s, size_t n, uint64_t i0) {
    (void)i0; return collage_fp16_from_f32_row(d, s, n);
}
static collage_status fp16_sr(uint16_t *d, const float *s, size_t n, uint64_t i0) {
    return collage_fp16_from_f32_sr_row(d, s, n, SR_KEY, i0);
}

/* stride s: test the chunks whose 4 top fraction bits t satisfy t % s == 0 or t == 15 (so the
 * largest fractions, where rounding carries into the exponent and overflows, are always covered). */
static void exhaustive(conv_fn fn, collage_format f, int sr, unsigned stride) {
    size_t mismatches = 0;
    for (uint64_t base = 0; base < ((uint64_t)1 << 32); base += CHUNK) {
        unsigned t = (unsigned)(base >> 19) & 15u;
        if (t % stride != 0 && t != 15) continue;
        /* quick SR: even exponents only, plus the top one (Inf/NaN) */
        unsigned e = (unsigned)(base >> 23) & 0xffu;
        if (sr && g_quick && (e & 1u) && e != 255u) continue;
        fill_chunk(base);
        #pragma omp parallel for num_threads(2)
        for (int k = 0; k < NSUB; k++) {
            size_t a = (size_t)k * (CHUNK / NSUB);
            if (sr) collage_lp_from_f32_sr_row_ref(f, g_ref + a, g_src + a, CHUNK / NSUB, SR_KEY, base + a);
            else collage_lp_from_f32_row_ref(f, g_ref + a, g_src + a, CHUNK / NSUB);
        }
        for (int isa = COLLAGE_ISA_SCALAR; isa <= COLLAGE_ISA_AVX512; isa++) {
            if (!collage_isa_supported((collage_isa)isa)) continue;
            /* fp16's scalar row kernel is the reference itself; bf16's is the separate bit trick */
            if (isa == COLLAGE_ISA_SCALAR && f != COLLAGE_FMT_BF16) continue;
            collage_set_isa((collage_isa)isa);
            memset(g_vec, 0xAB, CHUNK * 2);
            CHECK(fn(g_vec, g_src, CHUNK, base) == COLLAGE_OK, "status");
            if (memcmp(g_vec, g_ref, CHUNK * 2) != 0) {
                for (size_t i = 0; i < CHUNK; i++)
                    if (g_vec[i] != g_ref[i]) {
                        mismatches++;
                        CHECK(g_vec[i] == g_ref[i], "isa %s input 0x%08x: row 0x%04x, ref 0x%04x",
                              collage_isa_name((collage_isa)isa), (unsigned)(base + i), g_vec[i], g_ref[i]);
                    }
            }
        }
    }
    collage_set_isa(COLLAGE_ISA_AUTO);
    if (mismatches) printf("    %zu mismatches\n", mismatches);
}

static void test_bf16_rn_all_fp32(void) { exhaustive(bf16_rn, COLLAGE_FMT_BF16, 0, g_quick ? 16 : 1); }
static void test_fp16_rn_all_fp32(void) { exhaustive(fp16_rn, COLLAGE_FMT_FP16, 0, g_quick ? 16 : 1); }
static void test_bf16_sr_every_exponent(void) { exhaustive(bf16_sr, COLLAGE_FMT_BF16, 1, 16); }
static void test_fp16_sr_every_exponent(void) { exhaustive(fp16_sr, COLLAGE_FMT_FP16, 1, 16); }

/* Widening: every 16-bit pattern, every ISA, equals the scalar decoder. */
static void test_widen_all_16bit(void) {
    static uint16_t h[65536];
    static float ref[65536], out[65536];
    for (int i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    for (int fi = 0; fi < 2; fi++) {
        collage_format f = fi ? COLLAGE_FMT_FP16 : COLLAGE_FMT_BF16;
        collage_lp_to_f32_row_ref(f, ref, h, 65536);
        for (int isa = COLLAGE_ISA_SCALAR; isa <= COLLAGE_ISA_AVX512; isa++) {
            if (!collage_isa_supported((collage_isa)isa)) continue;
            collage_set_isa((collage_isa)isa);
            memset(out, 0, sizeof out);
            if (fi) collage_fp16_to_f32_row(out, h, 65536);
            else collage_bf16_to_f32_row(out, (const collage_bf16 *)h, 65536);
            for (int i = 0; i < 65536; i++)
                CHECK(memcmp(&out[i], &ref[i], 4) == 0, "%s isa %s bits 0x%04x", fi ? "fp16" : "bf16",
                      collage_isa_name((collage_isa)isa), i);
        }
    }
    collage_set_isa(COLLAGE_ISA_AUTO);
}

/* Odd lengths and misaligned starts exercise every tail path; SR indices keep their meaning. */
static void test_tails_and_offsets(void) {
    enum { N = 1000 };
    float src[N + 8];
    uint16_t a[N + 8], b[N + 8];
    h_seed(7);
    for (int i = 0; i < N + 8; i++) src[i] = (float)((h_uniform() - 0.5) * 1e3);
    for (int isa = COLLAGE_ISA_SCALAR; isa <= COLLAGE_ISA_AVX512; isa++) {
        if (!collage_isa_supported((collage_isa)isa)) continue;
        collage_set_isa((collage_isa)isa);
        for (int off = 0; off < 5; off++)
            for (size_t n = 0; n < 70; n += 3) {
                collage_bf16_from_f32_sr_row((collage_bf16 *)a, src + off, n, 9, 100 + (uint64_t)off);
                collage_lp_from_f32_sr_row_ref(COLLAGE_FMT_BF16, b, src + off, n, 9, 100 + (uint64_t)off);
                CHECK(memcmp(a, b, n * 2) == 0, "bf16 SR isa %s off %d n %zu", collage_isa_name((collage_isa)isa), off, n);
                collage_fp16_from_f32_sr_row(a, src + off, n, 9, 100 + (uint64_t)off);
                collage_lp_from_f32_sr_row_ref(COLLAGE_FMT_FP16, b, src + off, n, 9, 100 + (uint64_t)off);
                CHECK(memcmp(a, b, n * 2) == 0, "fp16 SR isa %s off %d n %zu", collage_isa_name((collage_isa)isa), off, n);
            }
        /* a row whose indices cross a 2^32 boundary uses the right key on each side */
        uint64_t i0 = ((uint64_t)1 << 32) - 37;
        collage_bf16_from_f32_sr_row((collage_bf16 *)a, src, N, 3, i0);
        collage_lp_from_f32_sr_row_ref(COLLAGE_FMT_BF16, b, src, N, 3, i0);
        CHECK(memcmp(a, b, N * 2) == 0, "bf16 SR across 2^32, isa %s", collage_isa_name((collage_isa)isa));
        for (int i = 0; i < N; i++)
            CHECK(a[i] == collage_bf16_from_f32_sr(src[i], collage_rand32(3, i0 + (uint64_t)i)).bits, "element %d", i);
    }
    collage_set_isa(COLLAGE_ISA_AUTO);
}

/* The threaded path splits a row into blocks; the result must not depend on the thread count. */
static void test_thread_count_independent(void) {
    size_t n = (size_t)3 << 20 | 12345;
    float *src = malloc(n * 4);
    uint16_t *a = malloc(n * 2), *b = malloc(n * 2);
    h_seed(11);
    for (size_t i = 0; i < n; i++) src[i] = (float)((h_uniform() - 0.5) * 8.0);
    collage_set_threads(1);
    collage_bf16_from_f32_sr_row((collage_bf16 *)a, src, n, 77, 5);
    collage_set_threads(2);
    collage_bf16_from_f32_sr_row((collage_bf16 *)b, src, n, 77, 5);
    CHECK(memcmp(a, b, n * 2) == 0, "bf16 SR 1 vs 2 threads");
    collage_set_threads(3);
    collage_fp16_from_f32_sr_row(a, src, n, 77, 5);
    collage_set_threads(1);
    collage_fp16_from_f32_sr_row(b, src, n, 77, 5);
    CHECK(memcmp(a, b, n * 2) == 0, "fp16 SR 3 vs 1 threads");
    collage_set_threads(0);
    free(src); free(a); free(b);
}

static void test_bad_arguments(void) {
    float x = 1.0f;
    uint16_t h = 0;
    CHECK(collage_bf16_from_f32_row(NULL, &x, 1) == COLLAGE_ERR_NULL, "NULL dst");
    CHECK(collage_bf16_to_f32_row(&x, NULL, 1) == COLLAGE_ERR_NULL, "NULL src");
    CHECK(collage_fp16_from_f32_sr_row(&h, NULL, 1, 0, 0) == COLLAGE_ERR_NULL, "NULL src");
    CHECK(collage_bf16_from_f32_row(NULL, NULL, 0) == COLLAGE_OK, "n = 0 is a no-op");
    CHECK(collage_lp_from_f32_row_ref((collage_format)9, &h, &x, 1) == COLLAGE_ERR_ARG, "unknown format");
    CHECK(collage_set_isa((collage_isa)42) == COLLAGE_ERR_ARG, "unknown isa");
    CHECK(collage_format_get((collage_format)9) == NULL, "unknown format info");
    collage_format f;
    CHECK(collage_format_parse("e4m3", &f) == COLLAGE_OK && f == COLLAGE_FMT_E4M3, "parse e4m3");
    CHECK(collage_format_parse("fp12", &f) == COLLAGE_ERR_ARG, "parse unknown");
    CHECK(strlen(collage_status_str(COLLAGE_ERR_FORMAT)) > 0, "status string");
    CHECK(strcmp(collage_status_str((collage_status)999), "unknown status") == 0, "unknown status string");
}

int main(void) {
    g_quick = getenv("COLLAGE_TEST_QUICK") != NULL;
    g_src = malloc(CHUNK * 4);
    g_ref = malloc(CHUNK * 2);
    g_vec = malloc(CHUNK * 2);
    printf("test_rows: isa %s%s\n", collage_isa_name(collage_get_isa()), g_quick ? " (quick: RN on 5/16 of the fp32 patterns)" : "");
    RUN(test_bad_arguments);
    RUN(test_widen_all_16bit);
    RUN(test_tails_and_offsets);
    RUN(test_thread_count_independent);
    RUN(test_bf16_rn_all_fp32);
    RUN(test_fp16_rn_all_fp32);
    RUN(test_bf16_sr_every_exponent);
    RUN(test_fp16_sr_every_exponent);
    free(g_src); free(g_ref); free(g_vec);
    return h_end();
}
