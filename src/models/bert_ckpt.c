/* bert_ckpt.c — the BERT family's checkpoint file (layout in bert.h, docs/numerics.md §8): a 256-byte header
 * (magic, version, element type, config, tensor count), then every tensor as a record of its name, shape
 * and elements. Written atomically in slab order; read with full validation: the records may come in any
 * order, each tensor exactly once with its shape, and the file's size must be exactly what they add to. */
#include "bert.h"
#include "internal.h"
#include "model.h"
#include <errno.h>
#include <sys/stat.h>

#define HEADER_BYTES 256
#define NAME_MAX_LEN 64

int bert_ckpt_probe(const unsigned char *head, size_t len) {
    return len >= 8 && memcmp(head, BERT_CKPT_MAGIC, 8) == 0;
}

/* Bytes of tensor t's record: name length, name, ndim, sizes, elements of es bytes. */
static size_t record_bytes(const collage_tensor_info *t, size_t es) {
    return 4 + strlen(t->name) + 4 + 8 * (size_t)t->ndim + t->count * es;
}

static size_t file_bytes(const collage_model_config *c, size_t es) {
    collage_tensor_info t[BERT_NTENSORS];
    size_t total = HEADER_BYTES;
    for (int k = 0; k < bert_tensors(c, t, BERT_NTENSORS); k++) total += record_bytes(&t[k], es);
    return total;
}

collage_status bert_ckpt_save(const char *path, const collage_model_config *cfg, const void *params, int bf16,
                              char *err, size_t cap) {
    collage_tensor_info t[BERT_NTENSORS];
    if (!path || !cfg || !params) return COLLAGE_ERR_NULL;
    if (!bert_tensors(cfg, t, BERT_NTENSORS))
        return collage__fail(err, cap, COLLAGE_ERR_ARG, "invalid model shape for '%s'", path);
    unsigned char h[HEADER_BYTES] = {0};
    const uint32_t version = BERT_CKPT_VERSION, dtype = bf16 ? 1 : 0, count = BERT_NTENSORS;
    const int32_t c[6] = {cfg->vocab_size, cfg->padded_vocab_size, cfg->max_seq_len, cfg->num_layers, cfg->num_heads,
                          cfg->channels};
    memcpy(h, BERT_CKPT_MAGIC, 8);
    memcpy(h + 8, &version, 4);
    memcpy(h + 12, &dtype, 4);
    memcpy(h + 16, c, sizeof c);
    memcpy(h + 40, &count, 4);
    collage_atomic_file af;
    collage_status st = collage_atomic_open(&af, path, err, cap);
    if (st) return st;
    const size_t es = bf16 ? 2 : 4;
    int ok = fwrite(h, sizeof h, 1, af.f) == 1;
    for (int k = 0; ok && k < BERT_NTENSORS; k++) {
        const uint32_t nl = (uint32_t)strlen(t[k].name), nd = (uint32_t)t[k].ndim;
        uint64_t dims[4];
        for (int d = 0; d < t[k].ndim; d++) dims[d] = t[k].shape[d];
        ok = fwrite(&nl, 4, 1, af.f) == 1 && fwrite(t[k].name, 1, nl, af.f) == nl && fwrite(&nd, 4, 1, af.f) == 1 &&
             fwrite(dims, 8, nd, af.f) == nd &&
             fwrite((const char *)params + t[k].offset * es, es, t[k].count, af.f) == t[k].count;
    }
    return collage__atomic_finish(&af, ok, err, cap);
}

/* Open and validate the header and the file's size; on success *fp is positioned at the first record. */
static collage_status open_ckpt(const char *path, FILE **fp, collage_model_config *cfg, int *bf16, char *err,
                                size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return collage__fail(err, cap, COLLAGE_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    unsigned char h[HEADER_BYTES];
    uint32_t version, dtype, count;
    int32_t v[6];
    collage_status st = COLLAGE_OK;
    char msg[256];
    if (fread(h, sizeof h, 1, f) != 1)
        st = collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' is too short for a BERT checkpoint header (%d bytes)", path,
                           HEADER_BYTES);
    else if (memcmp(h, BERT_CKPT_MAGIC, 8) != 0)
        st = collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' is not a BERT checkpoint (magic is not \"%s\")", path,
                           BERT_CKPT_MAGIC);
    memcpy(&version, h + 8, 4);
    memcpy(&dtype, h + 12, 4);
    memcpy(v, h + 16, sizeof v);
    memcpy(&count, h + 40, 4);
    const collage_model_config c = {.family = COLLAGE_FAMILY_BERT, .vocab_size = v[0], .padded_vocab_size = v[1],
                                    .max_seq_len = v[2], .num_layers = v[3], .num_heads = v[4], .channels = v[5]};
    if (!st && version != BERT_CKPT_VERSION)
        st = collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' has BERT checkpoint version %u; collage reads %d", path,
                           version, BERT_CKPT_VERSION);
    if (!st && dtype > 1)
        st = collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' has element type %u (0: fp32, 1: bf16)", path, dtype);
    if (!st && bert_check(&c, 0, 0, msg, sizeof msg) != COLLAGE_OK)
        st = collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' describes an invalid model: %s", path, msg);
    if (!st && count != BERT_NTENSORS)
        st = collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' holds %u tensors; a bert model has %d", path, count,
                           BERT_NTENSORS);
    struct stat sb;
    const size_t want = st ? 0 : file_bytes(&c, dtype ? 2 : 4);
    if (!st && fstat(fileno(f), &sb) == 0 && (size_t)sb.st_size != want)
        st = collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' has %lld bytes but its header describes %zu (%s)", path,
                           (long long)sb.st_size, want, (size_t)sb.st_size < want ? "truncated" : "trailing data");
    if (st) { fclose(f); return st; }
    if (cfg) *cfg = c;
    if (bf16) *bf16 = dtype == 1;
    *fp = f;
    return COLLAGE_OK;
}

collage_status bert_ckpt_read_header(const char *path, collage_model_config *cfg, int *bf16, char *err, size_t cap) {
    if (!path) return COLLAGE_ERR_NULL;
    FILE *f;
    collage_status st = open_ckpt(path, &f, cfg, bf16, err, cap);
    if (st == COLLAGE_OK) fclose(f);
    return st;
}

/* One record's name and shape, checked against the tensors not yet read: *k is its index. */
static collage_status read_record_head(FILE *f, const char *path, const collage_tensor_info *t, const int *seen,
                                       int *k, char *err, size_t cap) {
    uint32_t nl = 0, nd = 0;
    char name[NAME_MAX_LEN + 1] = "";
    uint64_t dims[4] = {0};
    if (fread(&nl, 4, 1, f) != 1 || nl < 1 || nl > NAME_MAX_LEN || fread(name, 1, nl, f) != nl)
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s': a tensor record with a bad name (length %u)", path, nl);
    name[nl] = 0;
    for (*k = 0; *k < BERT_NTENSORS && strcmp(t[*k].name, name); (*k)++) {}
    if (*k == BERT_NTENSORS)
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' holds an unknown tensor '%s'", path, name);
    if (seen[*k]) return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' holds tensor '%s' twice", path, name);
    int same = fread(&nd, 4, 1, f) == 1 && nd == (uint32_t)t[*k].ndim && fread(dims, 8, nd, f) == nd;
    for (int d = 0; same && d < t[*k].ndim; d++) same = dims[d] == t[*k].shape[d];
    if (!same)
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s': tensor '%s' has another shape than the header's model "
                                                           "(%u dimensions, first %llu)", path, name, nd,
                             (unsigned long long)dims[0]);
    return COLLAGE_OK;
}

collage_status bert_ckpt_load(const char *path, const collage_model_config *cfg, void *params, int want_bf16,
                              char *err, size_t cap) {
    if (!path || !cfg || !params) return COLLAGE_ERR_NULL;
    FILE *f;
    collage_model_config c;
    int file_bf16;
    collage_status st = open_ckpt(path, &f, &c, &file_bf16, err, cap);
    if (st) return st;
    if ((st = collage__ckpt_same_shape(path, &c, cfg, err, cap))) {
        fclose(f);
        return st;
    }
    collage_tensor_info t[BERT_NTENSORS];
    bert_tensors(&c, t, BERT_NTENSORS);
    const size_t es = file_bf16 ? 2 : 4, chunk = (size_t)1 << 20, ws = want_bf16 ? 2 : 4;
    void *buf = file_bf16 == want_bf16 ? NULL : malloc(chunk * es);
    if (file_bf16 != want_bf16 && !buf) { fclose(f); return COLLAGE_ERR_NOMEM; }
    int seen[BERT_NTENSORS] = {0};
    for (int r = 0; r < BERT_NTENSORS && st == COLLAGE_OK; r++) {
        int k = 0;
        st = read_record_head(f, path, t, seen, &k, err, cap);
        if (st == COLLAGE_OK &&
            collage__read_elements(f, (char *)params + t[k].offset * ws, t[k].count, es, want_bf16, buf, chunk) != t[k].count)
            st = collage__fail(err, cap, COLLAGE_ERR_IO, "read error in '%s' in tensor '%s'", path, t[k].name);
        if (st == COLLAGE_OK) seen[k] = 1;
    }
    free(buf);
    fclose(f);
    return st;
}
