/* export.c — a model's weights in another program's layout: the safetensors file (a u64 little-endian
 * header length, a JSON header, the tensors) and config.json, through the family's export table
 * (model.h collage_export_layout). The table says which tensor goes where under which name; this file
 * expands the per-layer entries, cuts the slices, transposes where asked and writes both files
 * atomically. */
#include "internal.h"
#include "model.h"
#include <errno.h>
#include <stdarg.h>
#include <sys/stat.h>

typedef struct { char *p; size_t len, cap; int oom; } sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    for (int tries = 0; tries < 2 && !b->oom; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (k < 0) { b->oom = 1; return; }
        if (b->p && b->len + (size_t)k < b->cap) { b->len += (size_t)k; return; }
        size_t cap = (b->cap + (size_t)k + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = 1; return; }
        b->p = p;
        b->cap = cap;
    }
}

static int layered(const collage_export_tensor *e) { return strstr(e->name, "%d") != NULL; }

/* Entry e of layout L for layer l (0 where e is not per layer) into *o; 0 when the tensor's shape does not
 * fit. */
static int cut(collage_export_slice *o, const collage_export_layout *L, const collage_export_tensor *e, const collage_tensor_info *ti,
               int l, int layers, const collage_model_config *cfg) {
    const int d0 = layered(e); /* the layer dimension, if any, comes first */
    if (ti->ndim > d0 + 2 || ti->ndim <= d0 || (d0 && ti->shape[0] != (size_t)layers)) return 0;
    snprintf(o->name, sizeof o->name, e->name, l);
    o->rows = ti->shape[d0];
    o->cols = ti->ndim > d0 + 1 ? ti->shape[d0 + 1] : 1;
    o->src = ti->offset + (size_t)l * o->rows * o->cols;
    if (e->vocab_rows && (size_t)cfg->vocab_size < o->rows) o->rows = (size_t)cfg->vocab_size;
    if (e->part) {
        size_t r0 = 0, nr = 0;
        if (!L->rows) return 0;
        L->rows(cfg, e->part, &r0, &nr);
        if (nr == 0 || r0 + nr > o->rows) return 0;
        o->src += r0 * o->cols;
        o->rows = nr;
    }
    o->rope_hs = e->rope ? (size_t)(cfg->channels / cfg->num_heads) : 0;
    if (o->rope_hs && (o->rope_hs % 2 || o->rows % o->rope_hs || e->transpose)) return 0;
    o->transpose = e->transpose;
    o->ndim = ti->ndim - d0 > 1 ? 2 : 1;
    return 1;
}

collage_export_slice *collage__export_expand(const collage_export_layout *L, const collage_model_config *cfg, size_t es, int *n, char *err,
                       size_t cap) {
    collage_tensor_info t[COLLAGE_MODEL_MAX_TENSORS];
    const int nt = collage_model_tensors(cfg, t, COLLAGE_MODEL_MAX_TENSORS);
    int layers = 0, first = -1, k = 0, ok = 1;
    for (int i = 0; i < L->n_tensors; i++) {
        if (L->tensors[i].optional && L->tensors[i].tensor >= nt) continue; /* not in this configuration */
        if (L->tensors[i].tensor < 0 || L->tensors[i].tensor >= nt) {
            collage__fail(err, cap, COLLAGE_ERR_ARG, "%s: entry '%s' names tensor %d of %d", L->what, L->tensors[i].name,
                          L->tensors[i].tensor, nt);
            return NULL;
        }
        if (layered(&L->tensors[i]) && first < 0) { first = i; layers = (int)t[L->tensors[i].tensor].shape[0]; }
    }
    collage_export_slice *x = calloc((size_t)L->n_tensors * (size_t)(layers > 1 ? layers : 1), sizeof *x);
    if (!x) { collage__fail(err, cap, COLLAGE_ERR_NOMEM, "out of memory"); return NULL; }
    for (int i = 0; ok && i < L->n_tensors; i++) {
        const collage_export_tensor *e = &L->tensors[i];
        if (e->optional && e->tensor >= nt) continue;
        if (!layered(e)) ok = cut(&x[k++], L, e, &t[e->tensor], 0, layers, cfg);
        else if (i == first)
            for (int l = 0; l < layers; l++)
                for (int j = i; ok && j < L->n_tensors; j++)
                    if (layered(&L->tensors[j])) ok = cut(&x[k++], L, &L->tensors[j], &t[L->tensors[j].tensor], l, layers, cfg);
        if (!ok) collage__fail(err, cap, COLLAGE_ERR_ARG, "%s: the shape of tensor '%s' does not fit the layout", L->what,
                               t[e->tensor].name);
    }
    size_t at = 0;
    for (int i = 0; i < k; i++) {
        x[i].begin = at;
        x[i].end = at += x[i].rows * x[i].cols * es;
    }
    *n = k;
    if (!ok) { free(x); return NULL; }
    return x;
}

/* The JSON header, padded with spaces so that the data start at a multiple of 8 bytes. */
static int header_json(sbuf *b, const collage_export_slice *x, int n, int bf16) {
    sb_printf(b, "{\"__metadata__\":{\"format\":\"pt\",\"producer\":\"collage %s\"}", collage_version());
    for (int i = 0; i < n; i++) {
        const size_t r = x[i].transpose ? x[i].cols : x[i].rows, c = x[i].transpose ? x[i].rows : x[i].cols;
        sb_printf(b, ",\"%s\":{\"dtype\":\"%s\",\"shape\":", x[i].name, bf16 ? "BF16" : "F32");
        if (x[i].ndim == 2) sb_printf(b, "[%zu,%zu]", r, c);
        else sb_printf(b, "[%zu]", r * c);
        sb_printf(b, ",\"data_offsets\":[%zu,%zu]}", x[i].begin, x[i].end);
    }
    sb_printf(b, "}");
    while (!b->oom && (8 + b->len) % 8) sb_printf(b, " ");
    return !b->oom;
}

size_t collage__rope_row(size_t r, size_t hs) {
    const size_t h = r / hs, j = r % hs, half = hs / 2;
    return h * hs + (j < half ? 2 * j : 2 * (j - half) + 1);
}

/* The elements of x in the order the file holds them: row by row, a transposed matrix through a
 * buffer of one written row. */
static int write_tensor(FILE *f, const unsigned char *slab, size_t es, const collage_export_slice *x, unsigned char *row) {
    const unsigned char *src = slab + x->src * es;
    if (x->rope_hs) {
        for (size_t r = 0; r < x->rows; r++)
            if (fwrite(src + collage__rope_row(r, x->rope_hs) * x->cols * es, es, x->cols, f) != x->cols) return 0;
        return 1;
    }
    if (!x->transpose) return fwrite(src, es, x->rows * x->cols, f) == x->rows * x->cols;
    for (size_t j = 0; j < x->cols; j++) {
        for (size_t i = 0; i < x->rows; i++) memcpy(row + i * es, src + (i * x->cols + j) * es, es);
        if (fwrite(row, es, x->rows, f) != x->rows) return 0;
    }
    return 1;
}

static collage_status write_safetensors(const char *path, const collage_export_slice *x, int n, const void *params, int bf16,
                                        char *err, size_t cap) {
    const size_t es = bf16 ? 2 : 4;
    sbuf h = {0};
    size_t longest = 1;
    for (int i = 0; i < n; i++) longest = x[i].rows > longest ? x[i].rows : longest;
    unsigned char *row = malloc(longest * es);
    if (!row || !header_json(&h, x, n, bf16)) {
        free(row); free(h.p);
        return collage__fail(err, cap, COLLAGE_ERR_NOMEM, "out of memory writing '%s'", path);
    }
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)h.len >> (8 * i)); /* little-endian */
    collage_atomic_file af;
    collage_status st = collage_atomic_open(&af, path, err, cap);
    int ok = st == COLLAGE_OK && fwrite(len, 1, 8, af.f) == 8 && fwrite(h.p, 1, h.len, af.f) == h.len;
    for (int i = 0; ok && i < n; i++) ok = write_tensor(af.f, params, es, &x[i], row);
    free(row);
    free(h.p);
    if (st != COLLAGE_OK) return st;
    if (!ok) {
        st = collage__fail(err, cap, COLLAGE_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
        collage_atomic_abort(&af);
        return st;
    }
    return collage_atomic_commit(&af, err, cap);
}

static collage_status write_text(const char *path, const char *text, char *err, size_t cap) {
    collage_atomic_file af;
    collage_status st = collage_atomic_open(&af, path, err, cap);
    if (st != COLLAGE_OK) return st;
    if (fputs(text, af.f) == EOF) {
        st = collage__fail(err, cap, COLLAGE_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
        collage_atomic_abort(&af);
        return st;
    }
    return collage_atomic_commit(&af, err, cap);
}

collage_status collage_model_export_safetensors(const char *dir, const collage_model_config *cfg, const void *params,
                                                int bf16, char *err, size_t cap) {
    if (!dir || !cfg || !params) return collage__fail(err, cap, COLLAGE_ERR_NULL, "export: no folder, config or weights");
    const uint16_t one = 1;
    unsigned char little;
    memcpy(&little, &one, 1);
    if (!little) return collage__fail(err, cap, COLLAGE_ERR_UNSUPPORTED, "safetensors export needs a little-endian machine");
    char msg[256];
    collage_status st = collage_model_check(cfg, 0, 0, msg, sizeof msg);
    if (st != COLLAGE_OK) return collage__fail(err, cap, st, "export: %s", msg);
    const collage_model_family *fam = collage__model_family(cfg->family);
    if (!fam->hf) return collage__fail(err, cap, COLLAGE_ERR_UNSUPPORTED, "the %s family has no safetensors layout", fam->name);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return collage__fail(err, cap, COLLAGE_ERR_IO, "cannot create folder '%s': %s", dir, strerror(errno));
    int n = 0;
    collage_export_slice *x = collage__export_expand(fam->hf, cfg, bf16 ? 2 : 4, &n, err, cap);
    if (!x) return COLLAGE_ERR_ARG;
    size_t plen = strlen(dir) + 32;
    char *path = malloc(plen), *json = NULL;
    const char *dtype = bf16 ? "bfloat16" : "float32";
    const int jlen = fam->hf->config_json(cfg, dtype, NULL, 0);
    if (!path || jlen < 0 || !(json = malloc((size_t)jlen + 1))) {
        free(x); free(path);
        return collage__fail(err, cap, COLLAGE_ERR_NOMEM, "out of memory");
    }
    fam->hf->config_json(cfg, dtype, json, (size_t)jlen + 1);
    snprintf(path, plen, "%s/model.safetensors", dir);
    st = write_safetensors(path, x, n, params, bf16, err, cap);
    snprintf(path, plen, "%s/config.json", dir);
    if (st == COLLAGE_OK) st = write_text(path, json, err, cap);
    free(x); free(path); free(json);
    return st;
}
