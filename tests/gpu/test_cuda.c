/* test_cuda — the device check of libcollage_cuda (run by scripts/gpu_check.sh on a machine with an NVIDIA
 * GPU; CI only builds it): every preset and a set of compositions, 3 tensors (groups with their own lr and
 * weight decay, slab offsets that key stochastic rounding), clipping that triggers, EDQ, a NaN gradient
 * skipped, stepped on the GPU and by libcollage's scalar reference on the CPU (one optimizer per tensor,
 * collage_adamw_step_many with the chunks' Σg², as the Python package's CPU path), every word, the
 * norm, the factor and the EDQ sums bit for bit. --bench FILE: the step's time on 1B parameters in one
 * tensor and on GPT-2 124M's 148 tensors, with clipping and without, against the device-to-device copy's
 * bandwidth, as JSON.
 * --profile STRATEGY: that step on GPT-2 124M's tensors only (a few launches, for ncu).
 * --exhaustive: the device's fast bf16 operations (conversion, square root, quotient) against the IEEE
 * lines on every input (tests/gpu/exhaustive.cu).
 * Usage: test_cuda [--quick] [--steps N] [--bench FILE] [--profile STRATEGY] [--exhaustive] */
#include "collage_cuda.h"
#include "../harness.h"

#include <cuda_runtime_api.h>
#include <stdint.h>

#define SEED 37u
#define NT 3

static int g_steps = 100;
static int g_quick = 0;
static int g_exhaustive = 0;

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float urand(void) { return (float)(rnd() & 0xffffff) / 16777216.0f; }

#define CUDA_OK(call) (cudaSuccess == (call))

static size_t word_bytes(collage_word_format f, size_t n) {
    if (f == COLLAGE_WORD_INT8 || f == COLLAGE_WORD_E4M3) return ((n + 63) & ~(size_t)63) + (n + 255) / 256 * 4;
    if (f == COLLAGE_WORD_BYTE) return n;
    return n * (f == COLLAGE_WORD_FP32 ? 4 : 2);
}
static int is_q8(collage_strategy s) {
    const collage_strategy_info *R = collage_strategy_get(s);
    for (int r = 0; r < COLLAGE_ROLE_COUNT; r++)
        if (R->word[r].format == COLLAGE_WORD_INT8 || R->word[r].format == COLLAGE_WORD_E4M3) return 1;
    return 0;
}
static void put_grad(collage_word_format wf, void *g, size_t i, float x) {
    if (wf == COLLAGE_WORD_FP32) ((float *)g)[i] = x;
    else ((uint16_t *)g)[i] = collage_lp_from_f32(wf == COLLAGE_WORD_FP16 ? COLLAGE_FMT_FP16 : COLLAGE_FMT_BF16, x);
}

typedef struct {
    collage_adamw *cpu;
    void *dev[COLLAGE_ROLE_COUNT];
    size_t bytes[COLLAGE_ROLE_COUNT];
    void *g, *dg;
    size_t n, index0;
    double lr, wd;
} tensor;

/* One strategy: NT tensors stepped on both sides for g_steps steps, compared after each. */
static void run_strategy(collage_strategy s) {
    const collage_strategy_info *R = collage_strategy_get(s);
    const int q8 = is_q8(s), fp16 = R->arith == COLLAGE_WORD_FP16;
    const collage_word_format wf = R->word[COLLAGE_ROLE_WEIGHTS].format;
    const size_t gsz = word_bytes(wf, 1);
    const size_t ns[NT] = {g_quick ? 5000 : 70001, 777, g_quick ? 3000 : 20000};
    const double lrs[NT] = {1e-3, 2e-3, 5e-4}, wds[NT] = {0.1, 0.0, 0.05};
    tensor T[NT];
    memset(T, 0, sizeof T);
    size_t at = q8 ? 0 : 13; /* an odd first offset: the SR keys of a shard */
    for (int j = 0; j < NT; j++) {
        if (q8) at = (at + 255) / 256 * 256;
        T[j].n = ns[j]; T[j].index0 = at; T[j].lr = lrs[j]; T[j].wd = wds[j];
        at += ns[j];
    }
    for (int j = 0; j < NT; j++) {
        collage_adamw_config cfg = {.strategy = s, .n = T[j].n, .beta1 = 0.9, .beta2 = 0.95, .eps = fp16 ? 1e-4 : 1e-8,
                                    .weight_decay = T[j].wd, .clip = 0.05, .skip_nonfinite = 1, .edq = 1, .seed = SEED,
                                    .index0 = T[j].index0, .total = q8 ? T[j].index0 + T[j].n : at};
        CHECK(collage_adamw_create(&cfg, &T[j].cpu) == COLLAGE_OK, "%s: create", R->name);
        if (!T[j].cpu) return;
        float *w = malloc(T[j].n * sizeof *w);
        for (size_t i = 0; i < T[j].n; i++) w[i] = (2.0f * urand() - 1.0f) * 0.5f;
        collage_adamw_set_weights_f32(T[j].cpu, w, T[j].n);
        free(w);
        for (int r = 0; r < COLLAGE_ROLE_COUNT; r++) {
            if (!R->word[r].format) continue;
            T[j].bytes[r] = word_bytes(R->word[r].format, T[j].n);
            CHECK(CUDA_OK(cudaMalloc(&T[j].dev[r], T[j].bytes[r])), "cudaMalloc");
            cudaMemcpy(T[j].dev[r], collage_adamw_word(T[j].cpu, (collage_word_role)r), T[j].bytes[r], cudaMemcpyHostToDevice);
        }
        T[j].g = malloc(T[j].n * gsz);
        CHECK(CUDA_OK(cudaMalloc(&T[j].dg, T[j].n * gsz)), "cudaMalloc");
    }
    collage_cuda_adamw_config dc = {.strategy = s, .clip = 0.05, .skip_nonfinite = 1, .edq = 1, .seed = SEED,
                                    .max_tensors = NT, .max_elements = at};
    collage_cuda_adamw *o = NULL;
    CHECK(collage_cuda_adamw_create(&dc, &o) == COLLAGE_OK, "%s: create on the device: %s", R->name, collage_cuda_adamw_error(o));
    int fails = 0;
    for (int step = 0; step < g_steps && o; step++) {
        const int nan_step = step == g_steps / 2;
        collage_adamw *opts[NT];
        const void *grads[NT], *gs[NT];
        double lr[NT];
        size_t nsz[NT];
        collage_cuda_tensor dt[NT];
        memset(dt, 0, sizeof dt);
        for (int j = 0; j < NT; j++) {
            for (size_t i = 0; i < T[j].n; i++) put_grad(wf, T[j].g, i, (2.0f * urand() - 1.0f) * 0.05f);
            if (nan_step && j == NT - 1) put_grad(wf, T[j].g, T[j].n / 2, (float)NAN);
            cudaMemcpy(T[j].dg, T[j].g, T[j].n * gsz, cudaMemcpyHostToDevice);
            opts[j] = T[j].cpu; grads[j] = gs[j] = T[j].g; lr[j] = T[j].lr; nsz[j] = T[j].n;
            dt[j] = (collage_cuda_tensor){.grad = T[j].dg, .n = T[j].n, .index0 = T[j].index0,
                                          .step = collage_adamw_steps(T[j].cpu) + 1, .lr = T[j].lr,
                                          .weight_decay = T[j].wd, .beta1 = 0.9, .beta2 = 0.95, .eps = fp16 ? 1e-4 : 1e-8};
            for (int r = 0; r < COLLAGE_ROLE_COUNT; r++) dt[j].words[r] = T[j].dev[r];
        }
        /* the CPU: the chunks' Σg², added in order, and the scalar reference */
        size_t nc = 0;
        for (int j = 0; j < NT; j++) nc += (T[j].n + 16383) / 16384;
        double *chunks = malloc(nc * sizeof *chunks), sumsq = 0;
        collage_sumsq_chunks_many(gs, nsz, NT, wf == COLLAGE_WORD_FP32 ? 0 : wf == COLLAGE_WORD_BF16 ? 1 : 2, 16384, chunks);
        for (size_t c = 0; c < nc; c++) sumsq += chunks[c];
        free(chunks);
        collage_step_stats cs[NT];
        const collage_status rc = collage_adamw_step_many(opts, grads, lr, NT, sumsq, cs);
        collage_step_stats ds;
        collage_edq de[NT];
        const collage_status rd = collage_cuda_adamw_step(o, dt, NT, NULL, 0, NULL);
        CHECK(rd == COLLAGE_OK && collage_cuda_adamw_stats(o, &ds, de) == COLLAGE_OK, "%s step %d: %s", R->name, step,
              collage_cuda_adamw_error(o));
        const int before = h_cur_fail;
        CHECK(ds.skipped == (rc == COLLAGE_ERR_NONFINITE) && ds.skipped == nan_step, "%s step %d: skipped %d, CPU %d",
              R->name, step, ds.skipped, (int)rc);
        CHECK(memcmp(&ds.grad_norm, &cs[0].grad_norm, 8) == 0 && memcmp(&ds.clip_coef, &cs[0].clip_coef, 8) == 0,
              "%s step %d: norm %a factor %a, CPU %a %a", R->name, step, ds.grad_norm, ds.clip_coef, cs[0].grad_norm,
              cs[0].clip_coef);
        CHECK(nan_step || ds.clip_coef < 1.0, "%s step %d: clipping was to trigger", R->name, step);
        for (int j = 0; j < NT && !ds.skipped; j++)
            CHECK(memcmp(&de[j].sum_dot, &cs[j].edq.sum_dot, 8) == 0 && memcmp(&de[j].sum_dot_state, &cs[j].edq.sum_dot_state, 8) == 0 &&
                      memcmp(&de[j].sum_nn, &cs[j].edq.sum_nn, 8) == 0 && de[j].lost_count == cs[j].edq.lost_count &&
                      de[j].updates == cs[j].edq.updates,
                  "%s step %d tensor %d: EDQ %a %a %a, CPU %a %a %a", R->name, step, j, de[j].sum_dot, de[j].sum_dot_state,
                  de[j].sum_nn, cs[j].edq.sum_dot, cs[j].edq.sum_dot_state, cs[j].edq.sum_nn);
        for (int j = 0; j < NT; j++)
            for (int r = 0; r < COLLAGE_ROLE_COUNT; r++) {
                if (!T[j].dev[r]) continue;
                unsigned char *h = malloc(T[j].bytes[r]);
                cudaMemcpy(h, T[j].dev[r], T[j].bytes[r], cudaMemcpyDeviceToHost);
                const unsigned char *c = collage_adamw_word(T[j].cpu, (collage_word_role)r);
                size_t k = 0;
                while (k < T[j].bytes[r] && h[k] == c[k]) k++;
                CHECK(k == T[j].bytes[r], "%s step %d tensor %d: word %s differs at byte %zu (GPU %02x, CPU %02x)", R->name,
                      step, j, collage_word_role_name((collage_word_role)r), k, k < T[j].bytes[r] ? h[k] : 0,
                      k < T[j].bytes[r] ? c[k] : 0);
                free(h);
            }
        if (h_cur_fail > before && ++fails >= 3) break; /* the first steps that differ say enough */
    }
    collage_cuda_adamw_free(o);
    for (int j = 0; j < NT; j++) {
        collage_adamw_free(T[j].cpu);
        for (int r = 0; r < COLLAGE_ROLE_COUNT; r++) cudaFree(T[j].dev[r]);
        cudaFree(T[j].dg);
        free(T[j].g);
    }
}

static collage_strategy composed(collage_weight_scheme w, collage_moment_format m, collage_moment_format v, int sr) {
    collage_composition c = {w, m, v, sr};
    collage_strategy s = COLLAGE_STRATEGY_COUNT;
    collage_strategy_compose(&c, &s);
    return s;
}

static void test_every_strategy(void) {
    collage_strategy list[COLLAGE_STRATEGY_COUNT + 6];
    int n = 0;
    for (int s = 0; s < COLLAGE_STRATEGY_COUNT; s++) list[n++] = (collage_strategy)s;
    list[n++] = composed(COLLAGE_SCHEME_MCF, COLLAGE_MOMENT_INT8, COLLAGE_MOMENT_INT8, 0);
    list[n++] = composed(COLLAGE_SCHEME_MCF, COLLAGE_MOMENT_INT8, COLLAGE_MOMENT_INT8, 1);
    list[n++] = composed(COLLAGE_SCHEME_SR, COLLAGE_MOMENT_E4M3, COLLAGE_MOMENT_E4M3, 1);
    list[n++] = composed(COLLAGE_SCHEME_MASTER, COLLAGE_MOMENT_INT8, COLLAGE_MOMENT_FP32, 0);
    list[n++] = composed(COLLAGE_SCHEME_KAHAN, COLLAGE_MOMENT_BF16, COLLAGE_MOMENT_E4M3, 0);
    list[n++] = composed(COLLAGE_SCHEME_REMAINDER, COLLAGE_MOMENT_FP32, COLLAGE_MOMENT_MCF, 0);
    for (int i = 0; i < (g_quick ? 3 : n); i++) {
        const int idx = g_quick ? (int[]){COLLAGE_LIGHT, COLLAGE_BF16_SR, COLLAGE_STRATEGY_COUNT}[i] : i;
        const double t0 = h_now();
        run_strategy(list[idx]);
        printf("    %s: %d steps (%.1f s)\n", collage_strategy_get(list[idx])->name, g_steps, h_now() - t0);
    }
}

/* ------------------------------------------------------------------ the benchmark */
static double ms_of(cudaEvent_t a, cudaEvent_t b) { float ms = 0; cudaEventElapsedTime(&ms, a, b); return (double)ms; }

/* GPT-2 124M's 148 tensors (wte, wpe, 12 × 12, ln_f). */
static int gpt2_shapes(size_t *n) {
    int k = 0;
    n[k++] = 50257 * 768; n[k++] = 1024 * 768;
    for (int l = 0; l < 12; l++) {
        const size_t L[12] = {768, 768, 768 * 2304, 2304, 768 * 768, 768, 768, 768, 768 * 3072, 3072, 3072 * 768, 768};
        for (int i = 0; i < 12; i++) n[k++] = L[i];
    }
    n[k++] = 768; n[k++] = 768;
    return k;
}

/* Bytes one step moves per element: the gradient read, every word read and written. */
static double bytes_per_elem(collage_strategy s) {
    const collage_strategy_info *R = collage_strategy_get(s);
    double b = (double)word_bytes(R->word[COLLAGE_ROLE_WEIGHTS].format, 1);
    for (int r = 0; r < COLLAGE_ROLE_COUNT; r++) b += 2.0 * R->word[r].bytes;
    return b;
}

/* The device memory of k tensors of a table: their words and gradients. */
static void free_tensors(collage_cuda_tensor *t, int k) {
    for (int j = 0; j < k; j++) {
        for (int r = 0; r < COLLAGE_ROLE_COUNT; r++) cudaFree(t[j].words[r]);
        cudaFree((void *)t[j].grad);
    }
}

/* dst (bytes) on the device: the pattern's bytes repeated (the pattern copied once, then doubled). */
static int fill_repeat(void *dst, size_t bytes, const void *pattern, size_t pbytes) {
    size_t have = bytes < pbytes ? bytes : pbytes;
    if (!CUDA_OK(cudaMemcpy(dst, pattern, have, cudaMemcpyHostToDevice))) return 0;
    while (have < bytes) {
        const size_t c = bytes - have < have ? bytes - have : have;
        if (!CUDA_OK(cudaMemcpy((char *)dst + have, dst, c, cudaMemcpyDeviceToDevice))) return 0;
        have += c;
    }
    return 1;
}

/* The benchmark's data: weights of about 0.02 and gradients of about 1e-3 (sums of uniforms, the same
 * 2^16-element pattern repeated) in θ's format, the master (where the strategy has one) equal to θ, the
 * other words zero: the warm-up steps give the moments values, so that the timed steps take the paths
 * training takes (zero moments would send every quotient to the IEEE fallback). */
#define BENCH_PERIOD ((size_t)1 << 16)
static int bench_fill(const collage_strategy_info *R, const collage_cuda_tensor *t, size_t n) {
    static float w[BENCH_PERIOD], g[BENCH_PERIOD];
    static uint16_t w16[BENCH_PERIOD], g16[BENCH_PERIOD];
    const collage_word_format wf = R->word[COLLAGE_ROLE_WEIGHTS].format;
    const int f16 = wf == COLLAGE_WORD_FP16 ? COLLAGE_FMT_FP16 : COLLAGE_FMT_BF16;
    for (size_t i = 0; i < BENCH_PERIOD; i++) {
        w16[i] = collage_lp_from_f32(f16, 0.02f * (urand() + urand() + urand() - 1.5f));
        g16[i] = collage_lp_from_f32(f16, 1e-3f * (urand() + urand() + urand() - 1.5f));
        w[i] = wf == COLLAGE_WORD_FP32 ? 0.02f * (urand() - 0.5f) : collage_lp_to_f32(f16, w16[i]);
        g[i] = 1e-3f * (urand() + urand() + urand() - 1.5f);
    }
    const int wide = wf == COLLAGE_WORD_FP32;
    const size_t pb = wide ? sizeof w : sizeof w16;
    int ok = fill_repeat(t->words[COLLAGE_ROLE_WEIGHTS], word_bytes(wf, n), wide ? (const void *)w : w16, pb);
    ok &= fill_repeat((void *)t->grad, word_bytes(wf, n), wide ? (const void *)g : g16, pb);
    if (R->word[COLLAGE_ROLE_MASTER].format == COLLAGE_WORD_FP32)
        ok &= fill_repeat(t->words[COLLAGE_ROLE_MASTER], n * 4, w, sizeof w);
    return ok;
}

/* What a timed configuration runs: the step with clipping by the global norm (Σg² on the device), without,
 * with clipping and EDQ, or Σg²'s chunk sums alone (collage_cuda_sumsq_chunks). */
enum { FORM_CLIP, FORM_PLAIN, FORM_EDQ, FORM_SUMSQ };
static const char *const form_name[] = {"clipping", "no clipping", "clipping, EDQ", "the chunk sums of the norm alone"};

/* One timed configuration. Its bytes: the step's are the gradient read once and every word read and
 * written (bytes_per_elem); with clipping the gradient is read twice, and "moved" counts that second read
 * (what the memory serves); Σg² alone reads the gradient once. */
static double bench_one(collage_strategy s, const size_t *ns, int k, FILE *out, double copy_gbs, const char *what,
                        int form) {
    const collage_strategy_info *R = collage_strategy_get(s);
    collage_cuda_tensor *t = calloc((size_t)k, sizeof *t);
    size_t total = 0;
    int ok = 1;
    for (int j = 0; j < k; j++) {
        t[j] = (collage_cuda_tensor){.n = ns[j], .index0 = total, .step = 1, .lr = 1e-4, .weight_decay = 0.1,
                                     .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};
        for (int r = 0; r < COLLAGE_ROLE_COUNT; r++)
            if (R->word[r].format) {
                ok &= CUDA_OK(cudaMalloc(&t[j].words[r], word_bytes(R->word[r].format, ns[j])));
                if (ok) cudaMemset(t[j].words[r], 0, word_bytes(R->word[r].format, ns[j]));
            }
        void *g = NULL;
        ok &= CUDA_OK(cudaMalloc(&g, ns[j] * 4));
        t[j].grad = g;
        if (ok) ok &= bench_fill(R, &t[j], ns[j]);
        total += (ns[j] + 255) / 256 * 256;
    }
    double gbs = 0;
    collage_cuda_adamw *o = NULL;
    collage_cuda_adamw_config dc = {.strategy = s, .clip = form == FORM_PLAIN ? 0.0 : 1.0, .edq = form == FORM_EDQ,
                                    .seed = SEED, .max_tensors = k, .max_elements = total};
    double *sums = NULL;
    if (ok && form == FORM_SUMSQ) ok &= CUDA_OK(cudaMalloc((void **)&sums, collage_cuda_sumsq_chunk_count(t, k) * 8));
    if (ok && collage_cuda_adamw_create(&dc, &o) == COLLAGE_OK) {
        cudaEvent_t a, b;
        cudaEventCreate(&a); cudaEventCreate(&b);
        for (int i = 0; i < 3; i++) collage_cuda_adamw_step(o, t, k, NULL, 0, NULL);
        const int reps = 20;
        cudaEventRecord(a, 0);
        for (int i = 0; i < reps; i++) {
            for (int j = 0; j < k; j++) t[j].step = 4 + (uint64_t)i;
            if (form == FORM_SUMSQ) collage_cuda_sumsq_chunks(o, t, k, sums, NULL);
            else collage_cuda_adamw_step(o, t, k, NULL, 0, NULL);
        }
        cudaEventRecord(b, 0);
        cudaEventSynchronize(b);
        const double ms = ms_of(a, b) / reps;
        size_t elems = 0;
        for (int j = 0; j < k; j++) elems += ns[j];
        const double gb = (double)word_bytes(R->word[COLLAGE_ROLE_WEIGHTS].format, 1);
        const double per = form == FORM_SUMSQ ? gb : bytes_per_elem(s);
        const double moved = per + (form == FORM_CLIP || form == FORM_EDQ ? gb : 0);
        gbs = per * (double)elems / (ms * 1e6);
        const double mgbs = moved * (double)elems / (ms * 1e6);
        fprintf(out, "    {\"what\": \"%s\", \"strategy\": \"%s\", \"form\": \"%s\", \"tensors\": %d, \"elements\": %zu, "
                     "\"ms\": %.4f, \"bytes_per_element\": %.1f, \"GBps\": %.1f, \"of_copy\": %.3f, "
                     "\"moved_bytes_per_element\": %.1f, \"moved_of_copy\": %.3f},\n",
                what, R->name, form_name[form], k, elems, ms, per, gbs, gbs / copy_gbs, moved, mgbs / copy_gbs);
        printf("    %s %s (%s): %.3f ms, %.0f GB/s (%.0f%% of the copy's", what, R->name, form_name[form], ms, gbs,
               100 * gbs / copy_gbs);
        if (moved > per) printf("; %.0f%% with the norm's read of the gradient", 100 * mgbs / copy_gbs);
        printf(")\n");
        fflush(stdout);
        cudaEventDestroy(a); cudaEventDestroy(b);
    } else {
        printf("    %s %s: not run (memory: %s)\n", what, R->name, o ? collage_cuda_adamw_error(o) : "cudaMalloc");
    }
    collage_cuda_adamw_free(o);
    cudaFree(sums);
    free_tensors(t, k);
    free(t);
    return gbs;
}

/* The device-to-device copy's bandwidth (bytes read + written per second) on 2 GiB. */
static double copy_bandwidth(void) {
    const size_t bytes = (size_t)2 << 30;
    void *a = NULL, *b = NULL;
    if (!CUDA_OK(cudaMalloc(&a, bytes)) || !CUDA_OK(cudaMalloc(&b, bytes))) return 0;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0); cudaEventCreate(&e1);
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e0, 0);
    for (int i = 0; i < 10; i++) cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1, 0);
    cudaEventSynchronize(e1);
    const double gbs = 2.0 * (double)bytes * 10 / (ms_of(e0, e1) * 1e6);
    cudaFree(a); cudaFree(b);
    return gbs;
}

static void bench(const char *path) {
    FILE *out = fopen(path, "w");
    if (!out) { printf("cannot write %s\n", path); h_fail++; return; }
    struct cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    const double copy = copy_bandwidth();
    printf("    %s: device-to-device copy %.0f GB/s\n", p.name, copy);
    fprintf(out, "{\"device\": \"%s\", \"copy_GBps\": %.1f, \"steps\": [\n", p.name, copy);
    const collage_strategy S[] = {COLLAGE_BF16, COLLAGE_LIGHT, COLLAGE_BF16_SR, COLLAGE_PLUS, COLLAGE_BF16_MASTER};
    size_t gpt2[148];
    const int k = gpt2_shapes(gpt2);
    const size_t one = (size_t)1 << 30;
    for (int i = 0; i < 5; i++)
        for (int f = FORM_CLIP; f <= FORM_PLAIN; f++) {
            bench_one(S[i], &one, 1, out, copy, "1B in one tensor", f);
            bench_one(S[i], gpt2, k, out, copy, "GPT-2 124M, 148 tensors", f);
        }
    /* what EDQ costs, and the norm's read of a bf16 gradient alone */
    for (int f = FORM_EDQ; f <= FORM_SUMSQ; f++) {
        bench_one(COLLAGE_LIGHT, &one, 1, out, copy, "1B in one tensor", f);
        bench_one(COLLAGE_LIGHT, gpt2, k, out, copy, "GPT-2 124M, 148 tensors", f);
    }
    fprintf(out, "    {}\n]}\n");
    fclose(out);
}

/* The global norm over many chunks (GPT-2 124M's tensors: 7,700 chunks, batches of the in-order total
 * added while later chunks are still being summed): the step's norm and factor, from its one launch and
 * from the chunk sums handed to it, against the CPU's chunk sums added in order, bit for bit. */
static void test_norm_many_chunks(void) {
    size_t ns[148];
    const int k = gpt2_shapes(ns);
    collage_cuda_tensor t[148];
    const void *hg[148] = {0};
    memset(t, 0, sizeof t);
    size_t total = 0;
    int ok = 1;
    for (int j = 0; j < k && ok; j++) {
        uint16_t *g = malloc(ns[j] * 2);
        ok &= g != NULL;
        for (size_t i = 0; ok && i < ns[j]; i++) g[i] = collage_lp_from_f32(COLLAGE_FMT_BF16, 1e-3f * (2.0f * urand() - 1.0f));
        hg[j] = g;
        t[j] = (collage_cuda_tensor){.n = ns[j], .index0 = total, .step = 1, .lr = 1e-4, .weight_decay = 0.1,
                                     .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};
        void *dg = NULL;
        for (int r = COLLAGE_ROLE_WEIGHTS; r <= COLLAGE_ROLE_V; r++) {
            ok &= CUDA_OK(cudaMalloc(&t[j].words[r], ns[j] * 2));
            if (ok) cudaMemset(t[j].words[r], 0, ns[j] * 2);
        }
        ok &= CUDA_OK(cudaMalloc(&dg, ns[j] * 2)) && g && CUDA_OK(cudaMemcpy(dg, g, ns[j] * 2, cudaMemcpyHostToDevice));
        t[j].grad = dg;
        total += ns[j];
    }
    const size_t nc = collage_cuda_sumsq_chunk_count(t, k);
    double *hc = malloc(nc * sizeof *hc), *dc = NULL, sum = 0;
    ok &= hc && collage_sumsq_chunks_many(hg, ns, k, 1, 16384, hc) == COLLAGE_OK && CUDA_OK(cudaMalloc((void **)&dc, nc * 8));
    CHECK(ok, "setting up %zu elements", total);
    for (size_t c = 0; ok && c < nc; c++) sum += hc[c];
    const double clip = 1.0, gn = sqrt(sum), coef = gn > clip ? clip / (gn + 1e-6) : 1.0;
    collage_cuda_adamw_config cfg = {.strategy = COLLAGE_BF16, .clip = clip, .seed = SEED, .max_tensors = k,
                                     .max_elements = total};
    collage_cuda_adamw *o = NULL;
    if (ok) CHECK(collage_cuda_adamw_create(&cfg, &o) == COLLAGE_OK, "create: %s", collage_cuda_adamw_error(o));
    for (int given = 0; o && given < 2; given++)
        for (int rep = 0; rep < 3; rep++) {
            collage_step_stats st;
            collage_status rc = COLLAGE_OK;
            if (given) rc = collage_cuda_sumsq_chunks(o, t, k, dc, NULL);
            if (rc == COLLAGE_OK) rc = collage_cuda_adamw_step(o, t, k, given ? dc : NULL, given ? nc : 0, NULL);
            if (rc == COLLAGE_OK) rc = collage_cuda_adamw_stats(o, &st, NULL);
            CHECK(rc == COLLAGE_OK, "step: %s", collage_cuda_adamw_error(o));
            if (rc != COLLAGE_OK) break;
            CHECK(memcmp(&st.grad_norm, &gn, 8) == 0 && memcmp(&st.clip_coef, &coef, 8) == 0,
                  "%s chunk sums, step %d: norm %.17g factor %.17g, CPU %.17g %.17g", given ? "given" : "its own", rep,
                  st.grad_norm, st.clip_coef, gn, coef);
        }
    collage_cuda_adamw_free(o);
    cudaFree(dc);
    free(hc);
    free_tensors(t, k);
    for (int j = 0; j < k; j++) free((void *)hg[j]);
}

/* tests/gpu/exhaustive.cu: the device's fast bf16 operations against the IEEE lines on every input. */
long long exhaustive_check(char *msg, size_t size);
static void test_exhaustive(void) {
    char msg[1024] = "";
    const double t0 = h_now();
    const long long bad = exhaustive_check(msg, sizeof msg);
    printf("%s    (%.1f s)\n", msg, h_now() - t0);
    CHECK(bad == 0, "the device's fast bf16 operations differ from the IEEE lines on %lld inputs", bad);
}

/* --profile NAME: the step of GPT-2 124M's tensors with strategy NAME, a few times, for a profiler. */
static int profile(const char *name) {
    collage_strategy s;
    if (collage_strategy_parse(name, &s) != COLLAGE_OK) { fprintf(stderr, "test_cuda: unknown strategy %s\n", name); return 2; }
    size_t gpt2[148];
    const int k = gpt2_shapes(gpt2);
    FILE *out = fopen("/dev/null", "w");
    bench_one(s, gpt2, k, out, 1.0, "GPT-2 124M, 148 tensors", FORM_CLIP);
    fclose(out);
    return 0;
}

int main(int argc, char **argv) {
    const char *bench_path = NULL, *profile_name = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) { g_quick = 1; g_steps = 5; }
        else if (!strcmp(argv[i], "--exhaustive")) g_exhaustive = 1;
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) g_steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bench") && i + 1 < argc) bench_path = argv[++i];
        else if (!strcmp(argv[i], "--profile") && i + 1 < argc) profile_name = argv[++i];
        else { fprintf(stderr, "usage: test_cuda [--quick] [--steps N] [--bench FILE.json] [--profile STRATEGY] [--exhaustive]\n"); return 2; }
    }
    int nd = 0;
    if (!CUDA_OK(cudaGetDeviceCount(&nd)) || nd == 0) {
        printf("no CUDA device: the device check needs a GPU (scripts/gpu_check.sh on a machine with one)\n");
        printf("0 passed, 1 failed\n");
        return 1;
    }
    collage_set_isa(COLLAGE_ISA_SCALAR); /* the CPU side is the scalar reference (its EDQ sums) */
    if (profile_name) return profile(profile_name);
    if (bench_path) { bench(bench_path); return h_end(); }
    if (g_exhaustive) { RUN(test_exhaustive); return h_end(); }
    RUN(test_every_strategy);
    RUN(test_norm_many_chunks);
    return h_end();
}
