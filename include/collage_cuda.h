/* collage_cuda.h — the AdamW step of every strategy on NVIDIA GPUs (libcollage_cuda, built by
 * `make CUDA=1`): many tensors in one launch, each with its own words, lr and weight decay, clipping by
 * the global norm, skipping of non-finite gradients, EDQ, stochastic rounding keyed as on the CPU. Every
 * word comes out with the bits collage_adamw_step gives on the CPU (docs/cuda.md says how and what is
 * checked where). Pointers in collage_cuda_tensor are device pointers; `stream` is a cudaStream_t (NULL:
 * the default stream). The calls enqueue work on the stream and return; collage_cuda_adamw_stats waits. */
#ifndef COLLAGE_CUDA_H
#define COLLAGE_CUDA_H

#include "collage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One tensor of a step: its words on the device in the strategy's formats (collage_strategy_get), by
 * role as collage_adamw_config.words lays them out (words[COLLAGE_ROLE_WEIGHTS] is θ; an 8-bit word is
 * its n codes padded to a multiple of 64 bytes, then ceil(n / 256) fp32 block scales), the gradient in
 * θ's format, and the hyperparameters of its group. The kept value's words must be set (a first step:
 * compensation zero, master = θ; collage_adamw_set_weights_f32's values for fp32 weights). */
typedef struct {
    void *words[COLLAGE_ROLE_COUNT];
    const void *grad;
    size_t n;
    uint64_t index0;           /* the slab index of element 0: keys stochastic rounding as a shard's index0
                                  does (a multiple of 256 for a strategy with 8-bit moments) */
    uint64_t step;             /* t, this step's number (1 for the first): bias correction and the SR key */
    double lr, weight_decay;
    double beta1, beta2, eps;  /* as collage_adamw_config (no defaults here: give all three) */
} collage_cuda_tensor;

typedef struct {
    collage_strategy strategy;
    double clip;               /* clip the global gradient norm (all tensors of a step) to this; 0: none */
    int skip_nonfinite;        /* a NaN or Inf in any gradient skips the step: nothing changes */
    int edq;                   /* measure EDQ (numerics.md §7) each step: the scalar reference's sums */
    uint64_t seed;             /* stochastic rounding's stream (collage_rand_key(seed, t)) */
    double grad_scale;         /* gradients come multiplied by this (loss scaling); 0 means 1 */
    int max_tensors;           /* the most tensors a step takes */
    size_t max_elements;       /* the most elements (all tensors together) a step takes */
    int device;                /* the CUDA device the step runs on (its memory is allocated there) */
} collage_cuda_adamw_config;

typedef struct collage_cuda_adamw collage_cuda_adamw;

/* The step's device memory (tensor table, Σg² chunks, EDQ sums, the codes' tables) is allocated here, on
 * cfg->device; every call works on that device and leaves the caller's current device as it was.
 * COLLAGE_ERR_UNSUPPORTED (*out NULL) for a strategy with a part the device lines do not have.
 * COLLAGE_ERR_UNSUPPORTED when no CUDA device can be used: then *out, if not NULL, holds the object, whose
 * error message says why; free it. */
collage_status collage_cuda_adamw_create(const collage_cuda_adamw_config *cfg, collage_cuda_adamw **out);
void           collage_cuda_adamw_free(collage_cuda_adamw *o); /* NULL is fine */
const char    *collage_cuda_adamw_error(const collage_cuda_adamw *o);

/* Σg² is summed per chunk of 2^14 elements from each tensor's element 0, each chunk as
 * collage_sumsq_chunks sums it, and the chunk sums added in order, tensor after tensor (the Python
 * package's CPU path and collage_adamw_step_many's Σg²). The number of chunks of k tensors: */
size_t         collage_cuda_sumsq_chunk_count(const collage_cuda_tensor *t, int k);
/* The chunk sums of the k tensors' gradients into out (device memory, collage_cuda_sumsq_chunk_count
 * doubles). For sharded training: each rank writes its chunks into their places of the whole model's
 * chunk vector (zeros elsewhere), one all-reduce (sum) gives every rank the vector exactly (x + 0 = x),
 * and collage_cuda_adamw_step adds it in order: the clipping factor of the unsharded step. */
collage_status collage_cuda_sumsq_chunks(collage_cuda_adamw *o, const collage_cuda_tensor *t, int k, double *out,
                                         void *stream);
/* One step of k tensors. chunk_sums NULL: Σg² of the tensors' gradients is summed here; else the n_chunks
 * device doubles at chunk_sums are added in order (the whole model's, all-reduced). lr, weight decay,
 * betas, eps and t are each tensor's. Enqueued on stream. */
collage_status collage_cuda_adamw_step(collage_cuda_adamw *o, const collage_cuda_tensor *t, int k,
                                       const double *chunk_sums, size_t n_chunks, void *stream);
/* The last step's figures, after waiting for its stream: skipped, grad_norm, clip_coef and, with EDQ,
 * the whole step's EDQ (the tensors' sums added in order) in stats (step is left 0: the caller counts);
 * per_tensor (k entries, may be NULL): each tensor's EDQ sums, its blocks added in order. */
collage_status collage_cuda_adamw_stats(collage_cuda_adamw *o, collage_step_stats *stats, collage_edq *per_tensor);

#ifdef __cplusplus
}
#endif
#endif /* COLLAGE_CUDA_H */
