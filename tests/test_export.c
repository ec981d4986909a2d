/* test_export.c — collage_model_export_safetensors: every element of the slab lands where
 * GPT2LMHeadModel expects it. The weights are their own slab index (fp32) or arbitrary bits (bf16), the
 * file is parsed here (header length, JSON entries, byte ranges) and each tensor's elements are checked
 * against this file's own table of llm.c's layout and Hugging Face's names and orientation; config.json
 * carries the shape; LLaMA's (LlamaForCausalLM) and BERT's (BertForMaskedLM) layouts write every element
 * once but the padding rows, fused matrices cut into their blocks, LLaMA's q and k reordered per head; bad
 * arguments name the problem and leave no file. The Python suite reads the same
 * files with numpy and runs them through a GPT-2 forward in torch (python/tests/test_export.py). */
#include "collage.h"
#include "collage_model.h"
#include "harness.h"
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

static char g_dir[256];

/* V 19 in 24 rows: the export drops 5 padding rows of wte. */
static collage_model_config micro(void) {
    return (collage_model_config){.family = COLLAGE_FAMILY_GPT2, .vocab_size = 19, .padded_vocab_size = 24,
                                  .max_seq_len = 8, .num_layers = 2, .num_heads = 2, .channels = 16};
}

/* One expected tensor: its Hugging Face name, the slab offset of its source matrix, the source's rows and
 * columns (llm.c), how many rows are written, and whether it is written transposed. */
typedef struct { char name[96]; size_t src, rows, cols, keep; int transpose; } want_t;

static int expected(const collage_model_config *c, want_t *w) {
    const size_t V = (size_t)c->vocab_size, Vp = (size_t)c->padded_vocab_size, T = (size_t)c->max_seq_len,
                 L = (size_t)c->num_layers, C = (size_t)c->channels;
    /* llm.c's order and per-layer shapes */
    static const char *const hf[12] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                       "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                       "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
    const size_t rows[12] = {C, C, 3 * C, 3 * C, C, C, C, C, 4 * C, 4 * C, C, C};
    const size_t cols[12] = {1, 1, C, 1, C, 1, 1, 1, C, 1, 4 * C, 1};
    size_t off[12], at = Vp * C + T * C;
    for (int k = 0; k < 12; k++) { off[k] = at; at += L * rows[k] * cols[k]; }
    int n = 0;
    w[n++] = (want_t){"transformer.wte.weight", 0, Vp, C, V, 0};
    w[n++] = (want_t){"transformer.wpe.weight", Vp * C, T, C, T, 0};
    for (size_t l = 0; l < L; l++)
        for (int k = 0; k < 12; k++) {
            want_t *e = &w[n++];
            snprintf(e->name, sizeof e->name, "transformer.h.%zu.%s", l, hf[k]);
            e->src = off[k] + l * rows[k] * cols[k];
            e->rows = e->keep = rows[k];
            e->cols = cols[k];
            e->transpose = cols[k] > 1; /* every matrix of a block is a Conv1D: (in, out) */
        }
    w[n++] = (want_t){"transformer.ln_f.weight", at, C, 1, C, 0};
    w[n++] = (want_t){"transformer.ln_f.bias", at + C, C, 1, C, 0};
    return n;
}

/* Check one format: bf16 = 0, weights = their slab index as float; 1, weights = the index's low 16 bits. */
static void check_export(int bf16) {
    collage_model_config c = micro();
    const size_t n = collage_model_num_params(&c), es = bf16 ? 2 : 4;
    void *params = malloc(n * es);
    for (size_t i = 0; i < n; i++) {
        if (bf16) ((uint16_t *)params)[i] = (uint16_t)i;
        else ((float *)params)[i] = (float)i;
    }
    char dir[300], path[400], err[512] = "";
    snprintf(dir, sizeof dir, "%s/%s", g_dir, bf16 ? "bf16" : "fp32");
    collage_status st = collage_model_export_safetensors(dir, &c, params, bf16, err, sizeof err);
    CHECK(st == COLLAGE_OK, "export: %s (%s)", collage_status_str(st), err);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    size_t len = 0;
    unsigned char *file = h_read_file(path, &len);
    CHECK(file && len > 8, "cannot read %s", path);
    if (!file || len <= 8) { free(params); free(file); return; }
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)file[i] << (8 * i);
    CHECK((8 + hl) % 8 == 0 && 8 + hl <= len, "header length %llu in %zu bytes", (unsigned long long)hl, len);
    char *hdr = (char *)file + 8;
    const unsigned char *data = file + 8 + hl;
    CHECK(strstr(hdr, "\"__metadata__\":{\"format\":\"pt\"") == hdr + 1, "metadata first, format pt");
    want_t w[64];
    const int nw = expected(&c, w);
    size_t end = 0, total = 0;
    for (int t = 0; t < nw; t++) {
        char key[160];
        snprintf(key, sizeof key, "\"%.96s\":{", w[t].name);
        const char *e = strstr(hdr, key);
        CHECK(e && e < hdr + hl, "%s is not in the header", w[t].name);
        if (!e) continue;
        const size_t r = w[t].transpose ? w[t].cols : w[t].keep, cc = w[t].transpose ? w[t].keep : w[t].cols;
        char want_dt[256];
        if (w[t].cols > 1) snprintf(want_dt, sizeof want_dt, "%s\"dtype\":\"%s\",\"shape\":[%zu,%zu],", key, bf16 ? "BF16" : "F32", r, cc);
        else snprintf(want_dt, sizeof want_dt, "%s\"dtype\":\"%s\",\"shape\":[%zu],", key, bf16 ? "BF16" : "F32", r);
        CHECK(strncmp(e, want_dt, strlen(want_dt)) == 0, "%s: %.120s", w[t].name, e);
        size_t a = 0, b = 0;
        const char *o = strstr(e, "\"data_offsets\":[");
        CHECK(o && sscanf(o, "\"data_offsets\":[%zu,%zu]", &a, &b) == 2, "%s: no data_offsets", w[t].name);
        CHECK(a == end && b - a == r * cc * es && 8 + hl + b <= len, "%s: bytes [%zu, %zu) after %zu", w[t].name, a, b, end);
        end = b;
        total += r * cc;
        int bad = 0;
        for (size_t i = 0; i < r && b <= len; i++)     /* as written: r rows of cc */
            for (size_t j = 0; j < cc; j++) {
                const size_t src = w[t].src + (w[t].transpose ? j * w[t].cols + i : i * w[t].cols + j);
                const unsigned char *p = data + a + (i * cc + j) * es;
                if (bf16) { uint16_t v; memcpy(&v, p, 2); bad += v != (uint16_t)src; }
                else { float v; memcpy(&v, p, 4); bad += v != (float)src; }
            }
        CHECK(bad == 0, "%s: %d elements not from where llm.c keeps them", w[t].name, bad);
    }
    CHECK(8 + hl + end == len, "the tensors end at %zu of %zu bytes", 8 + hl + end, len);
    CHECK(total == n - (size_t)(c.padded_vocab_size - c.vocab_size) * (size_t)c.channels, "%zu of %zu elements", total, n);
    free(file);
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *cfg = (char *)h_read_file(path, &len);
    CHECK(cfg && strstr(cfg, "\"architectures\": [\"GPT2LMHeadModel\"]") && strstr(cfg, "\"vocab_size\": 19,") &&
          strstr(cfg, "\"n_positions\": 8,") && strstr(cfg, "\"n_embd\": 16,") && strstr(cfg, "\"n_layer\": 2,") &&
          strstr(cfg, "\"n_head\": 2,") && strstr(cfg, bf16 ? "\"torch_dtype\": \"bfloat16\"" : "\"torch_dtype\": \"float32\""),
          "config.json: %s", cfg ? cfg : "(missing)");
    free(cfg);
    free(params);
}

static void test_safetensors_fp32(void) { check_export(0); }
static void test_safetensors_bf16(void) { check_export(1); }

/* A tensor's byte range in the data section from the header, or 0 where the name is missing. */
static int span_of(const char *hdr, size_t hl, const char *name, size_t *a, size_t *b) {
    char key[160];
    snprintf(key, sizeof key, "\"%.120s\":{", name);
    const char *e = strstr(hdr, key), *o = e ? strstr(e, "\"data_offsets\":[") : NULL;
    return e && e < hdr + hl && o && sscanf(o, "\"data_offsets\":[%zu,%zu]", a, b) == 2;
}

/* Exports c with weights = their slab index (fp32) into g_dir/sub and checks that every element of the
 * slab is written exactly once but `padding` of them (the embedding's padding rows). Returns the file
 * (*hl: its header's length) for the caller's own checks, NULL after a failure. */
static unsigned char *export_indexed(const collage_model_config *c, const char *sub, size_t padding, size_t *hl) {
    const size_t n = collage_model_num_params(c);
    float *params = malloc(n * sizeof *params);
    unsigned char *seen = calloc(n, 1), *file = NULL;
    for (size_t i = 0; i < n; i++) params[i] = (float)i;
    char dir[300], path[400], err[512] = "";
    snprintf(dir, sizeof dir, "%s/%s", g_dir, sub);
    CHECK(collage_model_export_safetensors(dir, c, params, 0, err, sizeof err) == COLLAGE_OK, "%s: export: %s", sub, err);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    size_t len = 0;
    file = h_read_file(path, &len);
    CHECK(file && len > 8, "cannot read %s", path);
    if (file && len > 8) {
        *hl = 0;
        for (int i = 0; i < 8; i++) *hl |= (size_t)file[i] << (8 * i);
        const float *data = (const float *)(const void *)(file + 8 + *hl); /* 8 + hl is a multiple of 8 */
        size_t bad = 0, missing = 0;
        for (size_t i = 0; i < (len - 8 - *hl) / 4; i++) {
            const size_t v = (size_t)data[i];
            bad += v >= n || seen[v];
            if (v < n) seen[v] = 1;
        }
        for (size_t i = 0; i < n; i++) missing += !seen[i];
        CHECK(bad == 0 && missing == padding, "%s: %zu elements written twice or from outside the slab, %zu not written "
              "(padding: %zu)", sub, bad, missing, padding);
    } else {
        free(file);
        file = NULL;
    }
    free(params);
    free(seen);
    return file;
}

/* config.json of g_dir/sub holds every string of want. */
static void config_has(const char *sub, const char *const *want, int n) {
    char path[400];
    size_t len;
    snprintf(path, sizeof path, "%s/%s/config.json", g_dir, sub);
    char *cfg = (char *)h_read_file(path, &len);
    for (int i = 0; i < n; i++) CHECK(cfg && strstr(cfg, want[i]), "%s/config.json lacks %s", sub, want[i]);
    free(cfg);
}

/* LLaMA (LlamaForCausalLM's layout): q's rows within a head are the even rows then the odd ones of wqkv's
 * q block (pairs to halves); k likewise from its block; v, gate and up are their blocks in order; the
 * output only when untied. python/tests/test_export.py runs the file through LlamaForCausalLM's forward. */
static void check_llama(int untied) {
    collage_model_config c;
    CHECK(collage_model_preset("llama-tiny", &c) == COLLAGE_OK, "llama-tiny");
    collage_model_config_set_vocab(&c, 200);
    c.untied = untied;
    const size_t C = (size_t)c.channels, hs = C / (size_t)c.num_heads, kv = (size_t)c.num_kv_heads * hs;
    const size_t H = (size_t)c.hidden_dim, Vp = (size_t)c.padded_vocab_size;
    size_t hl = 0, a, b;
    unsigned char *file = export_indexed(&c, untied ? "llama-untied" : "llama", (Vp - 200) * C * (untied ? 2 : 1), &hl);
    if (!file) return;
    const char *hdr = (const char *)file + 8;
    const float *data = (const float *)(const void *)(file + 8 + hl);
    const size_t wqkv = Vp * C + (size_t)c.num_layers * C; /* layer 0's wqkv: after emb and attention_norm */
    CHECK(span_of(hdr, hl, "model.layers.0.self_attn.q_proj.weight", &a, &b) && data[a / 4 + 1 * C] == (float)(wqkv + 2 * C) &&
              data[a / 4 + (hs / 2) * C] == (float)(wqkv + 1 * C) && data[a / 4 + (hs + 1) * C] == (float)(wqkv + (hs + 2) * C),
          "q_proj: rows of a head are wqkv's even rows, then its odd rows");
    CHECK(span_of(hdr, hl, "model.layers.0.self_attn.k_proj.weight", &a, &b) && b - a == kv * C * 4 &&
              data[a / 4 + (hs / 2) * C] == (float)(wqkv + (C + 1) * C), "k_proj: from wqkv's k block, pairs to halves");
    CHECK(span_of(hdr, hl, "model.layers.0.self_attn.v_proj.weight", &a, &b) && data[a / 4 + 1] == (float)(wqkv + (C + kv) * C + 1),
          "v_proj: wqkv's v block in order");
    CHECK(span_of(hdr, hl, "model.layers.0.mlp.up_proj.weight", &a, &b) && b - a == H * C * 4, "up_proj: H rows");
    CHECK(span_of(hdr, hl, "lm_head.weight", &a, &b) == untied, "lm_head.weight only when untied");
    free(file);
    const char *want[] = {"\"architectures\": [\"LlamaForCausalLM\"]", "\"num_key_value_heads\": 2,",
                          untied ? "\"tie_word_embeddings\": false" : "\"tie_word_embeddings\": true"};
    config_has(untied ? "llama-untied" : "llama", want, 3);
}
static void test_llama_tied(void) { check_llama(0); }
static void test_llama_untied(void) { check_llama(1); }

/* BERT (BertForMaskedLM's layout): query, key and value (weights and biases) are qkv's blocks in order; the
 * output bias without its padding entries. python/tests/test_export.py runs the file through
 * BertForMaskedLM's forward. */
static void test_bert(void) {
    collage_model_config c;
    CHECK(collage_model_preset("bert-tiny", &c) == COLLAGE_OK, "bert-tiny");
    const size_t C = (size_t)c.channels, Vp = (size_t)c.padded_vocab_size, V = (size_t)c.vocab_size;
    const size_t L = (size_t)c.num_layers, T = (size_t)c.max_seq_len;
    size_t hl = 0, a, b;
    unsigned char *file = export_indexed(&c, "bert", (Vp - V) * (C + 1), &hl);
    if (!file) return;
    const char *hdr = (const char *)file + 8;
    const float *data = (const float *)(const void *)(file + 8 + hl);
    const size_t qkvw = Vp * C + T * C + 3 * C, qkvb = qkvw + L * 3 * C * C; /* layer 0's */
    CHECK(span_of(hdr, hl, "bert.encoder.layer.0.attention.self.key.weight", &a, &b) && b - a == C * C * 4 &&
              data[a / 4] == (float)(qkvw + C * C), "key: qkv's second block");
    CHECK(span_of(hdr, hl, "bert.encoder.layer.0.attention.self.value.bias", &a, &b) && b - a == C * 4 &&
              data[a / 4] == (float)(qkvb + 2 * C), "value's bias: the qkv bias's third block");
    CHECK(span_of(hdr, hl, "cls.predictions.bias", &a, &b) && b - a == V * 4, "cls.predictions.bias: vocab_size entries");
    free(file);
    const char *want[] = {"\"architectures\": [\"BertForMaskedLM\"]", "\"hidden_act\": \"gelu_new\"", "\"type_vocab_size\": 1,"};
    config_has("bert", want, 3);
}

static void test_bad_arguments(void) {
    collage_model_config c = micro();
    float *p = calloc(collage_model_num_params(&c), sizeof *p);
    char err[512] = "", dir[400];
    snprintf(dir, sizeof dir, "%s/no/such/parent", g_dir);
    CHECK(collage_model_export_safetensors(dir, &c, p, 0, err, sizeof err) == COLLAGE_ERR_IO && strstr(err, dir),
          "missing parent: %s", err);
    struct stat sb;
    CHECK(stat(dir, &sb) != 0, "a folder was made under a missing parent");
    CHECK(collage_model_export_safetensors(NULL, &c, p, 0, err, sizeof err) == COLLAGE_ERR_NULL, "NULL folder");
    CHECK(collage_model_export_safetensors(g_dir, &c, NULL, 0, err, sizeof err) == COLLAGE_ERR_NULL, "NULL weights");
    collage_model_config bad = c;
    bad.num_heads = 3; /* 16 channels do not split into 3 heads */
    snprintf(dir, sizeof dir, "%s/bad", g_dir);
    CHECK(collage_model_export_safetensors(dir, &bad, p, 0, err, sizeof err) != COLLAGE_OK && strstr(err, "export:"),
          "invalid config: %s", err);
    CHECK(stat(dir, &sb) != 0, "a folder was made for an invalid config");
    free(p);
}

int main(void) {
    printf("test_export\n");
    snprintf(g_dir, sizeof g_dir, "/tmp/collage_test_export_XXXXXX");
    if (!mkdtemp(g_dir)) { perror("mkdtemp"); return 1; }
    RUN(test_safetensors_fp32);
    RUN(test_safetensors_bf16);
    RUN(test_llama_tied);
    RUN(test_llama_untied);
    RUN(test_bert);
    RUN(test_bad_arguments);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) printf("    could not remove %s\n", g_dir);
    return h_end();
}
