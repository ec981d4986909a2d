/* tie_parity.c — for a step constant c, the bf16 operands whose fp32 line result is a bf16 tie, split
 * by the parity of the bf16 value below the tie (docs/optimizer-kernel.md: tie-free step scalars).
 *
 *   cc -O2 -ffp-contract=off -o /tmp/tie_parity scripts/tie_parity.c && /tmp/tie_parity [c ...]
 *
 * Rounding an fp32 pattern u to bf16 to nearest even takes the kernel 4 instructions (rn()); a fixed
 * rounding direction at ties takes 2: half up, (u + 0x8000) & ~0xffff (rn_nt), and half down,
 * (u + 0x7fff) & ~0xffff. Both equal round-to-even except at ties (low 16 bits 0x8000): half up is
 * wrong where the bf16 value below is even (low 17 bits 0x08000), half down where it is odd (low 17
 * bits 0x18000). For a line whose only variable operand is one bf16 value, the ties depend on the
 * constant alone, so trying all 65,536 operands proves which 2-instruction rounding is exact. The
 * kernel's proof (adamw_kernel.inc TIE_FREE_NAME) asks the half-up question for x·c and RN(√x) + c;
 * this program asks both, for those lines and for GrowAddcmul's c·(g·g) (g·g is exact in fp32).
 * With no arguments: AdamW's usual constants (β1, β2, 1 − β, and the high words of β2's split). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float f32(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
static uint32_t bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static float bf16_rn(float x) { /* round to nearest even, for the bf16 high words of the defaults */
    uint32_t u = bits(x);
    return f32((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}

/* kind 0: x·c, kind 1: RN(√x) + c (the kernel's root is correctly rounded and never a tie), kind 2: c·(x·x) */
static void count(int kind, float c, int *even, int *odd) {
    *even = *odd = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        volatile float x = f32(h << 16), y;
        if (kind == 0) y = x * c;
        else if (kind == 1) y = bf16_rn(sqrtf(x)) + c;
        else { volatile float xx = x * x; y = c * xx; }
        uint32_t u = bits(y);
        if ((u & 0x1ffffu) == 0x08000u) ++*even;
        if ((u & 0x1ffffu) == 0x18000u) ++*odd;
    }
}

static void show(float c) {
    static const char *line[3] = {"x * c", "RN(sqrt x) + c", "c * (x * x)"};
    for (int kind = 0; kind < 3; kind++) {
        int e, o;
        count(kind, c, &e, &o);
        printf("c = %-12.9g (0x%08x)  %-15s even-below ties %5d  odd-below ties %5d  exact in 2: %s\n", (double)c, bits(c),
               line[kind], e, o, !e && !o ? "half up and half down" : !e ? "half up" : !o ? "half down" : "neither");
    }
}

int main(int argc, char **argv) {
    if (argc > 1) {
        for (int i = 1; i < argc; i++) show(strtof(argv[i], NULL));
        return 0;
    }
    const double beta[] = {0.9, 0.95, 0.98, 0.99, 0.995, 0.999};
    for (size_t i = 0; i < sizeof beta / sizeof beta[0]; i++) {
        show((float)beta[i]);
        show((float)(1 - beta[i]));
        show(bf16_rn((float)beta[i]));
    }
    return 0;
}
