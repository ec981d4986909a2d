/* test_import.c — collage_model_import_config / _import_safetensors: a folder the export wrote reads back
 * into the same config and slab (the embedding's padding rows 0), and exporting that slab writes the same
 * files byte for byte, for every family in bf16 (arbitrary bits) and fp32; folders as transformers
 * writes them (a tied alias, shards with model.safetensors.index.json) are read, and a missing, extra,
 * misshapen, untied or F16 tensor and every config.json setting collage cannot compute are refused with
 * the file and the key or tensor named. python/tests/test_hf.py does the same with transformers' own
 * save_pretrained and from_pretrained. */
#include "collage.h"
#include "collage_model.h"
#include "harness.h"
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

static char g_dir[256];

/* ---------------------------------------------------------------- safetensors files taken apart here */
typedef struct { char name[128], dtype[8]; size_t shape[2]; int ndim; const unsigned char *data; size_t bytes; } st_t;

/* The tensors of a file the export wrote (its header has one fixed layout), pointing into file. */
static int st_parse(const unsigned char *file, st_t *t, int cap) {
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | file[i];
    const char *h = (const char *)file + 8, *p = h;
    int n = 0;
    while (n < cap && (p = strstr(p, ":{\"dtype\":\"")) && p < h + hl) {
        const char *q = p - 1, *s = q - 1;
        while (*s != '"') s--;
        snprintf(t[n].name, sizeof t[n].name, "%.*s", (int)(q - s - 1), s + 1);
        sscanf(p, ":{\"dtype\":\"%7[^\"]", t[n].dtype);
        t[n].ndim = sscanf(strstr(p, "\"shape\":[") + 9, "%zu,%zu", &t[n].shape[0], &t[n].shape[1]);
        size_t a = 0, b = 0;
        sscanf(strstr(p, "\"data_offsets\":[") + 16, "%zu,%zu", &a, &b);
        t[n].data = file + 8 + hl + a;
        t[n].bytes = b - a;
        n++;
        p++;
    }
    return n;
}

static int st_write(const char *path, const st_t *t, int n) {
    static char hdr[1 << 16];
    size_t at = 0, off = 0;
    at += (size_t)snprintf(hdr, sizeof hdr, "{");
    for (int i = 0; i < n; i++) {
        char shape[64];
        if (t[i].ndim == 2) snprintf(shape, sizeof shape, "%zu,%zu", t[i].shape[0], t[i].shape[1]);
        else snprintf(shape, sizeof shape, "%zu", t[i].shape[0]);
        at += (size_t)snprintf(hdr + at, sizeof hdr - at, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%s],\"data_offsets\":[%zu,%zu]}",
                               i ? "," : "", t[i].name, t[i].dtype, shape, off, off + t[i].bytes);
        off += t[i].bytes;
    }
    at += (size_t)snprintf(hdr + at, sizeof hdr - at, "}");
    while ((8 + at) % 8) hdr[at++] = ' ';
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)at >> (8 * i));
    int ok = fwrite(len, 1, 8, f) == 8 && fwrite(hdr, 1, at, f) == at;
    for (int i = 0; ok && i < n; i++) ok = fwrite(t[i].data, 1, t[i].bytes, f) == t[i].bytes;
    return fclose(f) == 0 && ok;
}

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return 0;
    const int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

static int same_file(const char *a, const char *b) {
    size_t la = 0, lb = 0;
    unsigned char *x = h_read_file(a, &la), *y = h_read_file(b, &lb);
    const int same = x && y && la == lb && !memcmp(x, y, la);
    free(x);
    free(y);
    return same;
}

/* ---------------------------------------------------------------- the round trip */
static uint64_t g_seed = 0x9e3779b97f4a7c15u;
static uint32_t rnd(void) {
    g_seed ^= g_seed << 13; g_seed ^= g_seed >> 7; g_seed ^= g_seed << 17;
    return (uint32_t)(g_seed >> 16);
}

/* Weights no element of which is 0: bf16 any bits but zero; fp32 finite values of every exponent range. */
static void *weights(const collage_model_config *c, int bf16) {
    const size_t n = collage_model_num_params(c);
    void *p = malloc(n * (bf16 ? 2 : 4));
    for (size_t i = 0; p && i < n; i++) {
        uint32_t r = rnd();
        if (bf16) ((collage_bf16 *)p)[i] = (collage_bf16){(uint16_t)(r & 0xffff ? r : 1)};
        else ((float *)p)[i] = ldexpf((float)(r % 1000 + 1) / 1000.0f, (int)(r >> 24) % 60 - 30) * (r & 1 ? -1.0f : 1.0f);
    }
    return p;
}

/* Export, import, export again: the config and every written element back, the padding rows (padding
 * elements in all) 0, the second folder's files equal to the first's byte for byte. */
static void round_trip(collage_model_config c, const char *sub, int bf16, size_t padding) {
    char d1[512], d2[512], a[600], b[600], err[512] = "";
    snprintf(d1, sizeof d1, "%s/%s-%s", g_dir, sub, bf16 ? "bf16" : "fp32");
    snprintf(d2, sizeof d2, "%s/%s-%s-again", g_dir, sub, bf16 ? "bf16" : "fp32");
    const size_t n = collage_model_num_params(&c), es = bf16 ? 2 : 4;
    unsigned char *w = weights(&c, bf16), *back = malloc(n * es);
    collage_model_config got;
    int file_bf16 = -1;
    CHECK(collage_model_export_safetensors(d1, &c, w, bf16, err, sizeof err) == COLLAGE_OK, "export: %s", err);
    CHECK(collage_model_is_hf_folder(d1), "%s is not seen as a Hugging Face folder", d1);
    collage_status st = collage_model_read_header(d1, &got, &file_bf16, err, sizeof err);
    CHECK(st == COLLAGE_OK && !memcmp(&got, &c, sizeof c) && file_bf16 == bf16, "%s: config back: %s", sub, err);
    st = collage_model_load_file(d1, &c, back, bf16, err, sizeof err);
    CHECK(st == COLLAGE_OK, "%s: import: %s", sub, err);
    size_t zeroed = 0, other = 0;
    for (size_t i = 0; i < n; i++) {
        if (!memcmp(w + i * es, back + i * es, es)) continue;
        const int zero = bf16 ? !((collage_bf16 *)(void *)back)[i].bits : ((float *)(void *)back)[i] == 0.0f;
        zeroed += zero;
        other += !zero;
    }
    CHECK(zeroed == padding && other == 0, "%s: %zu elements differ from the source but 0 (%zu padding), %zu otherwise", sub,
          zeroed, padding, other);
    CHECK(collage_model_export_safetensors(d2, &c, back, bf16, err, sizeof err) == COLLAGE_OK, "export again: %s", err);
    snprintf(a, sizeof a, "%s/model.safetensors", d1);
    snprintf(b, sizeof b, "%s/model.safetensors", d2);
    CHECK(same_file(a, b), "%s: the second export's model.safetensors differs from the first", sub);
    snprintf(a, sizeof a, "%s/config.json", d1);
    snprintf(b, sizeof b, "%s/config.json", d2);
    CHECK(same_file(a, b), "%s: the second export's config.json differs from the first", sub);
    if (bf16) { /* the fp32 reading of a BF16 folder widens exactly */
        float *f = malloc(n * sizeof *f);
        CHECK(collage_model_load_file(d1, &c, f, 0, err, sizeof err) == COLLAGE_OK, "fp32 import: %s", err);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += collage_bf16_from_f32(f[i]).bits != ((collage_bf16 *)(void *)back)[i].bits &&
                                                f[i] == f[i];
        CHECK(bad == 0, "%s: %zu elements of the fp32 import are not the bf16 ones widened", sub, bad);
        free(f);
    }
    free(w);
    free(back);
}

/* V 19 in GPT-2's 128 padded rows (a folder holds no padding: the import pads by the family's rule). */
static collage_model_config gpt2_micro(void) {
    collage_model_config c = {.family = COLLAGE_FAMILY_GPT2, .max_seq_len = 8, .num_layers = 2, .num_heads = 2, .channels = 16};
    collage_model_config_set_vocab(&c, 19);
    return c;
}
static collage_model_config llama(int untied) {
    collage_model_config c;
    collage_model_preset("llama-tiny", &c);
    collage_model_config_set_vocab(&c, 200);
    c.untied = untied;
    c.norm_eps = 1e-6;
    c.rope_theta = 500000.0;
    return c;
}
static collage_model_config bert(void) {
    collage_model_config c;
    collage_model_preset("bert-tiny", &c);
    return c;
}

static void check_families(int bf16) {
    collage_model_config g = gpt2_micro(), l = llama(0), u = llama(1), b = bert();
    round_trip(g, "gpt2", bf16, (size_t)(g.padded_vocab_size - g.vocab_size) * (size_t)g.channels);
    round_trip(l, "llama", bf16, (size_t)(l.padded_vocab_size - l.vocab_size) * (size_t)l.channels);
    round_trip(u, "llama-untied", bf16, 2 * (size_t)(u.padded_vocab_size - u.vocab_size) * (size_t)u.channels);
    round_trip(b, "bert", bf16, (size_t)(b.padded_vocab_size - b.vocab_size) * (size_t)(b.channels + 1));
}
static void test_round_trip_bf16(void) { check_families(1); }
static void test_round_trip_fp32(void) { check_families(0); }

/* ---------------------------------------------------------------- folders as transformers writes them */
/* A copy of folder src (export of sub) with config.json text from src and the tensors t[0..n) written
 * as one file, or split in two shards with an index (shards = 1). */
static void write_folder(const char *dst, const char *src, const st_t *t, int n, int shards) {
    char p[600], q[600];
    mkdir(dst, 0755);
    snprintf(p, sizeof p, "%s/config.json", src);
    size_t len = 0;
    unsigned char *cfg = h_read_file(p, &len);
    snprintf(q, sizeof q, "%s/config.json", dst);
    CHECK(cfg && write_text(q, (const char *)cfg), "copy %s", p);
    free(cfg);
    if (!shards) {
        snprintf(q, sizeof q, "%s/model.safetensors", dst);
        CHECK(st_write(q, t, n), "write %s", q);
        return;
    }
    const int half = n / 2;
    snprintf(q, sizeof q, "%s/model-00001-of-00002.safetensors", dst);
    CHECK(st_write(q, t, half), "write %s", q);
    snprintf(q, sizeof q, "%s/model-00002-of-00002.safetensors", dst);
    CHECK(st_write(q, t + half, n - half), "write %s", q);
    static char idx[1 << 15];
    size_t at = (size_t)snprintf(idx, sizeof idx, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
    for (int i = 0; i < n; i++)
        at += (size_t)snprintf(idx + at, sizeof idx - at, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "",
                               t[i].name, i < half ? 1 : 2);
    snprintf(idx + at, sizeof idx - at, "}}\n");
    snprintf(q, sizeof q, "%s/model.safetensors.index.json", dst);
    CHECK(write_text(q, idx), "write %s", q);
}

static int find(const st_t *t, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return i;
    return -1;
}

/* The folder's import: its status, and err holding each of the words given (NULL-ended). */
static void expect(const char *dir, collage_status want, const char *w1, const char *w2) {
    collage_model_config c = gpt2_micro(), got;
    char err[1024] = "";
    collage_status st = collage_model_read_header(dir, &got, NULL, err, sizeof err);
    if (st == COLLAGE_OK) {
        void *p = malloc(collage_model_num_params(&got) * 2);
        st = collage_model_load_file(dir, &got, p, 1, err, sizeof err);
        free(p);
        CHECK(want != COLLAGE_OK || !memcmp(&got, &c, sizeof c), "%s: another config", dir);
    }
    CHECK(st == want && (!w1 || strstr(err, w1)) && (!w2 || strstr(err, w2)), "%s: status %s, expected %s; '%s' (wants '%s', '%s')",
          dir, collage_status_str(st), collage_status_str(want), err, w1 ? w1 : "", w2 ? w2 : "");
}

static void test_transformers_folders(void) {
    char src[320], dst[400], path[512], err[512] = "";
    const collage_model_config c = gpt2_micro();
    snprintf(src, sizeof src, "%s/hf-src", g_dir);
    void *w = weights(&c, 1);
    CHECK(collage_model_export_safetensors(src, &c, w, 1, err, sizeof err) == COLLAGE_OK, "export: %s", err);
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    size_t len = 0;
    unsigned char *file = h_read_file(path, &len);
    st_t t[64];
    const int n = file ? st_parse(file, t, 62) : 0, wte = find(t, n, "transformer.wte.weight");
    CHECK(n == 4 + 12 * 2 && wte >= 0, "the export's header: %d tensors", n);
    if (wte < 0) { free(file); free(w); return; }
    t[n] = t[wte]; /* the output, saved beside its twin */
    snprintf(t[n].name, sizeof t[n].name, "lm_head.weight");
    snprintf(dst, sizeof dst, "%s/tied", g_dir);
    write_folder(dst, src, t, n + 1, 0);
    expect(dst, COLLAGE_OK, NULL, NULL);
    snprintf(dst, sizeof dst, "%s/sharded", g_dir);
    write_folder(dst, src, t, n, 1);
    expect(dst, COLLAGE_OK, NULL, NULL);
    unsigned char *other = malloc(t[wte].bytes);
    memcpy(other, t[wte].data, t[wte].bytes);
    other[7] ^= 1;
    t[n].data = other; /* an untied output */
    snprintf(dst, sizeof dst, "%s/untied", g_dir);
    write_folder(dst, src, t, n + 1, 0);
    expect(dst, COLLAGE_ERR_UNSUPPORTED, "lm_head.weight", "untied");
    snprintf(t[n].name, sizeof t[n].name, "transformer.h.0.attn.masked_bias");
    snprintf(dst, sizeof dst, "%s/extra", g_dir);
    write_folder(dst, src, t, n + 1, 0);
    expect(dst, COLLAGE_ERR_FORMAT, "masked_bias", "no place");
    snprintf(dst, sizeof dst, "%s/missing", g_dir);
    write_folder(dst, src, t, n - 1, 0); /* without the last: transformer.ln_f.bias */
    expect(dst, COLLAGE_ERR_FORMAT, "has no tensor", t[n - 1].name);
    const int qkv = find(t, n, "transformer.h.1.attn.c_attn.weight");
    const size_t r = t[qkv].shape[0];
    t[qkv].shape[0] = t[qkv].shape[1]; /* (out, in): nn.Linear's orientation, not Conv1D's */
    t[qkv].shape[1] = r;
    snprintf(dst, sizeof dst, "%s/shape", g_dir);
    write_folder(dst, src, t, n, 0);
    expect(dst, COLLAGE_ERR_FORMAT, "transformer.h.1.attn.c_attn.weight", "shape");
    t[qkv].shape[1] = t[qkv].shape[0];
    t[qkv].shape[0] = r;
    snprintf(t[qkv].dtype, sizeof t[qkv].dtype, "F16");
    snprintf(dst, sizeof dst, "%s/f16", g_dir);
    write_folder(dst, src, t, n, 0);
    expect(dst, COLLAGE_ERR_FORMAT, "F16", "BF16 and F32");
    snprintf(dst, sizeof dst, "%s/empty", g_dir);
    mkdir(dst, 0755);
    snprintf(path, sizeof path, "%s/config.json", dst);
    write_text(path, "{\"model_type\": \"gpt2\", \"n_embd\": 16, \"n_head\": 2, \"n_layer\": 2, \"n_positions\": 8, \"vocab_size\": 19}");
    expect(dst, COLLAGE_ERR_IO, "neither model.safetensors", NULL);
    free(other);
    free(file);
    free(w);
}

/* ---------------------------------------------------------------- config.json refusals */
/* The family's export with one text of config.json replaced: refused with status want, err naming
 * config.json and word. */
typedef struct { const char *family, *old, *repl, *word; collage_status want; } edit_t;
static const edit_t EDITS[] = {
    {"gpt2", "\"activation_function\": \"gelu_new\"", "\"activation_function\": \"relu\"", "activation_function", COLLAGE_ERR_UNSUPPORTED},
    {"gpt2", "\"activation_function\": \"gelu_new\",\n", "", NULL, COLLAGE_OK}, /* absent: GPT2Config's gelu_new */
    {"gpt2", "\"layer_norm_epsilon\": 1e-05", "\"layer_norm_epsilon\": 1e-06", "layer_norm_epsilon", COLLAGE_ERR_UNSUPPORTED},
    {"gpt2", "\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false", "tie_word_embeddings", COLLAGE_ERR_UNSUPPORTED},
    {"gpt2", "\"n_inner\": null", "\"n_inner\": 48", "n_inner", COLLAGE_ERR_UNSUPPORTED},
    {"gpt2", "\"n_inner\": null", "\"n_inner\": 64", NULL, COLLAGE_OK}, /* 4 · n_embd, stated */
    {"gpt2", "\"n_embd\": 16", "\"n_embd\": NaN", "n_embd", COLLAGE_ERR_FORMAT},
    {"gpt2", "\"n_embd\": 16", "\"n_embd\": 16.5", "n_embd", COLLAGE_ERR_FORMAT},
    {"gpt2", "\"n_head\": 2", "\"n_head\": 3", "num_heads", COLLAGE_ERR_SIZE},
    {"gpt2", "\"model_type\": \"gpt2\"", "\"model_type\": \"roberta\"", "RoBERTa", COLLAGE_ERR_UNSUPPORTED},
    {"gpt2", "\"model_type\": \"gpt2\"", "\"model_type\": \"t5\"", "model_type", COLLAGE_ERR_UNSUPPORTED},
    {"gpt2", "[\"GPT2LMHeadModel\"]", "[\"GPT2Model\"]", "architectures", COLLAGE_ERR_UNSUPPORTED},
    {"gpt2", "\"scale_attn_weights\": true", "\"scale_attn_weights\": false", "scale_attn_weights", COLLAGE_ERR_UNSUPPORTED},
    {"gpt2", "{", "{\"scale_attn_by_inverse_layer_idx\": true,", "scale_attn_by_inverse_layer_idx", COLLAGE_ERR_UNSUPPORTED},
    {"gpt2", "\"n_layer\": 2,", "\"n_layer\": 2", "not a JSON object", COLLAGE_ERR_FORMAT},
    {"llama", "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", "hidden_act", COLLAGE_ERR_UNSUPPORTED},
    {"llama", "\"attention_bias\": false", "\"attention_bias\": true", "attention_bias", COLLAGE_ERR_UNSUPPORTED},
    {"llama", "{", "{\"mlp_bias\": true,", "mlp_bias", COLLAGE_ERR_UNSUPPORTED},
    {"llama", "\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2.0}", "rope_scaling",
     COLLAGE_ERR_UNSUPPORTED},
    {"llama", "{", "{\"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": \"llama3\"},", "rope_type",
     COLLAGE_ERR_UNSUPPORTED},
    {"llama", "\"rope_theta\": 500000,", "\"rope_theta\": 10000, \"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": \"default\"},",
     NULL, COLLAGE_OK}, /* transformers 5's place for θ, read after the top level's */
    {"llama", "{", "{\"head_dim\": 16,", "head_dim", COLLAGE_ERR_UNSUPPORTED},
    {"llama", "\"rms_norm_eps\": 1e-06", "\"rms_norm_eps\": -1", "rms_norm_eps", COLLAGE_ERR_FORMAT},
    {"llama", "\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false", "lm_head.weight", COLLAGE_ERR_FORMAT},
    {"bert", "\"hidden_act\": \"gelu_new\"", "\"hidden_act\": \"gelu\"", "hidden_act", COLLAGE_ERR_UNSUPPORTED},
    {"bert", "\"hidden_act\": \"gelu_new\",\n", "", "hidden_act", COLLAGE_ERR_UNSUPPORTED}, /* absent: BertConfig's gelu */
    {"bert", "\"layer_norm_eps\": 1e-05", "\"layer_norm_eps\": 1e-12", "layer_norm_eps", COLLAGE_ERR_UNSUPPORTED},
    {"bert", "\"type_vocab_size\": 1", "\"type_vocab_size\": 2", "type_vocab_size", COLLAGE_ERR_UNSUPPORTED},
    {"bert", "\"absolute\"", "\"relative_key\"", "position_embedding_type", COLLAGE_ERR_UNSUPPORTED},
    {"bert", "\"intermediate_size\": 512", "\"intermediate_size\": 256", "intermediate_size", COLLAGE_ERR_UNSUPPORTED},
};

static void test_config_refusals(void) {
    const collage_model_config cfgs[3] = {gpt2_micro(), llama(0), bert()};
    const char *names[3] = {"gpt2", "llama", "bert"};
    char src[3][320], err[1024];
    for (int f = 0; f < 3; f++) {
        snprintf(src[f], sizeof src[f], "%s/cfg-%s", g_dir, names[f]);
        void *w = weights(&cfgs[f], 1);
        CHECK(collage_model_export_safetensors(src[f], &cfgs[f], w, 1, err, sizeof err) == COLLAGE_OK, "export: %s", err);
        free(w);
    }
    for (size_t i = 0; i < sizeof EDITS / sizeof EDITS[0]; i++) {
        const edit_t *e = &EDITS[i];
        const int f = !strcmp(e->family, "gpt2") ? 0 : !strcmp(e->family, "llama") ? 1 : 2;
        char dir[400], path[1024], text[8192];
        snprintf(dir, sizeof dir, "%s/edit-%zu", g_dir, i);
        mkdir(dir, 0755);
        snprintf(path, sizeof path, "%s/config.json", (const char *)src[f]);
        size_t len = 0;
        unsigned char *cfg = h_read_file(path, &len);
        const char *at = cfg ? strstr((const char *)cfg, e->old) : NULL;
        CHECK(at, "edit %zu: '%s' is not in %s", i, e->old, path);
        if (!at) { free(cfg); continue; }
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - (const char *)cfg), cfg, e->repl, at + strlen(e->old));
        free(cfg);
        snprintf(path, sizeof path, "%s/config.json", dir);
        write_text(path, text);
        char a[1024];
        snprintf(a, sizeof a, "%s/model.safetensors", (const char *)src[f]);
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        CHECK(symlink(a, path) == 0, "link %s", path);
        collage_model_config got;
        err[0] = 0;
        collage_status st = collage_model_read_header(dir, &got, NULL, err, sizeof err);
        CHECK(st != COLLAGE_OK || e->want != COLLAGE_OK || !memcmp(&got, &cfgs[f], sizeof got), "edit %zu: another config", i);
        if (st == COLLAGE_OK) {
            void *p = malloc(collage_model_num_params(&got) * 2);
            st = collage_model_load_file(dir, &got, p, 1, err, sizeof err);
            free(p);
        }
        CHECK(st == e->want && (st == COLLAGE_OK || (strstr(err, "config.json") || strstr(err, "safetensors"))) &&
                  (!e->word || strstr(err, e->word)),
              "edit %zu (%s: '%s' → '%s'): %s, expected %s naming '%s': %s", i, e->family, e->old, e->repl,
              collage_status_str(st), collage_status_str(e->want), e->word ? e->word : "", err);
    }
}

int main(void) {
    printf("test_import\n");
    snprintf(g_dir, sizeof g_dir, "/tmp/collage_test_import_XXXXXX");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 1; }
    RUN(test_round_trip_bf16);
    RUN(test_round_trip_fp32);
    RUN(test_transformers_folders);
    RUN(test_config_refusals);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) printf("    could not remove %s\n", g_dir);
    return h_end();
}
