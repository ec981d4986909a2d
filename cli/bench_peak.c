/* bench_peak.c — the core's arithmetic peak for the instructions collage's products use, as the
 * benchmarks print it: measured by the library (collage_core_peak_measure: register-only loops of fp32
 * FMA, VDPBF16PS and AMX's TDPBF16PS), once per process. */
#include "bench.h"
#include "cli.h"
#include "collage_model.h"
#include <stdio.h>

static collage_core_peak g_peak;
static int g_measured;

const collage_core_peak *bench_core_peak(void) {
    if (!g_measured) collage_core_peak_measure(collage_get_threads(), &g_peak), g_measured = 1;
    return &g_peak;
}

void bench_core_peak_again(void) {
    collage_core_peak p;
    collage_core_peak_measure(collage_get_threads(), &p);
    if (!g_measured) g_peak = p, g_measured = 1;
    if (p.fma > g_peak.fma) g_peak.fma = p.fma;
    if (p.bf16_dot > g_peak.bf16_dot) g_peak.bf16_dot = p.bf16_dot;
    if (p.amx_bf16 > g_peak.amx_bf16) g_peak.amx_bf16 = p.amx_bf16;
}

void bench_peak_line(const collage_core_peak *p, char *out, size_t cap) {
    char f[64] = "no FMA", b[64] = "no bf16 dot product", a[64] = "";
    if (p->fma > 0) snprintf(f, sizeof f, "fp32 FMA, %d-bit %.0f GFLOP/s", p->fma_bits, p->fma * 1e-9);
    if (p->bf16_dot > 0) snprintf(b, sizeof b, "bf16 dot (VDPBF16PS) %.0f GFLOP/s", p->bf16_dot * 1e-9);
    if (p->amx_bf16 > 0) snprintf(a, sizeof a, ", AMX bf16 (TDPBF16PS) %.0f GFLOP/s", p->amx_bf16 * 1e-9);
    snprintf(out, cap, "core peak (a core's, register-only loops on %d core%s at once): %s, %s%s", p->threads,
             p->threads == 1 ? "" : "s", f, b, a);
}
