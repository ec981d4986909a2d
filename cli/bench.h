/* bench.h — what the benchmarks of `collage bench` share. */
#ifndef COLLAGE_CLI_BENCH_H
#define COLLAGE_CLI_BENCH_H
#include "collage.h"
#include "collage_model.h"
#include <stddef.h>
/* The CPU's brand string, family and model (x86), safe to put into JSON as it is. */
const char *bench_cpu_name(void);
/* The median of t[0..r) (sorts t). */
double      bench_median(double *t, int r);
int         cmd_bench_model(int argc, char **argv);
/* The core's arithmetic peak (bench_peak.c: collage_core_peak_measure on collage_get_threads() cores at
 * once, measured once per process), and the line that prints it. */
const collage_core_peak *bench_core_peak(void);
/* Measures the peak again, keeping the higher figure of each instruction (bench model: before and after its
 * steps, so that a moment of load on a shared core does not set the ceiling its rows are held to). */
void bench_core_peak_again(void);
void bench_peak_line(const collage_core_peak *p, char *out, size_t cap);
/* The memory bound of `bench optimizer` (bench.c): a[i] = a[i]·s + b[i] in place, vectorised, over two
 * arrays of n floats on `threads` threads, in GB/s (12 bytes an element), the median of reps runs after
 * an untimed one; NaN when the arrays cannot be allocated. */
double bench_memory_bound(size_t n, int threads, int reps);
/* Bytes one optimizer step reads and writes per parameter (`bench optimizer`'s B/param): each state word
 * read and written once (only written where derived), the gradient read once. */
double bench_step_bytes(collage_optimizer opt, collage_strategy s);
#endif
