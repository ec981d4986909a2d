/* import.c — a folder transformers' save_pretrained wrote, read through the family's export table
 * (model.h collage_export_layout) run backwards: config.json's keys mapped to collage's config by the
 * layout's key table and from_hf, every tensor the table names found by name in model.safetensors (or
 * the shards model.safetensors.index.json lists), checked for dtype and shape and put back into the slab
 * with the export's transposes and row orders undone; a tensor the class ties must equal its twin. */
#include "internal.h"
#include "hf_json.h"
#include "model.h"
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <sys/stat.h>

#define MAX_HEADER ((uint64_t)1 << 27) /* safetensors' own readers refuse headers past 100 MB */
#define MAX_SHARDS 256

/* ---------------------------------------------------------------- config.json */
static const collage_export_layout *layout_of(const char *model_type) {
    for (int f = 0; f < COLLAGE_FAMILY_COUNT; f++) {
        const collage_export_layout *L = collage__model_family((collage_family)f)->hf;
        if (L && L->model_type && !strcmp(L->model_type, model_type)) return L;
    }
    return NULL;
}

/* One key of the table into h: its value (or the default) read and checked. */
static collage_status read_key(hj_span obj, const collage_hf_key *k, collage_hf_config *h, const char *path, char *err,
                               size_t cap) {
    hj_span v;
    char t[64], want[64];
    if (!hj_get(obj, k->key, &v)) {
        if (!k->dflt) return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' has no %s", path, k->key);
        if (!k->dflt[0]) return COLLAGE_OK;
        v = (hj_span){k->dflt, k->dflt + strlen(k->dflt)};
    }
    const char kind = hj_kind(v);
    double x = 0;
    if (k->kind == COLLAGE_HF_FIXED) {
        const hj_span f = {k->fixed, k->fixed + strlen(k->fixed)};
        double y;
        const int same = kind == 'n' ? hj_kind(f) == 'n' && hj_number(v, &x) && hj_number(f, &y) && x == y
                       : kind == '"' ? hj_string(v, t, sizeof t) && hj_string(f, want, sizeof want) && !strcmp(t, want)
                                     : kind == hj_kind(f);
        if (same) return COLLAGE_OK;
        return collage__fail(err, cap, COLLAGE_ERR_UNSUPPORTED, "'%s': %s is %s; %s", path, k->key, hj_text(v, t, sizeof t),
                             k->why);
    }
    int *iv = (int *)((char *)h + k->field);
    if (k->kind == COLLAGE_HF_TIED) {
        if (kind != 't' && kind != 'f')
            return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s': %s is %s, not true or false", path, k->key, hj_text(v, t, sizeof t));
        *iv = kind == 'f';
        return COLLAGE_OK;
    }
    if (kind == 'z' && k->kind == COLLAGE_HF_INT && k->dflt && !strcmp(k->dflt, "null")) { *iv = 0; return COLLAGE_OK; }
    const int ok = hj_number(v, &x) && isfinite(x) && x > 0 && (k->kind == COLLAGE_HF_REAL || (x == floor(x) && x <= 1 << 30));
    if (!ok)
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s': %s is %s, not a positive %s", path, k->key,
                             hj_text(v, t, sizeof t), k->kind == COLLAGE_HF_REAL ? "finite number" : "integer");
    if (k->kind == COLLAGE_HF_REAL) *(double *)((char *)h + k->field) = x;
    else *iv = (int)x;
    return COLLAGE_OK;
}

/* model_type and architectures: the layout that reads this folder, or a refusal naming what it holds. */
static collage_status which_layout(hj_span obj, const char *path, const collage_export_layout **out, char *err, size_t cap) {
    hj_span v, it, e;
    char mt[64] = "", a[128];
    if (!hj_get(obj, "model_type", &v) || !hj_string(v, mt, sizeof mt))
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' has no model_type string", path);
    if (!strcmp(mt, "roberta"))
        return collage__fail(err, cap, COLLAGE_ERR_UNSUPPORTED,
                             "'%s': model_type is \"roberta\"; RoBERTa numbers positions from pad_token_id + 1 and skips "
                             "its padding token, which collage's BERT (positions 0 … T-1, no padding token) does not compute",
                             path);
    const collage_export_layout *L = layout_of(mt);
    if (!L)
        return collage__fail(err, cap, COLLAGE_ERR_UNSUPPORTED, "'%s': model_type is \"%s\"; collage reads gpt2, llama and bert",
                             path, mt);
    if (hj_get(obj, "architectures", &v) && hj_kind(v) != 'z') {
        int found = 0, r;
        if (!hj_enter(v, '[', &it)) return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s': architectures is not a list", path);
        while ((r = hj_element(&it, &e)) == 1) found |= hj_string(e, a, sizeof a) && !strcmp(a, L->arch);
        if (!found)
            return collage__fail(err, cap, COLLAGE_ERR_UNSUPPORTED, "'%s': architectures is %s; collage reads %s's tensors", path,
                                 hj_text(v, a, sizeof a), L->arch);
    }
    *out = L;
    return COLLAGE_OK;
}

static collage_status parse_config(const char *text, size_t len, const char *path, collage_model_config *cfg, char *err,
                                   size_t cap) {
    hj_span s = {text, text + len}, obj, rest;
    if (!hj_value(&s, &obj) || hj_kind(obj) != '{' || hj_value(&s, &rest))
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' is not a JSON object", path);
    const collage_export_layout *L = NULL;
    collage_status st = which_layout(obj, path, &L, err, cap);
    collage_hf_config h = {0};
    for (int i = 0; st == COLLAGE_OK && i < L->n_keys; i++) st = read_key(obj, &L->keys[i], &h, path, err, cap);
    if (st != COLLAGE_OK) return st;
    char why[512], msg[256];
    collage_model_config c = {0};
    if (!L->from_hf(&h, &c, why, sizeof why)) return collage__fail(err, cap, COLLAGE_ERR_UNSUPPORTED, "'%s': %s", path, why);
    const collage_model_family *fam = collage__model_family(c.family);
    if (h.vocab <= fam->added_tokens)
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s': vocab_size %d leaves no room for the text tokens", path, h.vocab);
    collage_model_config_set_vocab(&c, h.vocab - fam->added_tokens);
    if ((st = collage_model_check(&c, 0, 0, msg, sizeof msg)) != COLLAGE_OK)
        return collage__fail(err, cap, st, "'%s': collage cannot build this model: %s", path, msg);
    *cfg = c;
    return COLLAGE_OK;
}

/* ---------------------------------------------------------------- the safetensors files */
typedef struct {
    char name[256];
    int bf16, ndim, file, used;
    size_t shape[2];
    uint64_t begin, end; /* bytes from the file's start */
} sf_entry;

typedef struct {
    char files[MAX_SHARDS][4096];
    int nfiles;
    sf_entry *e;
    int n, cap;
} sf_set;

static int set_add(sf_set *S, const sf_entry *x) {
    if (S->n == S->cap) {
        const int c = S->cap ? 2 * S->cap : 256;
        sf_entry *p = realloc(S->e, (size_t)c * sizeof *p);
        if (!p) return 0;
        S->e = p;
        S->cap = c;
    }
    S->e[S->n++] = *x;
    return 1;
}

static sf_entry *set_find(sf_set *S, const char *name) {
    for (int i = 0; i < S->n; i++)
        if (!strcmp(S->e[i].name, name)) return &S->e[i];
    return NULL;
}

/* One entry of a safetensors header: its dtype, shape and byte range, checked against the data size. */
static collage_status header_entry(const char *path, const char *name, hj_span v, uint64_t base, uint64_t data, sf_entry *x,
                                   char *err, size_t cap) {
    hj_span d, sh, off, it, e;
    char dt[16] = "";
    double o[2] = {-1, -1}, dim;
    snprintf(x->name, sizeof x->name, "%s", name);
    if (!hj_get(v, "dtype", &d) || !hj_string(d, dt, sizeof dt) || !hj_get(v, "shape", &sh) || !hj_enter(sh, '[', &it) ||
        !hj_get(v, "data_offsets", &off))
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s': the header entry of '%s' is damaged", path, name);
    if (strcmp(dt, "BF16") && strcmp(dt, "F32"))
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s': tensor '%s' is %s; collage reads BF16 and F32", path, name, dt);
    x->bf16 = !strcmp(dt, "BF16");
    size_t numel = 1;
    int r;
    for (x->ndim = 0; (r = hj_element(&it, &e)) == 1; x->ndim++) {
        if (!hj_number(e, &dim) || dim < 0 || dim != floor(dim) || dim > 1e12 || x->ndim >= 2)
            return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s': tensor '%s' has a shape %s collage has no tensor of", path,
                                 name, hj_text(sh, dt, sizeof dt));
        x->shape[x->ndim] = (size_t)dim;
        numel *= (size_t)dim;
    }
    int k = 0;
    if (hj_enter(off, '[', &it))
        while (k < 2 && hj_element(&it, &e) == 1 && hj_number(e, &o[k]) && o[k] >= 0 && o[k] == floor(o[k])) k++;
    if (r < 0 || k != 2 || o[0] > o[1] || o[1] > (double)data || (uint64_t)(o[1] - o[0]) != numel * (x->bf16 ? 2u : 4u))
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s': the data_offsets of '%s' do not fit its shape and dtype, or run past the file",
                             path, name);
    x->begin = base + (uint64_t)o[0];
    x->end = base + (uint64_t)o[1];
    return COLLAGE_OK;
}

static collage_status read_header(FILE *f, const char *path, char **text, uint64_t *hlen, uint64_t *size, char *err, size_t cap) {
    unsigned char b[8];
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || fread(b, 1, 8, f) != 8)
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' is too short for a safetensors file", path);
    *size = (uint64_t)sb.st_size;
    *hlen = 0;
    for (int i = 7; i >= 0; i--) *hlen = *hlen << 8 | b[i];
    if (*hlen < 2 || *hlen > MAX_HEADER || 8 + *hlen > *size)
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s': a header of %llu bytes does not fit a file of %llu", path,
                             (unsigned long long)*hlen, (unsigned long long)*size);
    if (!(*text = malloc(*hlen))) return collage__fail(err, cap, COLLAGE_ERR_NOMEM, "out of memory reading '%s'", path);
    if (fread(*text, 1, *hlen, f) != *hlen)
        return collage__fail(err, cap, COLLAGE_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    return COLLAGE_OK;
}

/* The tensors of file number fi of S into S's list. */
static collage_status load_header(sf_set *S, int fi, char *err, size_t cap) {
    const char *path = S->files[fi];
    FILE *f = fopen(path, "rb");
    if (!f) return collage__fail(err, cap, COLLAGE_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    char *text = NULL, key[256];
    uint64_t hlen = 0, size = 0;
    collage_status st = read_header(f, path, &text, &hlen, &size, err, cap);
    fclose(f);
    hj_span s = {text, st == COLLAGE_OK ? text + hlen : text}, obj, it, v; /* text is NULL when the header was refused */
    if (st == COLLAGE_OK && (!hj_value(&s, &obj) || !hj_enter(obj, '{', &it)))
        st = collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s': the header is not a JSON object", path);
    int r = 1;
    while (st == COLLAGE_OK && (r = hj_member(&it, key, sizeof key, &v)) == 1) {
        if (!strcmp(key, "__metadata__")) continue;
        sf_entry x = {.file = fi};
        if (set_find(S, key)) st = collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s': tensor '%s' is stored twice", path, key);
        if (st == COLLAGE_OK) st = header_entry(path, key, v, 8 + hlen, size - 8 - hlen, &x, err, cap);
        if (st == COLLAGE_OK && !set_add(S, &x)) st = collage__fail(err, cap, COLLAGE_ERR_NOMEM, "out of memory");
    }
    if (st == COLLAGE_OK && r < 0) st = collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s': the header is damaged", path);
    free(text);
    return st;
}

/* The shard files model.safetensors.index.json's weight_map names, each once. */
static collage_status index_files(sf_set *S, const char *dir, const char *path, char *err, size_t cap) {
    char *text = NULL, key[256], file[256];
    size_t len = 0;
    collage_status st = collage__read_file(path, &text, &len, err, cap);
    if (st != COLLAGE_OK) return st;
    hj_span s = {text, text + len}, obj, map, it, v;
    int r = -1;
    if (hj_value(&s, &obj) && hj_get(obj, "weight_map", &map) && hj_enter(map, '{', &it))
        while ((r = hj_member(&it, key, sizeof key, &v)) == 1) {
            if (!hj_string(v, file, sizeof file) || strchr(file, '/') || !file[0] || file[0] == '.') { r = -1; break; }
            int seen = 0;
            for (int i = 0; i < S->nfiles; i++) seen |= !strcmp(S->files[i], file);
            if (seen) continue;
            if (S->nfiles == MAX_SHARDS) { r = -1; break; }
            snprintf(S->files[S->nfiles++], sizeof S->files[0], "%s", file);
        }
    free(text);
    if (r < 0 || S->nfiles == 0)
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s': weight_map is missing or names a file outside the folder", path);
    for (int i = 0; i < S->nfiles; i++) {
        snprintf(key, sizeof key, "%s", S->files[i]);
        snprintf(S->files[i], sizeof S->files[0], "%s/%s", dir, key);
    }
    return COLLAGE_OK;
}

/* Every tensor of the folder's safetensors file or shards. */
static collage_status open_set(sf_set *S, const char *dir, char *err, size_t cap) {
    struct stat sb;
    char idx[4096];
    snprintf(S->files[0], sizeof S->files[0], "%s/model.safetensors", dir);
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    collage_status st = COLLAGE_OK;
    if (stat(S->files[0], &sb) == 0) S->nfiles = 1;
    else if (stat(idx, &sb) == 0) st = index_files(S, dir, idx, err, cap);
    else return collage__fail(err, cap, COLLAGE_ERR_IO, "'%s' holds neither model.safetensors nor model.safetensors.index.json", dir);
    for (int i = 0; st == COLLAGE_OK && i < S->nfiles; i++) st = load_header(S, i, err, cap);
    return st;
}

/* ---------------------------------------------------------------- the tensors */
/* The file's element k (of its dtype) as the slab's type. */
static void put(void *slab, size_t at, const unsigned char *src, size_t k, int file_bf16, int want_bf16) {
    uint16_t h;
    float f;
    if (file_bf16) {
        memcpy(&h, src + 2 * k, 2);
        if (want_bf16) ((collage_bf16 *)slab)[at] = (collage_bf16){h};
        else ((float *)slab)[at] = collage_bf16_to_f32((collage_bf16){h});
    } else {
        memcpy(&f, src + 4 * k, 4);
        if (want_bf16) ((collage_bf16 *)slab)[at] = collage_bf16_from_f32(f);
        else ((float *)slab)[at] = f;
    }
}

/* The slab element the file's element (i, j) of slice x came from: the export's row order and
 * transpose undone. */
static size_t slab_at(const collage_export_slice *x, size_t i, size_t j) {
    if (x->transpose) return x->src + j * x->cols + i; /* the file holds (cols, rows) */
    const size_t r = x->rope_hs ? collage__rope_row(i, x->rope_hs) : i;
    return x->src + r * x->cols + j;
}

static collage_status read_bytes(const sf_set *S, const sf_entry *e, unsigned char *buf, char *err, size_t cap) {
    const char *path = S->files[e->file];
    FILE *f = fopen(path, "rb");
    int ok = f && fseeko(f, (off_t)e->begin, SEEK_SET) == 0 && fread(buf, 1, e->end - e->begin, f) == e->end - e->begin;
    if (f) fclose(f);
    return ok ? COLLAGE_OK : collage__fail(err, cap, COLLAGE_ERR_IO, "cannot read tensor '%s' of '%s'", e->name, path);
}

/* Slice x from the file: found by name, its shape checked, its elements put where the export took them. */
static collage_status read_slice(sf_set *S, const collage_export_slice *x, void *params, int want_bf16, unsigned char *buf,
                                 const char *arch, char *err, size_t cap) {
    sf_entry *e = set_find(S, x->name);
    if (!e) return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' has no tensor '%s', which %s of this config.json has",
                                 S->files[0], x->name, arch);
    const size_t R = x->transpose ? x->cols : x->rows, Cc = x->transpose ? x->rows : x->cols;
    const int fits = x->ndim == 2 ? e->ndim == 2 && e->shape[0] == R && e->shape[1] == Cc : e->ndim == 1 && e->shape[0] == R * Cc;
    if (!fits)
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s': tensor '%s' has shape [%zu%s%zu], expected [%zu%s%zu] from config.json",
                             S->files[e->file], x->name, e->shape[0], e->ndim == 2 ? ", " : "", e->ndim == 2 ? e->shape[1] : 0,
                             x->ndim == 2 ? R : R * Cc, x->ndim == 2 ? ", " : "", x->ndim == 2 ? Cc : 0);
    collage_status st = read_bytes(S, e, buf, err, cap);
    for (size_t i = 0; st == COLLAGE_OK && i < R; i++)
        for (size_t j = 0; j < Cc; j++) put(params, slab_at(x, i, j), buf, i * Cc + j, e->bf16, want_bf16);
    e->used = 1;
    return st;
}

/* The tensors no slice took: a tied alias equal to its twin is accepted, anything else refused. */
static collage_status check_rest(sf_set *S, const collage_export_layout *L, unsigned char *buf, char *err, size_t cap) {
    for (int i = 0; i < S->n; i++) {
        sf_entry *e = &S->e[i], *twin = NULL;
        if (e->used) continue;
        for (int t = 0; t < L->n_ties && !twin; t++)
            if (!strcmp(L->ties[t].alias, e->name)) twin = set_find(S, L->ties[t].twin);
        if (!twin || !twin->used)
            return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' holds tensor '%s', which collage's %s has no place for",
                                 S->files[e->file], e->name, L->arch);
        const size_t nb = e->end - e->begin;
        collage_status st = twin->end - twin->begin == nb && twin->bf16 == e->bf16 ? read_bytes(S, e, buf, err, cap) : COLLAGE_OK;
        if (st == COLLAGE_OK && twin->end - twin->begin == nb && twin->bf16 == e->bf16)
            st = read_bytes(S, twin, buf + nb, err, cap);
        if (st != COLLAGE_OK) return st;
        if (twin->end - twin->begin != nb || twin->bf16 != e->bf16 || memcmp(buf, buf + nb, nb))
            return collage__fail(err, cap, COLLAGE_ERR_UNSUPPORTED, "'%s': '%s' differs from '%s': an untied output, which "
                                 "collage's model of this config.json (tie_word_embeddings) does not have",
                                 S->files[e->file], e->name, twin->name);
        e->used = 1;
    }
    return COLLAGE_OK;
}

/* ---------------------------------------------------------------- the public calls */
int collage_model_is_hf_folder(const char *path) {
    struct stat sb;
    char p[4096];
    if (!path || stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) return 0;
    snprintf(p, sizeof p, "%s/config.json", path);
    return stat(p, &sb) == 0;
}

static collage_status read_config(const char *dir, collage_model_config *cfg, char *err, size_t cap) {
    char path[4096], *text = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/config.json", dir);
    collage_status st = collage__read_file(path, &text, &len, err, cap);
    if (st == COLLAGE_OK) st = parse_config(text, len, path, cfg, err, cap);
    free(text);
    return st;
}

collage_status collage_model_import_config(const char *dir, collage_model_config *cfg, int *bf16, char *err, size_t cap) {
    if (!dir || !cfg) return collage__fail(err, cap, COLLAGE_ERR_NULL, "import: no folder or config");
    collage_model_config c;
    collage_status st = read_config(dir, &c, err, cap);
    if (st != COLLAGE_OK) return st;
    sf_set *S = calloc(1, sizeof *S);
    if (!S) return collage__fail(err, cap, COLLAGE_ERR_NOMEM, "out of memory");
    st = open_set(S, dir, err, cap);
    int all = S->n > 0;
    for (int i = 0; i < S->n; i++) all &= S->e[i].bf16;
    free(S->e);
    free(S);
    if (st != COLLAGE_OK) return st;
    *cfg = c;
    if (bf16) *bf16 = all;
    return COLLAGE_OK;
}

collage_status collage_model_import_safetensors(const char *dir, const collage_model_config *cfg, void *params, int want_bf16,
                                                char *err, size_t cap) {
    if (!dir || !cfg || !params) return collage__fail(err, cap, COLLAGE_ERR_NULL, "import: no folder, config or weights");
    collage_model_config c;
    collage_status st = read_config(dir, &c, err, cap);
    if (st != COLLAGE_OK) return st;
    if (memcmp(&c, cfg, sizeof c))
        return collage__fail(err, cap, COLLAGE_ERR_ARG, "'%s/config.json' describes another model than the one asked for", dir);
    const collage_export_layout *L = collage__model_family(c.family)->hf;
    int n = 0;
    collage_export_slice *x = collage__export_expand(L, &c, 4, &n, err, cap);
    sf_set *S = calloc(1, sizeof *S);
    size_t big = 0;
    st = x && S ? open_set(S, dir, err, cap) : x ? collage__fail(err, cap, COLLAGE_ERR_NOMEM, "out of memory") : COLLAGE_ERR_ARG;
    for (int i = 0; S && i < S->n; i++) big = S->e[i].end - S->e[i].begin > big ? S->e[i].end - S->e[i].begin : big;
    unsigned char *buf = st == COLLAGE_OK ? malloc(2 * big + 1) : NULL;
    if (st == COLLAGE_OK && !buf) st = collage__fail(err, cap, COLLAGE_ERR_NOMEM, "out of memory");
    if (st == COLLAGE_OK) memset(params, 0, collage_model_num_params(&c) * (want_bf16 ? 2 : 4));
    for (int i = 0; st == COLLAGE_OK && i < n; i++) st = read_slice(S, &x[i], params, want_bf16, buf, L->arch, err, cap);
    if (st == COLLAGE_OK) st = check_rest(S, L, buf, err, cap);
    free(buf);
    free(x);
    if (S) free(S->e);
    free(S);
    return st;
}
