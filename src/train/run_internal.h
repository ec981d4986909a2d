/* run_internal.h — the training run's object, shared by run.c (create, step, evaluate) and
 * run_ckpt.c (train.state, save, resume and re-shard). */
#ifndef COLLAGE_RUN_INTERNAL_H
#define COLLAGE_RUN_INTERNAL_H
#include "collage_run.h"
#include "internal.h"
#include "shard.h"

#define RUN_MAX_MICRO 4096 /* ranks × micro-batches per rank */
#define RUN_MAX_ACCUM 256  /* micro-batches per rank */

struct collage_run {
    collage_run_config cfg;       /* resolved: the preset's shape, seq, warmup filled in */
    char model_name[64], tokenizer_name[64], *data, *init;
    char fp8_recipe[16];          /* cfg.fp8_recipe's copy */
    char fp4_recipe[24];          /* cfg.fp4_recipe's copy */
#define RUN_FP4_SR_STREAM 0x46503453ull /* collage_rand_key stream of the fp4 gradients' SR keys ("FP4S") */
    float *amax_all;              /* fp8 on several ranks: every rank's delayed amaxes */
    collage_comm comm;            /* a copy; has_comm 0: one process */
    int has_comm;
    collage_tokenizer *tok;
    collage_loader *ld;
    collage_model *m;
    collage_adamw *opt;
    collage_model_config mc;
    void *params, *grads, *gshard; /* grads: the model's slab; gshard: this rank's reduced shard */
    float *gacc;                  /* micro-batch sum when accum > 1 */
    double *gathered;             /* every rank's losses or EDQ sums: max(M, 5·P) */
    collage_edq *parts;           /* every rank's EDQ, P */
    int32_t *in, *tg;
    size_t n, lo, hi, wb;         /* parameters, this rank's shard, bytes per weight */
    int bf16, step, P, R, A, M, Bm; /* bf16: the weights' (and gradients') kind: 0 fp32, 1 bf16, 2 fp16 */
    double loss_scale;            /* the dynamic loss scale of the fp16 strategies; 1 otherwise */
    int scale_good;               /* finite steps since it last changed */
    uint64_t fingerprint;
    int resumed_ranks, resumed_accum;
    int mlm;                      /* the model's objective is masked LM (mlm.c) */
    int32_t *gin, *gtg;           /* masked LM: the whole global batch, masked */
    uint64_t run_id;              /* the lineage of its checkpoints: new for a new run, kept on resume */
    int skipped;                  /* steps skipped so far (non-finite gradient): the optimizer's count lags by it */
    int streak, first_bad;        /* skipped steps in a row, and the first bad step of the streak */
    int diverged;                 /* the step that made the run diverge (0: it has not) */
    char err[1024];
};

static inline const collage_comm *run_comm(const collage_run *r) { return r->has_comm ? &r->comm : NULL; }
/* A message into r->err with status st ("rank R: " before it when there are several ranks). */
collage_status run_fail(collage_run *r, collage_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Every rank says whether it failed; all learn it. st: this rank's status. Returns st on the failing
 * rank, COLLAGE_ERR_PEER (with a message naming the rank) on the others, COLLAGE_OK when none failed. */
collage_status run_agree(collage_run *r, collage_status st, const char *what);

/* mlm.c: micro-batch k of batch `step` of a split (a training step's, or an evaluation's) into r->in and
 * r->tg: next-token windows, or masked-LM inputs and targets with *divisor the loss divisor of
 * collage_batch (0: the micro-batch's mean). 0, or -1 when the split has no such batch. */
int run_micro_batch(collage_run *r, collage_split split, uint64_t step, int k, double *divisor);

/* The divergence watch after step `step` (run.c): st, or COLLAGE_ERR_NONFINITE with a message when
 * the step was skipped or made the run diverge (r->diverged). */
collage_status run_watch(collage_run *r, collage_status st, int step, double loss, int skipped);

/* run_ckpt.c: the files of one checkpoint */
collage_status run_load_shards(collage_run *r, const char *dir, const collage_run_saved *saved);
/* fp8 compute: the checkpoint's delayed scaling state (fp8.state) into the model; none saved: nothing. */
collage_status run_load_fp8(collage_run *r, const char *dir);
void           run_opt_path(char *out, size_t cap, const char *dir, int rank, int ranks);
/* ckdir/train.state, exactly that folder's (its own checksum verified for the current layout). */
collage_status run_manifest_read(const char *ckdir, collage_run_saved *s, char *err, size_t cap);

/* ckpt.c: the run folder. An entry is a complete checkpoint: a step-N folder, or the folder itself
 * ("here": the older layout, or a checkpoint folder given directly). ok: its train.state was read. */
typedef struct { int step, here, ok; uint64_t run_id; char name[32]; } ckpt_entry;
/* dir/step-0000000N + suffix */
void ckpt_path(char *out, size_t cap, const char *dir, int step, const char *suffix);
/* The checkpoints of dir by step, oldest first (malloc'd; run ids read when want_ids); -1: unreadable. */
int  ckpt_list(const char *dir, ckpt_entry **out, int want_ids);
/* dir as a folder: created when missing; COLLAGE_ERR_IO naming it when it is a file or cannot be made. */
collage_status ckpt_make_folder(const char *dir, char *err, size_t cap);
/* Remove what killed or failed saves left in dir, unless another process holds dir's lock (lock.c). */
void ckpt_clean(const char *dir);
/* 1 when another process holds dir's lock (a run saving there). */
int  ckpt_busy(const char *dir);
/* Remove a checkpoint so that no moment leaves part of one under a checkpoint's name. 0 or -1. */
int  ckpt_remove(const char *dir, const ckpt_entry *e);
/* The complete folder tmp becomes fin (replacing a checkpoint of the same step), durably. 0 or -1. */
int  ckpt_commit(const char *dir, const char *tmp, const char *fin);
/* After saving `step`: keep it and the keep - 1 newest older checkpoints of run_id; remove the rest
 * (other runs', and this run's newer ones, which a resume from an older step left behind). 0 or -1. */
int  ckpt_prune(const char *dir, int step, uint64_t run_id, int keep);
int  ckpt_rm_tree(const char *path);
void ckpt_sync_dir(const char *dir);
#endif
