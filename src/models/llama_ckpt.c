/* llama_ckpt.c — the LLaMA family's model file: llama2.c's legacy fp32 format (what its export.py
 * writes with --version 0 and its run.c reads), validated on read with messages that name the file,
 * written atomically. The layout (docs/llama.md): seven little-endian int32 — dim, hidden_dim,
 * n_layers, n_heads, n_kv_heads, vocab_size (negative: a separate output matrix follows), seq_len —
 * then float32 tensors: the token embedding, the attention norms, wq, wk, wv, wo, the MLP norms, w1,
 * w2, w3, the final norm, the rotary tables (cos, then sin, seq_len × head_size/2 each: written, skipped
 * on read, as run.c skips them), and the output matrix when untied. The slab keeps wq, wk, wv (and w1,
 * w3) of a layer side by side and pads the embedding and output to padded_vocab_size rows (zero in a
 * loaded model), so the file's tensors are runs of it. */
#include "internal.h"
#include "llama_plan.h"
#include <errno.h>
#include <limits.h>
#include <sys/stat.h>

#define HEADER_BYTES (7 * 4)
#define VERSIONED_MAGIC 0x616b3432 /* "ak42": llama2.c's versioned exports (version 1 and 2), not read */
#define RUN_COS SIZE_MAX           /* a run of the rotary tables, not of the slab */
#define RUN_SIN (SIZE_MAX - 1)
#define CHUNK ((size_t)1 << 16)    /* floats converted at a time */

typedef struct { size_t off, count; } file_run;

/* The file's tensors after the header, in order, as runs of the slab of c (out NULL: count them). */
static size_t file_runs(const collage_model_config *c, file_run *out) {
    collage_tensor_info t[LT_COUNT];
    llama_tensors(c, t, LT_COUNT);
    const size_t L = (size_t)c->num_layers, C = (size_t)c->channels, H = (size_t)c->hidden_dim, VC = (size_t)c->vocab_size * C;
    const size_t hs = C / (size_t)c->num_heads, kv = (size_t)c->num_kv_heads * hs;
    const size_t ql = t[LT_WQKV].count / L, hl = t[LT_W13].count / L, half = (size_t)c->max_seq_len * hs / 2;
    size_t n = 0;
#define PUT(o, k) do { if (out) out[n] = (file_run){(o), (k)}; n++; } while (0)
    PUT(t[LT_EMB].offset, VC); /* the V real rows */
    PUT(t[LT_ATTN_NORM].offset, t[LT_ATTN_NORM].count);
    for (size_t l = 0; l < L; l++) PUT(t[LT_WQKV].offset + l * ql, C * C);                 /* wq */
    for (size_t l = 0; l < L; l++) PUT(t[LT_WQKV].offset + l * ql + C * C, kv * C);        /* wk */
    for (size_t l = 0; l < L; l++) PUT(t[LT_WQKV].offset + l * ql + (C + kv) * C, kv * C); /* wv */
    PUT(t[LT_WO].offset, t[LT_WO].count);
    PUT(t[LT_FFN_NORM].offset, t[LT_FFN_NORM].count);
    for (size_t l = 0; l < L; l++) PUT(t[LT_W13].offset + l * hl, H * C);                  /* w1 */
    PUT(t[LT_W2].offset, t[LT_W2].count);
    for (size_t l = 0; l < L; l++) PUT(t[LT_W13].offset + l * hl + H * C, H * C);          /* w3 */
    PUT(t[LT_NORM].offset, t[LT_NORM].count);
    PUT(RUN_COS, half);
    PUT(RUN_SIN, half);
    if (c->untied) PUT(t[LT_OUT].offset, VC);
#undef PUT
    return n;
}

/* Floats after the header: the slab less its padding rows, plus the rotary tables. */
static size_t file_floats(const collage_model_config *c) {
    collage_tensor_info t[LT_COUNT];
    const int nt = llama_tensors(c, t, LT_COUNT);
    const size_t pad = (size_t)(c->padded_vocab_size - c->vocab_size) * (size_t)c->channels;
    return t[nt - 1].offset + t[nt - 1].count - pad * (c->untied ? 2 : 1) +
           (size_t)c->max_seq_len * (size_t)(c->channels / c->num_heads);
}

static void header_of(const collage_model_config *c, int32_t h[7]) {
    h[0] = c->channels; h[1] = c->hidden_dim; h[2] = c->num_layers; h[3] = c->num_heads;
    h[4] = c->num_kv_heads; h[5] = c->untied ? -c->vocab_size : c->vocab_size; h[6] = c->max_seq_len;
}

static collage_model_config config_of(const int32_t h[7]) {
    collage_model_config c = {.family = COLLAGE_FAMILY_LLAMA, .max_seq_len = h[6], .num_layers = h[2],
                              .num_heads = h[3], .num_kv_heads = h[4], .channels = h[0], .hidden_dim = h[1],
                              .untied = h[5] < 0, .norm_eps = 1e-5, .rope_theta = 10000.0};
    collage_model_config_set_vocab(&c, h[5] == INT_MIN ? 0 : h[5] < 0 ? -h[5] : h[5]);
    return c;
}

int llama_ckpt_probe(const unsigned char *head, size_t len) {
    int32_t h[7];
    if (len >= 4) {
        memcpy(h, head, 4);
        if (h[0] == VERSIONED_MAGIC) return 1; /* ours to refuse with a precise message */
    }
    if (len < HEADER_BYTES) return 0;
    memcpy(h, head, HEADER_BYTES);
    return h[0] > 0 && h[0] <= (1 << 15) && h[1] > 0 && h[1] <= (1 << 17) && h[2] > 0 && h[2] <= 4096 && h[3] > 0 &&
           h[0] % h[3] == 0 && h[4] > 0 && h[3] % h[4] == 0 && h[5] != 0 && h[5] >= -(1 << 20) && h[5] <= (1 << 20) &&
           h[6] > 0 && h[6] <= (1 << 20);
}

/* One run of floats from the slab (float or bf16 widened) or the rotary tables into f. */
static int write_run(FILE *f, const file_run *r, const void *params, int bf16, const float *cs, size_t half,
                     float *buf) {
    if (r->off == RUN_COS || r->off == RUN_SIN) {
        for (size_t i = 0; i < half; i++) buf[i] = cs[2 * i + (r->off == RUN_SIN)];
        return fwrite(buf, sizeof(float), half, f) == half ? 0 : -1;
    }
    if (!bf16) return fwrite((const float *)params + r->off, sizeof(float), r->count, f) == r->count ? 0 : -1;
    for (size_t at = 0; at < r->count; at += CHUNK) {
        const size_t k = r->count - at < CHUNK ? r->count - at : CHUNK;
        collage_bf16_to_f32_row(buf, (const collage_bf16 *)params + r->off + at, k);
        if (fwrite(buf, sizeof(float), k, f) != k) return -1;
    }
    return 0;
}

collage_status llama_ckpt_save(const char *path, const collage_model_config *cfg, const void *params, int bf16,
                               char *err, size_t cap) {
    char msg[256];
    if (collage_model_check(cfg, 0, 0, msg, sizeof msg) != COLLAGE_OK)
        return collage__fail(err, cap, COLLAGE_ERR_ARG, "cannot write '%s': %s", path, msg);
    if (cfg->norm_eps != 1e-5 || cfg->rope_theta != 10000.0)
        return collage__fail(err, cap, COLLAGE_ERR_ARG,
                             "cannot write '%s' in llama2.c's format: it holds no RMSNorm eps or rotary theta, and "
                             "llama2.c's run.c takes 1e-5 and 10000 (this model: %g and %g)", path, cfg->norm_eps,
                             cfg->rope_theta);
    const size_t nr = file_runs(cfg, NULL), hs = (size_t)(cfg->channels / cfg->num_heads);
    const size_t half = (size_t)cfg->max_seq_len * hs / 2;
    file_run *runs = malloc(nr * sizeof *runs);
    float *cs = malloc((size_t)cfg->max_seq_len * hs * sizeof(float));
    float *buf = malloc((half > CHUNK ? half : CHUNK) * sizeof(float));
    collage_status st = runs && cs && buf ? COLLAGE_OK : COLLAGE_ERR_NOMEM;
    collage_atomic_file af;
    if (st == COLLAGE_OK) st = collage_atomic_open(&af, path, err, cap);
    else collage__fail(err, cap, st, "out of memory writing '%s'", path);
    if (st == COLLAGE_OK) {
        int32_t h[7];
        header_of(cfg, h);
        file_runs(cfg, runs);
        nn_rope_table_f32(cs, cfg->max_seq_len, (int)hs, cfg->rope_theta);
        int bad = fwrite(h, sizeof h, 1, af.f) != 1;
        for (size_t i = 0; i < nr && !bad; i++) bad = write_run(af.f, &runs[i], params, bf16, cs, half, buf);
        st = collage__atomic_finish(&af, !bad, err, cap);
    }
    free(runs); free(cs); free(buf);
    return st;
}

/* Open and validate the file; on success *fp is positioned after the header. */
static collage_status open_file(const char *path, FILE **fp, collage_model_config *cfg, char *err, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return collage__fail(err, cap, COLLAGE_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    int32_t h[7] = {0};
    const size_t got = fread(h, 1, sizeof h, f);
    collage_status st = COLLAGE_OK;
    char msg[256];
    collage_model_config c = config_of(h);
    struct stat sb;
    if (got >= 4 && h[0] == VERSIONED_MAGIC)
        st = collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' is a llama2.c versioned export (magic \"ak42\"); collage "
                           "reads the legacy fp32 format: export it with llama2.c's export.py --version 0", path);
    else if (got < sizeof h)
        st = collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' is too short for a llama2.c model header (%d bytes)", path,
                           HEADER_BYTES);
    else if (collage_model_check(&c, 0, 0, msg, sizeof msg) != COLLAGE_OK)
        st = collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' describes an invalid llama model: %s", path, msg);
    else if (fstat(fileno(f), &sb) == 0 && (size_t)sb.st_size != HEADER_BYTES + 4 * file_floats(&c))
        st = collage__fail(err, cap, COLLAGE_ERR_FORMAT,
                           "'%s' has %lld bytes but its header (dim %d, hidden_dim %d, n_layers %d, n_heads %d, "
                           "n_kv_heads %d, vocab_size %d, seq_len %d) describes %zu (%s)", path, (long long)sb.st_size,
                           h[0], h[1], h[2], h[3], h[4], h[5], h[6], HEADER_BYTES + 4 * file_floats(&c),
                           (size_t)sb.st_size < HEADER_BYTES + 4 * file_floats(&c) ? "truncated" : "trailing data");
    if (st != COLLAGE_OK) {
        fclose(f);
        return st;
    }
    if (cfg) *cfg = c;
    *fp = f;
    return COLLAGE_OK;
}

collage_status llama_ckpt_read_header(const char *path, collage_model_config *cfg, int *bf16, char *err, size_t cap) {
    FILE *f;
    collage_status st = open_file(path, &f, cfg, err, cap);
    if (st != COLLAGE_OK) return st;
    fclose(f);
    if (bf16) *bf16 = 0;
    return COLLAGE_OK;
}

static int same_model(const collage_model_config *a, const collage_model_config *b) {
    return a->vocab_size == b->vocab_size && a->max_seq_len == b->max_seq_len && a->num_layers == b->num_layers &&
           a->num_heads == b->num_heads && a->num_kv_heads == b->num_kv_heads && a->channels == b->channels &&
           a->hidden_dim == b->hidden_dim && a->untied == b->untied && a->norm_eps == b->norm_eps &&
           a->rope_theta == b->rope_theta;
}

/* The runs of the file into params (float, or bf16 by RN); the rotary tables skipped. */
static collage_status read_runs(FILE *f, const char *path, const file_run *runs, size_t nr, void *params, int want_bf16,
                                float *buf, char *err, size_t cap) {
    for (size_t i = 0; i < nr; i++) {
        const file_run *r = &runs[i];
        if (r->off == RUN_COS || r->off == RUN_SIN) {
            if (fseek(f, (long)(r->count * sizeof(float)), SEEK_CUR) == 0) continue;
            return collage__fail(err, cap, COLLAGE_ERR_IO, "cannot skip the rotary tables of '%s': %s", path,
                                 strerror(errno));
        }
        for (size_t at = 0; at < r->count; at += CHUNK) {
            const size_t k = r->count - at < CHUNK ? r->count - at : CHUNK;
            float *dst = want_bf16 ? buf : (float *)params + r->off + at;
            if (fread(dst, sizeof(float), k, f) != k)
                return collage__fail(err, cap, COLLAGE_ERR_IO, "read error in '%s' at parameter %zu", path, r->off + at);
            if (want_bf16) collage_bf16_from_f32_row((collage_bf16 *)params + r->off + at, buf, k);
        }
    }
    return COLLAGE_OK;
}

/* The embedding's (and the output's) rows from vocab_size to padded_vocab_size: 0. */
static void zero_padding(const collage_model_config *c, void *params, int bf16) {
    collage_tensor_info t[LT_COUNT];
    const int nt = llama_tensors(c, t, LT_COUNT), es = bf16 ? 2 : 4;
    const size_t pad = (size_t)(c->padded_vocab_size - c->vocab_size) * (size_t)c->channels;
    for (int k = 0; k < nt; k++)
        if (k == LT_EMB || k == LT_OUT)
            memset((char *)params + (t[k].offset + t[k].count - pad) * (size_t)es, 0, pad * (size_t)es);
}

collage_status llama_ckpt_load(const char *path, const collage_model_config *cfg, void *params, int want_bf16,
                               char *err, size_t cap) {
    FILE *f;
    collage_model_config c;
    collage_status st = open_file(path, &f, &c, err, cap);
    if (st != COLLAGE_OK) return st;
    if (!same_model(&c, cfg)) {
        fclose(f);
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT,
                             "'%s' holds a llama of dim %d, hidden %d, %d layers, %d heads (%d kv), vocabulary %d%s, "
                             "context %d; expected dim %d, hidden %d, %d layers, %d heads (%d kv), vocabulary %d%s, "
                             "context %d, eps 1e-5 and theta 10000", path, c.channels, c.hidden_dim, c.num_layers,
                             c.num_heads, c.num_kv_heads, c.vocab_size, c.untied ? " untied" : "", c.max_seq_len,
                             cfg->channels, cfg->hidden_dim, cfg->num_layers, cfg->num_heads, cfg->num_kv_heads,
                             cfg->vocab_size, cfg->untied ? " untied" : "", cfg->max_seq_len);
    }
    const size_t nr = file_runs(cfg, NULL);
    file_run *runs = malloc(nr * sizeof *runs);
    float *buf = malloc(CHUNK * sizeof(float));
    if (!runs || !buf) st = collage__fail(err, cap, COLLAGE_ERR_NOMEM, "out of memory reading '%s'", path);
    else {
        file_runs(cfg, runs);
        st = read_runs(f, path, runs, nr, params, want_bf16, buf, err, cap);
        zero_padding(cfg, params, want_bf16);
    }
    free(runs); free(buf);
    fclose(f);
    return st;
}
