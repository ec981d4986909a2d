/* gpt2_ckpt.c — the GPT-2 family's checkpoints in llm.c's format (gpt2.h): read with full validation,
 * written atomically. */
#include "gpt2.h"
#include "internal.h"
#include "model.h"
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

static size_t num_params(const collage_model_config *cfg) {
    collage_tensor_info t[GPT2_NTENSORS];
    return gpt2_tensors(cfg, t, GPT2_NTENSORS) ? t[GPT2_NTENSORS - 1].offset + t[GPT2_NTENSORS - 1].count : 0;
}

/* llm.c's header starts with the int32 magic 20240326 (little-endian, as every int of the format). */
int gpt2_ckpt_probe(const unsigned char *head, size_t len) {
    int32_t magic;
    if (len < sizeof magic) return 0;
    memcpy(&magic, head, sizeof magic);
    return magic == GPT2_LLMC_MAGIC;
}

static void header_of(const collage_model_config *c, int bf16, int32_t h[256]) {
    memset(h, 0, 256 * sizeof *h);
    h[0] = GPT2_LLMC_MAGIC;
    h[1] = bf16 ? GPT2_LLMC_VERSION_BF16 : GPT2_LLMC_VERSION_FP32;
    h[2] = c->max_seq_len; h[3] = c->vocab_size; h[4] = c->num_layers;
    h[5] = c->num_heads; h[6] = c->channels; h[7] = c->padded_vocab_size;
}

collage_status gpt2_ckpt_save(const char *path, const collage_model_config *cfg, const void *params, int bf16,
                              char *err, size_t cap) {
    if (!path || !cfg || !params) return COLLAGE_ERR_NULL;
    size_t n = num_params(cfg);
    if (!n) return collage__fail(err, cap, COLLAGE_ERR_ARG, "invalid model shape for '%s'", path);
    int32_t h[256];
    header_of(cfg, bf16, h);
    collage_atomic_file af;
    collage_status st = collage_atomic_open(&af, path, err, cap);
    if (st) return st;
    size_t es = bf16 ? 2 : 4;
    return collage__atomic_finish(&af, fwrite(h, sizeof h, 1, af.f) == 1 && fwrite(params, es, n, af.f) == n, err, cap);
}

/* Open and validate the header; on success *fp is positioned at the weights. */
static collage_status open_ckpt(const char *path, FILE **fp, collage_model_config *cfg, int *bf16, char *err,
                                size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return collage__fail(err, cap, COLLAGE_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    int32_t h[256];
    if (fread(h, sizeof h, 1, f) != 1) {
        fclose(f);
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' is too short for an llm.c checkpoint header (1024 bytes)", path);
    }
    if (h[0] != GPT2_LLMC_MAGIC) {
        fclose(f);
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' is not an llm.c model checkpoint (magic %d, expected %d)", path,
                    h[0], GPT2_LLMC_MAGIC);
    }
    if (h[1] != GPT2_LLMC_VERSION_FP32 && h[1] != GPT2_LLMC_VERSION_BF16) {
        fclose(f);
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' has checkpoint version %d; collage reads 3 (fp32) and 5 (bf16)",
                    path, h[1]);
    }
    collage_model_config c = {.family = COLLAGE_FAMILY_GPT2, .max_seq_len = h[2], .vocab_size = h[3],
                              .num_layers = h[4], .num_heads = h[5], .channels = h[6], .padded_vocab_size = h[7]};
    char msg[256];
    if (gpt2_check(&c, 0, 0, msg, sizeof msg) != COLLAGE_OK) {
        fclose(f);
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' describes an invalid model: %s", path, msg);
    }
    struct stat sb;
    size_t want = 1024 + num_params(&c) * (h[1] == GPT2_LLMC_VERSION_BF16 ? 2 : 4);
    if (fstat(fileno(f), &sb) == 0 && (size_t)sb.st_size != want) {
        fclose(f);
        return collage__fail(err, cap, COLLAGE_ERR_FORMAT, "'%s' has %lld bytes but its header describes %zu (%s)", path,
                    (long long)sb.st_size, want, (size_t)sb.st_size < want ? "truncated" : "trailing data");
    }
    if (cfg) *cfg = c;
    if (bf16) *bf16 = h[1] == GPT2_LLMC_VERSION_BF16;
    *fp = f;
    return COLLAGE_OK;
}

collage_status gpt2_ckpt_read_header(const char *path, collage_model_config *cfg, int *bf16, char *err, size_t cap) {
    if (!path) return COLLAGE_ERR_NULL;
    FILE *f;
    collage_status st = open_ckpt(path, &f, cfg, bf16, err, cap);
    if (st == COLLAGE_OK) fclose(f);
    return st;
}

collage_status gpt2_ckpt_load(const char *path, const collage_model_config *cfg, void *params, int want_bf16,
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
    size_t n = num_params(&c), chunk = (size_t)1 << 20;
    size_t fes = file_bf16 ? 2 : 4;
    void *buf = file_bf16 == want_bf16 ? NULL : malloc(chunk * fes);
    if (file_bf16 != want_bf16 && !buf) { fclose(f); return COLLAGE_ERR_NOMEM; }
    const size_t got = collage__read_elements(f, params, n, fes, want_bf16, buf, chunk);
    free(buf);
    fclose(f);
    if (got < n) return collage__fail(err, cap, COLLAGE_ERR_IO, "read error in '%s' at parameter %zu", path, got);
    return COLLAGE_OK;
}
