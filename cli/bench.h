/* bench.h — what the benchmarks of `collage bench` share. */
#ifndef COLLAGE_CLI_BENCH_H
#define COLLAGE_CLI_BENCH_H
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
void bench_peak_line(const collage_core_peak *p, char *out, size_t cap);
#endif
