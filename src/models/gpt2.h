/* gpt2.h — the GPT-2 family (llm.c's train_gpt2.c architecture): its tensors in llm.c's slab order,
 * presets, checks, initialisation and checkpoint file, behind collage_model.h's family table (gpt2.c fills
 * the row; its model object is graph_model.h's, on collage__gpt2_graph of gpt2_plan.h). Configs are
 * collage_model_config (family COLLAGE_FAMILY_GPT2); the MLP is 4·C wide, the output tied to wte.
 * Private to the library and its tests. */
#ifndef COLLAGE_GPT2_H
#define COLLAGE_GPT2_H

#include "collage_model.h"

/* The parameter slab, in llm.c's order (checkpoints map 1:1). Per-layer tensors have a leading L. */
enum {
    GPT2_WTE = 0,               /* (Vp, C) token embedding, also the output matrix */
    GPT2_WPE,                   /* (maxT, C) positions */
    GPT2_LN1W, GPT2_LN1B,       /* (L, C) */
    GPT2_QKVW, GPT2_QKVB,       /* (L, 3C, C), (L, 3C) */
    GPT2_ATTPROJW, GPT2_ATTPROJB, /* (L, C, C), (L, C) */
    GPT2_LN2W, GPT2_LN2B,       /* (L, C) */
    GPT2_FCW, GPT2_FCB,         /* (L, 4C, C), (L, 4C) */
    GPT2_FCPROJW, GPT2_FCPROJB, /* (L, C, 4C), (L, C) */
    GPT2_LNFW, GPT2_LNFB,       /* (C) */
    GPT2_NTENSORS
};

/* Presets "tiny" (L2 NH4 C128 T64, V 256), "small" (L6 NH6 C384 T256, V 256), "gpt2" (L12 NH12 C768
 * T1024, V 50257 → 50304); collage_model_config_set_vocab sets another tokenizer's. */
collage_status gpt2_preset(const char *name, collage_model_config *out);
int            gpt2_pad_vocab(int vocab_size); /* round up to a multiple of 128 */
/* The shared shape checks (collage__check_dims) and no field of another family (kv heads, hidden size,
 * an untied output, norm_eps, rope_theta), with a message for each refusal; msg may be NULL. */
collage_status gpt2_check(const collage_model_config *cfg, int maxB, int maxT, char *msg, size_t cap);
/* The 16 tensors in slab order (at most cap written); returns GPT2_NTENSORS, 0 for an invalid config. */
int            gpt2_tensors(const collage_model_config *cfg, collage_tensor_info *out, int cap);
/* GPT-2 initialisation, deterministic in seed and independent of the thread count: matrices N(0, 0.02)
 * (attprojw, fcprojw: 0.02/sqrt(2L)), wte rows ≥ V zero, biases 0, LayerNorm weights 1. */
collage_status gpt2_init_weights(const collage_model_config *cfg, uint64_t seed, float *w, size_t n);

/* The checkpoint file (gpt2_ckpt.c), llm.c's, so a model trained here loads in llm.c and llm.c's
 * gpt2_124M.bin loads here: 256 little-endian int32 — [0] magic 20240326, [1] version (3: fp32 weights,
 * 5: bf16), [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] padded V; then the parameters in slab order. */
#define GPT2_LLMC_MAGIC 20240326
#define GPT2_LLMC_VERSION_FP32 3
#define GPT2_LLMC_VERSION_BF16 5
int            gpt2_ckpt_probe(const unsigned char *head, size_t len);
collage_status gpt2_ckpt_save(const char *path, const collage_model_config *cfg, const void *params, int bf16,
                              char *err, size_t cap);
collage_status gpt2_ckpt_read_header(const char *path, collage_model_config *cfg, int *bf16, char *err, size_t cap);
collage_status gpt2_ckpt_load(const char *path, const collage_model_config *cfg, void *params, int want_bf16,
                              char *err, size_t cap);

#endif
