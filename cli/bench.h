/* bench.h — what the benchmarks of `collage bench` share. */
#ifndef COLLAGE_CLI_BENCH_H
#define COLLAGE_CLI_BENCH_H
/* The CPU's brand string, family and model (x86), safe to put into JSON as it is. */
const char *bench_cpu_name(void);
/* The median of t[0..r) (sorts t). */
double      bench_median(double *t, int r);
int         cmd_bench_model(int argc, char **argv);
#endif
