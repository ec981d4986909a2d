/* bench.h — what the benchmarks of `collage bench` share. */
#ifndef COLLAGE_CLI_BENCH_H
#define COLLAGE_CLI_BENCH_H
#include <stddef.h>
/* The CPU's brand string, family and model (x86), safe to put into JSON as it is. */
const char *bench_cpu_name(void);
/* The median of t[0..r) (sorts t). */
double      bench_median(double *t, int r);
int         cmd_bench_model(int argc, char **argv);
/* The core's arithmetic peak (bench_peak.c), FLOP/s of one core: fp32 FMA, the bf16 dot product (0 where
 * the CPU has none); amx: the CPU has AMX tiles. */
typedef struct { double fma, bf16; const char *fma_name; int amx; } bench_peak;
bench_peak bench_core_peak(void);
void bench_peak_line(const bench_peak *p, char *out, size_t cap);
#endif
