/* bert.h — the BERT family (a BERT/RoBERTa encoder: token, learned position and one token-type embedding
 * with LayerNorm; post-norm blocks of bidirectional multi-head attention and a GELU MLP; the masked-LM
 * head, dense + GELU + LayerNorm, then the output matrix tied to the token embedding plus a bias): its
 * tensors, presets, checks, initialisation and checkpoint file, behind collage_model.h's family table
 * (bert.c fills the row; its model object is graph_model.h's, on collage__bert_graph of bert_plan.h).
 * Configs are collage_model_config (family COLLAGE_FAMILY_BERT); the MLP is 4·C wide, one token type.
 * Private to the library and its tests. */
#ifndef COLLAGE_BERT_H
#define COLLAGE_BERT_H

#include "collage_model.h"

/* The parameter slab, in this order. Per-layer tensors have a leading L dimension. */
enum {
    BERT_WTE = 0, /* (Vp, C) token embedding, also the output matrix of the head */
    BERT_WPE,     /* (maxT, C) positions */
    BERT_WTT,     /* (1, C) the one token type */
    BERT_LNEW, BERT_LNEB,             /* (C) the embedding's LayerNorm */
    BERT_QKVW, BERT_QKVB,             /* (L, 3C, C), (L, 3C) */
    BERT_ATTPROJW, BERT_ATTPROJB,     /* (L, C, C), (L, C) */
    BERT_LN1W, BERT_LN1B,             /* (L, C): after attention + residual */
    BERT_FCW, BERT_FCB,               /* (L, 4C, C), (L, 4C) */
    BERT_FCPROJW, BERT_FCPROJB,       /* (L, C, 4C), (L, C) */
    BERT_LN2W, BERT_LN2B,             /* (L, C): after the MLP + residual: the block's output */
    BERT_HEADW, BERT_HEADB,           /* (C, C), (C): the head's dense layer */
    BERT_HEADLNW, BERT_HEADLNB,       /* (C): the head's LayerNorm */
    BERT_OUTB,                        /* (Vp): the output bias */
    BERT_NTENSORS
};

/* Presets "bert-tiny" (L2 NH2 C128, context 128; the 256 bytes and the mask: V 257 → 320) and "bert-base"
 * (L12 NH12 C768, context 512; GPT-2's BPE and the mask: V 50258 → 50304); collage_model_config_set_vocab
 * sets another tokenizer's. */
#define BERT_BYTE_VOCAB 257  /* the byte tokenizer's 256 and the mask token */
#define BERT_BPE_VOCAB 50258 /* GPT-2's 50257 BPE tokens and the mask token */
collage_status bert_preset(const char *name, collage_model_config *out);
int            bert_pad_vocab(int vocab_size);  /* round up to a multiple of 64 */
collage_status bert_check(const collage_model_config *cfg, int maxB, int maxT, char *msg, size_t cap);
int            bert_tensors(const collage_model_config *cfg, collage_tensor_info *out, int cap);
/* BERT's initialisation, deterministic in seed and independent of the thread count: embeddings and
 * matrices N(0, 0.02) (wte rows ≥ V zero), biases 0, LayerNorm weights 1. */
collage_status bert_init_weights(const collage_model_config *cfg, uint64_t seed, float *w, size_t n);

/* The checkpoint file (bert_ckpt.c; docs/numerics.md §8): a 256-byte header — magic "collbert", uint32
 * version 1, uint32 dtype (0 fp32, 1 bf16), int32 V, Vp, maxT, L, NH, C, uint32 tensor count, zeros —
 * then each tensor: uint32 name length, the name, uint32 ndim, ndim uint64 sizes, its elements.
 * Little-endian throughout. */
#define BERT_CKPT_MAGIC "collbert"
#define BERT_CKPT_VERSION 1
int            bert_ckpt_probe(const unsigned char *head, size_t len);
collage_status bert_ckpt_save(const char *path, const collage_model_config *cfg, const void *params, int bf16,
                              char *err, size_t cap);
collage_status bert_ckpt_read_header(const char *path, collage_model_config *cfg, int *bf16, char *err, size_t cap);
collage_status bert_ckpt_load(const char *path, const collage_model_config *cfg, void *params, int want_bf16,
                              char *err, size_t cap);

#endif
