/* bench.c — `collage bench convert`: the row conversions in GB/s next to memcpy; `collage bench
 * optimizer`: the fused AdamW step per strategy in ns/param and GB/s next to an in-place streaming
 * bound (a[i] = a[i]·s + b[i]) measured in the same run (bench_memory_bound: `collage bench model`'s
 * memory bound too). Medians of several repetitions; arrays far larger than the caches (`collage bench
 * model`: bench_model.c). Speed is reported here, never asserted by tests. */
#include "cli.h"
#include "bench.h"
#include <math.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

typedef struct {
    size_t n;
    int reps, json, max_threads;
} bench_opts;

/* The CPU: its brand string and, on x86, family and model from CPUID. The benchmarks print it with
 * their figures, which depend on it more than on anything else: AVX-512 runs at full width on Zen 5
 * and Intel and as two 256-bit halves on Zen 4 (family 25), where the bf16 loops, bound by the issue of
 * vector operations, take about twice as long against the same memory. Quotes and backslashes are
 * replaced so that the name can go into JSON as it is. */
const char *bench_cpu_name(void) {
    static char name[96];
    if (name[0]) return name;
#if defined(__x86_64__) || defined(__i386__)
    unsigned r[12] = {0}, a = 0, b = 0, c = 0, d = 0;
    char brand[49] = "x86";
    if ((unsigned)__get_cpuid_max(0x80000000u, NULL) >= 0x80000004u) {
        for (unsigned i = 0; i < 3; i++) __get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
        memcpy(brand, r, 48);
        brand[48] = 0;
    }
    char *p = brand;
    while (*p == ' ') p++;
    for (char *e = p + strlen(p); e > p && e[-1] == ' '; e--) e[-1] = 0;
    unsigned fam = 0, model = 0;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        fam = (a >> 8) & 0xfu;
        model = (a >> 4) & 0xfu;
        if (fam == 0xfu) fam += (a >> 20) & 0xffu;
        if (fam == 0x6u || fam >= 0xfu) model |= ((a >> 16) & 0xfu) << 4;
    }
    snprintf(name, sizeof name, "%s, family %u model %u", *p ? p : "x86", fam, model);
#else
    snprintf(name, sizeof name, "unknown");
#endif
    for (char *q = name; *q; q++)
        if (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20) *q = ' ';
    return name;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void copy_par(void *dst, const void *src, size_t bytes, int threads) {
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        size_t chunk = (bytes / (size_t)nt + 63) & ~(size_t)63;
        size_t a = (size_t)t * chunk, b = a + chunk < bytes ? a + chunk : bytes;
        if (a < b) memcpy((char *)dst + a, (const char *)src + a, b - a);
    }
#else
    (void)threads;
    memcpy(dst, src, bytes);
#endif
}

enum { B_COPY, B_BF16_RN, B_BF16_SR, B_BF16_WIDEN, B_FP16_RN, B_FP16_SR, B_FP16_WIDEN, B_COUNT };
static const char *B_NAME[B_COUNT] = {"memcpy", "f32->bf16 RN", "f32->bf16 SR", "bf16->f32",
                                      "f32->fp16 RN", "f32->fp16 SR", "fp16->f32"};
static const char *B_KEY[B_COUNT] = {"copy", "bf16_rn", "bf16_sr", "bf16_to_f32", "fp16_rn", "fp16_sr", "fp16_to_f32"};

static double run_once(int k, float *f32, float *f32b, uint16_t *h, size_t n, int threads, int rep) {
    double t0 = cli_now();
    switch (k) {
    case B_COPY: copy_par(f32b, f32, n * 4, threads); break;
    case B_BF16_RN: collage_bf16_from_f32_row((collage_bf16 *)h, f32, n); break;
    case B_BF16_SR: collage_bf16_from_f32_sr_row((collage_bf16 *)h, f32, n, 42, (uint64_t)rep * n); break;
    case B_BF16_WIDEN: collage_bf16_to_f32_row(f32b, (const collage_bf16 *)h, n); break;
    case B_FP16_RN: collage_fp16_from_f32_row(h, f32, n); break;
    case B_FP16_SR: collage_fp16_from_f32_sr_row(h, f32, n, 42, (uint64_t)rep * n); break;
    case B_FP16_WIDEN: collage_fp16_to_f32_row(f32b, h, n); break;
    }
    return cli_now() - t0;
}

static int bench_convert(const bench_opts *o) {
    size_t n = o->n;
    float *f32 = aligned_alloc(64, (n * 4 + 63) & ~(size_t)63);
    float *f32b = aligned_alloc(64, (n * 4 + 63) & ~(size_t)63);
    uint16_t *h = aligned_alloc(64, (n * 2 + 63) & ~(size_t)63);
    if (!f32 || !f32b || !h) {
        fprintf(stderr, "collage bench convert: cannot allocate %zu MB\nhint: use a smaller --n\n", n * 10 >> 20);
        free(f32); free(f32b); free(h);
        return 1;
    }
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) { /* values of every magnitude a model sees, mostly normal */
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        f32[i] = (float)((double)(int32_t)(s >> 32) * 0x1p-31 * (double)(1u << (s & 7)));
    }
    memset(h, 0, n * 2); memset(f32b, 0, n * 4);
    collage_fp16_from_f32_row(h, f32, n);
    if (!o->json)
        printf("collage bench convert: n = %zu elements, isa = %s, median of %d reps\ncpu: %s\n"
               "%-14s %7s %9s %8s\n", n, collage_isa_name(collage_get_isa()), o->reps, bench_cpu_name(),
               "kernel", "threads", "GB/s", "vs copy");
    double *ts = malloc(sizeof(double) * (size_t)o->reps);
    int thread_list[2] = {1, o->max_threads};
    int ntl = o->max_threads > 1 ? 2 : 1;
    for (int ti = 0; ti < ntl; ti++) {
        int threads = thread_list[ti];
        collage_set_threads(threads);
        double copy_gbps = 0;
        for (int k = 0; k < B_COUNT; k++) {
            double bytes = k == B_COPY ? 8.0 * (double)n : 6.0 * (double)n;
            run_once(k, f32, f32b, h, n, threads, 0); /* warm-up: pages touched, threads started */
            for (int r = 0; r < o->reps; r++) ts[r] = run_once(k, f32, f32b, h, n, threads, r + 1);
            qsort(ts, (size_t)o->reps, sizeof(double), cmp_double);
            double gbps = bytes / ts[o->reps / 2] * 1e-9;
            if (k == B_COPY) copy_gbps = gbps;
            if (o->json)
                printf("{\"kernel\":\"%s\",\"threads\":%d,\"n\":%zu,\"isa\":\"%s\",\"gbps\":%.3f,\"copy_fraction\":%.3f,"
                       "\"cpu\":\"%s\"}\n",
                       B_KEY[k], threads, n, collage_isa_name(collage_get_isa()), gbps, gbps / copy_gbps, bench_cpu_name());
            else
                printf("%-14s %7d %9.2f %7.0f%%\n", B_NAME[k], threads, gbps, 100.0 * gbps / copy_gbps);
            fflush(stdout);
        }
    }
    collage_set_threads(0);
    free(ts); free(f32); free(f32b); free(h);
    return 0;
}

/* `collage bench` and `collage bench --help`: the three benchmarks. */
static void bench_list(FILE *f) {
    fprintf(f, "usage: collage bench convert|optimizer|model [options]   (collage bench NAME --help for its options)\n"
               "  convert     row conversion throughput (fp32 <-> bf16/fp16, RN and SR) against a plain memory copy\n"
               "  optimizer   the fused AdamW step per precision strategy against the memory-bandwidth bound\n"
               "  model       a training step per precision strategy: tokens/s, model FLOP/s against sgemm\n");
}

static void bench_usage(FILE *f) {
    fprintf(f, "usage: collage bench convert [--n N] [--threads T] [--reps R] [--isa scalar|avx2|avx512] [--json]\n"
               "  --n N          elements per array (default 32M; suffixes K, M, G)\n"
               "  --threads T    also measure on T threads (1 to 4 x the cores; default: all cores)\n"
               "  --reps R       repetitions, the median is reported (default 7)\n"
               "  --isa NAME     force an instruction set (default: the best the CPU has)\n"
               "  --json         one JSON object per line\n");
}

/* ------------------------------------------------------------------ optimizer */
/* Logical bytes one step moves per parameter, from the strategy table: each state word read and
 * written once, or only written where the step derives it from the others (bf16-master's θ), and the
 * gradient (in the weights' format) read. */
double bench_step_bytes(collage_optimizer opt, collage_strategy s) {
    const collage_strategy_info *T = collage_strategy_get(s);
    double bytes = T->word[COLLAGE_ROLE_WEIGHTS].bytes; /* the gradient */
    for (int r = 0; r < COLLAGE_ROLE_COUNT; r++)
        if (r != COLLAGE_ROLE_V || collage_optimizer_get(opt)->has_v) /* Lion and SGD keep no v */
            bytes += (T->word[r].derived ? 1.0 : 2.0) * T->word[r].bytes;
    return bytes;
}

/* The memory bound: a[i] = a[i]·s + b[i] in place (read, read, write back, as the optimizer's state
 * is), vectorised for the CPU: compiled for the baseline ISA the loop is compute-limited (measured
 * 30 GB/s against 45 with AVX-512 on 2 threads of a Xeon) and would flatter every strategy. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
__attribute__((target("avx512f"))) static void stream_avx512(float *a, const float *b, size_t lo, size_t hi) {
    const __m512 sc = _mm512_set1_ps(0.999f);
    size_t i = lo;
    for (; i + 16 <= hi; i += 16)
        _mm512_storeu_ps(a + i, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(a + i), sc), _mm512_loadu_ps(b + i)));
    for (; i < hi; i++) a[i] = a[i] * 0.999f + b[i];
}
__attribute__((target("avx2"))) static void stream_avx2(float *a, const float *b, size_t lo, size_t hi) {
    const __m256 sc = _mm256_set1_ps(0.999f);
    size_t i = lo;
    for (; i + 8 <= hi; i += 8)
        _mm256_storeu_ps(a + i, _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(a + i), sc), _mm256_loadu_ps(b + i)));
    for (; i < hi; i++) a[i] = a[i] * 0.999f + b[i];
}
#endif

static void stream_bound(float *a, const float *b, size_t n, int threads) {
    (void)threads; /* unused without OpenMP */
    const collage_isa isa = collage_get_isa();
    const long pieces = 256;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long p = 0; p < pieces; p++) {
        size_t lo = n / (size_t)pieces * (size_t)p, hi = p == pieces - 1 ? n : n / (size_t)pieces * (size_t)(p + 1);
        lo &= ~(size_t)15;
        if (p != pieces - 1) hi &= ~(size_t)15;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        if (isa == COLLAGE_ISA_AVX512) { stream_avx512(a, b, lo, hi); continue; }
        if (isa == COLLAGE_ISA_AVX2) { stream_avx2(a, b, lo, hi); continue; }
#endif
        for (size_t i = lo; i < hi; i++) a[i] = a[i] * 0.999f + b[i];
    }
    (void)isa;
}

double bench_median(double *t, int r) {
    qsort(t, (size_t)r, sizeof(double), cmp_double);
    return t[r / 2];
}

typedef struct { double ns, ns_edq, bound, master_ns, edq_paired, master_paired, tie_free; } opt_times;


/* The streaming bound's buffers, timed beside each strategy's steps. */
typedef struct { float *a, *b; size_t n; int threads; } bound_buf;

static double bound_once(const bound_buf *B) {
    double t0 = cli_now();
    stream_bound(B->a, B->b, B->n, B->threads);
    return cli_now() - t0;
}

/* An optimizer under test and its gradient, filled with the same pseudo-random values every run; of
 * its timed steps, how many had tie-free scalars (collage_step_stats.tie_free: the shorter loops). */
typedef struct { collage_adamw *o; void *g; int steps, tie_free; } timed_opt;

static void timed_opt_free(timed_opt *T) {
    collage_adamw_free(T->o);
    free(T->g);
    memset(T, 0, sizeof *T);
}

/* tie_proof: the size from which the optimizer proves its step scalars tie-free (collage.h
 * collage_adamw_set_tie_proof). */
static int timed_opt_make(timed_opt *T, collage_optimizer opt, collage_strategy s, size_t n, double beta2, size_t tie_proof) {
    memset(T, 0, sizeof *T);
    const int fp16 = collage_strategy_is_fp16(s);
    collage_adamw_config c = {.strategy = s, .n = n, .beta2 = beta2, .eps = fp16 ? 1e-4 : 0, /* 1e-8 is 0 in fp16 */
                              .weight_decay = 0.1, .edq = 0, .seed = 1, .optimizer = opt, .momentum = 0.9};
    if (collage_adamw_create(&c, &T->o) != COLLAGE_OK) return -1;
    collage_adamw_set_tie_proof(T->o, tie_proof);
    size_t gb = collage_strategy_is_fp32(s) ? 4 : 2;
    T->g = malloc(n * gb);
    if (!T->g) { timed_opt_free(T); return -1; }
    float *w = collage_adamw_params(T->o), *g32 = T->g;
    uint16_t *w16 = collage_adamw_params(T->o), *g16 = T->g;
    uint64_t x = 0x9e3779b97f4a7c15ull;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < (long)n; i++) {
        uint64_t z = x ^ (uint64_t)i * 0xbf58476d1ce4e5b9ull;
        z ^= z >> 29; z *= 0x94d049bb133111ebull; z ^= z >> 32;
        float wv = (float)((double)(z & 0xffff) / 65536.0 - 0.5), gv = (float)((double)(z >> 48) / 6553600.0 - 0.005);
        if (gb == 4) { w[i] = wv; g32[i] = gv; }
        else if (fp16) { w16[i] = collage_lp_from_f32(COLLAGE_FMT_FP16, wv); g16[i] = collage_lp_from_f32(COLLAGE_FMT_FP16, gv); }
        else { w16[i] = collage_bf16_from_f32(wv).bits; g16[i] = collage_bf16_from_f32(gv).bits; }
    }
    collage_adamw_step(T->o, T->g, 1e-3, NULL); /* warm-up: pages touched, threads started */
    return 0;
}

static double timed_step(timed_opt *T, int edq) {
    collage_step_stats st;
    collage_adamw_set_edq(T->o, edq);
    double t0 = cli_now();
    collage_adamw_step(T->o, T->g, 1e-3, &st);
    double dt = cli_now() - t0;
    T->steps++;
    T->tie_free += st.tie_free > 0;
    return dt;
}

/* One strategy over `reps` rounds of: the streaming bound (bb), a bf16-master step (partner), a step
 * with EDQ off and one with EDQ on, in alternating order (one object, the same memory, so that the
 * EDQ cost is not where two allocations landed). The machine's bandwidth drifts by 2x over minutes
 * here: every figure of a row comes from the same rounds. Without bb and partner: EDQ off only. */
static int time_strategy(collage_optimizer opt, collage_strategy s, size_t n, double beta2, size_t tie_proof, int reps,
                         opt_times *R, const bound_buf *bb, timed_opt *partner) {
    timed_opt T;
    if (timed_opt_make(&T, opt, s, n, beta2, tie_proof)) return -1;
    double *t = malloc(sizeof(double) * 6 * (size_t)reps);
    if (!t) { timed_opt_free(&T); return -1; }
    double *off = t, *on = t + reps, *bt = t + 2 * reps, *mt = t + 3 * reps, *pe = t + 4 * reps, *pm = t + 5 * reps;
    for (int r = 0; r < reps; r++) {
        if (bb) bt[r] = bound_once(bb);
        if (partner) mt[r] = timed_step(partner, 0);
        if (bb && (r & 1)) { /* odd rounds: EDQ on first, so that neither setting always follows the other */
            on[r] = timed_step(&T, 1);
            off[r] = timed_step(&T, 0);
        } else {
            off[r] = timed_step(&T, 0);
            if (bb) on[r] = timed_step(&T, 1);
        }
    }
    /* the ratios paired within each round (EDQ on over off, bf16-master over the strategy), taken before
     * median_of sorts the samples: the memory's drift between rounds cancels in each pair */
    for (int r = 0; r < reps; r++) {
        pe[r] = bb ? on[r] / off[r] : 1.0;
        pm[r] = partner ? mt[r] / off[r] : 1.0;
    }
    R->edq_paired = bench_median(pe, reps) - 1.0;
    R->master_paired = bench_median(pm, reps);
    R->ns = bench_median(off, reps) / (double)n * 1e9;
    if (bb) {
        R->ns_edq = bench_median(on, reps) / (double)n * 1e9;
        R->bound = 12.0 * (double)bb->n / bench_median(bt, reps) * 1e-9;
    }
    R->master_ns = partner ? bench_median(mt, reps) / (double)n * 1e9 : R->ns;
    R->tie_free = T.steps ? (double)T.tie_free / T.steps : 0.0;
    free(t);
    timed_opt_free(&T);
    return 0;
}

/* What the optimizer benchmark prints about itself, shared by its parts. */
typedef struct {
    size_t n, n_cache;
    int threads, reps, json;
    double beta2;
    const char *only;
    collage_optimizer opt; /* the update rule of the table under way */
} opt_bench;

/* The strategies in the order of the rows: bf16-master (every row's reference) first, then the table's
 * presets, then the 8-bit compositions of `collage compare --precision frontier`. */
static const char *const BENCH_COMPOSED[] = {"collage-light+m=int8,v=int8", "collage-light+m=int8,v=int8,q=sr",
                                              "bf16-sr+m=int8,v=int8",       "bf16-sr+m=int8,v=int8,q=sr",
                                              "bf16-remainder+m=int8,v=int8", "bf16-master+m=int8,v=int8",
                                              "collage-light+m=e4m3,v=e4m3", "bf16-c8+m=int8,v=int8",
                                              "eco+m=int8,v=int8"};
#define BENCH_MAX (COLLAGE_STRATEGY_COUNT + (int)(sizeof BENCH_COMPOSED / sizeof *BENCH_COMPOSED) + 1)
/* ... and `only` (--precision) at the end where it is none of those (another composition). */
static int bench_order(collage_strategy *order, const char *only) {
    int k = 0;
    order[k++] = COLLAGE_BF16_MASTER;
    for (int s = 0; s < COLLAGE_STRATEGY_COUNT; s++)
        if (s != COLLAGE_BF16_MASTER) order[k++] = (collage_strategy)s;
    for (size_t i = 0; i < sizeof BENCH_COMPOSED / sizeof *BENCH_COMPOSED; i++)
        if (collage_strategy_parse(BENCH_COMPOSED[i], &order[k]) == COLLAGE_OK) k++;
    int listed = !only;
    for (int i = 0; i < k && !listed; i++) listed = !strcmp(only, collage_strategy_name(order[i]));
    if (!listed && collage_strategy_parse(only, &order[k]) == COLLAGE_OK) k++;
    return k;
}

static void opt_header(const opt_bench *B, double bound0) {
    /* below a few hundred MB of state the "memory" figures are cache figures, and at a few MB a step's
     * time is mostly the threads' fork and join (the bound then read 0.4-255 GB/s from run to run at
     * 256K params on Zen 4): say so rather than print them as memory figures */
    if ((double)B->n * 28.0 < 256e6)
        printf("note: %zu params hold %.0f MB of bf16-master state, within or near the caches: the bound, \"of bound\"\n"
               "and \"limit\" are not memory figures at this size (use --params 64M or more for them)\n",
               B->n, (double)B->n * 28.0 / 1e6);
    char peak[256];
    bench_peak_line(bench_core_peak(), peak, sizeof peak);
    printf("collage bench optimizer: %s, n = %zu params, %d thread%s, isa %s, beta2 %g, median of %d rounds\n"
           "cpu: %s\n%s (the in-cache column's limit: each parameter's fp32 operations issue at up to that rate)\n"
           "memory bound (in-place a[i] = a[i]*s + b[i], vectorised): %.1f GB/s at the start. Each round times the\n"
           "bound, a bf16-master step and the strategy's step with EDQ off and on: a row's columns come from the\n"
           "same minutes of a machine whose bandwidth drifts\n\n"
           "%-32s %8s %7s %7s %7s %8s %9s %9s %8s %8s  %s\n", collage_optimizer_name(B->opt), B->n, B->threads, B->threads == 1 ? "" : "s",
           collage_isa_name(collage_get_isa()), B->beta2, B->reps, bench_cpu_name(), peak, bound0, "strategy", "ns/param",
           "B/param", "GB/s", "bound", "of bound", "vs master", "EDQ cost", "in-cache", "penalty", "limit");
}

/* One strategy's row from its from-memory (R) and in-cache (C) times. */
static void opt_row(const opt_bench *B, collage_strategy s, const opt_times *R, const opt_times *C) {
    double bound = R->bound, bytes = bench_step_bytes(B->opt, s), gbps = bytes / R->ns, frac = gbps / bound;
    /* The limit: "memory" when the step moves its bytes at 80% of the bound or more; "compute" when
     * the in-cache step is nearly as slow (its instructions take the time, wherever the data are);
     * else "compute+memory": the loop is compute-heavy but also slows when its state streams from
     * memory (the penalty column: the step over its in-cache time), without using the bandwidth.
     * On Zen 5, collage-plus reads 0.34-0.37 ns/param in cache and 0.43-0.46 streaming, at half
     * the bound; a two-way label flipped between "compute" and "memory" from run to run. */
    double penalty = R->ns / C->ns - 1.0;
    const char *limit = frac >= 0.8 ? "memory" : C->ns > 0.8 * R->ns ? "compute" : "compute+memory";
    if (B->json)
        printf("{\"optimizer\":\"%s\",\"strategy\":\"%s\",\"n\":%zu,\"threads\":%d,\"beta2\":%g,\"ns_per_param\":%.4f,\"bytes_per_param\":%.2f,"
               "\"gbps\":%.2f,\"bound_gbps\":%.2f,\"bound_fraction\":%.3f,\"bf16_master_ns_per_param\":%.4f,"
               "\"speed_vs_bf16_master\":%.3f,\"edq_ns_per_param\":%.4f,\"edq_overhead\":%.3f,"
               "\"in_cache_ns_per_param\":%.4f,\"from_memory_penalty\":%.3f,\"limit\":\"%s\",\"isa\":\"%s\","
               "\"cpu\":\"%s\",\"edq_overhead_paired\":%.3f,\"speed_vs_bf16_master_paired\":%.3f,"
               "\"tie_free_steps\":%.3f}\n",
               collage_optimizer_name(B->opt), collage_strategy_name(s), B->n, B->threads, B->beta2, R->ns, bytes, gbps, bound, frac, R->master_ns,
               R->master_ns / R->ns, R->ns_edq, R->ns_edq / R->ns - 1.0, C->ns, penalty, limit,
               collage_isa_name(collage_get_isa()), bench_cpu_name(), R->edq_paired, R->master_paired, R->tie_free);
    else
        printf("%-32s %8.3f %7.2f %7.1f %7.1f %7.0f%% %8.2fx %8.1f%% %8.3f %7.0f%%  %s\n", collage_strategy_name(s),
               R->ns, bytes, gbps, bound, 100.0 * frac, R->master_ns / R->ns, 100.0 * R->edq_paired, C->ns,
               100.0 * penalty, limit);
    fflush(stdout);
}

/* The legend, and the bf16-arithmetic strategies' share of timed steps on the shorter loops (tf, by
 * strategy). */
static void opt_footer(const opt_bench *B, const collage_strategy *order, int no, const double *tf) {
    printf("\nB/param: bytes one step reads and writes per parameter (state words, weights, bf16 gradient).\n"
           "bound: the streaming bound in GB/s; of bound: the step's GB/s over it. vs master: speed over the\n"
           "bf16-master steps of the same rounds. EDQ cost: the median over the rounds of each round's EDQ-on\n"
           "step over its EDQ-off step, taken one after the other (the JSON has the ratio of the medians too).\n"
           "in-cache: ns/param on a %zu-param slab that fits in cache;\n"
           "penalty: the step's time over its in-cache time. limit: memory (80%% of the bound or more),\n"
           "compute (the in-cache step is nearly as slow: every bf16 rounding is emulated), or\n"
           "compute+memory (compute-heavy, and slower again when the state streams from memory).\n", B->n_cache);
    printf("tie-free step scalars (the bf16 loops' shorter roundings, README):");
    for (int oi = 0; oi < no; oi++) {
        collage_strategy s = order[oi];
        if (collage_strategy_get(s)->arith != COLLAGE_WORD_BF16 || s >= COLLAGE_STRATEGY_COUNT) continue; /* no such loops */
        if (B->only && strcmp(B->only, collage_strategy_name(s))) continue;
        printf(" %s %.0f%%", collage_strategy_name(s), 100.0 * tf[oi]);
    }
    printf(" of the timed steps\n");
}

/* One strategy from memory, beside the bound and bf16-master's steps (R), and in cache (C). The in-cache
 * slab is below the size from which the library proves its step scalars tie-free (COLLAGE_TIE_PROOF_MIN):
 * where the from-memory steps took the shorter loops, the in-cache optimizer is told to prove them at any
 * size, so that both take the same loops and the penalty compares one loop with itself (the rows say
 * whether they did: tie_free_steps). */
static int opt_time(const opt_bench *B, collage_strategy s, const bound_buf *bb, timed_opt *master, opt_times *R,
                    opt_times *C) {
    if (time_strategy(B->opt, s, B->n, B->beta2, COLLAGE_TIE_PROOF_MIN, B->reps, R, bb, s == COLLAGE_BF16_MASTER ? NULL : master))
        return -1;
    return time_strategy(B->opt, s, B->n_cache, B->beta2, R->tie_free > 0 ? 0 : COLLAGE_TIE_PROOF_MIN, B->reps * 20, C, NULL,
                         NULL);
}

/* The streaming bound's figure at the start, from reps runs over a and b (n floats each). */
static double bound_start(const bound_buf *bb, int reps) {
#pragma omp parallel for schedule(static) num_threads(bb->threads)
    for (long i = 0; i < (long)bb->n; i++) { bb->a[i] = 1.0f; bb->b[i] = 1e-3f; }
    double *t = malloc(sizeof(double) * (size_t)reps);
    stream_bound(bb->a, bb->b, bb->n, bb->threads); /* warm-up: pages touched */
    for (int r = 0; r < reps && t; r++) t[r] = bound_once(bb);
    double bound0 = t ? 12.0 * (double)bb->n / bench_median(t, reps) * 1e-9 : (double)NAN;
    free(t);
    return bound0;
}

double bench_memory_bound(size_t n, int threads, int reps) {
    float *a = aligned_alloc(64, (n * 4 + 63) & ~(size_t)63), *b = aligned_alloc(64, (n * 4 + 63) & ~(size_t)63);
    const bound_buf bb = {a, b, n, threads};
    const double gbps = a && b ? bound_start(&bb, reps) : (double)NAN;
    free(a); free(b);
    return gbps;
}

static int bench_optimizer(opt_bench *B) {
    size_t n = B->n;
    collage_set_threads(B->threads);
    float *a = aligned_alloc(64, (n * 4 + 63) & ~(size_t)63), *b = aligned_alloc(64, (n * 4 + 63) & ~(size_t)63);
    timed_opt master;
    if (!a || !b || timed_opt_make(&master, B->opt, COLLAGE_BF16_MASTER, n, B->beta2, COLLAGE_TIE_PROOF_MIN)) {
        fprintf(stderr, "collage bench optimizer: cannot allocate the bound's %zu MB and a bf16-master optimizer\n"
                        "hint: use a smaller --params\n", n * 8 >> 20);
        free(a); free(b);
        return 1;
    }
    bound_buf bb = {a, b, n, B->threads};
    double bound0 = bound_start(&bb, B->reps);
    /* compute cost: the same step on a cache-resident slab, 2^16 parameters a thread (at most 1.8 MB of
     * state each: L2 or L3). Smaller slabs measured the threads' fork and join: 32768 parameters on
     * two threads read bf16-master 0.27-0.43 ns/param in cache against 0.27 streaming from memory. */
    B->n_cache = ((size_t)1 << 16) * (size_t)B->threads; /* threads ≥ 1: checked by the caller */
    if (!B->json) opt_header(B, bound0);
    collage_strategy order[BENCH_MAX];
    int rc = 0, no = bench_order(order, B->only);
    double tf[BENCH_MAX] = {0}; /* tie-free share of the timed steps, by row */
    for (int oi = 0; oi < no; oi++) {
        collage_strategy s = order[oi];
        if (B->only && strcmp(B->only, collage_strategy_name(s)) && s != COLLAGE_BF16_MASTER) continue;
        if (collage_optimizer_check(B->opt, s, NULL, 0) != COLLAGE_OK) continue; /* collage-plus's (v, δv) without v */
        opt_times R = {0}, C = {0};
        if (opt_time(B, s, &bb, &master, &R, &C)) {
            fprintf(stderr, "collage bench optimizer: cannot create a %s optimizer of %zu params (out of memory?)\nhint: a smaller --params\n",
                    collage_strategy_name(s), n);
            rc = 1;
            break;
        }
        tf[oi] = R.tie_free;
        opt_row(B, s, &R, &C);
    }
    if (!B->json && !rc) opt_footer(B, order, no, tf);
    collage_set_threads(0);
    timed_opt_free(&master);
    free(a); free(b);
    return rc;
}

static void bench_opt_usage(FILE *f) {
    fprintf(f, "usage: collage bench optimizer [--params N] [--threads T] [--beta2 B] [--reps R] [--precision S]\n"
               "                               [--optimizer LIST] [--json]\n"
               "  --params N      parameters (default 64M = 64,000,000; suffixes K, M, G are powers of 1000)\n"
               "  --threads T     threads (1 to 4 x the cores; default: all cores)\n"
               "  --beta2 B       AdamW's and Lion's beta2 in (0, 1), refused with sgd alone (default 0.95; from\n"
               "                  0.998046875 on, bf16(beta2) = 1 and collage-plus takes a loop with four fewer\n"
               "                  roundings)\n"
               "  --reps R        rounds per strategy (bound, bf16-master step, EDQ-off and EDQ-on steps);\n"
               "                  the median of each is reported (default 5)\n"
               "  --precision S   only this strategy (and bf16-master, the reference); a composition too\n"
               "                  (default: every preset and the 8-bit compositions of compare's frontier)\n"
               "  --optimizer L   adamw (default), lion, sgd, or a comma-separated list: one table each, every\n"
               "                  strategy the optimizer can step (lion and sgd: no collage-plus, whose v is a pair)\n"
               "  --json          one JSON object per line per strategy\n");
}

/* --optimizer LIST: the optimizers named, each once, in order; their count, or -1 after a message. */
static int parse_optimizers(const char *v, collage_optimizer *out) {
    char buf[256];
    int k = 0;
    if (!v) { cli_needs_value("bench optimizer", "--optimizer"); return -1; }
    snprintf(buf, sizeof buf, "%s", v);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        collage_optimizer o;
        if (cli_parse_optimizer("bench optimizer", "--optimizer", t, &o)) return -1;
        int seen = 0;
        for (int j = 0; j < k; j++) seen |= out[j] == o;
        if (!seen) out[k++] = o;
    }
    if (k == 0) { cli_parse_optimizer("bench optimizer", "--optimizer", "", NULL); return -1; }
    return k;
}

static int cmd_bench_optimizer(int argc, char **argv) {
    size_t n = 64000000;
    int threads = collage_get_threads(), reps = 5, json = 0;
    double beta2 = 0.95;
    int beta2_given = 0;
    const char *only = NULL;
    collage_optimizer opts[COLLAGE_OPTIM_COUNT] = {COLLAGE_OPTIM_ADAMW};
    int nopt = 1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--params")) { if (cli_parse_size("bench optimizer", a, v, &n)) return 2; i++; }
        else if (!strcmp(a, "--threads")) { if (cli_parse_threads("bench optimizer", v, &threads)) return 2; i++; }
        else if (!strcmp(a, "--reps")) { if (cli_parse_range("bench optimizer", a, v, 1, INT_MAX, &reps)) return 2; i++; }
        else if (!strcmp(a, "--beta2")) {
            if (cli_parse_double("bench optimizer", a, v, &beta2)) return 2;
            if (!(beta2 > 0 && beta2 < 1)) {
                fprintf(stderr, "collage bench optimizer: --beta2 %s: it takes a number in (0, 1)\nhint: collage bench optimizer --help\n", v);
                return 2;
            }
            beta2_given = 1;
            i++;
        }
        else if (!strcmp(a, "--precision") || !strcmp(a, "--strategy")) {
            collage_strategy s;
            if (cli_parse_strategy("bench optimizer", a, v, &s)) return 2;
            only = collage_strategy_name(s);
            i++;
        } else if (!strcmp(a, "--optimizer")) {
            if ((nopt = parse_optimizers(v, opts)) < 0) return 2;
            i++;
        } else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { bench_opt_usage(stdout); return 0; }
        else { cli_unknown("bench optimizer", a); return 2; }
    }
    if (n == 0) { fprintf(stderr, "collage bench optimizer: --params 0: it takes 1 or more\nhint: collage bench optimizer --help\n"); return 2; }
    int read = 0; /* --beta2 is refused when no optimizer of the list reads it (sgd alone) */
    for (int j = 0; j < nopt; j++) read |= cli_optimizer_reads(opts[j], "--beta2");
    if (beta2_given && !read && cli_refuse_unread("bench optimizer", "--beta2", opts[0], NULL)) return 2;
    int rc = 0;
    for (int j = 0; j < nopt && !rc; j++) {
        if (j && !json) printf("\n");
        opt_bench B = {.n = n, .threads = threads, .reps = reps, .json = json, .beta2 = beta2, .only = only, .opt = opts[j]};
        rc = bench_optimizer(&B);
    }
    return rc;
}


int cmd_bench(int argc, char **argv) {
    if (argc >= 1 && !strcmp(argv[0], "optimizer")) return cmd_bench_optimizer(argc - 1, argv + 1);
    if (argc >= 1 && !strcmp(argv[0], "model")) return cmd_bench_model(argc - 1, argv + 1);
    if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) { bench_list(argc < 1 ? stderr : stdout); return argc < 1 ? 2 : 0; }
    bench_opts o = {.n = (size_t)32 << 20, .reps = 7, .json = 0, .max_threads = collage_get_threads()};
    if (strcmp(argv[0], "convert") != 0) {
        fprintf(stderr, "collage bench: unknown benchmark '%s'\nhint: convert, optimizer or model (collage bench --help)\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--n")) { if (cli_parse_size("bench convert", a, v, &o.n)) return 2; i++; }
        else if (!strcmp(a, "--threads")) { if (cli_parse_threads("bench convert", v, &o.max_threads)) return 2; i++; }
        else if (!strcmp(a, "--reps")) { if (cli_parse_range("bench convert", a, v, 1, INT_MAX, &o.reps)) return 2; i++; }
        else if (!strcmp(a, "--json")) o.json = 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { bench_usage(stdout); return 0; }
        else if (!strcmp(a, "--isa")) {
            collage_isa isa = COLLAGE_ISA_AUTO;
            if (!v) { cli_needs_value("bench convert", a); return 2; }
            for (int k = COLLAGE_ISA_SCALAR; k <= COLLAGE_ISA_AVX512; k++)
                if (!strcmp(v, collage_isa_name((collage_isa)k))) isa = (collage_isa)k;
            if (isa == COLLAGE_ISA_AUTO || collage_set_isa(isa) != COLLAGE_OK) {
                fprintf(stderr, "collage bench convert: --isa %s is unknown or unsupported on this CPU\nhint: scalar, avx2 or avx512\n", v);
                return 2;
            }
            i++;
        } else { cli_unknown("bench convert", a); return 2; }
    }
    if (o.n == 0) { fprintf(stderr, "collage bench convert: --n 0: it takes 1 or more\nhint: collage bench convert --help\n"); return 2; }
    return bench_convert(&o);
}
