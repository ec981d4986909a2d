/* ckpt.h — model checkpoints in llm.c's format (so a model trained here loads in llm.c, and llm.c's
 * gpt2_124M.bin loads here), and the atomic-write helper every file writer of collage uses.
 * llm.c format: 256 little-endian int32 — [0] magic 20240326, [1] version (3: fp32 weights, 5: bf16),
 * [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] padded V; then the parameters in gpt.h's slab order. */
#ifndef COLLAGE_CKPT_H
#define COLLAGE_CKPT_H

#include "gpt.h"
#include <stdio.h>

#define COLLAGE_LLMC_MAGIC 20240326
#define COLLAGE_LLMC_VERSION_FP32 3
#define COLLAGE_LLMC_VERSION_BF16 5

/* Atomic file writing: open a temporary name beside path, write, then collage_atomic_commit flushes,
 * fsyncs, renames over path and fsyncs the folder; collage_atomic_abort removes the temporary file.
 * A reader never sees a partial file at path. */
typedef struct {
    FILE *f;
    char *tmp, *path;
} collage_atomic_file;
collage_status collage_atomic_open(collage_atomic_file *af, const char *path, char *err, size_t cap);
collage_status collage_atomic_commit(collage_atomic_file *af, char *err, size_t cap);
void           collage_atomic_abort(collage_atomic_file *af);

/* Write the model: params are float (bf16 = 0, version 3) or collage_bf16 (bf16 = 1, version 5). */
collage_status collage_ckpt_save_model(const char *path, const collage_gpt_config *cfg, const void *params,
                                       int bf16, char *err, size_t cap);
/* Read a checkpoint's header: its model shape and whether the weights are bf16. */
collage_status collage_ckpt_read_header(const char *path, collage_gpt_config *cfg, int *bf16, char *err,
                                        size_t cap);
/* Read the weights into params (float when want_bf16 = 0, collage_bf16 when 1), converting (bf16 →
 * float exactly, float → bf16 by RN) when the file's precision differs. The file's shape must equal
 * cfg; the size must match exactly. */
collage_status collage_ckpt_load_model(const char *path, const collage_gpt_config *cfg, void *params, int want_bf16,
                                       char *err, size_t cap);

#endif
