/* checksum.c — the 64-bit checksum of checkpoint files (collage__sum64): four lanes over the
 * stream's 8-byte little-endian words, each lane a chain of bijections, folded with the length.
 * A change confined to one 8-byte word (a flipped bit or byte) always changes the result; any other
 * corruption changes it but with probability about 2^-64. Fast enough (several GB/s) to run over
 * every file of a checkpoint at each save and each load. */
#include "internal.h"
#include <errno.h>

#define SUM_MUL 0x9e3779b97f4a7c15ull /* odd: multiplying by it is a bijection of 64-bit words */

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
/* One word into a lane: a bijection of the lane for a fixed word and of the word for a fixed lane. */
static inline uint64_t lane_add(uint64_t h, uint64_t w) { return rotl64(h ^ w, 29) * SUM_MUL; }
/* splitmix64's finaliser: a bijection that spreads every input bit over the output. */
static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27; x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void collage__sum64_init(collage__sum64_state *s) {
    memset(s, 0, sizeof *s);
    for (int k = 0; k < 4; k++) s->lane[k] = mix64(0x636f6c6c61676500ull + (uint64_t)k); /* "collage" + k */
}

static void blocks(collage__sum64_state *s, const unsigned char *p, size_t nblocks) {
    uint64_t h0 = s->lane[0], h1 = s->lane[1], h2 = s->lane[2], h3 = s->lane[3], w[4];
    for (size_t b = 0; b < nblocks; b++, p += 32) {
        memcpy(w, p, 32); /* little-endian hosts only, as every collage file format */
        h0 = lane_add(h0, w[0]); h1 = lane_add(h1, w[1]);
        h2 = lane_add(h2, w[2]); h3 = lane_add(h3, w[3]);
    }
    s->lane[0] = h0; s->lane[1] = h1; s->lane[2] = h2; s->lane[3] = h3;
}

void collage__sum64_add(collage__sum64_state *s, const void *data, size_t n) {
    const unsigned char *p = data;
    s->len += n;
    if (s->nbuf) { /* complete the pending block first */
        size_t take = 32 - s->nbuf < n ? 32 - s->nbuf : n;
        memcpy(s->buf + s->nbuf, p, take);
        s->nbuf += take; p += take; n -= take;
        if (s->nbuf < 32) return;
        blocks(s, s->buf, 1);
        s->nbuf = 0;
    }
    blocks(s, p, n / 32);
    s->nbuf = n % 32;
    memcpy(s->buf, p + n - s->nbuf, s->nbuf);
}

uint64_t collage__sum64_end(const collage__sum64_state *s) {
    collage__sum64_state t = *s;
    if (t.nbuf) { /* the last partial block, padded with zeros (the length tells the padding apart) */
        memset(t.buf + t.nbuf, 0, 32 - t.nbuf);
        blocks(&t, t.buf, 1);
    }
    uint64_t x = mix64(t.len * SUM_MUL + 1);
    for (int k = 0; k < 4; k++) x = mix64(x ^ t.lane[k]);
    return x;
}

uint64_t collage__sum64(const void *data, size_t n) {
    collage__sum64_state s;
    collage__sum64_init(&s);
    collage__sum64_add(&s, data, n);
    return collage__sum64_end(&s);
}

collage_status collage__sum64_file(const char *path, uint64_t *sum, uint64_t *size, char *err, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return collage__fail(err, cap, COLLAGE_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    collage__sum64_state s;
    collage__sum64_init(&s);
    static _Thread_local unsigned char buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) collage__sum64_add(&s, buf, got);
    int bad = ferror(f);
    fclose(f);
    if (bad) return collage__fail(err, cap, COLLAGE_ERR_IO, "cannot read '%s'", path);
    *sum = collage__sum64_end(&s);
    if (size) *size = s.len;
    return COLLAGE_OK;
}
