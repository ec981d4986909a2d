/* gpt2.h — the GPT-2 family's own API (llm.c's train_gpt2.c architecture), behind collage_model.h's
 * family table (gpt2.c fills the row) and used directly by its tests: configuration and presets, the flat
 * parameter slab in llm.c's order (checkpoints map 1:1), GPT-2 initialisation, forward (mean
 * cross-entropy), backward (gradients accumulated into a flat slab of the same layout), and next-token
 * logits + sampling. Precisions: fp32, bf16 (bf16 weights, activations and gradients in 2-byte words,
 * products on bf16 operands with fp32 sums), fp64 (the float code in double: the gradient-check
 * reference) and bf16-emulated (the float code rounding where bf16 rounds: the bf16 model's reference). */
#ifndef COLLAGE_GPT2_H
#define COLLAGE_GPT2_H

#include "collage.h"
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int vocab_size;        /* V: real tokens; logits ≥ V are masked (probability 0, gradient 0) */
    int padded_vocab_size; /* Vp ≥ V: rows of wte (llm.c pads V to a multiple of 128) */
    int max_seq_len;       /* maxT: rows of wpe */
    int num_layers;        /* L */
    int num_heads;         /* NH, divides channels */
    int channels;          /* C */
} collage_gpt_config;

typedef enum {
    COLLAGE_GPT_FP32 = 0, /* weights, activations, gradients float */
    COLLAGE_GPT_BF16,     /* weights, gradients, activations and activation gradients bf16 (RN), each
                             computed in fp32 and rounded once where it is stored; products on bf16
                             operands with fp32 sums (nn.h: nn_gemm_bf16); LayerNorm statistics, the
                             loss's softmax and the sums of bias and norm gradients fp32 */
    COLLAGE_GPT_FP64,     /* weights, activations, gradients double: reference for gradient checks */
    COLLAGE_GPT_BF16_EMULATED, /* the fp32 model rounding to bf16 where COLLAGE_GPT_BF16 stores bf16, on
                             the bf16 weights widened into an fp32 copy; its gradients summed in an fp32
                             slab, rounded into the bf16 slab after each backward. The bf16 model with
                             COLLAGE_BF16_GEMM=widen gives its values (tests/test_gpt.c) */
    COLLAGE_GPT_FP16_EMULATED, /* the same emulation with fp16 (IEEE half) storage: fp16 weights (uint16_t)
                             widened, stored activations and activation gradients rounded to fp16, the
                             gradients rounded into an fp16 slab after each backward. Computed in fp32:
                             an accuracy study of fp16 storage, not fp16 arithmetic */
    COLLAGE_GPT_PRECISION_COUNT
} collage_gpt_precision;
const char    *collage_gpt_precision_name(collage_gpt_precision p);   /* "fp32", "bf16", "fp64", "bf16-emulated",
                                                                         "fp16-emulated" */
collage_status collage_gpt_precision_parse(const char *name, collage_gpt_precision *out);

/* Presets: "tiny" (L2 NH4 C128 T64, V 256), "small" (L6 NH6 C384 T256, V 256), "gpt2" (L12 NH12
 * C768 T1024, V 50257 → 50304). Set vocab_size / padded_vocab_size afterwards for another tokenizer. */
collage_status collage_gpt_preset(const char *name, collage_gpt_config *out);
int            collage_gpt_pad_vocab(int vocab_size);       /* round up to a multiple of 128 */
/* Shape check with a message ("channels 130 not divisible by num_heads 4"); msg may be NULL.
 * maxB, maxT: the batch the model is created for (0 = skip those checks). */
collage_status collage_gpt_check(const collage_gpt_config *cfg, int maxB, int maxT, char *msg, size_t cap);

/* ---------------------------------------------------------------- the parameter slab */
enum {
    COLLAGE_GPT_WTE = 0, COLLAGE_GPT_WPE, COLLAGE_GPT_LN1W, COLLAGE_GPT_LN1B, COLLAGE_GPT_QKVW,
    COLLAGE_GPT_QKVB, COLLAGE_GPT_ATTPROJW, COLLAGE_GPT_ATTPROJB, COLLAGE_GPT_LN2W, COLLAGE_GPT_LN2B,
    COLLAGE_GPT_FCW, COLLAGE_GPT_FCB, COLLAGE_GPT_FCPROJW, COLLAGE_GPT_FCPROJB, COLLAGE_GPT_LNFW,
    COLLAGE_GPT_LNFB, COLLAGE_GPT_NTENSORS
};
typedef struct {
    const char *name;      /* llm.c's: "wte", "wpe", "ln1w", …, "lnfb" */
    size_t offset, count;  /* elements [offset, offset + count) of the slab */
    int ndim;              /* shape as in llm.c, e.g. qkvw (L, 3C, C) */
    size_t shape[3];
    int decay;             /* 1: a matrix (wte, wpe, the four weights); 0: bias or LayerNorm */
} collage_gpt_tensor;

size_t collage_gpt_num_params(const collage_gpt_config *cfg);    /* 0 for an invalid config */
/* The 16 tensors in slab order; returns COLLAGE_GPT_NTENSORS (0 for an invalid config). */
int    collage_gpt_tensors(const collage_gpt_config *cfg, collage_gpt_tensor out[COLLAGE_GPT_NTENSORS]);
/* One optimizer group per tensor: weight_decay for matrices, 0 for biases and LayerNorm.
 * Names point to static strings. Returns the count (COLLAGE_GPT_NTENSORS) or 0. */
int    collage_gpt_param_groups(const collage_gpt_config *cfg, double weight_decay,
                                collage_param_group out[COLLAGE_GPT_NTENSORS]);
/* GPT-2 initialisation, deterministic in seed and independent of the thread count: matrices
 * N(0, 0.02) (attprojw, fcprojw: 0.02/sqrt(2L)), wte rows ≥ V zero, biases 0, LayerNorm weight 1. */
collage_status collage_gpt_init_weights(const collage_gpt_config *cfg, uint64_t seed, float *w, size_t n);

/* ---------------------------------------------------------------- the model */
/* Threads: collage_set_threads (OpenMP) runs every kernel and every matrix product (a fixed grid of
 * single-threaded cblas_sgemm tiles, src/nn/gemm.c); results are bit-identical for any thread count and
 * with OpenMP off. Forward, backward and next_logits set OpenBLAS to one thread on entry and restore the
 * caller's count before they return. */
typedef struct collage_gpt collage_gpt;

/* All memory (activations for maxB × maxT, gradients, bf16 staging) is allocated here. */
collage_status collage_gpt_create(const collage_gpt_config *cfg, collage_gpt_precision prec, int maxB, int maxT,
                                  collage_gpt **out);
void           collage_gpt_free(collage_gpt *m);                               /* NULL is fine */
const collage_gpt_config *collage_gpt_get_config(const collage_gpt *m);
collage_gpt_precision     collage_gpt_get_precision(const collage_gpt *m);
size_t         collage_gpt_size(const collage_gpt *m);                         /* parameters */
/* The message of the last failed call on m ("token 300 at (0, 5) >= vocab_size 256"). */
const char    *collage_gpt_error(const collage_gpt *m);

/* Forward on B × T tokens (row-major, B ≤ maxB, 1 ≤ T ≤ maxT). params: float (fp32), collage_bf16
 * (bf16) or double (fp64) slab of collage_gpt_size elements; it must not change before backward.
 * With targets: *loss = mean cross-entropy over the B·T positions (loss may be NULL); without
 * (targets NULL): logits only, *loss = NaN. Bad sizes or token ids: a status, nothing computed. */
collage_status collage_gpt_forward(collage_gpt *m, const void *params, const int *tokens, const int *targets,
                                   int B, int T, double *loss);
/* Gradients of the last forward's mean loss, added to the gradient slab (llm.c's accumulation). fp32,
 * fp64: +=. bf16: after zero_grad the slab gets this batch's gradient, each element summed in fp32 and
 * rounded once; without zero_grad, each element becomes rnd(old + that sum) (one rounding per backward:
 * sum micro-batches in fp32 outside the model for exact accumulation, as collage_run does).
 * bf16-emulated: sums in its fp32 slab, rounded into the bf16 slab after each backward. Needs a
 * forward with targets; consumes it (a second backward returns COLLAGE_ERR_ARG). */
collage_status collage_gpt_backward(collage_gpt *m);
/* The gradient slab: float / collage_bf16 / double. Read it through this call after zero_grad: in the
 * bf16 models zero_grad defers clearing the bf16 slab to this call (a backward writes it whole), so a
 * pointer kept from before zero_grad may still show the old values. */
void          *collage_gpt_grads(collage_gpt *m);
/* Loss scaling: the following backwards compute the gradients of scale × the mean loss (the seed of the
 * backward is scale / (B·T); 1 by default), so that small activation gradients stay above fp16's
 * subnormals. The float graphs only: COLLAGE_ERR_UNSUPPORTED for the bf16 model. */
collage_status collage_gpt_set_loss_scale(collage_gpt *m, double scale);
void           collage_gpt_zero_grad(collage_gpt *m);

/* Bytes the model holds besides the weights (the caller's). */
typedef struct {
    size_t gradients;    /* the gradient slab(s) and the float sums of the bf16 model */
    size_t activations;  /* stored activations, activation gradients, logits, token copies */
    size_t scratch;      /* the products' tile scratch; the fp32 weight copy of bf16-emulated */
} collage_gpt_mem;
collage_status collage_gpt_memory(const collage_gpt *m, collage_gpt_mem *out);

/* Stored activations (for tests and diagnostics), by name: data (esize bytes per element: 2 for the
 * bf16 ones of the bf16 model, holding bf16 bits; else 4, or 8 in fp64); bf16 = 1 when the tensor holds
 * bf16 values (the bf16 models; all but the LayerNorm statistics, the per-position losses, the fp32
 * softmax of the loss in "logits" and the attention scratch). The d_* tensors are the backward's
 * activation gradients. */
typedef struct { const char *name; const void *data; size_t count, esize; int bf16; } collage_gpt_act;
int            collage_gpt_act_tensors(const collage_gpt *m, collage_gpt_act *out, int cap); /* returns total */

/* ---------------------------------------------------------------- inference */
/* Logits (float, vocab_size entries) of the token following tokens[0..T), 1 ≤ T ≤ maxT; runs the
 * model on the (1, T) context and the output layer on the last position only. */
collage_status collage_gpt_next_logits(collage_gpt *m, const void *params, const int *tokens, int T,
                                       float *logits);
/* A token drawn from softmax(logits / temperature) with the uniform collage_rand32(key, index)
 * (key = collage_rand_key(seed, stream)): the same (logits, key, index) always gives the same
 * token. temperature ≤ 0: the argmax (first on ties). Returns -1 for V ≤ 0 or non-finite logits. */
int            collage_gpt_sample(const float *logits, int V, float temperature, uint64_t key, uint64_t index);

/* Internal, for tests: the float model's e^x (nn_exp_f32 of nn.h: ≤ 2 ulp, the same bits in every build). */
float          collage__gpt_exp_f32(float x);

#ifdef __cplusplus
}
#endif
#endif
