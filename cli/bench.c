/* bench.c — `collage bench convert`: throughput of the row conversions in GB/s (bytes read + written)
 * next to a plain memory copy (memcpy, same bytes-counting) measured in the same run, on 1 and on
 * T threads. Reports the median of several repetitions; arrays are far larger than the caches. */
#include "cli.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct {
    size_t n;
    int reps, json, max_threads;
} bench_opts;

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
        fprintf(stderr, "collage bench: cannot allocate %zu MB\nhint: use a smaller --n\n", n * 10 >> 20);
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
        printf("collage bench convert: n = %zu elements, isa = %s, median of %d reps\n"
               "%-14s %7s %9s %8s\n", n, collage_isa_name(collage_get_isa()), o->reps,
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
                printf("{\"kernel\":\"%s\",\"threads\":%d,\"n\":%zu,\"isa\":\"%s\",\"gbps\":%.3f,\"copy_fraction\":%.3f}\n",
                       B_KEY[k], threads, n, collage_isa_name(collage_get_isa()), gbps, gbps / copy_gbps);
            else
                printf("%-14s %7d %9.2f %7.0f%%\n", B_NAME[k], threads, gbps, 100.0 * gbps / copy_gbps);
            fflush(stdout);
        }
    }
    collage_set_threads(0);
    free(ts); free(f32); free(f32b); free(h);
    return 0;
}

static void bench_usage(FILE *f) {
    fprintf(f, "usage: collage bench convert [--n N] [--threads T] [--reps R] [--isa scalar|avx2|avx512] [--json]\n"
               "  --n N        elements per array (default 32M; suffixes K, M, G)\n"
               "  --threads T  also measure on T threads (default: all cores)\n"
               "  --reps R     repetitions, the median is reported (default 7)\n"
               "  --isa NAME   force an instruction set (default: the best the CPU has)\n"
               "  --json       one JSON object per line\n");
}

int cmd_bench(int argc, char **argv) {
    if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) { bench_usage(argc < 1 ? stderr : stdout); return argc < 1 ? 2 : 0; }
    bench_opts o = {.n = (size_t)32 << 20, .reps = 7, .json = 0, .max_threads = collage_get_threads()};
    if (strcmp(argv[0], "convert") != 0) {
        fprintf(stderr, "collage bench: unknown benchmark '%s'\nhint: collage bench convert\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--n")) { if (cli_parse_size(a, v, &o.n)) return 2; i++; }
        else if (!strcmp(a, "--threads")) { if (cli_parse_int(a, v, &o.max_threads)) return 2; i++; }
        else if (!strcmp(a, "--reps")) { if (cli_parse_int(a, v, &o.reps)) return 2; i++; }
        else if (!strcmp(a, "--json")) o.json = 1;
        else if (!strcmp(a, "--isa")) {
            collage_isa isa = COLLAGE_ISA_AUTO;
            if (!v) { fprintf(stderr, "collage bench: --isa needs a value\n"); return 2; }
            for (int k = COLLAGE_ISA_SCALAR; k <= COLLAGE_ISA_AVX512; k++)
                if (!strcmp(v, collage_isa_name((collage_isa)k))) isa = (collage_isa)k;
            if (isa == COLLAGE_ISA_AUTO || collage_set_isa(isa) != COLLAGE_OK) {
                fprintf(stderr, "collage bench: --isa %s is unknown or unsupported on this CPU\nhint: use scalar, avx2 or avx512\n", v);
                return 2;
            }
            i++;
        } else { fprintf(stderr, "collage bench: unknown option '%s'\n", a); bench_usage(stderr); return 2; }
    }
    if (o.n == 0 || o.reps < 1 || o.max_threads < 1) { fprintf(stderr, "collage bench: --n, --reps and --threads must be positive\n"); return 2; }
    return bench_convert(&o);
}
