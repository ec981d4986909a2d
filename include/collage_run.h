/* collage_run.h — a training run: a model, its data, an AdamW optimizer with a precision strategy
 * and a learning-rate schedule, stepped, evaluated, saved to a checkpoint folder and resumed from
 * one bit for bit — on one process or data-parallel over ranks (ZeRO-1: each rank holds 1/N of the
 * optimizer state), re-sharded when the number of ranks changes.
 * The library does every floating-point sum of data parallelism itself, in a fixed order; the
 * caller's transport (MPI, or anything else) only moves bytes, through the collage_comm callbacks. */
#ifndef COLLAGE_RUN_H
#define COLLAGE_RUN_H

#include "collage.h"
#include "collage_data.h"
#include "collage_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- the transport */
/* Byte movers over `size` processes. Element counts and displacements are in elements of elsize
 * bytes. Each returns 0, or non-zero when the transport failed (the run then stops).
 * any: every rank passes its flag and every rank gets 1 + the highest rank whose flag is set, 0 when
 *   none is: call sites where ranks may diverge use it so that no rank waits for one that failed.
 * allgather: every rank's k elements of `mine` to `out` (size·k elements, rank order).
 * allgatherv: in place, rank r's counts[r] elements at displs[r] of buf to every rank.
 * alltoallv: MPI_Alltoallv's meaning, with send and receive layouts per rank. */
typedef struct {
    void *ctx;
    int rank, size;
    int (*any)(void *ctx, int flag);
    int (*allgather)(void *ctx, const void *mine, size_t k, size_t elsize, void *out);
    int (*allgatherv)(void *ctx, void *buf, const size_t *counts, const size_t *displs, size_t elsize);
    int (*alltoallv)(void *ctx, const void *send, const size_t *scounts, const size_t *sdispls, void *recv,
                     const size_t *rcounts, const size_t *rdispls, size_t elsize);
} collage_comm;

/* Shards start at multiples of this many elements, and the gradient's Σg² is summed in chunks of
 * it: the chunk sums, added in chunk order, do not depend on the number of ranks. */
#define COLLAGE_SHARD_CHUNK ((size_t)4096)
/* Rank r's shard [lo, hi) of n elements among `size` ranks: whole chunks, balanced (chunk counts
 * differ by at most one), the last shard ending at n. */
void collage_shard_bounds(size_t n, int size, int r, size_t *lo, size_t *hi);

/* ---------------------------------------------------------------- the configuration */
typedef struct {
    const char *model;          /* preset (collage_model_preset); NULL = "tiny" */
    int layers, heads, dim;     /* 0: the preset's */
    int kv_heads, hidden;       /* LLaMA's key/value heads and MLP size; 0: the preset's, following heads and dim
                                   (collage_model_config_resize) */
    const char *init;           /* a model file whose shape and weights start the run (its family's format, e.g.
                                   a llama2.c model); then model and the sizes above stay unset. NULL: none */
    int context;                /* the model's longest context; 0: the preset's, or seq if longer */
    const char *data;           /* corpus (collage_data.h); NULL = the default corpus */
    const char *tokenizer;      /* "byte" or "gpt2"; NULL = "byte" */
    collage_strategy strategy;
    int steps;                  /* the length of the schedule */
    int batch, seq;             /* global batch: sequences and their length (seq 0: min(64, context)) */
    int accum;                  /* micro-batches per rank per step (0 = 1) */
    int warmup;                 /* linear warm-up steps; -1 = steps / 20 */
    double lr, beta1, beta2, eps, weight_decay, clip;
    uint64_t seed;
} collage_run_config;

/* The defaults of `collage train`: tiny model, byte tokenizer, collage-light, 1000 steps, 16 x 64,
 * lr 1e-3, β 0.9 / 0.95, eps 1e-8, weight decay 0.1, clipping 1.0, seed 1337. */
collage_run_config collage_run_defaults(void);
/* Linear warm-up to lr, then cosine decay to lr/10 at the last step of the schedule. */
double collage_run_lr(const collage_run_config *cfg, int step);

/* The fields that shape a run, as bits: a caller says which it set itself (collage_run_conflict). */
enum {
    COLLAGE_RUN_TOKENIZER = 1u << 0, COLLAGE_RUN_MODEL = 1u << 1, COLLAGE_RUN_LAYERS = 1u << 2,
    COLLAGE_RUN_HEADS = 1u << 3, COLLAGE_RUN_DIM = 1u << 4, COLLAGE_RUN_BATCH = 1u << 5,
    COLLAGE_RUN_SEQ = 1u << 6, COLLAGE_RUN_WARMUP = 1u << 7, COLLAGE_RUN_LR = 1u << 8,
    COLLAGE_RUN_BETA1 = 1u << 9, COLLAGE_RUN_BETA2 = 1u << 10, COLLAGE_RUN_EPS = 1u << 11,
    COLLAGE_RUN_WD = 1u << 12, COLLAGE_RUN_CLIP = 1u << 13, COLLAGE_RUN_SEED = 1u << 14,
    COLLAGE_RUN_STRATEGY = 1u << 15, COLLAGE_RUN_KV_HEADS = 1u << 16, COLLAGE_RUN_HIDDEN = 1u << 17
};

/* ---------------------------------------------------------------- checkpoints */
/* A checkpoint folder holds model.bin (the family's format), one optimizer state per rank
 * (optimizer.state for one rank, optimizer.rankR-of-N.state for N) and, written last so that it
 * commits the checkpoint, train.state: every setting that shapes the run. */
typedef struct {
    collage_run_config cfg;     /* its strings point into this struct */
    int step;                   /* steps taken */
    int ranks, accum;           /* how it was split */
    uint64_t data_fingerprint;  /* collage_loader_fingerprint of the data it trained on */
    char tokenizer[64], model[64];
} collage_run_saved;
/* Read dir/train.state. Errors name the file and what is wrong. */
collage_status collage_run_read_saved(const char *dir, collage_run_saved *out, char *err, size_t cap);
/* Whether `asked` contradicts the saved run in a field set in `given` (COLLAGE_RUN_* bits): the
 * first such field, as "--flag value" in why and "key value there" in was (caps 256). 1 = conflict.
 * A model preset conflicts when the preset (with layers, heads, dim over it) has another shape. */
int collage_run_conflict(const collage_run_saved *saved, const collage_run_config *asked, unsigned given,
                         char *why, char *was, size_t cap);
/* The model file of a checkpoint argument: dir/model.bin for a folder, the path itself otherwise. */
void collage_checkpoint_model_path(const char *arg, char *out, size_t cap);

/* ---------------------------------------------------------------- the run */
typedef struct collage_run collage_run;
/* Everything is allocated here: tokenizer, data, model, this rank's optimizer shard, buffers. With
 * resume_dir, the model's shape comes from its model file and the optimizer state from that checkpoint
 * (re-sharded when it was written by another number of ranks), whose settings must be cfg's
 * (collage_run_read_saved) except steps, which may extend the schedule; without, the weights are
 * cfg->init's, or the family's initialisation. comm NULL: one process. A failure on any rank fails
 * every rank (the others say which rank). */
collage_status collage_run_create(const collage_run_config *cfg, const collage_comm *comm, const char *resume_dir,
                                  collage_run **out, char *err, size_t cap);
void           collage_run_free(collage_run *r);                        /* NULL is fine */
/* The message of the last failed call on r. */
const char    *collage_run_error(const collage_run *r);

/* What a run is, once created. */
typedef struct {
    collage_model_config model;
    size_t params;              /* parameters of the model */
    size_t train_tokens;        /* tokens in the training windows */
    int step;                   /* steps taken so far */
    int ranks, accum, micro_batch; /* micro_batch: sequences per forward */
    int resumed_ranks, resumed_accum; /* how the checkpoint it resumed from was split (0: not resumed) */
    int has_val;                /* a held-out split exists */
    collage_memory memory;      /* bytes per parameter by kind */
    double state_mb_per_rank;   /* optimizer state (m, v, compensation, master) of the largest shard */
    const char *products;       /* what the model's products run on (collage_model_products) */
    /* bytes this rank holds: the weights (whole), the optimizer state of its shard, the gradients (the
     * model's slab, the fp32 micro-batch sum when accum > 1, the reduced shard when micro-batches > 1),
     * the model's activations and its products' scratch */
    size_t weight_bytes, state_bytes, grad_bytes, act_bytes, scratch_bytes;
} collage_run_info;
collage_run_info collage_run_get_info(const collage_run *r);
const collage_run_config *collage_run_get_config(const collage_run *r);

/* One training step: each rank's micro-batches forward and backward, the batch gradient summed in a
 * fixed order (micro-batch k = rank·accum + a), clipped by the whole slab's norm, one AdamW step at
 * collage_run_lr, the updated weights to every rank. Collective. A non-finite gradient skips the
 * update (stats.skipped) and returns COLLAGE_ERR_NONFINITE with a message; the run can go on. */
typedef struct {
    int step;                   /* the step just taken, from 1 */
    double loss;                /* mean training loss of the batch */
    double lr;
    collage_step_stats stats;   /* this rank's optimizer figures: grad_norm and clip_coef are global */
    collage_edq edq;            /* EDQ of the whole slab, the ranks' parts combined in rank order */
} collage_run_step_info;
collage_status collage_run_step(collage_run *r, collage_run_step_info *info);
/* Mean loss over the first `batches` batches of a split (at most one epoch), computed as the training
 * step does. NaN when the split is absent or holds no batch. Collective. */
collage_status collage_run_evaluate(collage_run *r, collage_split split, int batches, double *loss);
/* Write the checkpoint folder (made when missing): every file atomic, train.state last. Collective. */
collage_status collage_run_save(collage_run *r, const char *dir);

/* The model's weights (this run's precision: float for fp32, collage_bf16 otherwise), whole on every rank. */
const void    *collage_run_params(const collage_run *r);

/* ---------------------------------------------------------------- evaluation of a loaded model */
/* Mean loss of model m with weights params over the first `batches` batches of a split of ld (at
 * most one epoch). NaN when there is no batch. */
collage_status collage_eval_loss(collage_model *m, const void *params, const collage_loader *ld, collage_split split,
                                 int B, int T, int batches, double *loss);

#ifdef __cplusplus
}
#endif
#endif
