/* mcf.c — the public face of eft.h: bf16 single operations, the error-free transforms and the MCF
 * updates (Grow, GrowAddcmul, MultMC and the published MultMC), for bf16 and for any format.
 * All arithmetic lives in eft.h; this file only checks arguments and converts types. */
#include "eft.h"

#define BF COLLAGE_FMT_BF16
#define FMT_OK(f) ((unsigned)(f) < COLLAGE_FMT_COUNT)

static inline collage_bf16 B(uint16_t b) { return (collage_bf16){b}; }
static inline collage_mcf M(collage_lp_pair p) { return (collage_mcf){{p.hi}, {p.lo}}; }
static inline collage_lp_pair P(collage_mcf m) { return (collage_lp_pair){m.hi.bits, m.lo.bits}; }
static const collage_lp_pair NAN_PAIR = {0x7fc0, 0x7fc0};

collage_bf16 collage_bf16_add(collage_bf16 a, collage_bf16 b) { return B(lp_add_(BF, a.bits, b.bits)); }
collage_bf16 collage_bf16_sub(collage_bf16 a, collage_bf16 b) { return B(lp_sub_(BF, a.bits, b.bits)); }
collage_bf16 collage_bf16_mul(collage_bf16 a, collage_bf16 b) { return B(lp_mul_(BF, a.bits, b.bits)); }
collage_bf16 collage_bf16_div(collage_bf16 a, collage_bf16 b) { return B(lp_div_(BF, a.bits, b.bits)); }
collage_bf16 collage_bf16_sqrt(collage_bf16 a) { return B(lp_sqrt_(BF, a.bits)); }

collage_mcf collage_two_sum(collage_bf16 a, collage_bf16 b) { return M(lp_two_sum_(BF, a.bits, b.bits)); }
collage_mcf collage_fast_two_sum(collage_bf16 a, collage_bf16 b) { return M(lp_fast_two_sum_(BF, a.bits, b.bits)); }
collage_mcf collage_two_prod(collage_bf16 a, collage_bf16 b) { return M(lp_two_prod_(BF, a.bits, b.bits)); }
collage_mcf collage_mcf_grow(collage_mcf x, collage_bf16 d) { return M(lp_grow_(BF, P(x), d.bits)); }
collage_mcf collage_mcf_grow_addcmul(collage_mcf x, collage_bf16 t1, collage_bf16 t2, float c) {
    return M(lp_grow_addcmul_(BF, P(x), t1.bits, t2.bits, c));
}
collage_mcf collage_mcf_mul(collage_mcf x, collage_mcf b) { return M(lp_mcf_mul_(BF, P(x), P(b))); }
collage_mcf collage_mcf_mul_v1(collage_mcf x, collage_mcf b) { return M(lp_mcf_mul_v1_(BF, P(x), P(b))); }
collage_mcf collage_mcf_split(double beta) { return M(collage_lp_split(BF, beta)); }
double collage_mcf_to_f64(collage_mcf x) { return (double)bf16_f32(x.hi.bits) + (double)bf16_f32(x.lo.bits); }

/* β split: hi = RN(β); lo = RN(β − hi) with the difference taken in double (exact for β in
 * [0.5, 2], and one rounding otherwise). */
collage_lp_pair collage_lp_split(collage_format f, double beta) {
    if (!FMT_OK(f)) return NAN_PAIR;
    uint16_t hi = collage__lp_enc_f64(f, beta, LP_RN, 0);
    uint16_t lo = collage__lp_enc_f64(f, beta - (double)lp_f32(f, hi), LP_RN, 0);
    return (collage_lp_pair){hi, lo};
}

uint16_t collage_lp_add(fmt_t f, uint16_t a, uint16_t b) { return FMT_OK(f) ? lp_add_(f, a, b) : 0; }
uint16_t collage_lp_sub(fmt_t f, uint16_t a, uint16_t b) { return FMT_OK(f) ? lp_sub_(f, a, b) : 0; }
uint16_t collage_lp_mul(fmt_t f, uint16_t a, uint16_t b) { return FMT_OK(f) ? lp_mul_(f, a, b) : 0; }
uint16_t collage_lp_div(fmt_t f, uint16_t a, uint16_t b) { return FMT_OK(f) ? lp_div_(f, a, b) : 0; }
uint16_t collage_lp_sqrt(fmt_t f, uint16_t a) { return FMT_OK(f) ? lp_sqrt_(f, a) : 0; }
collage_lp_pair collage_lp_two_sum(fmt_t f, uint16_t a, uint16_t b) {
    return FMT_OK(f) ? lp_two_sum_(f, a, b) : NAN_PAIR;
}
collage_lp_pair collage_lp_fast_two_sum(fmt_t f, uint16_t a, uint16_t b) {
    return FMT_OK(f) ? lp_fast_two_sum_(f, a, b) : NAN_PAIR;
}
collage_lp_pair collage_lp_two_prod(fmt_t f, uint16_t a, uint16_t b) {
    return FMT_OK(f) ? lp_two_prod_(f, a, b) : NAN_PAIR;
}
collage_lp_pair collage_lp_grow(fmt_t f, collage_lp_pair x, uint16_t d) {
    return FMT_OK(f) ? lp_grow_(f, x, d) : NAN_PAIR;
}
collage_lp_pair collage_lp_grow_addcmul(fmt_t f, collage_lp_pair x, uint16_t t1, uint16_t t2, float c) {
    return FMT_OK(f) ? lp_grow_addcmul_(f, x, t1, t2, c) : NAN_PAIR;
}
collage_lp_pair collage_lp_mcf_mul(fmt_t f, collage_lp_pair x, collage_lp_pair b) {
    return FMT_OK(f) ? lp_mcf_mul_(f, x, b) : NAN_PAIR;
}
collage_lp_pair collage_lp_mcf_mul_v1(fmt_t f, collage_lp_pair x, collage_lp_pair b) {
    return FMT_OK(f) ? lp_mcf_mul_v1_(f, x, b) : NAN_PAIR;
}
