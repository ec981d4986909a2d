/* data.c — corpora (the fortunes default, text files and folders, llm.c token shards), shard reading
 * with precise validation and atomic writing, the tokenize operation, and the batch loader: windows
 * of T + 1 tokens visited epoch by epoch in a keyed permutation, every batch a pure function of
 * (seed, step), rows sliced by rank. */
#include "collage_data.h"
#include "internal.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void put_le32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static int host_is_le(void) {
    uint16_t x = 1;
    unsigned char c;
    memcpy(&c, &x, 1);
    return c == 1;
}
static void swap16(uint16_t *t, size_t n) {
    for (size_t i = 0; i < n; i++) t[i] = (uint16_t)(t[i] << 8 | t[i] >> 8);
}

/* ------------------------------------------------------------------ shards */
collage_status collage_shard_write(const char *path, const uint16_t *tokens, size_t n, int vocab_size,
                                   char *err, size_t err_size) {
    if (!path || (n && !tokens)) return collage__fail(err, err_size, COLLAGE_ERR_NULL, "shard write: NULL argument");
    if (n > INT32_MAX)
        return collage__fail(err, err_size, COLLAGE_ERR_SIZE, "'%s': %zu tokens do not fit one shard (at most %d)", path, n,
                    INT32_MAX);
    for (size_t i = 0; vocab_size > 0 && i < n; i++)
        if (tokens[i] >= vocab_size)
            return collage__fail(err, err_size, COLLAGE_ERR_ARG, "'%s': token %u at position %zu is outside the vocabulary (%d)",
                        path, tokens[i], i, vocab_size);
    unsigned char header[COLLAGE_SHARD_HEADER_BYTES] = {0};
    put_le32(header, COLLAGE_SHARD_MAGIC);
    put_le32(header + 4, COLLAGE_SHARD_VERSION);
    put_le32(header + 8, (uint32_t)n);
    put_le32(header + 12, vocab_size > 0 ? (uint32_t)vocab_size : 0);
    collage_atomic_file af;
    collage_status st = collage_atomic_open(&af, path, err, err_size);
    if (st) return st;
    FILE *f = af.f;
    int ok = fwrite(header, 1, sizeof header, f) == sizeof header;
    if (host_is_le()) ok = ok && (n == 0 || fwrite(tokens, 2, n, f) == n);
    else {
        for (size_t i = 0; ok && i < n; i++) {
            unsigned char b[2] = {(unsigned char)tokens[i], (unsigned char)(tokens[i] >> 8)};
            ok = fwrite(b, 1, 2, f) == 2;
        }
    }
    return collage__atomic_finish(&af, ok, err, err_size);
}

/* Validate the header against the file size; on success *count = N. */
static collage_status shard_header(const char *path, const unsigned char *h, size_t got, long long fsize,
                                   int vocab_size, size_t *count, char *err, size_t err_size) {
    if (got < COLLAGE_SHARD_HEADER_BYTES)
        return collage__fail(err, err_size, COLLAGE_ERR_FORMAT, "'%s': truncated header: %zu bytes, an llm.c shard starts "
                    "with %d", path, got, COLLAGE_SHARD_HEADER_BYTES);
    uint32_t magic = get_le32(h), version = get_le32(h + 4), ntok = get_le32(h + 8), vocab = get_le32(h + 12);
    if (magic != COLLAGE_SHARD_MAGIC)
        return collage__fail(err, err_size, COLLAGE_ERR_FORMAT, "'%s': wrong magic %u (expected %d): not an llm.c token shard",
                    path, magic, COLLAGE_SHARD_MAGIC);
    if (version != COLLAGE_SHARD_VERSION)
        return collage__fail(err, err_size, COLLAGE_ERR_FORMAT, "'%s': wrong version %u (expected %d: uint16 tokens)", path,
                    version, COLLAGE_SHARD_VERSION);
    if (ntok > INT32_MAX)
        return collage__fail(err, err_size, COLLAGE_ERR_FORMAT, "'%s': negative token count %d in the header", path,
                    (int32_t)ntok);
    long long body = fsize - COLLAGE_SHARD_HEADER_BYTES, want = 2 * (long long)ntok;
    if (body != want) {
        const char *odd = body % 2 ? " and a stray byte" : "";
        if (body < want)
            return collage__fail(err, err_size, COLLAGE_ERR_FORMAT, "'%s': truncated: header says %u tokens, file has %lld%s",
                        path, ntok, body / 2, odd);
        return collage__fail(err, err_size, COLLAGE_ERR_FORMAT, "'%s': header says %u tokens, file has %lld%s (trailing data)",
                    path, ntok, body / 2, odd);
    }
    if (vocab_size > 0 && vocab != 0 && vocab != (uint32_t)vocab_size)
        return collage__fail(err, err_size, COLLAGE_ERR_FORMAT, "'%s': written for a vocabulary of %u tokens, the tokenizer "
                    "has %d", path, vocab, vocab_size);
    *count = ntok;
    return COLLAGE_OK;
}

collage_status collage_shard_read(const char *path, int vocab_size, uint16_t **tokens, size_t *n,
                                  char *err, size_t err_size) {
    if (!path || !tokens || !n) return collage__fail(err, err_size, COLLAGE_ERR_NULL, "shard read: NULL argument");
    *tokens = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return collage__fail(err, err_size, COLLAGE_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return collage__fail(err, err_size, COLLAGE_ERR_IO, "'%s' is not a regular file", path);
    }
    unsigned char h[COLLAGE_SHARD_HEADER_BYTES];
    size_t got = fread(h, 1, sizeof h, f), count = 0;
    collage_status s = shard_header(path, h, got, (long long)st.st_size, vocab_size, &count, err, err_size);
    if (s) { fclose(f); return s; }
    uint16_t *t = malloc(count ? count * 2 : 1);
    if (!t) {
        fclose(f);
        return collage__fail(err, err_size, COLLAGE_ERR_NOMEM, "'%s': out of memory for %zu tokens", path, count);
    }
    size_t rd = fread(t, 2, count, f);
    int bad = ferror(f);
    fclose(f);
    if (rd != count) {
        free(t);
        return collage__fail(err, err_size, bad ? COLLAGE_ERR_IO : COLLAGE_ERR_FORMAT, "'%s': %s after %zu of %zu tokens", path,
                    bad ? "read error" : "file shrank", rd, count);
    }
    if (!host_is_le()) swap16(t, count);
    for (size_t i = 0; vocab_size > 0 && i < count; i++)
        if (t[i] >= vocab_size) {
            collage_status e = collage__fail(err, err_size, COLLAGE_ERR_FORMAT, "'%s': token %u at position %zu is outside the "
                                    "vocabulary (%d tokens)", path, t[i], i, vocab_size);
            free(t);
            return e;
        }
    *tokens = t;
    *n = count;
    return COLLAGE_OK;
}

/* ------------------------------------------------------------------ corpora: which files */
enum { SRC_TEXT = 0, SRC_FORTUNE, SRC_SHARD };

typedef struct {
    char **files;
    size_t n;
    int kind;
} source;

static void source_free(source *s) {
    for (size_t i = 0; i < s->n; i++) free(s->files[i]);
    free(s->files);
    s->files = NULL;
    s->n = 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int same_dir(const char *a, const char *b) {
    struct stat x, y;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* The files of folder dir in strcmp order (fortune: plain files without '.', symlinks skipped). */
static collage_status list_dir(const char *dir, int fortune, source *s, char *err, size_t err_size) {
    DIR *d = opendir(dir);
    if (!d) return collage__fail(err, err_size, COLLAGE_ERR_IO, "cannot open folder '%s': %s", dir, strerror(errno));
    size_t cap = 0, nbin = 0;
    struct dirent *e;
    collage_status st = COLLAGE_OK;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || (fortune && strchr(e->d_name, '.'))) continue;
        size_t plen = strlen(dir) + strlen(e->d_name) + 2;
        char *p = malloc(plen);
        if (!p) { st = COLLAGE_ERR_NOMEM; break; }
        snprintf(p, plen, "%s/%s", dir, e->d_name);
        struct stat sb;
        if ((fortune ? lstat(p, &sb) : stat(p, &sb)) != 0 || !S_ISREG(sb.st_mode)) { free(p); continue; }
        if (s->n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nf = realloc(s->files, cap * sizeof *nf);
            if (!nf) { free(p); st = COLLAGE_ERR_NOMEM; break; }
            s->files = nf;
        }
        s->files[s->n++] = p;
        nbin += ends_with(e->d_name, ".bin");
    }
    closedir(d);
    if (st) { source_free(s); return collage__fail(err, err_size, st, "out of memory listing '%s'", dir); }
    if (!s->n)
        return collage__fail(err, err_size, COLLAGE_ERR_IO, "folder '%s' holds no %sfiles", dir, fortune ? "fortune " : "");
    if (nbin && nbin != s->n) {
        source_free(s);
        return collage__fail(err, err_size, COLLAGE_ERR_ARG, "folder '%s' mixes %zu .bin shards with other files: keep shards "
                    "and text apart", dir, nbin);
    }
    qsort(s->files, s->n, sizeof *s->files, cmp_str);
    s->kind = fortune ? SRC_FORTUNE : nbin ? SRC_SHARD : SRC_TEXT;
    return COLLAGE_OK;
}

static collage_status list_source(const char *path, source *s, char *err, size_t err_size) {
    memset(s, 0, sizeof *s);
    if (!path || !*path || same_dir(path, COLLAGE_FORTUNES_DIR)) {
        struct stat sb;
        if (stat(COLLAGE_FORTUNES_DIR, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return collage__fail(err, err_size, COLLAGE_ERR_IO, "the default corpus %s is missing (Debian package 'fortunes')",
                        COLLAGE_FORTUNES_DIR);
        return list_dir(COLLAGE_FORTUNES_DIR, 1, s, err, err_size);
    }
    struct stat sb;
    if (stat(path, &sb) != 0) return collage__fail(err, err_size, COLLAGE_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) return list_dir(path, 0, s, err, err_size);
    if (!S_ISREG(sb.st_mode)) return collage__fail(err, err_size, COLLAGE_ERR_IO, "'%s' is not a regular file", path);
    s->files = malloc(sizeof *s->files);
    if (!s->files || !(s->files[0] = strdup(path))) {
        free(s->files);
        s->files = NULL;
        return collage__fail(err, err_size, COLLAGE_ERR_NOMEM, "out of memory");
    }
    s->n = 1;
    s->kind = ends_with(path, ".bin") ? SRC_SHARD : SRC_TEXT;
    return COLLAGE_OK;
}

/* ------------------------------------------------------------------ corpora: text */
size_t collage_fortune_strip(char *text, size_t len) {
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - text) + 1 : len, line = (nl ? end - 1 : end) - i;
        if (line == 1 && text[i] == '%') text[o++] = '\n';
        else { memmove(text + o, text + i, end - i); o += end - i; }
        i = end;
    }
    return o;
}

/* One text file, whole, NUL-terminated; fortune separators rewritten when fortune. */
static collage_status read_text(const char *path, int fortune, char **buf, size_t *len, char *err, size_t err_size) {
    char *b;
    size_t n;
    collage_status st = collage__read_file(path, &b, &n, err, err_size);
    if (st) return st;
    const char *nul = memchr(b, 0, n);
    if (nul) {
        size_t at = (size_t)(nul - b);
        free(b);
        return collage__fail(err, err_size, COLLAGE_ERR_FORMAT, "'%s': NUL byte at offset %zu: not a text file (token shards "
                    "must end in .bin)", path, at);
    }
    if (fortune) n = collage_fortune_strip(b, n);
    b[n] = 0;
    *buf = b;
    *len = n;
    return COLLAGE_OK;
}

collage_status collage_corpus_text(const char *path, char **text, size_t *len, collage_corpus_info *info,
                                   char *err, size_t err_size) {
    if (!text || !len) return collage__fail(err, err_size, COLLAGE_ERR_NULL, "corpus text: NULL argument");
    *text = NULL;
    *len = 0;
    source s;
    collage_status st = list_source(path, &s, err, err_size);
    if (st) return st;
    if (s.kind == SRC_SHARD) {
        st = collage__fail(err, err_size, COLLAGE_ERR_ARG, "'%s' holds token shards, not text", path);
        source_free(&s);
        return st;
    }
    char *all = NULL;
    size_t n = 0;
    for (size_t i = 0; i < s.n && !st; i++) {
        char *b;
        size_t l;
        if ((st = read_text(s.files[i], s.kind == SRC_FORTUNE, &b, &l, err, err_size))) break;
        char *na = realloc(all, n + l + 1);
        if (!na) {
            free(b);
            st = collage__fail(err, err_size, COLLAGE_ERR_NOMEM, "out of memory reading '%s'", s.files[i]);
            break;
        }
        all = na;
        memcpy(all + n, b, l + 1);
        n += l;
        free(b);
    }
    if (!st && !all && !(all = calloc(1, 1))) st = collage__fail(err, err_size, COLLAGE_ERR_NOMEM, "out of memory");
    if (st) { free(all); source_free(&s); return st; }
    if (info) *info = (collage_corpus_info){.files = s.n, .bytes = n, .tokens = 0, .shards = 0};
    source_free(&s);
    *text = all;
    *len = n;
    return COLLAGE_OK;
}

/* Append m tokens to the growing array (*t, *n, *cap). */
static int append(uint16_t **t, size_t *n, size_t *cap, const uint16_t *src, size_t m) {
    if (m == 0) return 0; /* an empty file: *t may still be NULL, and NULL + 0 is undefined (found by fuzzing) */
    if (*n + m > *cap) {
        size_t nc = *cap ? *cap : 1 << 16;
        while (nc < *n + m) nc *= 2;
        uint16_t *nt = realloc(*t, nc * sizeof *nt);
        if (!nt) return -1;
        *t = nt;
        *cap = nc;
    }
    memcpy(*t + *n, src, m * sizeof *src);
    *n += m;
    return 0;
}

collage_status collage_corpus_tokens(const char *path, const collage_tokenizer *tok, uint16_t **tokens,
                                     size_t *n, collage_corpus_info *info, char *err, size_t err_size) {
    if (!tokens || !n) return collage__fail(err, err_size, COLLAGE_ERR_NULL, "corpus tokens: NULL argument");
    *tokens = NULL;
    *n = 0;
    collage_tokenizer *own = NULL;
    collage_status st;
    if (!tok) {
        if ((st = collage_tokenizer_create(COLLAGE_TOKENIZER_BYTE, NULL, &own, err, err_size))) return st;
        tok = own;
    }
    source s;
    if ((st = list_source(path, &s, err, err_size))) { collage_tokenizer_free(own); return st; }
    int vocab = collage_tokenizer_vocab_size(tok);
    uint16_t *all = NULL;
    size_t na = 0, cap = 0, bytes = 0;
    for (size_t i = 0; i < s.n && !st; i++) {
        uint16_t *part = NULL;
        size_t m = 0;
        if (s.kind == SRC_SHARD) {
            st = collage_shard_read(s.files[i], vocab, &part, &m, err, err_size);
        } else {
            char *b;
            size_t l;
            if ((st = read_text(s.files[i], s.kind == SRC_FORTUNE, &b, &l, err, err_size))) break;
            bytes += l;
            part = malloc((l ? l : 1) * sizeof *part);
            if (!part) st = COLLAGE_ERR_NOMEM;
            else st = collage_tokenizer_encode(tok, b, l, part, &m);
            free(b);
            if (st) collage__fail(err, err_size, st, "cannot encode '%s': %s", s.files[i], collage_status_str(st));
        }
        if (!st && append(&all, &na, &cap, part, m))
            st = collage__fail(err, err_size, COLLAGE_ERR_NOMEM, "out of memory after %zu tokens", na);
        free(part);
    }
    if (!st && !all && !(all = malloc(sizeof *all))) st = collage__fail(err, err_size, COLLAGE_ERR_NOMEM, "out of memory");
    if (!st && info)
        *info = (collage_corpus_info){.files = s.n, .bytes = bytes, .tokens = na, .shards = s.kind == SRC_SHARD};
    source_free(&s);
    collage_tokenizer_free(own);
    if (st) { free(all); return st; }
    *tokens = all;
    *n = na;
    return COLLAGE_OK;
}

collage_status collage_tokenize(const char *in_path, const collage_tokenizer *tok, const char *out_path,
                                collage_corpus_info *info, char *err, size_t err_size) {
    if (!out_path) return collage__fail(err, err_size, COLLAGE_ERR_NULL, "tokenize: no output path");
    uint16_t *t;
    size_t n;
    collage_status st = collage_corpus_tokens(in_path, tok, &t, &n, info, err, err_size);
    if (st) return st;
    int vocab = tok ? collage_tokenizer_vocab_size(tok) : 256;
    st = collage_shard_write(out_path, t, n, vocab, err, err_size);
    free(t);
    return st;
}

/* ------------------------------------------------------------------ the loader */
struct collage_loader {
    collage_loader_config cfg;  /* pointers cleared: nothing borrowed outlives create */
    uint16_t *train, *val;      /* val points into train's block when split off its tail */
    size_t n_train, n_val;
    uint16_t *own_train, *own_val;
    uint64_t fingerprint;
};

/* splitmix64's finaliser: a bijection of 64-bit words with full avalanche. */
static uint64_t mix64(uint64_t x) {
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27; x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* A pseudo-random permutation of [0, n) keyed by key: a 4-round balanced Feistel network on the
 * smallest even number of bits covering n, cycle-walked back into range (a bijection of [0, 2^k)
 * restricted to [0, n) by walking is a bijection of [0, n); 2^k < 4n, so < 4 walks expected). */
static uint64_t permute(uint64_t i, uint64_t n, uint64_t key) {
    if (n <= 1) return 0;
    int bits = 64 - __builtin_clzll(n - 1);
    bits += bits & 1;
    int h = bits / 2;
    uint64_t mask = h == 32 ? 0xffffffffull : (1ull << h) - 1, x = i;
    do {
        uint64_t L = x >> h, R = x & mask;
        for (uint64_t r = 0; r < 4; r++) {
            uint64_t F = mix64(R ^ mix64(key + r)) & mask, nl = R;
            R = L ^ F;
            L = nl;
        }
        x = L << h | R;
    } while (x >= n);
    return x;
}

static uint64_t fnv_tokens(uint64_t h, const uint16_t *t, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h ^= t[i] & 0xff; h *= 1099511628211ull;
        h ^= t[i] >> 8; h *= 1099511628211ull;
    }
    return h;
}

static collage_status check_ids(const uint16_t *t, size_t n, int vocab, char *err, size_t err_size) {
    for (size_t i = 0; i < n; i++)
        if (t[i] >= vocab)
            return collage__fail(err, err_size, COLLAGE_ERR_ARG, "loader: token %u at position %zu is outside the vocabulary "
                        "(%d tokens)", t[i], i, vocab);
    return COLLAGE_OK;
}

static collage_status loader_fill(collage_loader *l, const collage_loader_config *c, const collage_tokenizer *tok,
                                  char *err, size_t err_size) {
    collage_status st;
    size_t n;
    if (c->tokens) {
        if ((st = check_ids(c->tokens, c->n_tokens, collage_tokenizer_vocab_size(tok), err, err_size))) return st;
        if (!(l->own_train = malloc((c->n_tokens ? c->n_tokens : 1) * sizeof *l->own_train)))
            return collage__fail(err, err_size, COLLAGE_ERR_NOMEM, "loader: out of memory");
        memcpy(l->own_train, c->tokens, c->n_tokens * sizeof *c->tokens);
        n = c->n_tokens;
    } else if ((st = collage_corpus_tokens(c->path, tok, &l->own_train, &n, NULL, err, err_size))) {
        return st;
    }
    l->train = l->own_train;
    l->n_train = n;
    const char *what = c->tokens ? "the given tokens" : c->path && *c->path ? c->path : COLLAGE_FORTUNES_DIR;
    if (c->val_path) {
        if ((st = collage_corpus_tokens(c->val_path, tok, &l->own_val, &l->n_val, NULL, err, err_size))) return st;
        l->val = l->own_val;
    } else if (c->val_fraction >= 0) {
        double f = c->val_fraction == 0 ? 0.1 : c->val_fraction;
        if (!(f < 1)) return collage__fail(err, err_size, COLLAGE_ERR_ARG, "loader: val_fraction %g is not below 1", f);
        l->n_val = (size_t)((double)n * f);
        l->n_train = n - l->n_val;
        l->val = l->train + l->n_train;
    }
    size_t need = (size_t)c->T + 1;
    if (l->n_train < need)
        return collage__fail(err, err_size, COLLAGE_ERR_SIZE, "loader: the training split of %s has %zu tokens, fewer than "
                    "T + 1 = %zu", what, l->n_train, need);
    if (l->val && l->n_val < need)
        return collage__fail(err, err_size, COLLAGE_ERR_SIZE, "loader: the validation split of %s has %zu tokens, fewer than "
                    "T + 1 = %zu", c->val_path ? c->val_path : what, l->n_val, need);
    return COLLAGE_OK;
}

collage_status collage_loader_create(const collage_loader_config *cfg, collage_loader **out,
                                     char *err, size_t err_size) {
    if (!cfg || !out) return collage__fail(err, err_size, COLLAGE_ERR_NULL, "loader: NULL argument");
    *out = NULL;
    if (cfg->B < 1 || cfg->T < 1)
        return collage__fail(err, err_size, COLLAGE_ERR_SIZE, "loader: B = %d and T = %d must both be at least 1", cfg->B,
                    cfg->T);
    collage_loader *l = calloc(1, sizeof *l);
    if (!l) return collage__fail(err, err_size, COLLAGE_ERR_NOMEM, "loader: out of memory");
    collage_tokenizer *own = NULL;
    const collage_tokenizer *tok = cfg->tokenizer;
    collage_status st = COLLAGE_OK;
    if (!tok && !(st = collage_tokenizer_create(COLLAGE_TOKENIZER_BYTE, NULL, &own, err, err_size))) tok = own;
    if (!st) st = loader_fill(l, cfg, tok, err, err_size);
    collage_tokenizer_free(own);
    if (st) { collage_loader_free(l); return st; }
    l->cfg = *cfg;
    l->cfg.path = l->cfg.val_path = NULL;
    l->cfg.tokens = NULL;
    l->cfg.tokenizer = NULL;
    uint64_t h = fnv_tokens(1469598103934665603ull, l->train, l->n_train);
    h = fnv_tokens(mix64(h ^ l->n_train), l->val, l->n_val);
    h = mix64(h ^ l->n_val) ^ mix64((uint64_t)cfg->B << 32 | (uint32_t)cfg->T);
    l->fingerprint = mix64(h ^ mix64(cfg->seed) ^ (cfg->sequential ? 0x5851f42d4c957f2dull : 0));
    *out = l;
    return COLLAGE_OK;
}

void collage_loader_free(collage_loader *l) {
    if (!l) return;
    free(l->own_train);
    free(l->own_val);
    free(l);
}

const uint16_t *collage_loader_data(const collage_loader *l, collage_split s, size_t *n) {
    const uint16_t *t = s == COLLAGE_SPLIT_VAL ? l->val : l->train;
    if (n) *n = t ? (s == COLLAGE_SPLIT_VAL ? l->n_val : l->n_train) : 0;
    return t;
}

int collage_loader_has_val(const collage_loader *l) { return l->val != NULL; }

uint64_t collage_loader_windows(const collage_loader *l, collage_split s) {
    size_t n;
    if (!collage_loader_data(l, s, &n) || n < 2) return 0;
    return (uint64_t)(n - 1) / (uint64_t)l->cfg.T;
}

uint64_t collage_loader_steps_per_epoch(const collage_loader *l, collage_split s) {
    return collage_loader_windows(l, s) / (uint64_t)l->cfg.B;
}

uint64_t collage_loader_offset(const collage_loader *l, collage_split s, uint64_t step, int b) {
    uint64_t W = collage_loader_windows(l, s);
    if (!W) return 0;
    uint64_t g = step * (uint64_t)l->cfg.B + (uint64_t)b, epoch = g / W, i = g % W;
    if (s == COLLAGE_SPLIT_TRAIN && !l->cfg.sequential)
        i = permute(i, W, mix64(l->cfg.seed ^ mix64(epoch + 0x9e3779b97f4a7c15ull)));
    return i * (uint64_t)l->cfg.T;
}

collage_status collage_loader_batch(const collage_loader *l, collage_split s, uint64_t step, int rank,
                                    int nranks, int32_t *inputs, int32_t *targets) {
    if (!l || !inputs || !targets) return COLLAGE_ERR_NULL;
    if (nranks < 1 || rank < 0 || rank >= nranks || l->cfg.B % nranks) return COLLAGE_ERR_ARG;
    if (s != COLLAGE_SPLIT_TRAIN && s != COLLAGE_SPLIT_VAL) return COLLAGE_ERR_ARG;
    const uint16_t *t = collage_loader_data(l, s, NULL);
    if (!t) return COLLAGE_ERR_ARG;
    int rows = l->cfg.B / nranks, T = l->cfg.T;
    for (int r = 0; r < rows; r++) {
        uint64_t o = collage_loader_offset(l, s, step, rank * rows + r);
        int32_t *in = inputs + (size_t)r * (size_t)T, *tg = targets + (size_t)r * (size_t)T;
        for (int k = 0; k < T; k++) {
            in[k] = t[o + (uint64_t)k];
            tg[k] = t[o + (uint64_t)k + 1];
        }
    }
    return COLLAGE_OK;
}

uint64_t collage_loader_fingerprint(const collage_loader *l) { return l->fingerprint; }
