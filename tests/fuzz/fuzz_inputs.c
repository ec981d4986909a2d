/* fuzz_inputs.c — libFuzzer over every reader of a file that a user hands collage, and over the
 * tokenizers: the optimizer state (collage_adamw_load, collage_adamw_load_part), the model checkpoint
 * (collage_model_read_header, collage_model_load_file), the llm.c token shard (collage_shard_read), the
 * GPT-2 vocabulary files (collage_tokenizer_create), a corpus folder of text files or shards
 * (collage_corpus_tokens, collage_corpus_text), a checkpoint's train.state (collage_run_read_saved,
 * collage_checkpoint_verify), a Hugging Face folder (collage_model_import_config, _import_safetensors),
 * and encode/decode on arbitrary bytes and ids.
 * Built with clang under ASan + UBSan (`make fuzz`); run e.g. `build-fuzz/fuzz_inputs -max_total_time=60`.
 *
 * Besides "no crash, no out-of-bounds access, no leak", each target checks the contracts of
 * the public headers that bad input must keep:
 *  - a failed optimizer load returns an error, names the file in its message, and leaves every state
 *    word as it was (the loader validates the whole file, checksum included, before writing any);
 *  - a failed checkpoint, shard or corpus read names the file; a text corpus read with the byte
 *    tokenizer gives its bytes, in file-name order;
 *  - decode(encode(x)) == x for any bytes x, with both tokenizers; decoding an id outside the
 *    vocabulary is COLLAGE_ERR_ARG.
 * The optimizer-state and checkpoint targets are structure-aware: they start from valid files saved at
 * start-up and apply the input as edits (truncation or extension, byte overwrites, and optionally the
 * checksum recomputed), so that mutations get past the magic and the checksum to the later checks;
 * so is the train.state target (a valid manifest, edited, its checksum line optionally recomputed).
 * The checkpoint target edits a GPT-2 (llm.c format, fp32 or bf16), a BERT (collbert, fp32 or bf16) or
 * a LLaMA (llama2.c's fp32) file; the Hugging Face target edits config.json or model.safetensors of a
 * folder the export wrote (GPT-2 bf16, BERT fp32, LLaMA). Input: byte 0 picks the target (mod 8), the
 * rest is its payload. */
#include "collage.h"
#include "collage_data.h"
#include "collage_model.h"
#include "collage_run.h"
#include "internal.h" /* collage__sum64, the manifest's checksum */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FAIL(...) do { fprintf(stderr, "fuzz_inputs: " __VA_ARGS__); fputc('\n', stderr); abort(); } while (0)

static char g_dir[256];                       /* the scratch folder */
/* The states fuzzed: every preset's, and two compositions with 8-bit moments (codes and block scales). */
#define N_FUZZ_STRATS (COLLAGE_STRATEGY_COUNT + 2)
static collage_strategy g_strat[N_FUZZ_STRATS];
static unsigned char *g_state[N_FUZZ_STRATS];
static size_t g_state_len[N_FUZZ_STRATS];
static unsigned char *g_ckpt[5];              /* gpt2 fp32, gpt2 bf16, bert fp32, bert bf16, llama */
static size_t g_ckpt_len[5];
static const collage_model_config g_cfg[2] = {
    {.family = COLLAGE_FAMILY_GPT2, .vocab_size = 16, .padded_vocab_size = 16, .max_seq_len = 8, .num_layers = 1,
     .num_heads = 2, .channels = 8},
    {.family = COLLAGE_FAMILY_BERT, .vocab_size = 17, .padded_vocab_size = 64, .max_seq_len = 8, .num_layers = 1,
     .num_heads = 2, .channels = 8}};
static const collage_model_config g_llama = {.family = COLLAGE_FAMILY_LLAMA, .vocab_size = 16, .padded_vocab_size = 16,
                                             .max_seq_len = 8, .num_layers = 1, .num_heads = 2, .num_kv_heads = 1,
                                             .channels = 8, .hidden_dim = 12, .untied = 1, .norm_eps = 1e-5,
                                             .rope_theta = 10000.0};
static collage_tokenizer *g_tok[2];           /* byte, gpt2 (NULL when its files are not installed) */
static unsigned char *g_hf[3][2];             /* gpt2 bf16, bert fp32, llama: config.json, model.safetensors */
static size_t g_hf_len[3][2];
static const char *const HF_FILES[2] = {"config.json", "model.safetensors"};

enum { N_ELEM = 40 };
static const collage_param_group g_groups[2] = {{"matrices", 0, 16, 0.1}, {"norms", 16, 24, 0.0}};

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) FAIL("cannot read back %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) FAIL("cannot read back %s", path);
    fclose(f);
    *len = (size_t)n;
    return b;
}
static void spit(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n) || fclose(f)) FAIL("cannot write %s", path);
}

/* An optimizer over [index0, index0 + n) of the N_ELEM-element slab, one step taken (so that every
 * state word is nonzero somewhere). */
static collage_adamw *make_opt(collage_strategy s, size_t index0, size_t n) {
    collage_adamw_config c = {0};
    c.strategy = s;
    c.n = n;
    c.index0 = index0;
    c.total = N_ELEM;
    c.groups = g_groups;
    c.n_groups = 2;
    c.beta2 = 0.95;
    c.eps = 1e-4; /* not 0 in fp16: the fp16 strategies take it */
    c.seed = 7;
    collage_adamw *o;
    if (collage_adamw_create(&c, &o) != COLLAGE_OK) FAIL("cannot create a %s optimizer", collage_strategy_name(s));
    float w[N_ELEM], gf[N_ELEM];
    collage_bf16 gb[N_ELEM];
    for (size_t i = 0; i < n; i++) {
        w[i] = 0.25f * (float)((index0 + i) % 7) - 0.7f;
        gf[i] = 0.01f * (float)((index0 + i) % 5) - 0.02f;
        uint32_t u;
        memcpy(&u, &gf[i], 4);
        gb[i].bits = (uint16_t)(u >> 16);
    }
    if (collage_adamw_set_weights_f32(o, w, n) != COLLAGE_OK ||
        collage_adamw_step(o, collage_strategy_is_fp32(s) ? (const void *)gf : (const void *)gb, 1e-3, NULL) != COLLAGE_OK)
        FAIL("cannot step a %s optimizer", collage_strategy_name(s));
    return o;
}

static uint64_t fnv1a(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 0x100000001b3ull; }
    return h;
}

/* The base file edited by the payload: p[0] resize (< 64: truncate to len·p/64; ≥ 128: p − 128 bytes
 * appended), p[1] & 1: recompute the trailing FNV-1a checksum, then (offset u16, byte) triples. */
static unsigned char *edit(const unsigned char *base, size_t base_len, const uint8_t *p, size_t n, size_t *out_len,
                           int checksum) {
    size_t len = base_len, extra = 0;
    if (n >= 1) {
        if (p[0] < 64) len = base_len * p[0] / 64;
        else if (p[0] >= 128) extra = (size_t)(p[0] - 128);
    }
    unsigned char *b = malloc(len + extra + 1);
    if (!b) FAIL("out of memory");
    memcpy(b, base, len);
    memset(b + len, 0xab, extra);
    len += extra;
    for (size_t i = 2; i + 3 <= n && len; i += 3) b[((size_t)p[i] | (size_t)p[i + 1] << 8) % len] = p[i + 2];
    if (checksum && n >= 2 && (p[1] & 1) && len >= 8) {
        uint64_t h = fnv1a(b, len - 8);
        memcpy(b + len - 8, &h, 8);
    }
    *out_len = len;
    return b;
}

/* The optimizer's whole visible state: its weights and its kept values. */
static void snapshot(collage_adamw *o, unsigned char *w, double *kept) {
    size_t n = collage_adamw_size(o), es = collage_strategy_is_fp32(collage_adamw_strategy(o)) ? 4 : 2;
    memcpy(w, collage_adamw_params(o), n * es);
    if (collage_adamw_kept_f64(o, kept, n) != COLLAGE_OK) FAIL("kept_f64 failed");
}

static void fuzz_state(const uint8_t *d, size_t n) {
    if (n < 1) return;
    const int si = d[0] % N_FUZZ_STRATS;
    const collage_strategy s = g_strat[si];
    const collage_strategy_info *T = collage_strategy_get(s);
    const int q8 = T->word[COLLAGE_ROLE_M].block || T->word[COLLAGE_ROLE_V].block; /* shards of whole scale blocks only */
    size_t len;
    unsigned char *b = edit(g_state[si], g_state_len[si], d + 1, n - 1, &len, 1);
    char path[300];
    snprintf(path, sizeof path, "%s/state.bin", g_dir);
    spit(path, b, len);
    free(b);
    /* the whole slab, then a shard of it (load_part reads only the overlap) */
    for (int part = 0; part < 2; part++) {
        collage_adamw *o = part && !q8 ? make_opt(s, 8, 24) : make_opt(s, 0, N_ELEM);
        unsigned char w0[N_ELEM * 4] = {0}, w1[N_ELEM * 4] = {0};
        double k0[N_ELEM] = {0}, k1[N_ELEM] = {0};
        snapshot(o, w0, k0);
        uint64_t t0 = collage_adamw_steps(o);
        size_t copied = 0;
        collage_status st = part ? collage_adamw_load_part(o, path, &copied) : collage_adamw_load(o, path);
        if (st != COLLAGE_OK) {
            const char *msg = collage_adamw_error(o);
            if (!msg || !strstr(msg, path)) FAIL("a failed load does not name the file: '%s'", msg ? msg : "(null)");
            snapshot(o, w1, k1);
            if (memcmp(w0, w1, sizeof w0) || memcmp(k0, k1, sizeof k0) || collage_adamw_steps(o) != t0)
                FAIL("a failed load (%s) changed the optimizer's state", msg);
        } else if (part && copied > (q8 ? (size_t)N_ELEM : 24))
            FAIL("load_part copied %zu elements into a shard of %d", copied, q8 ? N_ELEM : 24);
        collage_adamw_free(o);
    }
}

static void fuzz_ckpt(const uint8_t *d, size_t n) {
    if (n < 1) return;
    const int k = d[0] % 5; /* which of the five saved files */
    size_t len;
    unsigned char *b = edit(g_ckpt[k], g_ckpt_len[k], d + 1, n - 1, &len, 0);
    char path[300], err[COLLAGE_ERR_LEN];
    snprintf(path, sizeof path, "%s/model.bin", g_dir);
    spit(path, b, len);
    free(b);
    collage_model_config c;
    int file_bf16;
    err[0] = 0;
    collage_status st = collage_model_read_header(path, &c, &file_bf16, err, sizeof err);
    if (st != COLLAGE_OK) {
        if (!strstr(err, path)) FAIL("a failed checkpoint read does not name the file: '%s'", err);
        return;
    }
    size_t np = collage_model_num_params(&c);
    if (np == 0) FAIL("read_header accepted a model of no parameters");
    if (np > ((size_t)1 << 20)) return; /* a valid but large shape: the load would only read the file short */
    float *w = malloc(np * sizeof(float));
    if (!w) FAIL("out of memory");
    for (int want = 0; want < 2; want++) {
        err[0] = 0;
        if (collage_model_load_file(path, &c, w, want, err, sizeof err) != COLLAGE_OK && !strstr(err, path))
            FAIL("a failed checkpoint load does not name the file: '%s'", err);
    }
    free(w);
}

/* A Hugging Face folder: one of its two files edited, the other as exported; a failed read names the
 * folder's file, and a folder read whole has the model's shape. */
static void fuzz_hf(const uint8_t *d, size_t n) {
    if (n < 1) return;
    const int fam = d[0] % 3, which = (d[0] / 3) & 1;
    char dir[300], path[320], err[COLLAGE_ERR_LEN];
    snprintf(dir, sizeof dir, "%s/hf", g_dir);
    mkdir(dir, 0755);
    for (int i = 0; i < 2; i++) {
        size_t len = g_hf_len[fam][i];
        unsigned char *b = i == which ? edit(g_hf[fam][i], len, d + 1, n - 1, &len, 0) : NULL;
        snprintf(path, sizeof path, "%s/%s", dir, HF_FILES[i]);
        spit(path, b ? b : g_hf[fam][i], len);
        free(b);
    }
    collage_model_config c;
    int bf16 = 0;
    err[0] = 0;
    if (collage_model_import_config(dir, &c, &bf16, err, sizeof err) != COLLAGE_OK) {
        if (!strstr(err, dir)) FAIL("a failed config.json read does not name the file: '%s'", err);
        return;
    }
    size_t np = collage_model_num_params(&c);
    if (np == 0) FAIL("import_config accepted a model of no parameters");
    if (np > ((size_t)1 << 20)) return;
    float *w = malloc(np * sizeof(float));
    if (!w) FAIL("out of memory");
    for (int want = 0; want < 2; want++) {
        err[0] = 0;
        if (collage_model_import_safetensors(dir, &c, w, want, err, sizeof err) != COLLAGE_OK && !strstr(err, dir))
            FAIL("a failed import does not name the folder's file: '%s'", err);
    }
    free(w);
}

static void fuzz_shard(const uint8_t *d, size_t n) {
    if (n < 2) return;
    /* d[0] & 1: a valid magic and version over the payload's first bytes, so that the later checks run */
    unsigned char *b = malloc(n + 1024);
    if (!b) FAIL("out of memory");
    size_t len = n - 1;
    memcpy(b, d + 1, len);
    if ((d[0] & 1) && len >= 12) {
        int32_t h[3] = {COLLAGE_SHARD_MAGIC, COLLAGE_SHARD_VERSION, (int32_t)((len > 1024 ? len - 1024 : 0) / 2)};
        if (d[0] & 2) h[2] += (int32_t)(d[0] >> 2) - 32;
        memcpy(b, h, sizeof h);
    }
    char path[300], err[COLLAGE_ERR_LEN];
    snprintf(path, sizeof path, "%s/tokens.bin", g_dir);
    spit(path, b, len);
    free(b);
    const int vocabs[3] = {0, 256, COLLAGE_GPT2_VOCAB_SIZE};
    for (int v = 0; v < 3; v++) {
        uint16_t *tok = NULL;
        size_t nt = 0;
        err[0] = 0;
        collage_status st = collage_shard_read(path, vocabs[v], &tok, &nt, err, sizeof err);
        if (st != COLLAGE_OK && !strstr(err, path)) FAIL("a failed shard read does not name the file: '%s'", err);
        if (st == COLLAGE_OK && vocabs[v])
            for (size_t i = 0; i < nt; i++)
                if (tok[i] >= vocabs[v]) FAIL("shard read accepted token %u with vocabulary %d", tok[i], vocabs[v]);
        free(tok);
    }
}

static void fuzz_tokens(const uint8_t *d, size_t n) {
    for (int k = 0; k < 2; k++) {
        const collage_tokenizer *t = g_tok[k];
        if (!t) continue;
        uint16_t *ids = malloc((n + 1) * sizeof *ids);
        char *back = malloc(n + 1);
        size_t nt = 0, bl = 0;
        if (!ids || !back) FAIL("out of memory");
        if (collage_tokenizer_encode(t, (const char *)d, n, ids, &nt) != COLLAGE_OK) FAIL("encode refused bytes");
        if (nt > n) FAIL("encode wrote %zu ids for %zu bytes", nt, n);
        if (collage_tokenizer_decode(t, ids, nt, back, n + 1, &bl) != COLLAGE_OK || bl != n || (n && memcmp(back, d, n)))
            FAIL("decode(encode(x)) != x with the %s tokenizer (%zu bytes)", k ? "gpt2" : "byte", n);
        /* the payload read as ids: those outside the vocabulary are refused */
        size_t ni = n / 2, need = 0;
        uint16_t *raw = malloc((ni + 1) * sizeof *raw);
        if (!raw) FAIL("out of memory");
        memcpy(raw, d, ni * 2);
        int outside = 0;
        for (size_t i = 0; i < ni; i++) outside |= raw[i] >= collage_tokenizer_vocab_size(t);
        collage_status st = collage_tokenizer_decode(t, raw, ni, NULL, 0, &need);
        if (outside ? st != COLLAGE_ERR_ARG : (st != COLLAGE_OK && st != COLLAGE_ERR_SIZE))
            FAIL("decode of %s ids returned %d", outside ? "out-of-vocabulary" : "valid", (int)st);
        if (!outside) {
            char *out = malloc(need + 1);
            size_t got = 0;
            if (!out || collage_tokenizer_decode(t, raw, ni, out, need, &got) != COLLAGE_OK || got != need)
                FAIL("decode into the size it asked for failed");
            free(out);
        }
        free(raw);
        free(ids);
        free(back);
    }
}

/* encoder.json and vocab.bpe from the payload, split at its first 0xff byte. */
static void fuzz_vocab(const uint8_t *d, size_t n) {
    const uint8_t *cut = memchr(d, 0xff, n);
    size_t a = cut ? (size_t)(cut - d) : n;
    char vdir[300], path[340], err[COLLAGE_ERR_LEN];
    snprintf(vdir, sizeof vdir, "%s/vocab", g_dir);
    snprintf(path, sizeof path, "%s/encoder.json", vdir);
    spit(path, d, a);
    snprintf(path, sizeof path, "%s/vocab.bpe", vdir);
    spit(path, cut ? cut + 1 : d, cut ? n - a - 1 : 0);
    collage_tokenizer *t = NULL;
    err[0] = 0;
    collage_status st = collage_tokenizer_create(COLLAGE_TOKENIZER_GPT2, vdir, &t, err, sizeof err);
    if (st != COLLAGE_OK && !strstr(err, vdir)) FAIL("a failed vocabulary read does not name the file: '%s'", err);
    collage_tokenizer_free(t);
}

/* A checkpoint folder ck/ with a train.state edited from a valid one (p[1] & 1: its checksum line
 * recomputed) beside the model.bin it lists: read and verified, a failure names the file. */
static const char MANIFEST[] =
    "collage-train 2\nstep 3\nskipped 0\nrun_id 00000000000000ab\nprecision collage-light\ntokenizer byte\nvocab 16\n"
    "padded_vocab 16\nmax_seq 8\nlayers 1\nheads 2\ndim 8\nbatch 2\nseq 4\nsteps 10\nwarmup 0\nlr 0.001\nbeta1 0.9\n"
    "beta2 0.95\neps 1e-08\nwd 0.1\nclip 1\nseed 1\ndata_fingerprint 7\nranks 1\naccum 1\nfamily gpt2\n";
static void fuzz_manifest(const uint8_t *d, size_t n) {
    char dir[300], path[340], err[COLLAGE_ERR_LEN], *text = malloc(sizeof MANIFEST + 512);
    if (!text) FAIL("out of memory");
    snprintf(dir, sizeof dir, "%s/ck", g_dir);
    snprintf(path, sizeof path, "%s/model.bin", dir);
    spit(path, g_ckpt[0], g_ckpt_len[0]);
    int k = snprintf(text, sizeof MANIFEST + 512, "%sfile model.bin %zu %016llx\n", MANIFEST, g_ckpt_len[0],
                     (unsigned long long)collage__sum64(g_ckpt[0], g_ckpt_len[0]));
    snprintf(text + k, sizeof MANIFEST + 512 - (size_t)k, "checksum %016llx\n", (unsigned long long)collage__sum64(text, (size_t)k));
    size_t len;
    unsigned char *b = edit((const unsigned char *)text, strlen(text), d, n, &len, 0);
    const char *last = NULL; /* the checksum line recomputed over the edited bytes before it */
    for (size_t i = 0; i + 10 <= len; i++)
        if (!memcmp(b + i, "\nchecksum ", 10)) last = (const char *)b + i;
    if (n >= 2 && (d[1] & 1) && last && (size_t)(last - (const char *)b) + 27 <= len) {
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)collage__sum64(b, (size_t)(last + 1 - (const char *)b)));
        memcpy((char *)last + 10, hex, 16);
    }
    snprintf(path, sizeof path, "%s/train.state", dir);
    spit(path, b, len);
    free(b);
    free(text);
    collage_run_saved sv;
    err[0] = 0;
    if (collage_run_read_saved(dir, &sv, err, sizeof err) != COLLAGE_OK) {
        if (!strstr(err, dir)) FAIL("a failed train.state read does not name the file: '%s'", err);
        return;
    }
    if (sv.step < 0 || sv.ranks < 1 || sv.accum < 1 || sv.skipped < 0 || sv.skipped > sv.step)
        FAIL("train.state accepted: step %d, ranks %d, accum %d, skipped %d", sv.step, sv.ranks, sv.accum, sv.skipped);
    err[0] = 0;
    if (collage_checkpoint_verify(dir, NULL, err, sizeof err) != COLLAGE_OK && !strstr(err, dir))
        FAIL("a failed verification does not name the file: '%s'", err);
}

/* The scratch folder and what the targets write in it, removed at exit (libFuzzer exits through
 * exit() when its runs are done; a crash leaves them for inspection). */
static void cleanup(void) {
    static const char *const files[] = {"state.bin", "base_state.bin", "model.bin", "base_model.bin", "tokens.bin",
                                         "vocab/encoder.json", "vocab/vocab.bpe", "ck/train.state", "ck/model.bin"};
    char path[340];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", g_dir, files[i]);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/vocab", g_dir);
    rmdir(path);
    snprintf(path, sizeof path, "%s/corpus", g_dir);
    rmdir(path);
    snprintf(path, sizeof path, "%s/ck", g_dir);
    rmdir(path);
    rmdir(g_dir);
}

/* A corpus folder of up to three files cut from the payload (p[0]: how many; each file's first byte
 * names it "a.bin"/"b.txt"/… and says whether to give a shard a valid header), read whole and file by
 * file, with the byte tokenizer: a text corpus's tokens are its bytes, in name order. */
static void fuzz_corpus(const uint8_t *d, size_t n) {
    if (n < 1) return;
    char cdir[300], path[340], err[COLLAGE_ERR_LEN];
    snprintf(cdir, sizeof cdir, "%s/corpus", g_dir);
    int nf = 1 + d[0] % 3;
    size_t at = 1, per = (n - 1) / (size_t)nf;
    char names[3][16];
    for (int i = 0; i < nf; i++) {
        const uint8_t *f = d + at;
        size_t len = i == nf - 1 ? n - at : per;
        at += len;
        int bin = len && (f[0] & 1), hdr = len && (f[0] & 2);
        snprintf(names[i], sizeof names[i], "%c.%s", 'a' + i, bin ? "bin" : "txt");
        snprintf(path, sizeof path, "%s/%s", cdir, names[i]);
        const uint8_t *body = len ? f + 1 : f;
        size_t blen = len ? len - 1 : 0;
        if (bin && hdr) { /* a shard header that agrees with the body's size, so the tokens get checked */
            unsigned char *b = calloc(1, 1024 + blen);
            if (!b) FAIL("out of memory");
            int32_t h[4] = {COLLAGE_SHARD_MAGIC, COLLAGE_SHARD_VERSION, (int32_t)(blen / 2), 256};
            memcpy(b, h, sizeof h);
            memcpy(b + 1024, body, blen);
            spit(path, b, 1024 + blen / 2 * 2);
            free(b);
        } else
            spit(path, body, blen);
    }
    /* the whole folder, then each file */
    for (int i = -1; i < nf; i++) {
        const char *src = cdir;
        if (i >= 0) { snprintf(path, sizeof path, "%s/%s", cdir, names[i]); src = path; }
        uint16_t *tok = NULL;
        size_t nt = 0;
        collage_corpus_info info;
        err[0] = 0;
        collage_status st = collage_corpus_tokens(src, g_tok[0], &tok, &nt, &info, err, sizeof err);
        if (st != COLLAGE_OK && !strstr(err, cdir)) FAIL("a failed corpus read does not name the file: '%s'", err);
        if (st == COLLAGE_OK) {
            if (nt != info.tokens) FAIL("corpus: %zu tokens but info says %zu", nt, info.tokens);
            for (size_t k = 0; k < nt; k++)
                if (tok[k] >= 256) FAIL("corpus: token %u from a byte-vocabulary corpus", tok[k]);
            if (!info.shards) { /* text: the tokens are the bytes */
                char *text = NULL;
                size_t tl = 0;
                if (collage_corpus_text(src, &text, &tl, NULL, err, sizeof err) != COLLAGE_OK)
                    FAIL("corpus_text failed where corpus_tokens read text: %s", err);
                if (tl != nt) FAIL("corpus: %zu bytes of text but %zu byte tokens", tl, nt);
                for (size_t k = 0; k < nt; k++)
                    if (tok[k] != (unsigned char)text[k]) FAIL("corpus: token %zu is not the text's byte", k);
                free(text);
            }
        }
        free(tok);
    }
    for (int i = 0; i < nf; i++) {
        snprintf(path, sizeof path, "%s/%s", cdir, names[i]);
        unlink(path);
    }
}

/* The Hugging Face folders the HF target edits: the micro GPT-2 in bf16, the BERT in fp32 and the LLaMA
 * (its weights wl), as collage_model_export_safetensors writes them. */
static void hf_bases(const float *wl) {
    const collage_model_config *cfg[3] = {&g_cfg[0], &g_cfg[1], &g_llama};
    char dir[300], path[320], err[COLLAGE_ERR_LEN];
    for (int f = 0; f < 3; f++) {
        const size_t np = collage_model_num_params(cfg[f]);
        float *w = malloc(np * sizeof *w);
        collage_bf16 *wb = malloc(np * sizeof *wb);
        if (!w || !wb) FAIL("out of memory");
        for (size_t i = 0; i < np; i++) { w[i] = f == 2 ? wl[i] : 0.01f * (float)(i % 13); wb[i].bits = (uint16_t)(0x3c00 + i % 256); }
        snprintf(dir, sizeof dir, "%s/base_hf%d", g_dir, f);
        if (collage_model_export_safetensors(dir, cfg[f], f == 0 ? (const void *)wb : (const void *)w, f == 0, err,
                                             sizeof err) != COLLAGE_OK)
            FAIL("cannot export a folder: %s", err);
        for (int i = 0; i < 2; i++) {
            snprintf(path, sizeof path, "%s/%s", dir, HF_FILES[i]);
            g_hf[f][i] = slurp(path, &g_hf_len[f][i]);
        }
        free(w);
        free(wb);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    collage_set_threads(1);
    snprintf(g_dir, sizeof g_dir, "%s/collage-fuzz-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_dir)) FAIL("cannot make a scratch folder");
    atexit(cleanup);
    char path[340];
    snprintf(path, sizeof path, "%s/vocab", g_dir);
    if (mkdir(path, 0700)) FAIL("cannot make %s", path);
    snprintf(path, sizeof path, "%s/corpus", g_dir);
    if (mkdir(path, 0700)) FAIL("cannot make %s", path);
    snprintf(path, sizeof path, "%s/ck", g_dir);
    if (mkdir(path, 0700)) FAIL("cannot make %s", path);
    for (int s = 0; s < COLLAGE_STRATEGY_COUNT; s++) g_strat[s] = (collage_strategy)s;
    if (collage_strategy_parse("collage-light+m=int8,v=int8", &g_strat[COLLAGE_STRATEGY_COUNT]) != COLLAGE_OK ||
        collage_strategy_parse("bf16-sr+m=e4m3,v=int8,q=sr", &g_strat[COLLAGE_STRATEGY_COUNT + 1]) != COLLAGE_OK)
        FAIL("cannot parse the compositions");
    for (int s = 0; s < N_FUZZ_STRATS; s++) {
        collage_adamw *o = make_opt(g_strat[s], 0, N_ELEM);
        snprintf(path, sizeof path, "%s/base_state.bin", g_dir);
        if (collage_adamw_save(o, path) != COLLAGE_OK) FAIL("cannot save a state: %s", collage_adamw_error(o));
        g_state[s] = slurp(path, &g_state_len[s]);
        collage_adamw_free(o);
    }
    char err[COLLAGE_ERR_LEN];
    for (int fam = 0; fam < 2; fam++) {
        size_t np = collage_model_num_params(&g_cfg[fam]);
        if (!np) FAIL("the micro model's shape is invalid");
        float *w = malloc(np * sizeof *w);
        collage_bf16 *wb = malloc(np * sizeof *wb);
        if (!w || !wb) FAIL("out of memory");
        for (size_t i = 0; i < np; i++) { w[i] = 0.01f * (float)(i % 13); wb[i].bits = (uint16_t)(0x3c00 + i % 256); }
        for (int bf = 0; bf < 2; bf++) {
            snprintf(path, sizeof path, "%s/base_model.bin", g_dir);
            if (collage_model_save_file(path, &g_cfg[fam], bf ? (const void *)wb : (const void *)w, bf, err, sizeof err) !=
                COLLAGE_OK)
                FAIL("cannot save a checkpoint: %s", err);
            g_ckpt[2 * fam + bf] = slurp(path, &g_ckpt_len[2 * fam + bf]);
        }
        free(w);
        free(wb);
    }
    const size_t nl = collage_model_num_params(&g_llama);
    float *wl = calloc(nl ? nl : 1, sizeof *wl);
    if (!nl || !wl) FAIL("the micro llama's shape is invalid");
    snprintf(path, sizeof path, "%s/base_model.bin", g_dir);
    if (collage_model_save_file(path, &g_llama, wl, 0, err, sizeof err) != COLLAGE_OK) FAIL("cannot save a llama: %s", err);
    g_ckpt[4] = slurp(path, &g_ckpt_len[4]);
    hf_bases(wl);
    free(wl);
    if (collage_tokenizer_create(COLLAGE_TOKENIZER_BYTE, NULL, &g_tok[0], err, sizeof err) != COLLAGE_OK)
        FAIL("no byte tokenizer: %s", err);
    if (collage_tokenizer_create(COLLAGE_TOKENIZER_GPT2, NULL, &g_tok[1], err, sizeof err) != COLLAGE_OK) {
        fprintf(stderr, "fuzz_inputs: no GPT-2 vocabulary (%s): the gpt2 tokenizer is not fuzzed\n", err);
        g_tok[1] = NULL;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {
    if (n < 1) return 0;
    switch (d[0] % 8) {
    case 0: fuzz_state(d + 1, n - 1); break;
    case 1: fuzz_ckpt(d + 1, n - 1); break;
    case 2: fuzz_shard(d + 1, n - 1); break;
    case 3: fuzz_tokens(d + 1, n - 1); break;
    case 4: fuzz_vocab(d + 1, n - 1); break;
    case 5: fuzz_corpus(d + 1, n - 1); break;
    case 6: fuzz_manifest(d + 1, n - 1); break;
    default: fuzz_hf(d + 1, n - 1); break;
    }
    return 0;
}
