/* test_core.c — round trips of every encoding, the fast-math guard, stochastic rounding (unbiased,
 * reproducible), and the MCF updates (Grow, GrowAddcmul, MultMC and the published MultMC) bit for bit
 * against an independent transcription of numerics.md §4-5, their normalisation, and MultMC as an
 * exponential moving average against float64; the checkpoint checksum (collage__sum64) against a
 * byte-at-a-time transcription, in any pieces, and every single-bit flip detected. */
#include "collage.h"
#include "harness.h"
#include "internal.h"
#include <math.h>
#include <string.h>

#define EMA_STEPS 10000
#define EMA_MAX_REL 2e-3        /* MultMC + GrowAddcmul EMA vs float64, relative (issue 2) */
#define SR_SIGMAS 6.0           /* SR mean within this many standard errors of the exact value */
#define MCF_RANDOM_CASES 200000

static uint32_t fbits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static float bf(uint16_t b) { uint32_t u = (uint32_t)b << 16; float x; memcpy(&x, &u, 4); return x; }

/* ------------------------------------------------------------------ independent oracle */
/* o_rn: bf16 nearest to the double x, ties to even, by scaling to an integer significand with
 * nearbyint (the default rounding mode is to nearest even); subnormal grid 2^-133; Inf at 2^128. */
static uint16_t o_rn(double x) {
    if (isnan(x)) return (uint16_t)(signbit(x) ? 0xffc0 : 0x7fc0);
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double ax = fabs(x);
    if (ax == 0.0) return sign;
    if (isinf(ax)) return (uint16_t)(sign | 0x7f80);
    int e;
    frexp(ax, &e);
    int q = e - 8 < -133 ? -133 : e - 8;
    double v = ldexp(nearbyint(ldexp(ax, -q)), q);
    if (v >= 0x1p128) return (uint16_t)(sign | 0x7f80);
    return (uint16_t)(sign | (fbits((float)v) >> 16));
}
static double D(uint16_t b) { return (double)bf(b); }
/* One bf16 operation: the fp32 result (double then float rounding is innocuous: 53 ≥ 2·24 + 2). */
static uint16_t o_add(uint16_t a, uint16_t b) { return o_rn((double)(float)(D(a) + D(b))); }
static uint16_t o_sub(uint16_t a, uint16_t b) { return o_rn((double)(float)(D(a) - D(b))); }
static uint16_t o_mul(uint16_t a, uint16_t b) { return o_rn((double)(float)(D(a) * D(b))); }
static double f32mul(double a, double b) { return (double)(float)(a * b); }

static collage_mcf mk(uint16_t hi, uint16_t lo) { return (collage_mcf){{hi}, {lo}}; }

static collage_mcf o_grow(collage_mcf x, uint16_t d) {
    uint16_t m = x.hi.bits, r = x.lo.bits;
    uint16_t s = o_add(m, d);
    r = o_add(r, o_sub(d, o_sub(s, m)));
    uint16_t m2 = o_add(s, r);
    return mk(m2, o_sub(r, o_sub(m2, s)));
}
static collage_mcf o_grow_addcmul(collage_mcf y, uint16_t t1, uint16_t t2, float c) {
    uint16_t m = y.hi.bits, r = y.lo.bits;
    uint16_t x = o_rn(f32mul((double)c, f32mul(D(t1), D(t2))));
    uint16_t s = o_add(m, x);
    x = o_add(x, o_sub(m, s));
    x = o_add(x, r);
    uint16_t m2 = o_add(s, x);
    return mk(m2, o_sub(x, o_sub(m2, s)));
}
static collage_mcf o_mcf_mul(collage_mcf x, collage_mcf b) {
    uint16_t m = x.hi.bits, r = x.lo.bits, bh = b.hi.bits, bl = b.lo.bits;
    double ab = f32mul(D(m), D(bh));
    uint16_t p = o_rn(ab), e = o_rn((double)(float)(ab - D(p)));
    r = o_mul(r, bh);
    r = o_rn((double)(float)(D(r) + f32mul(D(m), D(bl))));
    r = o_add(r, e);
    uint16_t m2 = o_add(p, r);
    return mk(m2, o_sub(r, o_sub(m2, p)));
}
static collage_mcf o_mcf_mul_v1(collage_mcf x, collage_mcf b) {
    uint16_t r = x.lo.bits, bh = b.hi.bits, bl = b.lo.bits;
    uint16_t p = o_mul(x.hi.bits, bh);
    uint16_t e = o_rn((double)(float)(-D(p) + f32mul(D(p), D(bh))));
    r = o_mul(r, bh);
    r = o_rn((double)(float)(D(r) + f32mul(D(p), D(bl))));
    r = o_add(r, e);
    return mk(o_add(p, r), r);
}

static int same(collage_mcf a, collage_mcf b) { return a.hi.bits == b.hi.bits && a.lo.bits == b.lo.bits; }
static int normalised(collage_mcf x) { return o_rn(D(x.hi.bits) + D(x.lo.bits)) == x.hi.bits; }

/* A random bf16 of magnitude about 2^lo_exp .. 2^hi_exp with a random sign. */
static uint16_t rnd_bf16(int lo_exp, int hi_exp) {
    double mag = ldexp(1.0 + h_uniform(), lo_exp + (int)(h_rand32() % (unsigned)(hi_exp - lo_exp + 1)));
    return o_rn((h_rand32() & 1) ? -mag : mag);
}

/* ------------------------------------------------------------------ tests */
static void test_roundtrip_every_encoding(void) {
    for (int i = 0; i < 65536; i++) {
        collage_bf16 b = {(uint16_t)i};
        float x = collage_bf16_to_f32(b);
        collage_bf16 back = collage_bf16_from_f32(x);
        if (isnan(x)) CHECK(isnan(collage_bf16_to_f32(back)) && (back.bits >> 15) == (unsigned)(i >> 15),
                            "bf16 NaN 0x%04x -> 0x%04x", i, back.bits);
        else CHECK(back.bits == i, "bf16 0x%04x -> %a -> 0x%04x", i, (double)x, back.bits);
    }
    for (int f = COLLAGE_FMT_FP16; f < COLLAGE_FMT_COUNT; f++) {
        const collage_format_info *F = collage_format_get((collage_format)f);
        int count = 1 << F->bits;
        for (int i = 0; i < count; i++) {
            float x = collage_lp_to_f32((collage_format)f, (uint16_t)i);
            uint16_t back = collage_lp_from_f32((collage_format)f, x);
            if (isnan(x)) CHECK(collage_lp_isnan((collage_format)f, back) && (back >> (F->bits - 1)) == (i >> (F->bits - 1)),
                                "%s NaN 0x%x -> 0x%x", F->name, i, back);
            else CHECK(back == i, "%s 0x%x -> %a -> 0x%x", F->name, i, (double)x, back);
        }
    }
}

/* If anything compiled the error term of TwoSum away (fast-math, reassociation), these are 0. */
static void test_fast_math_guard(void) {
#ifdef __FAST_MATH__
    CHECK(0, "this test was compiled with -ffast-math");
#endif
    volatile float a = 16777216.0f, b = 1.0f;
    float s = a + b, e = b - (s - a);
    CHECK(e == 1.0f, "local fp32 error term = %a", (double)e);
    collage_mcf t = collage_two_sum(collage_bf16_from_f32(1.0f / 3.0f), collage_bf16_from_f32(100.0f));
    CHECK(t.lo.bits != 0, "library TwoSum error term compiled to 0");
    CHECK(collage_bf16_to_f32(t.lo) == -0.166015625f, "TwoSum(1/3, 100).lo = %a", (double)collage_bf16_to_f32(t.lo));
    collage_lp_pair p = collage_lp_two_sum(COLLAGE_FMT_FP16, collage_lp_from_f32(COLLAGE_FMT_FP16, 2048.0f),
                                           collage_lp_from_f32(COLLAGE_FMT_FP16, 1.0f));
    CHECK(collage_lp_to_f32(COLLAGE_FMT_FP16, p.lo) == 1.0f, "fp16 TwoSum(2048, 1).lo");
    collage_mcf g = collage_mcf_grow(mk(0x4348, 0), (collage_bf16){0x3dcd}); /* 200 + 0.1 */
    CHECK(g.hi.bits == 0x4348 && g.lo.bits == 0x3dcd, "Grow(200, 0.1) = (%04x, %04x)", g.hi.bits, g.lo.bits);
}

static void test_mcf_ops_match_spec(void) {
    h_seed(20261122);
    printf("    seed 20261122, %d cases per op\n", MCF_RANDOM_CASES);
    int not_norm = 0;
    for (int i = 0; i < MCF_RANDOM_CASES; i++) {
        uint16_t m = rnd_bf16(-20, 20);
        int em = (int)(fbits(bf(m)) >> 23 & 0xff) - 127;
        uint16_t r = (h_rand32() % 8) ? rnd_bf16(em - 16, em - 9) : 0;
        collage_mcf x = mk(m, r);
        uint16_t d = rnd_bf16(em - 24, em + 2);
        collage_mcf got = collage_mcf_grow(x, (collage_bf16){d}), want = o_grow(x, d);
        CHECK(same(got, want), "Grow((%04x,%04x), %04x) = (%04x,%04x), spec (%04x,%04x)", m, r, d, got.hi.bits,
              got.lo.bits, want.hi.bits, want.lo.bits);
        if (fabs(D(d)) <= fabs(D(m)) * 0.25) not_norm += !normalised(got);
        uint16_t t1 = rnd_bf16(em / 2 - 12, em / 2), t2 = rnd_bf16(em / 2 - 12, em / 2);
        float c = (float)(h_uniform() * 0.1);
        got = collage_mcf_grow_addcmul(x, (collage_bf16){t1}, (collage_bf16){t2}, c);
        want = o_grow_addcmul(x, t1, t2, c);
        CHECK(same(got, want), "GrowAddcmul((%04x,%04x), %04x, %04x, %a)", m, r, t1, t2, (double)c);
        not_norm += !normalised(got);
        collage_mcf beta = collage_mcf_split(0.5 + 0.5 * h_uniform());
        got = collage_mcf_mul(x, beta);
        want = o_mcf_mul(x, beta);
        CHECK(same(got, want), "MultMC((%04x,%04x), (%04x,%04x)) = (%04x,%04x), spec (%04x,%04x)", m, r,
              beta.hi.bits, beta.lo.bits, got.hi.bits, got.lo.bits, want.hi.bits, want.lo.bits);
        not_norm += !normalised(got);
        got = collage_mcf_mul_v1(x, beta);
        want = o_mcf_mul_v1(x, beta);
        CHECK(same(got, want), "MultMC v1((%04x,%04x), (%04x,%04x))", m, r, beta.hi.bits, beta.lo.bits);
    }
    CHECK(not_norm == 0, "%d results not normalised", not_norm);
}

/* MultMC then GrowAddcmul as an EMA v = β v + (1 − β) g², against float64 on the same bf16 g. */
static void test_mcf_ema_tracks_float64(void) {
    const double betas[3] = {0.95, 0.999, 0.9999};
    h_seed(99);
    for (int bi = 0; bi < 3; bi++) {
        double beta = betas[bi];
        collage_mcf b = collage_mcf_split(beta), v = mk(0, 0), v1 = mk(0, 0);
        collage_bf16 plain = {0};
        float c = (float)(1.0 - beta);
        double ref = 0, worst = 0;
        for (int t = 1; t <= EMA_STEPS; t++) {
            collage_bf16 g = collage_bf16_from_f32((float)((h_uniform() - 0.5) * 0.02));
            double gd = (double)collage_bf16_to_f32(g);
            v = collage_mcf_grow_addcmul(collage_mcf_mul(v, b), g, g, c);
            v1 = collage_mcf_grow_addcmul(collage_mcf_mul_v1(v1, b), g, g, c);
            plain = collage_bf16_add(collage_bf16_mul(plain, b.hi),
                                     collage_bf16_from_f32(c * collage_bf16_to_f32(collage_bf16_mul(g, g))));
            ref = beta * ref + (1.0 - beta) * gd * gd;
            if (t >= EMA_STEPS / 10) {
                double rel = fabs(collage_mcf_to_f64(v) - ref) / ref;
                if (rel > worst) worst = rel;
            }
        }
        printf("    beta %.4f: MultMC worst rel %.2e over steps %d..%d; published MultMC/ref %.3f; plain bf16/ref %.3f\n",
               beta, worst, EMA_STEPS / 10, EMA_STEPS, collage_mcf_to_f64(v1) / ref,
               (double)collage_bf16_to_f32(plain) / ref);
        CHECK(worst <= EMA_MAX_REL, "beta %g: relative error %.3e > %.1e", beta, worst, EMA_MAX_REL);
    }
    /* β = 0.999 rounds to 1.0 in bf16: the plain second moment never decays, MultMC does */
    collage_mcf b = collage_mcf_split(0.999), v = mk(0x3f80, 0);
    collage_bf16 plain = {0x3f80};
    for (int t = 0; t < 1000; t++) { v = collage_mcf_mul(v, b); plain = collage_bf16_mul(plain, b.hi); }
    CHECK(plain.bits == 0x3f80, "plain bf16 decayed to %04x", plain.bits);
    CHECK(fabs(collage_mcf_to_f64(v) - pow(0.999, 1000)) < 1e-3, "MultMC decay %g vs %g", collage_mcf_to_f64(v), pow(0.999, 1000));
}

/* SR: every result is one of the two neighbours, and the mean over many draws is the exact value. */
static void test_sr_unbiased_and_reproducible(void) {
    const int N = 1 << 16;
    h_seed(5);
    for (int f = 0; f < COLLAGE_FMT_COUNT; f++) {
        const collage_format_info *F = collage_format_get((collage_format)f);
        for (int trial = 0; trial < 40; trial++) {
            /* magnitudes from the format's subnormals to its top binade */
            double lo_e = -(double)F->bias - F->man_bits + 1, hi_e = (double)F->bias;
            float x = (float)ldexp(1.0 + h_uniform(), (int)(lo_e + h_uniform() * (hi_e - lo_e)));
            if (trial & 1) x = -x;
            uint16_t down = collage_lp_from_f32_sat((collage_format)f, x); /* a neighbour */
            double xd = (double)x, nd = (double)collage_lp_to_f32((collage_format)f, down);
            uint16_t other = (uint16_t)(nd == xd ? down : (fabs(nd) < fabs(xd) ? down + 1 : down - 1));
            double od = (double)collage_lp_to_f32((collage_format)f, other);
            double gap = fabs(od - nd), sum = 0;
            uint64_t key = collage_rand_key(1234, (uint64_t)trial);
            int bad = 0;
            for (int i = 0; i < N; i++) {
                uint16_t y = collage_lp_from_f32_sr((collage_format)f, x, collage_rand32(key, (uint64_t)i));
                double yd = (double)collage_lp_to_f32((collage_format)f, y);
                bad += !(yd == nd || yd == od);
                sum += yd;
            }
            double mean = sum / N, tol = SR_SIGMAS * 0.5 * gap / sqrt((double)N) + gap * 0x1p-30;
            CHECK(bad == 0, "%s SR of %a left its two neighbours %d times", F->name, xd, bad);
            CHECK(fabs(mean - xd) <= tol, "%s SR mean of %a is %a (tol %a)", F->name, xd, mean, tol);
        }
    }
    /* reproducible for a key, different across keys */
    float x = 1.0f + 0x1p-8f; /* exactly halfway between two bf16 values */
    int same_count = 0, diff_count = 0;
    for (uint64_t i = 0; i < 4096; i++) {
        uint32_t r1 = collage_rand32(collage_rand_key(7, 3), i), r2 = collage_rand32(collage_rand_key(7, 3), i);
        uint32_t r3 = collage_rand32(collage_rand_key(8, 3), i);
        same_count += collage_bf16_from_f32_sr(x, r1).bits == collage_bf16_from_f32_sr(x, r2).bits;
        diff_count += collage_bf16_from_f32_sr(x, r1).bits != collage_bf16_from_f32_sr(x, r3).bits;
    }
    CHECK(same_count == 4096, "same key gave different roundings %d times", 4096 - same_count);
    CHECK(diff_count > 1800 && diff_count < 2300, "other seed agreed too often: %d of 4096 differ", diff_count);
    /* NaN and Inf are not perturbed */
    CHECK(collage_bf16_from_f32_sr(INFINITY, 0xffffffffu).bits == 0x7f80, "SR(Inf)");
    CHECK(collage_bf16_from_f32_sr(-INFINITY, 0xffffffffu).bits == 0xff80, "SR(-Inf)");
    CHECK(isnan(collage_bf16_to_f32(collage_bf16_from_f32_sr(NAN, 0xffffffffu))), "SR(NaN)");
    CHECK(collage_lp_from_f32_sr(COLLAGE_FMT_FP16, INFINITY, 0xffffffffu) == 0x7c00, "fp16 SR(Inf)");
}

/* ---------------------------------------------------------------- the checkpoint checksum */
/* The checksum as train.state defines it, a byte at a time: byte i goes into word i/8 of lane
 * (i/8) mod 4 at bit 8·(i mod 8); a lane takes each word w as h = rotl(h ^ w, 29) · 0x9e3779b97f4a7c15;
 * the last partial block is zero-padded; then x = mix(len · K + 1) and x = mix(x ^ lane) per lane. */
static uint64_t mix_ref(uint64_t x) {
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27; x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
static uint64_t sum64_ref(const unsigned char *p, size_t n) {
    uint64_t lane[4], w = 0;
    for (int k = 0; k < 4; k++) lane[k] = mix_ref(0x636f6c6c61676500ull + (uint64_t)k);
    size_t padded = (n + 31) / 32 * 32;
    for (size_t i = 0; i < padded; i++) {
        w |= (uint64_t)(i < n ? p[i] : 0) << (8 * (i % 8));
        if (i % 8 == 7) {
            uint64_t h = lane[(i / 8) % 4] ^ w;
            lane[(i / 8) % 4] = ((h << 29) | (h >> 35)) * 0x9e3779b97f4a7c15ull;
            w = 0;
        }
    }
    uint64_t x = mix_ref((uint64_t)n * 0x9e3779b97f4a7c15ull + 1);
    for (int k = 0; k < 4; k++) x = mix_ref(x ^ lane[k]);
    return x;
}

static void test_checkpoint_checksum(void) {
    enum { N = 4099 };
    static unsigned char buf[N];
    h_seed(23);
    for (size_t i = 0; i < N; i++) buf[i] = (unsigned char)h_rand32();
    for (size_t n = 0; n <= 300; n++)
        CHECK(collage__sum64(buf, n) == sum64_ref(buf, n), "length %zu: %016llx vs the transcription %016llx", n,
              (unsigned long long)collage__sum64(buf, n), (unsigned long long)sum64_ref(buf, n));
    CHECK(collage__sum64(buf, N) == sum64_ref(buf, N), "length %d", N);
    for (int trial = 0; trial < 50; trial++) { /* in pieces of random sizes: the same value */
        collage__sum64_state st;
        collage__sum64_init(&st);
        for (size_t at = 0; at < N;) {
            size_t k = h_rand32() % 97;
            if (k > N - at) k = N - at;
            collage__sum64_add(&st, buf + at, k);
            at += k;
        }
        CHECK(collage__sum64_end(&st) == collage__sum64(buf, N), "trial %d: in pieces, another value", trial);
    }
    /* every single-bit flip of a 257-byte stream, and a zero byte appended, change the value */
    uint64_t base = collage__sum64(buf, 257);
    int missed = 0;
    for (size_t i = 0; i < 257 * 8; i++) {
        buf[i / 8] ^= (unsigned char)(1u << (i % 8));
        missed += collage__sum64(buf, 257) == base;
        buf[i / 8] ^= (unsigned char)(1u << (i % 8));
    }
    CHECK(missed == 0, "%d of %d single-bit flips not detected", missed, 257 * 8);
    unsigned char z[258];
    memcpy(z, buf, 257);
    z[257] = 0;
    CHECK(collage__sum64(z, 258) != base, "a zero byte appended not detected");
}

int main(void) {
    printf("test_core\n");
    RUN(test_fast_math_guard);
    RUN(test_roundtrip_every_encoding);
    RUN(test_mcf_ops_match_spec);
    RUN(test_mcf_ema_tracks_float64);
    RUN(test_sr_unbiased_and_reproducible);
    RUN(test_checkpoint_checksum);
    return h_end();
}
