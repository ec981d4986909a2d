/* test_products.c — the kernels of the products (collage_model.h, docs/numerics.md §10): every family in
 * fp32, bf16 and fp16 storage gives the same bits on 1, 2 and 3 threads on every kernel this build has
 * (each forced in turn by a pin); the reference sgemm's two builds and a plain triple loop agree bit for
 * bit; a pin is taken whatever the timing says; a choice remembered in the products file is taken
 * (and a damaged file is measured again); a resumed run takes the kernels its checkpoint recorded. */
#include "harness.h"
#include "model.h"
#include "nn.h"
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#define B_TEST 4
#define T_TEST 32

static char g_bin[1024], g_dir[256], g_text[512];

/* ---------------------------------------------------------------- one forward + backward */
typedef struct { double loss; size_t n, esize; unsigned char *g; } pass_out;

static pass_out one_pass(const char *preset, collage_real prec, int threads) {
    collage_model_config cfg;
    collage_model_preset(preset, &cfg);
    pass_out o = {.loss = (double)NAN};
    collage_model *m = NULL;
    collage_set_threads(threads);
    CHECK(collage_model_create(&cfg, prec, B_TEST, T_TEST, &m) == COLLAGE_OK, "%s %s: create", preset,
          collage_real_name(prec));
    if (!m) return o;
    const size_t n = collage_model_size(m);
    float *w = malloc(n * sizeof *w);
    uint16_t *w16 = malloc(n * sizeof *w16);
    collage_model_init_weights(&cfg, 7, w, n);
    if (prec == COLLAGE_REAL_BF16) collage_bf16_from_f32_row((collage_bf16 *)w16, w, n);
    if (prec == COLLAGE_REAL_FP16) collage_fp16_from_f32_row(w16, w, n);
    int tok[B_TEST * T_TEST], tgt[B_TEST * T_TEST];
    const int masked = collage_family_objective(cfg.family) == COLLAGE_OBJECTIVE_MASKED_LM;
    for (int i = 0; i < B_TEST * T_TEST; i++) {
        tok[i] = (int)((i * 2654435761u) % 200u);
        tgt[i] = masked && i % 5 ? COLLAGE_TARGET_NONE : (int)((i * 40503u + 17u) % 200u);
    }
    const collage_batch b = {.tokens = tok, .targets = tgt, .B = B_TEST, .T = T_TEST};
    collage_forward_info fi = {0};
    CHECK(collage_model_forward_batch(m, prec == COLLAGE_REAL_FP32 ? (const void *)w : w16, &b, &fi) == COLLAGE_OK &&
              collage_model_backward(m) == COLLAGE_OK,
          "%s %s: %s", preset, collage_real_name(prec), collage_model_error(m));
    o.loss = fi.loss;
    o.n = n;
    o.esize = collage_real_size(prec);
    o.g = malloc(n * o.esize);
    memcpy(o.g, collage_model_grads(m), n * o.esize);
    free(w); free(w16);
    collage_model_free(m);
    return o;
}

/* Every family × {fp32, bf16, fp16} × every kernel (pinned in turn): the same loss and gradient bits on
 * 1, 2 and 3 threads. */
static void test_threads_every_kernel(void) {
    static const char *const fams[] = {"tiny", "llama-tiny", "bert-tiny"};
    static const collage_real precs[] = {COLLAGE_REAL_FP32, COLLAGE_REAL_BF16, COLLAGE_REAL_FP16};
    const int quick = getenv("COLLAGE_TEST_QUICK") != NULL; /* the sanitizer suites: 1 and 3 threads */
    int cases = 0;
    for (int k = 0; k < NN_SGEMM_COUNT; k++)
        for (int p = 0; p < NN_BF16_COUNT; p++) {
            if (!nn_sgemm_available((nn_sgemm)k) || !nn_bf16_available((nn_bf16_path)p)) continue;
            char spec[64], err[160];
            snprintf(spec, sizeof spec, "fp32=%s,bf16=%s", nn_sgemm_name((nn_sgemm)k), nn_bf16_name((nn_bf16_path)p));
            CHECK(collage_products_pin(spec, err, sizeof err) == COLLAGE_OK, "pin %s: %s", spec, err);
            for (size_t f = 0; f < sizeof fams / sizeof *fams; f++)
                for (size_t q = 0; q < sizeof precs / sizeof *precs; q++) {
                    if (p == NN_BF16_ONEDNN && precs[q] != COLLAGE_REAL_BF16) continue; /* the same as widen */
                    pass_out a = one_pass(fams[f], precs[q], 1);
                    for (int th = 3; th >= (quick ? 3 : 2); th--) {
                        pass_out b = one_pass(fams[f], precs[q], th);
                        CHECK(a.g && b.g && a.loss == b.loss && !memcmp(a.g, b.g, a.n * a.esize),
                              "%s %s %s: 1 and %d threads differ (loss %.17g vs %.17g)", spec, fams[f],
                              collage_real_name(precs[q]), th, a.loss, b.loss);
                        free(b.g);
                    }
                    free(a.g);
                    cases++;
                }
        }
    collage_products_pin(NULL, NULL, 0);
    collage_set_threads(0);
    printf("    %d cases (family, precision, kernels): the same bits on 1, 2 and 3 threads\n", cases);
}

/* ---------------------------------------------------------------- the reference sgemm */
/* nn_sgemm_ref and its AVX-512 build against the contract written as a plain loop, on odd shapes, both
 * transpositions, beta 0 and 1, subnormal and signed-zero inputs. */
static void test_ref_kernel(void) {
    const int shapes[][3] = {{1, 1, 1}, {3, 70, 5}, {17, 129, 300}, {64, 64, 513}, {5, 1, 260}};
    int bad = 0, cases = 0;
    h_seed(11);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int t = 0; t < 8; t++) {
            const int ta = t & 1, tb = t >> 1 & 1, beta1 = t >> 2, M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            float *A = malloc((size_t)M * K * 4), *B = malloc((size_t)K * N * 4), *C0 = malloc((size_t)M * N * 4);
            float *C1 = malloc((size_t)M * N * 4), *C2 = malloc((size_t)M * N * 4);
            for (int i = 0; i < M * K; i++) A[i] = i % 97 == 3 ? 1e-40f : i % 89 == 5 ? -0.0f : (float)(h_uniform() - 0.5);
            for (int i = 0; i < K * N; i++) B[i] = (float)(h_uniform() - 0.5) * (i % 13 == 0 ? 1e-30f : 1.0f);
            for (int i = 0; i < M * N; i++) C0[i] = C1[i] = C2[i] = (float)h_uniform();
            const int lda = ta ? M : K, ldb = tb ? K : N;
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    float acc = 0.0f;
                    for (int k = 0; k < K; k++) {
                        const float a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                        const float b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                        const float p = a * b;
                        acc = acc + p;
                    }
                    C0[(size_t)i * N + j] = beta1 ? 1.0f * C0[(size_t)i * N + j] + acc : acc;
                }
            nn_sgemm_ref(ta, tb, M, N, K, A, lda, B, ldb, beta1 ? 1.0f : 0.0f, C1, N);
            bad += memcmp(C0, C1, (size_t)M * N * 4) != 0;
            if (collage_isa_supported(COLLAGE_ISA_AVX512)) {
                nn_sgemm_ref_avx512(ta, tb, M, N, K, A, lda, B, ldb, beta1 ? 1.0f : 0.0f, C2, N);
                bad += memcmp(C0, C2, (size_t)M * N * 4) != 0;
            }
            cases++;
            free(A); free(B); free(C0); free(C1); free(C2);
        }
    CHECK(bad == 0, "%d of %d cases differ from the contract's loop", bad, cases);
    printf("    %d cases: the reference sgemm (baseline%s) equals the contract's loop bit for bit\n", cases,
           collage_isa_supported(COLLAGE_ISA_AVX512) ? " and AVX-512" : "");
}

/* ---------------------------------------------------------------- collage's own bf16 product */
/* A bf16 operand's values: normal numbers of both signs and many exponents, with subnormals (bf16 has
 * them: 0x0001-0x007F), signed zeros, and exact powers of two here and there. */
static uint16_t bf16_value(int i) {
    const unsigned r = h_rand32();
    if (i % 97 == 3) return (uint16_t)((0x0001 + r % 0x7F) | (r & 0x8000)); /* subnormal */
    if (i % 89 == 5) return (uint16_t)(r & 0x8000);                        /* ±0 */
    if (i % 83 == 7) return (uint16_t)((0x3F80 + (r % 8 << 7)) | (r & 0x8000)); /* ±2^k */
    return (uint16_t)((0x3A00 + r % 0x0A00) | (r & 0x8000)); /* |x| in about [5e-4, 2e2) */
}

/* nn_gemm_fma_tile against its plain-C twin bit for bit: odd shapes (edges of the 12 × 32 micro-kernel and
 * of the 256 k-block), both transpositions, subnormal and signed-zero inputs; and a whole product through
 * the door (nn_gemm_bf16 on the fma path) on 1, 2 and 3 threads against the twin. */
static void test_fma_kernel(void) {
    if (!nn_bf16_available(NN_BF16_FMA)) { printf("    skipped: collage's bf16 GEMM needs AVX-512\n"); return; }
    const int shapes[][3] = {{1, 1, 1}, {12, 32, 16}, {13, 33, 17}, {11, 31, 255}, {25, 70, 257}, {64, 96, 513},
                             {3, 200, 1}, {300, 5, 40}, {37, 47, 600}};
    int bad = 0, cases = 0;
    h_seed(21);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int t = 0; t < 4; t++) {
            const int ta = t & 1, tb = t >> 1, M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5; /* strides past the shape */
            uint16_t *A = malloc((size_t)(ta ? K : M) * lda * 2), *B = malloc((size_t)(tb ? N : K) * ldb * 2);
            float *want = malloc((size_t)M * N * 4), *got = malloc((size_t)M * N * 4);
            float *pack = malloc(nn_gemm_fma_pack_floats(M, N, K) * 4);
            for (int i = 0; i < (ta ? K : M) * lda; i++) A[i] = bf16_value(i);
            for (int i = 0; i < (tb ? N : K) * ldb; i++) B[i] = bf16_value(i + 1);
            nn_gemm_fma_ref(ta, tb, M, N, K, A, lda, B, ldb, want);
            nn_gemm_fma_tile(ta, tb, M, N, K, A, lda, B, ldb, got, pack);
            const int differ = memcmp(want, got, (size_t)M * N * 4) != 0;
            bad += differ;
            if (differ) printf("    differs: M %d N %d K %d ta %d tb %d\n", M, N, K, ta, tb);
            cases++;
            free(A), free(B), free(want), free(got), free(pack);
        }
    CHECK(bad == 0, "%d of %d tiles differ from nn_gemm_fma_ref", bad, cases);
    /* through the door: a GPT-2-like product's grid of tiles on 1, 2 and 3 threads */
    const int M = 200, N = 300, K = 270;
    uint16_t *A = malloc((size_t)M * K * 2), *B = malloc((size_t)N * K * 2);
    float *want = malloc((size_t)M * N * 4);
    for (int i = 0; i < M * K; i++) A[i] = bf16_value(i);
    for (int i = 0; i < N * K; i++) B[i] = bf16_value(i + 7);
    nn_gemm_fma_ref(0, 1, M, N, K, A, K, B, K, want);
    for (int th = 1; th <= 3; th++) {
        CHECK(collage_products_pin("bf16=fma", NULL, 0) == COLLAGE_OK, "pin bf16=fma");
        collage_set_threads(th);
        float *c = malloc((size_t)M * N * 4);
        CHECK(collage_bf16_matmul(0, 1, M, N, K, (const collage_bf16 *)A, K, (const collage_bf16 *)B, K, c, N) == COLLAGE_OK,
              "collage_bf16_matmul");
        CHECK(!memcmp(c, want, (size_t)M * N * 4), "%d threads: the door's product differs from nn_gemm_fma_ref", th);
        free(c);
    }
    collage_products_pin(NULL, NULL, 0);
    collage_set_threads(0);
    free(A), free(B), free(want);
    printf("    %d tiles and a %d x %d x %d product on 1-3 threads: collage's bf16 GEMM equals its twin bit for bit\n", cases,
           M, N, K);
}

/* nn_gemm_fma's epilogue in the test: the part copied into the (M,N) result at ctx, each element once
 * (a second write marks the element NaN's bits 0x7FC00001, which no product gives). */
typedef struct { float *c; unsigned char *seen; int N; } fma_sink;

static void fma_sink_ep(void *p, const float *t, int ldt, int i0, int i1, int j0, int j1) {
    fma_sink *s = p;
    for (int i = i0; i < i1; i++)
        for (int j = j0; j < j1; j++) {
            const size_t e = (size_t)i * s->N + j;
            s->c[e] = s->seen[e]++ ? bits_f32(0x7FC00001u) : t[(size_t)(i - i0) * ldt + (j - j0)];
        }
}

/* nn_gemm_fma (a whole product, each operand packed once, the threads over a band's panels) against the
 * twin bit for bit: shapes of one band and of several (rows past 264, columns past 384, k past 256 in
 * chunks, which reload their sums: the "beta 1" of a chunk after the first; operands held for all of k
 * and reused by the next band, or packed a chunk at a time, where the threads' parts are their share of
 * the split side, narrower than a band: 270 × 400 × 1200, 20 × 800 × 15000; a held operand's several bands
 * under the split side's parts: 390 × 790 × 20, 900 × 800 × 40; and K = 0), both
 * transpositions, subnormals and signed zeros, on 1, 2 and 3 threads; every element handed to the
 * epilogue exactly once. */
static void test_fma_product(void) {
    if (!nn_bf16_available(NN_BF16_FMA)) { printf("    skipped: collage's bf16 GEMM needs AVX-512\n"); return; }
    const int shapes[][3] = {{1, 1, 1}, {13, 33, 0}, {37, 47, 600}, {400, 40, 90}, {25, 800, 70}, {30, 70, 800},
                             {390, 790, 20}, {100, 200, 1537}, {300, 100, 600}, {50, 800, 600},
                             {270, 400, 1200}, {20, 800, 15000}, {900, 800, 40}};
    int bad = 0, cases = 0;
    h_seed(33);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int t = 0; t < 4; t++) {
            const int ta = t & 1, tb = t >> 1, M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5;
            const size_t na = (size_t)(ta ? K : M) * lda + 1, nb = (size_t)(tb ? N : K) * ldb + 1;
            uint16_t *A = malloc(na * 2), *B = malloc(nb * 2);
            float *want = malloc((size_t)M * N * 4), *got = malloc((size_t)M * N * 4);
            unsigned char *seen = malloc((size_t)M * N);
            float *scratch = malloc(nn_gemm_fma_floats(M, N, K, 3) * 4);
            for (size_t i = 0; i < na; i++) A[i] = bf16_value((int)i);
            for (size_t i = 0; i < nb; i++) B[i] = bf16_value((int)i + 1);
            nn_gemm_fma_ref(ta, tb, M, N, K, A, lda, B, ldb, want);
            for (int th = 1; th <= 3; th++) {
                memset(seen, 0, (size_t)M * N);
                fma_sink sink = {got, seen, N};
                nn_gemm_fma(ta, tb, M, N, K, A, lda, B, ldb, 1.0f, fma_sink_ep, &sink, scratch, th);
                int differ = memcmp(want, got, (size_t)M * N * 4) != 0;
                for (size_t e = 0; e < (size_t)M * N; e++) differ |= seen[e] != 1;
                bad += differ;
                if (differ) printf("    differs: M %d N %d K %d ta %d tb %d, %d threads\n", M, N, K, ta, tb, th);
                cases++;
            }
            free(A), free(B), free(want), free(got), free(seen), free(scratch);
        }
    CHECK(bad == 0, "%d of %d products differ from nn_gemm_fma_ref", bad, cases);
    printf("    %d products (bands, k chunks, 1-3 threads): nn_gemm_fma equals its twin bit for bit\n", cases);
}

/* ---------------------------------------------------------------- the core's peak */
/* The peak of the instruction a kernel runs on (fp32 FMA for every fp32 kernel and the widening path,
 * AMX's tile product or VDPBF16PS for oneDNN's bf16 GEMM by the hardware it reports, and fp32 FMA for
 * collage's own bf16 kernel, which multiplies widened operands): FLOP/s of one core. */
static double peak_of(const collage_core_peak *p, int bf16, int path) {
    if (!bf16 || path != NN_BF16_ONEDNN) return p->fma;
    return strstr(nn_bf16_label((nn_bf16_path)path), "AMX") ? p->amx_bf16 : p->bf16_dot;
}

/* A core's clock can move between two measurements on a shared machine (2.0-2.4 GHz seen within an hour):
 * a kernel is allowed this much over the peak measured beside it. A loop that is not issue-bound measures
 * far below the peak (the accumulators kept in memory gave about half). */
#define PEAK_SLACK 1.05

/* Under other load the peak loop can be given a smaller share of the core than the best of a kernel's
 * runs was: the peak is measured again, the highest kept, up to this many times while a kernel is above it. */
#define PEAK_ROUNDS 6

/* 1 when a kernel's rate passes the peak of its instruction (with the slack). */
static int kernel_above(const collage_core_peak *p, double rate[2][8]) {
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (int k = 0; k < 8; k++)
            if (rate[bf16][k] > 0 && PEAK_SLACK * peak_of(p, bf16, k) < rate[bf16][k]) return 1;
    return 0;
}

/* The core's peak is a ceiling: no kernel this build has runs a product faster on one core. Each kernel
 * is timed on a GPT-2 product shape (512 × 768 × 768, one thread, the best of 5) beside the peak measured
 * in the same test (the highest of a measurement before and those after, so that load on a shared machine
 * cannot make the peak look low). A peak below a real kernel's rate would mean the peak loops
 * are not issue-bound. Also: a peak for every instruction the CPU has. With COLLAGE_TEST_SHARED (CI's
 * stages that run beside others) the kernels are not timed: two timings compared need the core to themselves. */
static void test_peak_above_kernels(void) {
    collage_core_peak before, after;
    collage_core_peak_measure(1, &before);
    const int shared = getenv("COLLAGE_TEST_SHARED") && *getenv("COLLAGE_TEST_SHARED");
    if (shared) printf("    COLLAGE_TEST_SHARED: the kernels' rates are not compared with the peak (the plain suite does)\n");
    const nn_shape s = {0, 1, 512, 768, 768, 1};
    const double flops = 2.0 * s.M * s.N * s.K;
    _Static_assert(NN_SGEMM_COUNT <= 8 && NN_BF16_COUNT <= 8, "rate's rows");
    double rate[2][8] = {{0}}; /* [fp32 kernel or bf16 path] */
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (int k = 0; k < (bf16 ? NN_BF16_COUNT : NN_SGEMM_COUNT); k++) {
            if (bf16 ? !nn_bf16_available((nn_bf16_path)k) : !nn_sgemm_available((nn_sgemm)k)) continue;
            const nn_sgemm f32 = bf16 ? NN_SGEMM_ONEDNN : (nn_sgemm)k;
            if (!nn_sgemm_available(f32) || shared) continue;
            rate[bf16][k] = flops / nn_products_seconds(&s, 1, bf16, f32, bf16 ? (nn_bf16_path)k : NN_BF16_WIDEN, 5, HUGE_VAL);
        }
    collage_core_peak p = before;
    for (int round = 0; round < PEAK_ROUNDS && (round == 0 || kernel_above(&p, rate)); round++) {
        collage_core_peak_measure(1, &after);
        if (after.fma > p.fma) p.fma = after.fma;
        if (after.bf16_dot > p.bf16_dot) p.bf16_dot = after.bf16_dot;
        if (after.amx_bf16 > p.amx_bf16) p.amx_bf16 = after.amx_bf16;
    }
    __builtin_cpu_init();
    CHECK(p.fma > 0 || !__builtin_cpu_supports("fma"), "no FMA peak on a CPU with FMA");
    CHECK(p.fma_bits == (__builtin_cpu_supports("avx512f") ? 512 : __builtin_cpu_supports("fma") ? 256 : 0),
          "FMA peak measured at %d bits", p.fma_bits);
    CHECK(p.bf16_dot > 0 || !nn_bf16_available(NN_BF16_ONEDNN) || strstr(nn_bf16_label(NN_BF16_ONEDNN), "AMX"),
          "oneDNN has bf16 instructions, the peak none");
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (int k = 0; k < (bf16 ? NN_BF16_COUNT : NN_SGEMM_COUNT); k++) {
            if (rate[bf16][k] <= 0) continue;
            const char *name = bf16 ? nn_bf16_label((nn_bf16_path)k) : nn_sgemm_label((nn_sgemm)k);
            const double peak = peak_of(&p, bf16, k);
            CHECK(PEAK_SLACK * peak >= rate[bf16][k], "%s runs at %.1f GFLOP/s, above the core peak %.1f", name,
                  rate[bf16][k] * 1e-9, peak * 1e-9);
            printf("    %-40s %6.1f GFLOP/s, %3.0f%% of its instruction's peak (%.1f)\n", name, rate[bf16][k] * 1e-9,
                   100 * rate[bf16][k] / peak, peak * 1e-9);
        }
}

/* ---------------------------------------------------------------- pins and the products file */
static void test_pin_and_parse(void) {
    char err[200];
    static const char *const bad[] = {"", "fp32=", "fp32=mkl", "bf16=amx", "fp64=ref", "ref,", "fp32"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        CHECK(collage_products_pin(bad[i], err, sizeof err) == COLLAGE_ERR_ARG && err[0], "'%s' accepted", bad[i]);
    }
    CHECK(collage_products_pin("fp32=mkl", err, sizeof err) != COLLAGE_OK && strstr(err, "fp32=mkl") &&
              strstr(err, "openblas, onednn, ref"), "message: %s", err);
    collage_model_config cfg;
    collage_model_preset("tiny", &cfg);
    collage_model *m = NULL;
    CHECK(collage_products_pin("ref", err, sizeof err) == COLLAGE_OK, "pin ref: %s", err);
    CHECK(collage_model_create(&cfg, COLLAGE_REAL_BF16, 2, 16, &m) == COLLAGE_OK, "create");
    CHECK(m && !strcmp(collage_model_products_spec(m), "fp32=ref,bf16=widen") && strstr(collage_model_products(m), "pinned"),
          "pinned ref: %s / %s", m ? collage_model_products_spec(m) : "", m ? collage_model_products(m) : "");
    collage_model_free(m);
    collage_products_pin(NULL, NULL, 0);
}

/* A choice in the products file is taken as it is: its line rewritten to another kernel, a new process
 * (here: the memory of the choice cleared) takes that kernel, "remembered"; a line naming no kernel
 * is measured again and rewritten. */
static void test_products_file(void) {
    char path[400], err[200];
    snprintf(path, sizeof path, "%s/products", g_dir);
    setenv("COLLAGE_PRODUCTS_FILE", path, 1);
    collage__products_forget();
    collage_model_config cfg;
    collage_model_preset("llama-tiny", &cfg);
    collage_model *m = NULL;
    CHECK(collage_model_create(&cfg, COLLAGE_REAL_FP32, 2, 16, &m) == COLLAGE_OK, "create");
    CHECK(m && strstr(collage_model_products(m), "measured"), "first: %s", m ? collage_model_products(m) : "");
    collage_model_free(m);
    size_t len = 0;
    char *text = (char *)h_read_file(path, &len);
    char *fp = text ? strstr(text, " fp32 ") : NULL;
    CHECK(fp != NULL, "no fp32 line in %s", path);
    if (!fp) { free(text); return; }
    /* the line's kernel: replaced by ref, the one a measurement would not choose */
    char *name = fp + 6, *end = strchr(name, ' ');
    char out[4096];
    snprintf(out, sizeof out, "%.*sref%s", (int)(name - text), text, end);
    FILE *f = fopen(path, "w");
    fputs(out, f);
    fclose(f);
    collage__products_forget();
    CHECK(collage_model_create(&cfg, COLLAGE_REAL_FP32, 2, 16, &m) == COLLAGE_OK, "create");
    CHECK(m && !strcmp(collage_model_products_spec(m), "fp32=ref") && strstr(collage_model_products(m), "remembered"),
          "remembered: %s / %s", m ? collage_model_products_spec(m) : "", m ? collage_model_products(m) : "");
    collage_model_free(m);
    /* damaged: the kernel's name unknown */
    snprintf(out, sizeof out, "%.*sblas9%s", (int)(name - text), text, end);
    f = fopen(path, "w");
    fputs(out, f);
    fclose(f);
    collage__products_forget();
    CHECK(collage_model_create(&cfg, COLLAGE_REAL_FP32, 2, 16, &m) == COLLAGE_OK, "create");
    CHECK(m && strstr(collage_model_products(m), "measured"), "damaged line: %s", m ? collage_model_products(m) : "");
    collage_model_free(m);
    free(text);
    text = (char *)h_read_file(path, &len);
    CHECK(text && !strstr(text, "blas9"), "the damaged line was not rewritten");
    free(text);
    (void)err;
}

/* Processes that start together against an empty products file (an MPI run's ranks on a fresh machine)
 * measure one at a time: exactly one of three `collage train`s says "measured", the others take its choice
 * ("remembered"), every one names the same kernel, and the file holds the shapes' line once. */
static void test_products_file_shared(void) {
    char out[16384], path[400], cmd[4096];
    snprintf(path, sizeof path, "%s/products-shared", g_dir);
    unlink(path);
    snprintf(cmd, sizeof cmd, "env -u COLLAGE_GEMM COLLAGE_PRODUCTS_FILE=%s %s train --data %s --model tiny --layers 1 --dim 32 "
             "--heads 2 --batch 4 --seq 16 --threads 1 --steps 1 --precision collage-light", path, g_bin, g_text);
    int rc = h_sh(out, sizeof out, "for i in 1 2 3; do (%s > %s/shared-$i.out 2>&1; echo $? > %s/shared-$i.rc) & done; wait; "
                  "cat %s/shared-[123].rc | tr -d '\n'; echo; grep -h 'products:' %s/shared-[123].out | sed 's/; memory.*//'",
                  cmd, g_dir, g_dir, g_dir, g_dir);
    CHECK(rc == 0 && !strncmp(out, "000\n", 4), "three trains: rc %d: %s", rc, out);
    int measured = 0, lines = 0;
    char first[512] = "";
    for (char *l = strchr(out, '\n'); l && l[1]; l = strchr(l + 1, '\n')) {
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)strcspn(l + 1, "\n"), l + 1);
        measured += strstr(line, "(measured") != NULL;
        char *how = strstr(line, " (");
        if (how) *how = 0; /* the kernel's name */
        if (!lines++) snprintf(first, sizeof first, "%s", line);
        else CHECK(!strcmp(line, first), "kernels differ: '%s' and '%s'", line, first);
    }
    CHECK(lines == 3 && measured == 1, "%d products lines, %d measured: %s", lines, measured, out);
    size_t len = 0;
    char *text = (char *)h_read_file(path, &len);
    int bf16 = 0;
    for (const char *t = text; t && (t = strstr(t, " bf16 ")); t++) bf16++;
    CHECK(text && bf16 == 1, "%d bf16 lines in %s: %s", bf16, path, text ? text : "(none)");
    free(text);
}

/* A run saved on pinned kernels resumes on them with nothing pinned; a pin given on resume wins. */
static void test_resume_takes_recorded(void) {
    char out[16384], run[400], st[1200];
    snprintf(run, sizeof run, "%s/run", g_dir);
    int rc = h_sh(out, sizeof out, "COLLAGE_GEMM=ref %s train --data %s --model tiny --layers 1 --dim 32 --heads 2 "
                  "--batch 4 --seq 16 --threads 1 --steps 4 --stop-after 2 --save %s --precision collage-light", g_bin,
                  g_text, run);
    CHECK(rc == 0, "train: %s", out);
    char ck[1024];
    h_checkpoint(run, ck, sizeof ck);
    snprintf(st, sizeof st, "%s/train.state", ck);
    size_t len;
    char *text = (char *)h_read_file(st, &len);
    CHECK(text && strstr(text, "\nproducts fp32=ref,bf16=widen\n"), "train.state records no products line");
    free(text);
    rc = h_sh(out, sizeof out, "env -u COLLAGE_GEMM %s train --data %s --resume %s --save %s --threads 2 --stop-after 3",
              g_bin, g_text, run, run);
    CHECK(rc == 0 && strstr(out, "reference sgemm") && strstr(out, "pinned"), "resume: %s", out);
    rc = h_sh(out, sizeof out, "COLLAGE_GEMM=fp32=openblas,bf16=widen %s train --data %s --resume %s --save %s", g_bin,
              g_text, run, run);
    CHECK(rc == 0 && strstr(out, "OpenBLAS sgemm"), "resume with a pin: %s", out);
}

int main(void) {
    if (h_cli_setup("products", g_bin, g_dir, g_text, 5)) return 1;
    setenv("COLLAGE_PRODUCTS_FILE", "off", 1);
    RUN(test_ref_kernel);
    RUN(test_fma_kernel);
    RUN(test_fma_product);
    RUN(test_peak_above_kernels);
    RUN(test_pin_and_parse);
    RUN(test_threads_every_kernel);
    RUN(test_products_file);
    RUN(test_products_file_shared);
    RUN(test_resume_takes_recorded);
    h_rm_rf(g_dir);
    return h_end();
}
