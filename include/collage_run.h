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
    collage_optimizer optimizer;/* the update rule (0: AdamW); Lion reads beta1 and beta2 (the CLI's beta2 for
                                   Lion: 0.99), SGD momentum and nesterov (its decay is L2, as PyTorch's) */
    double momentum;            /* SGD's μ in [0, 1) */
    int nesterov;               /* SGD: Nesterov's momentum */
    double loss_scale;          /* fp16 strategies: the first dynamic loss scale (0: COLLAGE_LOSS_SCALE_INIT) */
    int fp8;                    /* 1: fp8 compute (COLLAGE_REAL_FP8; a strategy with bf16 weights): every matrix
                                   product on fp8 operands; a step whose fp8 operand holds NaN or Inf is skipped as a
                                   gradient with NaN is; the delayed scaling's amaxes max-reduced over the ranks */
    const char *fp8_recipe;     /* fp8: "delayed" (NULL), "current", "block" or "mxfp8" (collage_model_fp8_set) */
    int fp8_e4m3_all;           /* fp8: e4m3 for the gradients too (0: e5m2) */
    int fp4;                    /* 1: 4-bit compute (COLLAGE_REAL_FP4; a strategy with bf16 weights): every matrix
                                   product on NVFP4 or MXFP4 operands, the gradients rounded stochastically with a key
                                   per micro-batch; a step whose operand holds NaN or Inf is skipped */
    const char *fp4_recipe;     /* fp4: "nvfp4" (NULL), "mxfp4", either with ",hadamard" (collage_model_fp4_set) */
    int fp4_bf16_last;          /* fp4: the last linear layers that keep bf16 products */
    /* what the run does, not what it computes (not saved; may differ on resume) */
    int keep;                   /* checkpoints of this run kept in a run folder by collage_run_save (0: 2) */
    int max_skips;              /* skipped steps in a row that mean divergence (0: 10) */
} collage_run_config;

/* Dynamic loss scaling of the fp16 strategies: the backward computes the gradient of scale × loss
 * (collage_model_set_loss_scale) and the optimizer divides it out (collage_adamw_set_grad_scale). A
 * step whose scaled gradient overflows (a NaN or Inf anywhere) is skipped and the scale halved; after
 * COLLAGE_LOSS_SCALE_GROWTH finite steps in a row it doubles. The scale and the count are part of the
 * checkpoint, so a resumed run goes on bit for bit. */
#define COLLAGE_LOSS_SCALE_INIT 65536.0
#define COLLAGE_LOSS_SCALE_GROWTH 200
#define COLLAGE_LOSS_SCALE_MIN 0x1p-14 /* an overflow at this scale is a non-finite gradient: reported */

/* The defaults of `collage train`: tiny model, byte tokenizer, collage-light, 1000 steps, 16 x 64,
 * lr 1e-3, β 0.9 / 0.95, eps 1e-8, weight decay 0.1, clipping 1.0, seed 1337; keep 2, max_skips 10. */
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
    COLLAGE_RUN_STRATEGY = 1u << 15, COLLAGE_RUN_STEPS = 1u << 16, COLLAGE_RUN_KV_HEADS = 1u << 17,
    COLLAGE_RUN_HIDDEN = 1u << 18, COLLAGE_RUN_OPTIMIZER = 1u << 19, COLLAGE_RUN_MOMENTUM = 1u << 20,
    COLLAGE_RUN_NESTEROV = 1u << 21, COLLAGE_RUN_COMPUTE = 1u << 22 /* fp8, fp8_recipe, fp8_e4m3_all, fp4, fp4_recipe, fp4_bf16_last */
};

/* ---------------------------------------------------------------- checkpoints */
/* A run folder (collage train --save RUN) holds one folder per checkpoint, RUN/step-00000100, each
 * complete: model.bin (the family's format), one optimizer state per rank (optimizer.state for one
 * rank, optimizer.rankR-of-N.state for N) and train.state, the manifest: every setting that shapes
 * the run, the size and 64-bit checksum of every other file, and its own checksum. A save writes a
 * folder RUN/step-00000100.tmp and renames it into place once every file is written and synced, so a
 * reader sees the earlier checkpoints and, once complete, the new one, never a part of it; what a
 * killed save leaves (*.tmp folders and files, .trash-* folders) is removed by the next save or
 * resume: one run (one process, or one job of ranks) saves into a run folder at a time. The older
 * layout, the three files directly in RUN with no checksums, is still read. */
typedef struct {
    collage_run_config cfg;     /* its strings point into this struct */
    int step;                   /* steps taken */
    int ranks, accum;           /* how it was split */
    uint64_t data_fingerprint;  /* collage_loader_fingerprint of the data it trained on */
    char tokenizer[64], model[64];
    double loss_scale;          /* the loss scale the next step uses (0 for all but the fp16 strategies) */
    int loss_scale_good;        /* finite steps since the scale last changed */
    int skipped;                /* steps skipped for a non-finite gradient or an fp16 overflow (the optimizer
                                   did not count them) */
    uint64_t run_id;            /* the run's lineage: the same over its checkpoints and its resumed runs */
    int version;                /* of train.state: 2, or 1 for the older layout (no checksums) */
    char products[48];          /* the kernels its model's products ran on, as a pin (collage_products_pin):
                                   a resume takes them unless the process pins others; "" in older runs */
    char fp8_recipe[16];        /* cfg.fp8_recipe's storage (fp8 compute) */
    char fp4_recipe[24];        /* cfg.fp4_recipe's storage (fp4 compute) */
} collage_run_saved;
/* The checkpoint a path names: a checkpoint folder itself, or a run folder's newest checkpoint (by
 * step). Errors name the path and say what it holds. */
typedef struct {
    char dir[4096];             /* the checkpoint's folder (RUN/step-N, or RUN itself in the older layout) */
    int step;
    int older;                  /* how many older checkpoints the run folder holds */
    char previous[4096];        /* the newest of those ("" when none) */
} collage_checkpoint;
collage_status collage_checkpoint_find(const char *path, collage_checkpoint *out, char *err, size_t cap);
/* Check file `name` of the checkpoint at path (NULL: every file) against the size and checksum that
 * its train.state records; train.state's own checksum is checked too. The older layout records none:
 * only its train.state is read. COLLAGE_ERR_FORMAT names the damaged file. */
collage_status collage_checkpoint_verify(const char *path, const char *name, char *err, size_t cap);
/* The model file of a checkpoint argument, verified: the path itself for a file or a Hugging Face folder
 * (collage_model_is_hf_folder), else its checkpoint's model.bin after collage_checkpoint_verify. */
collage_status collage_checkpoint_model(const char *arg, char *out, size_t cap, char *err, size_t ecap);
/* The model file of a checkpoint argument without verification (its checkpoint's model.bin for a folder
 * other than a Hugging Face one). */
void collage_checkpoint_model_path(const char *arg, char *out, size_t cap);
/* Before a run saves into the run folder dir: create it when missing and write a file there (removed
 * again): COLLAGE_ERR_IO with the reason when that fails; remove the leftovers of killed saves (temporary
 * folders and files, trash) as a save would. COLLAGE_ERR_ARG when dir holds checkpoints
 * that a save would remove (collage_run_save keeps only the saving run's): another run's, or newer
 * ones of the run resumed from `resume` (NULL: a new run), unless overwrite. A checkpoint whose
 * train.state cannot be read is nobody's: it stays until it falls out of the newest `keep`. */
collage_status collage_checkpoint_check_folder(const char *dir, const char *resume, int overwrite, char *err, size_t cap);
/* One run per folder: take the run folder dir's lock (dir/.lock, an exclusive flock, with this process's
 * pid, host and start time in it; dir created when missing), before collage_checkpoint_check_folder, and
 * hold it while the run saves there. COLLAGE_ERR_BUSY when another process holds it: err says
 * "'dir' is in use by another run (pid N…)". The kernel releases it when the process ends, however;
 * *stale_pid (may be NULL) is then the pid the file still names, a run that ended without releasing it
 * (killed), else 0. While another process holds a folder, the library never removes the leftovers of
 * killed saves there (they could be that run's save in progress). Advisory: it stops runs that take it. */
typedef struct collage_folder_lock collage_folder_lock;
collage_status collage_folder_lock_take(const char *dir, collage_folder_lock **out, long *stale_pid, char *err,
                                        size_t cap);
/* Release it and remove the file (NULL: nothing). */
void collage_folder_lock_release(collage_folder_lock *l);

/* Read the train.state of the checkpoint at path (collage_checkpoint_find), its checksum checked.
 * Errors name the file and what is wrong. */
collage_status collage_run_read_saved(const char *path, collage_run_saved *out, char *err, size_t cap);
/* Whether `asked` contradicts the saved run in a field that shapes it, set in `given` (COLLAGE_RUN_*
 * bits): the first such field, as "--flag value" in why and "key value there" in was (caps 256).
 * 1 = conflict. A model preset conflicts when the preset (with layers, heads, dim over it) has
 * another shape. lr, warmup, eps, weight decay, clipping and steps may change: collage_run_changes. */
int collage_run_conflict(const collage_run_saved *saved, const collage_run_config *asked, unsigned given,
                         char *why, char *was, size_t cap);
/* The settings that may change on resume (lr, warmup, eps, wd, clip, steps), set in `given` to
 * another value than the saved run's: "--lr 0.5 (the saved run's 0.001)" for each, joined by ", "
 * into out. Returns how many. */
int collage_run_changes(const collage_run_saved *saved, const collage_run_config *asked, unsigned given, char *out,
                        size_t cap);

/* ---------------------------------------------------------------- the run */
typedef struct collage_run collage_run;
/* Everything is allocated here: tokenizer, data, model, this rank's optimizer shard, buffers. With
 * resume_dir (a checkpoint or a run folder: its newest), the model's shape comes from its model file
 * and the optimizer state from that checkpoint (re-sharded when it was written by another number of
 * ranks), each file read checked against its checksum; its settings must be cfg's
 * (collage_run_read_saved) except those collage_run_changes lists; the temporaries a killed save left
 * in its run folder are removed. Without, the weights are cfg->init's, or the family's
 * initialisation. comm NULL: one process. A failure on any rank fails every rank (the others say
 * which rank). */
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
 * update (stats.skipped) and returns COLLAGE_ERR_NONFINITE with a message; the run can go on, unless
 * the step made it diverge: a non-finite loss, or cfg.max_skips skipped steps in a row. Then
 * diverged is set, the message names the first bad step, and every later step and every save is
 * refused (COLLAGE_ERR_NONFINITE): the last checkpoint is never replaced by a diverged state. With an
 * fp16 strategy an overflow of the scaled gradient is the loss scaler's business: the step is skipped
 * (counted in the checkpoint's skipped, not toward max_skips), the scale halved, info.overflow set, and
 * COLLAGE_OK returned (an overflow at COLLAGE_LOSS_SCALE_MIN is a non-finite gradient as above). */
typedef struct {
    int step;                   /* the step just taken, from 1 */
    double loss;                /* mean training loss of the batch */
    double lr;
    collage_step_stats stats;   /* this rank's optimizer figures: grad_norm and clip_coef are global */
    collage_edq edq;            /* EDQ of the whole slab, the ranks' parts combined in rank order */
    double loss_scale;          /* the loss scale this step's backward used (1 but for the fp16 strategies) */
    int overflow;               /* fp16: the scaled gradient overflowed; the step was skipped (stats.skipped)
                                   and the scale halved */
    int diverged;               /* this step made the run diverge (see above) */
} collage_run_step_info;
/* Signals: the products run oneDNN's JIT kernels where oneDNN is built in, and some of them use the
 * stack pointer as a data register. A signal handled on a thread inside one writes its frame into the
 * heap. A program that handles signals while steps run blocks them in the threads that step (those
 * it starts after blocking inherit the mask) and takes them on a thread of its own, or runs its handler
 * on an alternate stack (sigaltstack, SA_ONSTACK) in every thread that can take it. */
collage_status collage_run_step(collage_run *r, collage_run_step_info *info);
/* Mean loss over the first `batches` batches of a split (at most one epoch), computed as the training
 * step does. NaN when the split is absent or holds no batch. Collective. */
collage_status collage_run_evaluate(collage_run *r, collage_split split, int batches, double *loss);
/* What an evaluation measures. A masked-LM model is scored on the positions collage_mlm_mask picks with
 * the fixed evaluation key (collage_mlm_key with train = 0), the same for every run and seed. */
typedef struct {
    double loss;        /* the mean over the batches of each batch's mean loss (NaN: no batch) */
    double accuracy;    /* masked LM: the fraction of scored positions whose most probable token is the
                           original one; NaN for a next-token model */
    long long scored;   /* positions scored */
} collage_scores;
/* collage_run_evaluate with the accuracy. Collective. */
collage_status collage_run_evaluate_scores(collage_run *r, collage_split split, int batches, collage_scores *out);
/* Save a checkpoint of the current step into the run folder dir (made when missing), as described
 * under "checkpoints", then remove the checkpoints beyond the newest cfg.keep of this run, and any
 * other run's (collage_checkpoint_check_folder first refuses a folder that holds some). Refused
 * (COLLAGE_ERR_NONFINITE) once the run has diverged or when a weight is not finite. On failure (a full
 * disk, say) the folder keeps the checkpoints it had and no temporary. Collective. */
collage_status collage_run_save(collage_run *r, const char *dir);

/* The model's weights (this run's precision: float for fp32, collage_bf16 otherwise), whole on every rank. */
const void    *collage_run_params(const collage_run *r);

/* ---------------------------------------------------------------- evaluation of a loaded model */
/* Mean loss of model m with weights params over the first `batches` batches of a split of ld (at
 * most one epoch). NaN when there is no batch. */
collage_status collage_eval_loss(collage_model *m, const void *params, const collage_loader *ld, collage_split split,
                                 int B, int T, int batches, double *loss);
/* collage_eval_loss with the accuracy of a masked-LM model (its masks: the evaluation key). */
collage_status collage_eval_scores(collage_model *m, const void *params, const collage_loader *ld, collage_split split,
                                   int B, int T, int batches, collage_scores *out);

/* ---------------------------------------------------------------- masked language modelling */
/* RoBERTa's dynamic masking of `rows` sequences of T tokens, the global rows row0 … row0 + rows − 1 of a
 * batch. Position t of global row g, t < its length (lengths NULL: T), with the uniform words
 * u_j = collage_rand32(key, 4·(g·T + t) + j), is chosen when u_0 < 0.15·2³²; a chosen position's target is
 * its token, and its input the mask token when u_1 < 0.8·2³², else a random token ⌊u_2·text_vocab/2³²⌋ of
 * the tokenizer's when u_1 < 0.9·2³², else its own token. Every other position (padding included) keeps
 * its token as input and gets target COLLAGE_TARGET_NONE. A pure function of (key, g, t, token): the same
 * masks for any split of a batch into ranks and micro-batches and any thread count. inputs may be tokens.
 * Returns the number of chosen positions. */
long           collage_mlm_mask(uint64_t key, const int32_t *tokens, const int *lengths, int rows, int T,
                                uint64_t row0, int mask_token, int text_vocab, int32_t *inputs, int32_t *targets);
/* The key of the masks: training step `step` of a run seeded `seed` (train = 1: new masks every step), or
 * evaluation batch `step` (train = 0: a fixed key, seed ignored, the same masks for every run). */
uint64_t       collage_mlm_key(uint64_t seed, int train, uint64_t step);

#ifdef __cplusplus
}
#endif
#endif
