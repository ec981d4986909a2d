/* gpt2_ckpt.h — the GPT-2 family's checkpoints in llm.c's format (so a model trained here loads in
 * llm.c, and llm.c's gpt2_124M.bin loads here).
 * llm.c format: 256 little-endian int32 — [0] magic 20240326, [1] version (3: fp32 weights, 5: bf16),
 * [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] padded V; then the parameters in gpt2.h's slab order.
 * Files are written with collage_atomic_* (collage_data.h). */
#ifndef COLLAGE_GPT2_CKPT_H
#define COLLAGE_GPT2_CKPT_H

#include "gpt2.h"
#include <stdio.h>

#define COLLAGE_LLMC_MAGIC 20240326
#define COLLAGE_LLMC_VERSION_FP32 3
#define COLLAGE_LLMC_VERSION_BF16 5

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
