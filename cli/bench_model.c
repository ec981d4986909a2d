/* bench_model.c — `collage bench model`: one training step (forward, backward, optimizer) of a model
 * per strategy, in tokens/s and model FLOP/s, next to OpenBLAS sgemm on the same matrix shapes
 * measured in the same run; and where the step's time goes: the matrix products, attention, the other
 * layer ops and the optimizer (the model's profile), each against its bound (the core peak, the memory
 * bound measured in the same run). */
#include "cli.h"
#include "bench.h"
#include "collage_model.h"
#include "collage_run.h" /* collage_mlm_mask: a masked-LM model's targets */
#include <cblas.h>
#include <math.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ model */
/* The model's products, from its tensor table: each matrix a token goes through (collage_tensor_info's
 * product) is a forward product (rows, inner, cols) = (B·T, in, out), taken once per layer it has; a
 * masked-LM head's matrices (product 2) run on the `scored` rows only; the backward runs the two
 * transposed products. Model FLOPs per token: 6 per weight of those matrices (the head's weighted by
 * scored / B·T) plus 6·L·T·C for attention scores and values (each position attends to T/2 positions on
 * average, causal; 12·L·T·C for an encoder, where every position attends to all T). */
typedef struct {
    int mkn[COLLAGE_MODEL_MAX_TENSORS][3], count[COLLAGE_MODEL_MAX_TENSORS], n;
    size_t a, b, o;
    double flops_tok, att_tok; /* model FLOPs per token, and of them attention's */
} model_shapes;

static model_shapes shapes_of(const collage_model_config *c, int BT, int T, int scored) {
    collage_tensor_info t[COLLAGE_MODEL_MAX_TENSORS];
    const int nt = collage_model_tensors(c, t, COLLAGE_MODEL_MAX_TENSORS);
    const double att = collage_family_objective(c->family) == COLLAGE_OBJECTIVE_MASKED_LM ? 12.0 : 6.0;
    model_shapes s = {.att_tok = att * c->num_layers * (double)T * c->channels};
    s.flops_tok = s.att_tok;
    for (int k = 0; k < nt; k++) {
        if (!t[k].product) continue;
        const int layered = t[k].ndim == 3, i = s.n++;
        const int out = (int)t[k].shape[layered], in = (int)t[k].shape[layered + 1];
        const int rows = t[k].product == 2 ? scored : BT;
        s.mkn[i][0] = rows; s.mkn[i][1] = in; s.mkn[i][2] = out;
        s.count[i] = layered ? (int)t[k].shape[0] : 1;
        s.flops_tok += 6.0 * s.count[i] * (double)in * out * rows / BT;
        const size_t a = (size_t)rows * in, b = (size_t)in * out, o = (size_t)rows * out;
        if (a > s.a) s.a = a;
        if (b > s.b) s.b = b;
        if (o > s.o) s.o = o;
    }
    return s;
}

/* OpenBLAS sgemm (its own threads) on the shapes: the reference of the fp32 model. */
static double sgemm_rate(const collage_model_config *c, int BT, int scored, int reps) {
    const model_shapes sh = shapes_of(c, BT, 1, scored);
    float *A = calloc(sh.a, 4), *B = calloc(sh.b, 4), *O = calloc(sh.o, 4);
    if (!A || !B || !O) { free(A); free(B); free(O); return (double)NAN; }
    for (size_t i = 0; i < sh.a; i++) A[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < sh.b; i++) B[i] = (float)(i % 5) * 0.1f;
    double best = 1e30, flops = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = cli_now();
        flops = 0;
        for (int k = 0; k < sh.n; k++) {
            const int M = sh.mkn[k][0], K = sh.mkn[k][1], N = sh.mkn[k][2];
            for (int rep = 0; rep < sh.count[k]; rep++) {
                /* forward out = inp·Wᵀ, backward dinp = dout·W and dW = doutᵀ·inp: three products */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, A, K, B, K, 0.0f, O, N);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, N, 1.0f, O, N, B, K, 0.0f, A, K);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, M, 1.0f, O, N, A, K, 0.0f, B, K);
                flops += 6.0 * M * N * K;
            }
        }
        double t = cli_now() - t0;
        if (t < best) best = t;
    }
    free(A); free(B); free(O);
    return flops / best;
}

/* The bf16 model's products alone on the same shapes and counts (collage_bf16_matmul with no output:
 * the path, tiles and threads the model uses, each tile left in its scratch as the model's epilogues
 * find it): the ceiling of a bf16 step's products. */
static double bf16_rate(const collage_model_config *c, int BT, int scored, int reps) {
    const model_shapes sh = shapes_of(c, BT, 1, scored);
    collage_bf16 *A = calloc(sh.a, 2), *B = calloc(sh.b, 2), *O = calloc(sh.o, 2);
    if (!A || !B || !O) { free(A); free(B); free(O); return (double)NAN; }
    for (size_t i = 0; i < sh.a; i++) A[i] = collage_bf16_from_f32((float)(i % 7) * 0.1f);
    for (size_t i = 0; i < sh.b; i++) B[i] = collage_bf16_from_f32((float)(i % 5) * 0.1f);
    for (size_t i = 0; i < sh.o; i++) O[i] = collage_bf16_from_f32((float)(i % 3) * 0.1f);
    double best = 1e30, flops = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = cli_now();
        flops = 0;
        for (int k = 0; k < sh.n; k++) {
            const int M = sh.mkn[k][0], K = sh.mkn[k][1], N = sh.mkn[k][2];
            for (int rep = 0; rep < sh.count[k]; rep++) {
                collage_bf16_matmul(0, 1, M, N, K, A, K, B, K, NULL, N);
                collage_bf16_matmul(0, 0, M, K, N, O, N, B, K, NULL, K);
                collage_bf16_matmul(1, 0, N, K, M, O, N, A, K, NULL, K);
                flops += 6.0 * M * N * K;
            }
        }
        double t = cli_now() - t0;
        if (t < best) best = t;
    }
    free(A); free(B); free(O);
    return flops / best;
}

/* One model and its optimizer, stepped by the benchmark; per-step times of each phase. */
#define NPH 8
enum { T_STEP, T_FWD, T_BWD, T_OPT, T_QUANT, T_PROD, T_ATT, T_ELEM };
typedef struct {
    collage_strategy s;
    collage_model *m;
    collage_adamw *opt;
    double *t[NPH]; /* whole step, forward (with zero_grad), backward, optimizer; fp8: quantization in the
                     * forward and backward; from the model's profile: the products, attention, and the rest
                     * of forward and backward (element-wise and other layer ops) */
    double mib[5]; /* held: weights, optimizer state, gradients, activations, products' scratch */
    double work[3]; /* a step's products FLOPs (profiled), element-wise bytes and optimizer bytes (estimated) */
    char products[160];   /* what its products run on (collage_model_products, copied) */
} bench_run;

static void bench_run_free(bench_run *r) {
    collage_model_free(r->m);
    collage_adamw_free(r->opt);
    free(r->t[0]);
    memset(r, 0, sizeof *r);
}

/* --compute fp8: the fp8 recipe of the strategies' models (NULL: bf16 products); --compute fp4: the fp4
 * recipe (NULL: none) and its bf16 last layers. */
static const char *g_fp8, *g_fp4;
static int g_fp4_last;
/* --optimizer: the update rule of every run, fp32's too; Lion at its own β2 (0.99), SGD with momentum 0.9
 * and L2 decay, as `bench optimizer` steps them. */
static collage_optimizer g_opt = COLLAGE_OPTIM_ADAMW;

/* The bytes the element-wise and other layer ops of a step move, estimated: each byte of the activation
 * memory (stored activations, their gradients, the logits: collage_model_memory) written once and read
 * once. A coarse model, for the order of magnitude of their rate against the memory bound. */
#define ELEM_PASSES 2.0

/* The memory r holds (all of it allocated at create); the bytes a step moves: the layer ops' (estimated,
 * ELEM_PASSES) and the optimizer's (`bench optimizer`'s bytes per parameter, and the gradient read once
 * more for the clipping norm). */
static void bench_run_memory(bench_run *r, size_t n) {
    collage_memory bp = collage_adamw_memory(r->opt);
    collage_model_memory mm = {0};
    collage_model_memory_get(r->m, &mm);
    r->work[1] = ELEM_PASSES * (double)mm.activations;
    r->work[2] = (bench_step_bytes(g_opt, r->s) + collage_strategy_get(r->s)->word[COLLAGE_ROLE_WEIGHTS].bytes) * (double)n;
    const double mib = 1.0 / 1048576.0;
    r->mib[0] = bp.weights * (double)n * mib;
    r->mib[1] = (bp.m + bp.v + bp.compensation + bp.master) * (double)n * mib;
    r->mib[2] = (double)mm.gradients * mib;
    r->mib[3] = (double)mm.activations * mib;
    r->mib[4] = (double)mm.scratch * mib;
}

static int bench_run_make(bench_run *r, collage_strategy s, const collage_model_config *c, const float *w0, int B,
                          int T, int samples) {
    memset(r, 0, sizeof *r);
    r->s = s;
    size_t n = collage_model_num_params(c);
    collage_param_group g[COLLAGE_MODEL_MAX_TENSORS];
    int ng = collage_model_param_groups(c, 0.1, g, COLLAGE_MODEL_MAX_TENSORS);
    collage_adamw_config ac = {.strategy = s, .n = n, .beta2 = 0.95, .weight_decay = 0.1, .groups = g,
                               .n_groups = ng, .clip = 1.0, .edq = 1, .optimizer = g_opt,
                               .momentum = g_opt == COLLAGE_OPTIM_SGD ? 0.9 : 0};
    if (g_opt == COLLAGE_OPTIM_LION) ac.beta2 = collage_optimizer_get(g_opt)->beta2;
    r->t[0] = malloc(sizeof(double) * NPH * (size_t)samples);
    const collage_real prec = s == COLLAGE_FP32 ? COLLAGE_REAL_FP32 : g_fp8 ? COLLAGE_REAL_FP8
                                                                    : g_fp4 ? COLLAGE_REAL_FP4 : COLLAGE_REAL_BF16;
    if (!r->t[0] || collage_model_create(c, prec, B, T, &r->m) != COLLAGE_OK ||
        (prec == COLLAGE_REAL_FP8 && collage_model_fp8_set(r->m, g_fp8, 0) != COLLAGE_OK) ||
        (prec == COLLAGE_REAL_FP4 && collage_model_fp4_set(r->m, g_fp4, g_fp4_last, 1) != COLLAGE_OK) ||
        collage_adamw_create(&ac, &r->opt) != COLLAGE_OK) {
        fprintf(stderr, "collage bench model: cannot create the %s model%s (out of memory?)\nhint: a smaller --batch or --seq%s\n",
                collage_strategy_name(s), g_fp8 ? " with fp8 compute" : g_fp4 ? " with fp4 compute" : "",
                g_fp8 ? "; --compute fp8 takes --fp8-recipe delayed | current | block | mxfp8"
                : g_fp4 ? "; --fp4-bf16-last within the model's linear layers" : "");
        bench_run_free(r);
        return 1;
    }
    for (int k = 1; k < NPH; k++) r->t[k] = r->t[0] + (size_t)k * samples;
    collage_adamw_set_weights_f32(r->opt, w0, n);
    snprintf(r->products, sizeof r->products, "%s", collage_model_products(r->m));
    bench_run_memory(r, n);
    collage_model_profile_set(r->m, 1);
    return 0;
}

/* The products' and attention's seconds of forward and backward into sample j of r, the rest of t (their
 * wall time) the other layer ops'; the products' FLOPs into r->work. p0: the profile before them. */
static void bench_run_profiled(bench_run *r, const collage_model_profile *p0, double t, int j) {
    collage_model_profile p1;
    collage_model_profile_get(r->m, &p1);
    r->work[0] = p1.products_flops - p0->products_flops;
    if (j < 0) return;
    r->t[T_PROD][j] = p1.products_seconds - p0->products_seconds;
    r->t[T_ATT][j] = p1.attention_seconds - p0->attention_seconds;
    r->t[T_ELEM][j] = t - r->t[T_PROD][j] - r->t[T_ATT][j];
}

/* One training step as `collage train` takes it (EDQ on); its phase times into sample j (j < 0: not kept). */
static void bench_run_step(bench_run *r, const int32_t *in, const int32_t *tg, int B, int T, int j) {
    const double q0 = collage_model_fp8_quant_seconds(r->m) + collage_model_fp4_quant_seconds(r->m);
    collage_model_profile p0;
    collage_model_profile_get(r->m, &p0);
    double t0 = cli_now(), loss;
    collage_model_zero_grad(r->m);
    collage_model_forward(r->m, collage_adamw_params(r->opt), in, tg, B, T, &loss);
    double t1 = cli_now();
    collage_model_backward(r->m);
    double t2 = cli_now();
    const collage_status st = collage_adamw_step(r->opt, collage_model_grads(r->m), 1e-4, NULL);
    if (collage_model_precision(r->m) == COLLAGE_REAL_FP8) collage_model_fp8_end_step(r->m, st != COLLAGE_OK);
    double t3 = cli_now();
    if (j >= 0) r->t[0][j] = t3 - t0, r->t[1][j] = t1 - t0, r->t[2][j] = t2 - t1, r->t[3][j] = t3 - t2;
    if (j >= 0) r->t[4][j] = collage_model_fp8_quant_seconds(r->m) + collage_model_fp4_quant_seconds(r->m) - q0;
    bench_run_profiled(r, &p0, t2 - t0, j);
}

/* Median of the first n samples of each phase, in ms, into med[NPH]. Sorts the samples in place: a
 * median taken later over more of them does not depend on their order. */
static void bench_run_medians(const bench_run *r, int n, double med[NPH]) {
    for (int k = 0; k < NPH; k++) med[k] = bench_median(r->t[k], n) * 1e3;
}

/* The physical limit of a row's products on the threads used: AMX's tile peak where they run on oneDNN's
 * AMX kernels, the bf16 dot product's on oneDNN's AVX512_BF16 ones, else fp32 FMA's (every other kernel
 * multiplies fp32 numbers, bf16 operands widened). */
static double row_peak(const char *products) {
    const collage_core_peak *p = bench_core_peak();
    const int amx = products && strstr(products, "(AMX)") && p->amx_bf16 > 0;
    const int dot = products && strstr(products, "oneDNN bf16") && !amx && p->bf16_dot > 0;
    return (amx ? p->amx_bf16 : dot ? p->bf16_dot : p->fma) * collage_get_threads();
}

/* ------------------------------------------------------------------ phases */
/* The memory bound of this run in GB/s (bench_memory_bound, measured once before the models). */
static double g_membw;
#define MEMBW_FLOATS ((size_t)1 << 24) /* per array: 64 MiB, far larger than the caches */

/* Where a step's time goes: the products, attention, the other layer ops (forward and backward less the
 * first two) and the optimizer; each phase's median ms, its share of the step's median, and its rate
 * against its bound: the products' FLOP/s against row_peak; attention's against fp32 FMA's peak (its
 * arithmetic is fp32 in every model) times the threads; the layer ops' and the optimizer's bytes per
 * second against the memory bound. */
enum { PH_PROD, PH_ATT, PH_ELEM, PH_OPT, PH_COUNT };
static const char *const PH_KEY[PH_COUNT] = {"products", "attention", "elementwise", "optimizer"};
static const char *const PH_NAME[PH_COUNT] = {"products", "attention", "element-wise", "optimizer"};
typedef struct { double ms[PH_COUNT], share[PH_COUNT], rate[PH_COUNT], bound[PH_COUNT], work[PH_COUNT]; int largest; } step_phases;

static step_phases phases_of(const bench_run *r, const double med[NPH], double att_flops) {
    const double ms[PH_COUNT] = {med[T_PROD], med[T_ATT], med[T_ELEM], med[T_OPT]};
    const double work[PH_COUNT] = {r->work[0], att_flops, r->work[1], r->work[2]};
    const double bound[PH_COUNT] = {row_peak(r->products), row_peak(NULL), g_membw * 1e9, g_membw * 1e9};
    step_phases p = {.largest = 0};
    for (int k = 0; k < PH_COUNT; k++) {
        p.ms[k] = ms[k], p.work[k] = work[k], p.bound[k] = bound[k];
        p.share[k] = ms[k] / med[T_STEP];
        p.rate[k] = work[k] / (ms[k] * 1e-3);
        if (ms[k] > ms[p.largest]) p.largest = k;
    }
    return p;
}

/* A row of the phase table: the step, then each phase's ms, share, rate (GFLOP/s or GB/s) and its
 * fraction of the bound; the largest phase. */
static void phase_row(const char *name, double ms_step, const step_phases *p) {
    printf("%-14s %8.1f", name, ms_step);
    for (int k = 0; k < PH_COUNT; k++)
        printf("  %7.1f %4.0f%% %8.1f %6.0f%%", p->ms[k], 100 * p->share[k], p->rate[k] * 1e-9, 100 * p->rate[k] / p->bound[k]);
    printf("  %s\n", PH_NAME[p->largest]);
}

static void phase_header(const char *preset) {
    printf("%s: where the step's time goes (median ms of each phase, its share of the step; its rate, of its bound)\n"
           "%-14s %8s", preset, "", "");
    static const char dashes[] = "------------------------------";
    for (int k = 0; k < PH_COUNT; k++) { /* the phase's name centred over its 30 columns */
        const int len = (int)strlen(PH_NAME[k]), l = (28 - len) / 2, r = 28 - len - l;
        printf("  %.*s %s %.*s", l, dashes, PH_NAME[k], r, dashes);
    }
    printf("\n%-14s %8s", "strategy", "ms/step");
    for (int k = 0; k < PH_COUNT; k++) printf("  %7s %5s %8s %7s", "ms", "step", k < PH_ELEM ? "GFLOP/s" : "GB/s", k < PH_ELEM ? "of peak" : "of bw");
    printf("  largest\n");
}

/* The phases as JSON fields (a row's optimizer_ms is printed already): ",\"products_ms\":...". */
static void phase_json(const step_phases *p) {
    for (int k = 0; k < PH_COUNT; k++) {
        const char *key = PH_KEY[k], *unit = k < PH_ELEM ? "gflops" : "gbps", *per = k < PH_ELEM ? "gflop" : "gb";
        if (k != PH_OPT) printf(",\"%s_ms\":%.3f", key, p->ms[k]);
        printf(",\"%s_share\":%.3f,\"%s_%s\":%.2f,\"%s_bound_%s\":%.2f,\"%s_of_bound\":%.3f,\"%s_%s_per_step\":%.4f", key,
               p->share[k], key, unit, p->rate[k] * 1e-9, key, unit, p->bound[k] * 1e-9, key, p->rate[k] / p->bound[k], key, per,
               p->work[k] * 1e-9);
    }
    printf(",\"largest_phase\":\"%s\"", PH_KEY[p->largest]);
}

/* One row: speed, the fraction of the reference rate of its products (sgemm for fp32, the bf16 products
 * for the bf16 strategies) and of the core's peak for the instruction they use, the speed-up over the
 * fp32 steps taken beside it, the phases, the memory. */
static void bench_model_row(const bench_run *r, const double med[NPH], double ms_fp32, double tok, double flops_tok,
                            const double ref[2], const char *preset, int B, int T, int json, const step_phases *ph) {
    const collage_strategy s = r->s;
    const double ms = med[0], fl = flops_tok * tok / (ms * 1e-3), ceil = s == COLLAGE_FP32 ? ref[0] : ref[1];
    const double peak = row_peak(r->products);
    const double *mb = r->mib, total = mb[0] + mb[1] + mb[2] + mb[3] + mb[4];
    if (json) {
        printf("{\"model\":\"%s\",\"optimizer\":\"%s\",\"strategy\":\"%s\",\"B\":%d,\"T\":%d,\"ms_per_step\":%.2f,\"tokens_per_s\":%.1f,"
               "\"model_gflops\":%.2f,\"sgemm_gflops\":%.2f,\"fraction_of_sgemm\":%.3f,\"bf16_gemm_gflops\":%.2f,"
               "\"fraction_of_products\":%.3f,\"fwd_bwd_fraction_of_products\":%.3f,\"slowdown_vs_fp32\":%.3f,\"speedup_vs_fp32\":%.3f,"
               "\"forward_ms\":%.2f,\"backward_ms\":%.2f,\"optimizer_ms\":%.2f,\"fp8_quant_ms\":%.2f,\"fp32_ms_alongside\":%.2f,"
               "\"weights_mib\":%.1f,\"state_mib\":%.1f,\"gradients_mib\":%.1f,\"activations_mib\":%.1f,"
               "\"scratch_mib\":%.1f,\"core_peak_gflops\":%.1f,\"fraction_of_core_peak\":%.3f,\"products\":\"%s\",\"cpu\":\"%s\"",
               preset, collage_optimizer_name(g_opt), collage_strategy_name(s), B, T, ms, tok / (ms * 1e-3), fl * 1e-9,
               ref[0] * 1e-9, fl / ref[0], ref[1] * 1e-9, fl / ceil, fl * ms / (med[1] + med[2]) / ceil, ms / ms_fp32,
               ms_fp32 / ms, med[1], med[2], med[3], med[4], ms_fp32, mb[0], mb[1],
               mb[2], mb[3], mb[4], peak * 1e-9, fl / peak, r->products, bench_cpu_name());
        phase_json(ph);
        printf("}\n");
    } else
        printf("%-14s %8.1f %8.0f %8.1f %6.0f%% %6.0f%% %7.2fx %8.1f %8.1f %8.1f %5.0f%%   %7.0f %6.0f %6.0f %6.0f %6.0f %7.0f\n",
               collage_strategy_name(s), ms, tok / (ms * 1e-3), fl * 1e-9, 100 * fl / ceil, 100 * fl / peak, ms_fp32 / ms, med[1], med[2],
               med[3], 100 * med[3] / ms, mb[0], mb[1], mb[2], mb[3], mb[4], total);
}

/* One model of the benchmark: its shape, reference rates, weights and tokens, the fp32 run stepped beside
 * every strategy, and each strategy's medians with fp32's alongside them. */
#define MAX_MODELS 4
enum { NLIST = 5 };
typedef struct {
    const char *preset;
    collage_model_config c;
    size_t n;
    double flops_tok, att_tok, ref[2]; /* model FLOPs per token, attention's of them; reference rates */
    float *w0;
    int32_t *in, *tg;
    bench_run f;
    double med[NLIST][NPH], fmed[NLIST][NPH], mib[NLIST][5], work[NLIST][3];
    char prod[NLIST][160];
} bench_model_set;

static void model_close(bench_model_set *m) {
    bench_run_free(&m->f);
    free(m->w0); free(m->in); free(m->tg);
    m->w0 = NULL; m->in = m->tg = NULL;
}

/* The model of a preset, its reference rates (sgemm on blas_threads OpenBLAS threads, the bf16 products on
 * the model's own), its header, and its fp32 run with room for `samples` steps. 0, 1 (failed) or 2 (bad
 * preset or shape, message printed). */
static int model_open(bench_model_set *m, const char *preset, int B, int T, int steps, int warmup, int samples,
                      int blas_threads, int json) {
    memset(m, 0, sizeof *m);
    m->preset = preset;
    char msg[256];
    if (collage_model_preset(preset, &m->c) != COLLAGE_OK) {
        fprintf(stderr, "collage bench model: unknown --model '%s'\nhint: one of %s\n", preset, cli_preset_names(", "));
        return 2;
    }
    if (collage_model_check(&m->c, B, T, msg, sizeof msg) != COLLAGE_OK) {
        fprintf(stderr, "collage bench model: --model %s with --batch %d --seq %d: %s\nhint: --seq %d or less (the "
                        "model's context)\n", preset, B, T, msg, m->c.max_seq_len);
        return 2;
    }
    m->n = collage_model_num_params(&m->c);
    m->w0 = malloc(m->n * sizeof(float));
    m->in = malloc(sizeof(int32_t) * (size_t)B * T);
    m->tg = malloc(sizeof(int32_t) * (size_t)B * T);
    if (!m->w0 || !m->in || !m->tg || collage_model_init_weights(&m->c, 1, m->w0, m->n) != COLLAGE_OK) {
        model_close(m);
        return 1;
    }
    for (int i = 0; i < B * T; i++) { m->in[i] = (i * 7919) % m->c.vocab_size; m->tg[i] = (i * 104729 + 1) % m->c.vocab_size; }
    const int mlm = collage_family_objective(m->c.family) == COLLAGE_OBJECTIVE_MASKED_LM;
    const int K = mlm ? (int)collage_mlm_mask(collage_mlm_key(1, 1, 0), m->in, NULL, B, T, 0, collage_model_mask_token(&m->c),
                                              collage_model_text_vocab(&m->c), m->in, m->tg)
                      : B * T; /* the rows a masked-LM head runs on: the masked ones */
    const model_shapes sh = shapes_of(&m->c, B * T, T, K);
    m->flops_tok = sh.flops_tok, m->att_tok = sh.att_tok;
    openblas_set_num_threads(blas_threads);
    m->ref[0] = sgemm_rate(&m->c, B * T, K, 3); /* OpenBLAS with its own threads: the reference of fp32 */
    openblas_set_num_threads(1); /* the model's tiles are single-threaded: no call switches it and back */
    m->ref[1] = bf16_rate(&m->c, B * T, K, 3); /* the bf16 model's products alone: the reference of bf16 */
    char peak_text[256];
    bench_peak_line(bench_core_peak(), peak_text, sizeof peak_text);
    if (!json && mlm) printf("%s: masked LM, %d of the %d positions scored, the head on those only\n", preset, K, B * T);
    if (!json)
        printf("collage bench model: %s (%zu params), optimizer %s, B = %d, T = %d, %d thread%s; median of %d step%s "
               "after %d untimed,\n"
               "each strategy stepped in alternation with an fp32 model (vs fp32: against those fp32 steps)\n"
               "cpu: %s\n%s\nproducts of the model's shapes alone: OpenBLAS sgemm %.1f GFLOP/s, bf16 (%s) %.1f GFLOP/s\n"
               "of prod: the model's FLOP/s over its products' rate (sgemm for fp32, bf16 for the others); of core: over\n"
               "the core peak of the instruction its products use, times the threads (each row's products: --json); speed-up: over\n"
               "the fp32 steps; phases (median ms): forward includes zeroing the gradients, optimizer the clipping norm\n"
               "and EDQ; memory held (MiB): weights, optimizer state, gradients, activations, products' scratch, total\n"
               "memory bound (bench optimizer's in-place a[i] = a[i]*s + b[i], 2 x 64 MiB): %.1f GB/s\n"
               "where the time goes (the model's profile; each phase's median, so the shares need not add to 100%%):\n"
               "products (their epilogues on the tiles included; fp8: the quantization) in GFLOP/s of the core peak;\n"
               "attention (%.0f FLOPs a token) of fp32 FMA's peak; element-wise: the other layer ops (norms, activations,\n"
               "residuals, softmax and loss, embeddings; fp32: the bias loops), bytes estimated as twice the activation\n"
               "memory, and the optimizer (its bytes per parameter, the gradient read once more for clipping) in GB/s of\n"
               "the memory bound; peaks times the threads\n\n",
               preset, m->n, collage_optimizer_name(g_opt), B, T, collage_get_threads(),
               collage_get_threads() == 1 ? "" : "s", steps, steps == 1 ? "" : "s",
               warmup, bench_cpu_name(), peak_text, m->ref[0] * 1e-9,
               collage_bf16_products(), m->ref[1] * 1e-9, g_membw, m->att_tok);
    fflush(stdout);
    if (bench_run_make(&m->f, COLLAGE_FP32, &m->c, m->w0, B, T, samples)) { model_close(m); return 1; }
    for (int k = 0; k < warmup; k++) bench_run_step(&m->f, m->in, m->tg, B, T, -1);
    return 0;
}

/* Strategy si on every model: each model's strategy run and fp32 run stepped in turn, model after model,
 * so that the models are timed side by side as well. 0 or 1. */
static int strategy_round(bench_model_set *ms, int nm, collage_strategy s, int si, int B, int T, int steps, int warmup) {
    bench_run r[MAX_MODELS];
    int made = 0, rc = 0;
    for (; made < nm; made++)
        if (bench_run_make(&r[made], s, &ms[made].c, ms[made].w0, B, T, steps)) { rc = 1; break; }
    for (int k = 0; k < warmup + steps && !rc; k++)
        for (int m = 0; m < nm; m++) { /* the fp32 steps timed beside strategy si: samples [si·steps, (si + 1)·steps) */
            bench_run_step(&ms[m].f, ms[m].in, ms[m].tg, B, T, k < warmup ? -1 : si * steps + k - warmup);
            bench_run_step(&r[m], ms[m].in, ms[m].tg, B, T, k < warmup ? -1 : k - warmup);
        }
    for (int m = 0; m < made; m++) {
        if (!rc) {
            bench_run alongside = ms[m].f;
            for (int q = 0; q < NPH; q++) alongside.t[q] = ms[m].f.t[q] + (size_t)si * steps;
            bench_run_medians(&r[m], steps, ms[m].med[si]);
            bench_run_medians(&alongside, steps, ms[m].fmed[si]);
            memcpy(ms[m].mib[si], r[m].mib, sizeof r[m].mib);
            memcpy(ms[m].work[si], r[m].work, sizeof r[m].work);
            snprintf(ms[m].prod[si], sizeof ms[m].prod[si], "%s", r[m].products);
        }
        bench_run_free(&r[m]);
    }
    return rc;
}

/* The phase table of a model's rows (fp32 first, medians in fall; ph: their phases). */
static void phase_table(const bench_model_set *m, const collage_strategy *chosen, int done, const double fall[NPH],
                        const step_phases *ph) {
    printf("\n");
    phase_header(m->preset);
    phase_row(collage_strategy_name(COLLAGE_FP32), fall[T_STEP], &ph[0]);
    for (int si = 0; si < done; si++) phase_row(collage_strategy_name(chosen[si]), m->med[si][T_STEP], &ph[si + 1]);
}

/* A model's rows: fp32 (its steps over every round), then each strategy measured; then, in text, its
 * phase table. The model GFLOP/s of each into gf (fp32 first). */
static void model_rows(bench_model_set *m, const collage_strategy *chosen, int done, int B, int T, int steps, int json,
                       double *gf) {
    const double tok = (double)B * T;
    double fall[NPH];
    step_phases ph[NLIST + 1];
    if (!json)
        printf("%s:\n%-14s %8s %8s %8s %7s %7s %8s %8s %8s %8s %6s   %7s %6s %6s %6s %6s %7s\n", m->preset, "strategy",
               "ms/step", "tokens/s", "GFLOP/s", "of prod", "of core", "speed-up", "forward", "backward", "optim.", "opt %",
               "weights", "state", "grads", "acts", "scr.", "total");
    bench_run_medians(&m->f, done ? done * steps : steps, fall);
    ph[0] = phases_of(&m->f, fall, m->att_tok * tok);
    bench_model_row(&m->f, fall, fall[0], tok, m->flops_tok, m->ref, m->preset, B, T, json, &ph[0]);
    gf[0] = m->flops_tok * tok / (fall[0] * 1e-3);
    for (int si = 0; si < done; si++) {
        bench_run shown = {.s = chosen[si]}; /* the strategy's figures */
        snprintf(shown.products, sizeof shown.products, "%s", m->prod[si]);
        memcpy(shown.mib, m->mib[si], sizeof shown.mib);
        memcpy(shown.work, m->work[si], sizeof shown.work);
        ph[si + 1] = phases_of(&shown, m->med[si], m->att_tok * tok);
        bench_model_row(&shown, m->med[si], m->fmed[si][0], tok, m->flops_tok, m->ref, m->preset, B, T, json, &ph[si + 1]);
        gf[si + 1] = m->flops_tok * tok / (m->med[si][0] * 1e-3);
    }
    if (json) return;
    printf("products: fp32 on %s", m->f.products); /* each distinct kernel choice once */
    for (int si = 0; si < done; si++) {
        int seen = 0;
        for (int k = 0; k < si; k++) seen |= !strcmp(m->prod[k], m->prod[si]);
        if (!seen) printf("; %s on %s", si == 0 ? "bf16 strategies" : collage_strategy_name(chosen[si]), m->prod[si]);
    }
    if (g_fp8) printf("; the bf16 strategies' products on fp8 operands (%s scaling, e4m3/e5m2)", g_fp8);
    if (g_fp4) printf("; the bf16 strategies' products on 4-bit operands (%s, last %d layers bf16)", g_fp4, g_fp4_last);
    printf("\n");
    for (int si = 0; (g_fp8 || g_fp4) && si < done; si++) /* the quantizer's share of the products' phases */
        printf("%s: %s quantization %.1f ms of the forward and backward's %.1f ms (%.0f%% of the step)\n",
               collage_strategy_name(chosen[si]), g_fp8 ? "fp8" : "fp4", m->med[si][4], m->med[si][1] + m->med[si][2],
               100 * m->med[si][4] / m->med[si][0]);
    phase_table(m, chosen, done, fall, ph);
}

/* Each low-precision strategy is timed in alternation with one fp32 model, step by step, and its
 * "vs fp32" is the ratio to the median of the fp32 steps taken alongside it: a shared machine drifts by
 * more than the differences measured. Several models (--model a,b) are stepped in alternation too, and
 * their model FLOP/s compared strategy by strategy at the end. The first `warmup` steps are not timed. */
static int bench_model(const char *const *presets, int nm, int B, int T, int steps, int warmup, const char *only,
                       int json) {
    static const collage_strategy list[NLIST] = {COLLAGE_BF16_MASTER, COLLAGE_LIGHT, COLLAGE_PLUS, COLLAGE_BF16,
                                                 COLLAGE_BF16_SR};
    collage_strategy chosen[NLIST];
    int nl = 0;
    if (only) {
        collage_strategy s;
        if (collage_strategy_parse(only, &s) != COLLAGE_OK) {
            fprintf(stderr, "collage bench model: unknown --precision '%s'\nhint: one of %s\n", only, cli_strategy_names(", ", 0));
            return 2;
        }
        char why[256];
        if (collage_optimizer_check(g_opt, s, why, sizeof why) != COLLAGE_OK) {
            fprintf(stderr, "collage bench model: --optimizer %s --precision %s: %s\nhint: --optimizer adamw keeps v; "
                            "lion and sgd take any strategy whose v is not a pair\n", collage_optimizer_name(g_opt), only, why);
            return 2;
        }
        if (s != COLLAGE_FP32) chosen[nl++] = s;
    } else
        for (int i = 0; i < NLIST; i++) /* those the optimizer can step (Lion and SGD: no collage-plus) */
            if (collage_optimizer_check(g_opt, list[i], NULL, 0) == COLLAGE_OK) chosen[nl++] = list[i];
    const int blas_threads = openblas_get_num_threads();
    g_membw = bench_memory_bound(MEMBW_FLOATS, collage_get_threads(), 5);
    bench_model_set ms[MAX_MODELS];
    int rc = 0, opened = 0, done = 0;
    for (; opened < nm && !rc; opened++) rc = model_open(&ms[opened], presets[opened], B, T, steps, warmup, steps * (nl ? nl : 1), blas_threads, json);
    if (rc) opened--;
    if (!rc && !nl)
        for (int k = 0; k < steps; k++)
            for (int m = 0; m < nm; m++) bench_run_step(&ms[m].f, ms[m].in, ms[m].tg, B, T, k);
    for (int si = 0; si < nl && !rc; si++) {
        rc = strategy_round(ms, nm, chosen[si], si, B, T, steps, warmup);
        done += !rc;
        if (!json && !rc) fprintf(stderr, "[%s measured]\n", collage_strategy_name(chosen[si]));
    }
    double gf[MAX_MODELS][NLIST + 1];
    if (!rc) { /* the peak measured again: a shared core's moment of load cannot set it for the rows */
        char again[256];
        bench_core_peak_again();
        bench_peak_line(bench_core_peak(), again, sizeof again);
        if (!json) printf("%s (the higher of two measurements, before and after the steps)\n", again);
    }
    for (int m = 0; m < opened && !rc; m++) model_rows(&ms[m], chosen, done, B, T, steps, json, gf[m]);
    if (!rc && !json && nm > 1) {
        printf("\nmodel GFLOP/s against %s's, the models stepped in alternation:\n%-14s", presets[0], "strategy");
        for (int m = 1; m < nm; m++) printf(" %12s", presets[m]);
        for (int si = 0; si <= done; si++) {
            printf("\n%-14s", collage_strategy_name(si ? chosen[si - 1] : COLLAGE_FP32));
            for (int m = 1; m < nm; m++) printf(" %11.2fx", gf[m][si] / gf[0][si]);
        }
        printf("\n");
    }
    for (int m = 0; m < opened; m++) model_close(&ms[m]);
    return rc;
}

/* "gpt2,llama-110m" into at most MAX_MODELS names (buf holds them); the count, or 0 for an empty name. */
static int split_models(const char *arg, char *buf, size_t cap, const char **out) {
    snprintf(buf, cap, "%s", arg);
    int n = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && n < MAX_MODELS; t = strtok_r(NULL, ",", &save)) out[n++] = t;
    return n;
}

/* `collage bench model --help`. */
static void bench_model_usage(void) {
    printf("usage: collage bench model [--model PRESET[,PRESET...]] [--batch B] [--seq T] [--steps N] [--warmup W] "
           "[--precision S] [--optimizer O] [--compute bf16|fp8|fp4] [--fp8-recipe R] [--fp4-recipe R] [--fp4-bf16-last N] [--threads N] [--json]\n"
           "each strategy is stepped in alternation with an fp32 model\n"
           "  --model P[,P]   presets (default gpt2); several (up to %d): stepped in alternation, their FLOP/s\n"
           "                  compared with the first's; presets: %s\n"
           "  --batch B --seq T   sequences per step and their length, T at most the model's context\n"
           "                  (default 4 x 64)\n"
           "  --steps N       timed steps (default 5)\n"
           "  --warmup W      untimed steps before them (default 3)\n"
           "  --precision S   fp32 and this strategy only (default: every strategy)\n"
           "  --optimizer O   adamw (default), lion (beta2 0.99) or sgd (momentum 0.9), for every run, fp32's\n"
           "                  too (lion and sgd: no collage-plus, whose v is a pair)\n"
           "  --compute C     the strategies' products: bf16 (default), fp8 or fp4 (every family; fp32 stays fp32)\n"
           "  --fp8-recipe R  fp8 scaling: delayed (default) | current | block | mxfp8\n"
           "  --fp4-recipe R  fp4: nvfp4 (default) | mxfp4, each optionally ,hadamard, then ,rn (numerics.md §15)\n"
           "  --fp4-bf16-last N  fp4: the last N linear layers keep bf16 products\n"
           "  --threads N     threads (1 to 4 x the cores; default: all cores)\n"
           "  --json          one JSON object per line\n"
           "per model, two tables (the same figures as fields of each --json line):\n"
           "  each strategy's speed, model FLOP/s against its products alone and the core peak, forward,\n"
           "  backward and optimizer ms, and the memory it holds;\n"
           "  where the step's time goes, from the model's profile: the matrix products (timed at their door,\n"
           "  the epilogues on their tiles and fp8's quantization included), attention (its ops, forward and\n"
           "  backward), element-wise (the rest of forward and backward: norms, activations, residuals, softmax\n"
           "  and loss, embeddings) and the optimizer, each in ms, share of the step and rate against its bound:\n"
           "  products in GFLOP/s of the core peak of their instruction, attention of fp32 FMA's (peaks times\n"
           "  the threads); element-wise and optimizer in GB/s of the memory bound (bench optimizer's, measured\n"
           "  at the start), the element-wise bytes an estimate (twice the activation memory a step), the\n"
           "  optimizer's its bytes per parameter and one more gradient read for clipping; and the largest phase\n",
           MAX_MODELS, cli_preset_names(", "));
}

int cmd_bench_model(int argc, char **argv) {
    const char *preset = "gpt2", *only = NULL, *recipe = "delayed", *recipe_given = NULL, *recipe4 = NULL;
    int fp8 = 0, fp4 = 0, last_given = 0;
    int B = 4, T = 64, steps = 5, warmup = 3, json = 0, threads = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--model")) preset = v;
        else if (!strcmp(a, "--batch")) bad = cli_parse_range("bench model", a, v, 1, INT_MAX, &B);
        else if (!strcmp(a, "--seq")) bad = cli_parse_range("bench model", a, v, 1, INT_MAX, &T);
        else if (!strcmp(a, "--steps")) bad = cli_parse_range("bench model", a, v, 1, INT_MAX, &steps);
        else if (!strcmp(a, "--warmup")) bad = cli_parse_range("bench model", a, v, 0, INT_MAX, &warmup);
        else if (!strcmp(a, "--precision") || !strcmp(a, "--strategy")) {
            only = v; /* checked with the others below */
            if (!strcmp(a, "--strategy")) fprintf(stderr, "collage bench model: note: --strategy is spelled --precision now\n");
        } else if (!strcmp(a, "--threads")) bad = cli_parse_threads("bench model", v, &threads);
        else if (!strcmp(a, "--json")) { json = 1; continue; }
        else if (!strcmp(a, "--compute")) {
            if (v && strcmp(v, "bf16") && strcmp(v, "fp8") && strcmp(v, "fp4")) {
                fprintf(stderr, "collage bench model: --compute %s: unknown\nhint: --compute takes bf16, fp8 or fp4\n", v);
                return 2;
            }
            fp8 = v && !strcmp(v, "fp8");
            fp4 = v && !strcmp(v, "fp4");
        } else if (!strcmp(a, "--fp8-recipe")) recipe = recipe_given = v;
        else if (!strcmp(a, "--fp4-recipe")) bad = v && cli_check_fp4_recipe("bench model", recipe4 = v);
        else if (!strcmp(a, "--fp4-bf16-last")) last_given = 1, bad = cli_parse_range("bench model", a, v, 0, 1 << 20, &g_fp4_last);
        else if (!strcmp(a, "--optimizer")) bad = v && cli_parse_optimizer("bench model", a, v, &g_opt);
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            bench_model_usage();
            return 0;
        } else {
            cli_unknown("bench model", a);
            return 2;
        }
        if (bad) return 2;
        if (!v) { cli_needs_value("bench model", a); return 2; }
        i++;
    }
    if (!preset) { cli_needs_value("bench model", "--model"); return 2; }
    if (recipe_given && !fp8) {
        fprintf(stderr, "collage bench model: --fp8-recipe: an fp8 compute setting without --compute fp8\nhint: add "
                        "--compute fp8 (bf16 strategies)\n");
        return 2;
    }
    char names[256];
    const char *presets[MAX_MODELS];
    const int nm = split_models(preset, names, sizeof names, presets);
    if (nm < 1) {
        fprintf(stderr, "collage bench model: --model '%s' names no preset\nhint: one of %s\n", preset, cli_preset_names(", "));
        return 2;
    }
    if ((recipe4 || last_given) && !fp4) {
        fprintf(stderr, "collage bench model: %s: an fp4 compute setting without --compute fp4\nhint: add --compute fp4 "
                        "(bf16 strategies)\n", recipe4 ? "--fp4-recipe" : "--fp4-bf16-last");
        return 2;
    }
    cli_set_threads(threads);
    g_fp8 = fp8 ? recipe : NULL;
    g_fp4 = fp4 ? (recipe4 ? recipe4 : "nvfp4") : NULL;
    return bench_model(presets, nm, B, T, steps, warmup, only, json);
}

