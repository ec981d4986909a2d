/* mlm.c — masked language modelling on the loader's windows: RoBERTa's dynamic masking (collage_mlm_mask),
 * drawn per training step from the run's seed and, for evaluation, from a fixed key so that every run and
 * every `collage eval` scores the same positions; the micro-batches of a training step or an evaluation
 * for either objective, with the loss divisor that makes a batch's masked-LM loss its mean over every
 * masked position of the whole batch, however it is split into ranks and micro-batches. */
#include "run_internal.h"
#include <math.h>

/* The thresholds of the three draws of a position, out of 2³². */
#define MLM_CHOOSE 644245094u  /* ⌊0.15·2³²⌋: chosen */
#define MLM_MASK 3435973836u   /* ⌊0.8·2³²⌋: of the chosen, the mask token below this */
#define MLM_RANDOM 3865470566u /* ⌊0.9·2³²⌋: a random token below this, unchanged above */
#define MLM_STREAM 0x6d6c6d2d7472616eull /* the run's masks: key (seed, this stream), then the step */
#define MLM_EVAL_KEY 0x6d6c6d2d6576616cull /* evaluation's masks: this key, then the batch */

long collage_mlm_mask(uint64_t key, const int32_t *tokens, const int *lengths, int rows, int T, uint64_t row0,
                      int mask_token, int text_vocab, int32_t *inputs, int32_t *targets) {
    long chosen = 0;
    for (int r = 0; r < rows; r++) {
        const int len = lengths ? lengths[r] : T;
        for (int t = 0; t < T; t++) {
            const size_t n = (size_t)r * (size_t)T + (size_t)t;
            const uint64_t at = 4 * ((row0 + (uint64_t)r) * (uint64_t)T + (uint64_t)t);
            const int32_t tok = tokens[n];
            inputs[n] = tok;
            targets[n] = COLLAGE_TARGET_NONE;
            if (t >= len || collage_rand32(key, at) >= MLM_CHOOSE) continue;
            chosen++;
            targets[n] = tok;
            const uint32_t u = collage_rand32(key, at + 1);
            if (u < MLM_MASK) inputs[n] = mask_token;
            else if (u < MLM_RANDOM)
                inputs[n] = (int32_t)(((uint64_t)collage_rand32(key, at + 2) * (uint64_t)text_vocab) >> 32);
        }
    }
    return chosen;
}

uint64_t collage_mlm_key(uint64_t seed, int train, uint64_t step) {
    return train ? collage_rand_key(collage_rand_key(seed, MLM_STREAM), step) : collage_rand_key(MLM_EVAL_KEY, step);
}

/* A whole global batch of the loader (rows B of T), masked with key into in, tg; the masked count. -1 when
 * the split has no such batch. */
static long masked_batch(const collage_loader *ld, const collage_model_config *mc, collage_split split, uint64_t step,
                         uint64_t key, int B, int T, int32_t *in, int32_t *tg) {
    if (collage_loader_batch(ld, split, step, 0, 1, in, tg) != COLLAGE_OK) return -1;
    return collage_mlm_mask(key, in, NULL, B, T, 0, collage_model_mask_token(mc), collage_model_text_vocab(mc), in, tg);
}

int run_micro_batch(collage_run *r, collage_split split, uint64_t step, int k, double *divisor) {
    *divisor = 0;
    if (!r->mlm) return collage_loader_batch(r->ld, split, step, k, r->M, r->in, r->tg) == COLLAGE_OK ? 0 : -1;
    const int T = r->cfg.seq;
    const uint64_t key = collage_mlm_key(r->cfg.seed, split == COLLAGE_SPLIT_TRAIN, step);
    const long total = masked_batch(r->ld, &r->mc, split, step, key, r->cfg.batch, T, r->gin, r->gtg);
    if (total < 0) return -1;
    const size_t off = (size_t)k * (size_t)r->Bm * (size_t)T, len = (size_t)r->Bm * (size_t)T;
    memcpy(r->in, r->gin + off, len * sizeof *r->in);
    memcpy(r->tg, r->gtg + off, len * sizeof *r->tg);
    /* each micro-batch's Σ / (total / M): their mean over the M micro-batches is Σ / total */
    *divisor = total > 0 ? (double)total / (double)r->M : 1.0;
    return 0;
}

collage_status collage_eval_scores(collage_model *m, const void *params, const collage_loader *ld, collage_split split,
                                   int B, int T, int batches, collage_scores *out) {
    if (!m || !params || !ld || !out) return COLLAGE_ERR_NULL;
    const collage_model_config *mc = collage_model_get_config(m);
    const int mlm = collage_family_objective(mc->family) == COLLAGE_OBJECTIVE_MASKED_LM;
    *out = (collage_scores){.loss = (double)NAN, .accuracy = (double)NAN};
    const size_t bt = (size_t)B * (size_t)T;
    int32_t *in = malloc(sizeof(int32_t) * bt), *tg = malloc(sizeof(int32_t) * bt);
    if (!in || !tg) { free(in); free(tg); return COLLAGE_ERR_NOMEM; }
    const uint64_t per_epoch = collage_loader_steps_per_epoch(ld, split);
    if ((uint64_t)batches > per_epoch) batches = (int)per_epoch;
    double sum = 0;
    long long hits = 0;
    int done = 0;
    collage_status st = COLLAGE_OK;
    for (int b = 0; b < batches && st == COLLAGE_OK; b++) {
        collage_forward_info fi;
        if (mlm ? masked_batch(ld, mc, split, (uint64_t)b, collage_mlm_key(0, 0, (uint64_t)b), B, T, in, tg) < 0
                : collage_loader_batch(ld, split, (uint64_t)b, 0, 1, in, tg) != COLLAGE_OK)
            break;
        const collage_batch batch = {.tokens = in, .targets = tg, .B = B, .T = T};
        if ((st = collage_model_forward_batch(m, params, &batch, &fi)) != COLLAGE_OK) break;
        sum += fi.loss;
        out->scored += fi.scored;
        hits += fi.correct;
        done++;
    }
    free(in); free(tg);
    if (done) out->loss = sum / done;
    if (done && mlm && out->scored) out->accuracy = (double)hits / (double)out->scored;
    return st;
}
