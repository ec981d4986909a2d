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
    int bf16, step, P, R, A, M, Bm;
    uint64_t fingerprint;
    int resumed_ranks, resumed_accum;
    char err[1024];
};

static inline const collage_comm *run_comm(const collage_run *r) { return r->has_comm ? &r->comm : NULL; }
/* A message into r->err with status st ("rank R: " before it when there are several ranks). */
collage_status run_fail(collage_run *r, collage_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Every rank says whether it failed; all learn it. st: this rank's status. Returns st on the failing
 * rank, COLLAGE_ERR_PEER (with a message naming the rank) on the others, COLLAGE_OK when none failed. */
collage_status run_agree(collage_run *r, collage_status st, const char *what);

/* run_ckpt.c */
collage_status run_load_shards(collage_run *r, const char *dir, const collage_run_saved *saved);
void           run_opt_path(char *out, size_t cap, const char *dir, int rank, int ranks);
#endif
