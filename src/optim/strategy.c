/* strategy.c — the public side of the strategy table (strategy.h): names and aliases, the rows
 * themselves, the memory report as the sum of a row's words, and the check that this build's step
 * implements every word a row asks for. */
#include "strategy.h"
#include <string.h>

const collage_strategy_info *collage_strategy_get(collage_strategy s) {
    return (unsigned)s < COLLAGE_STRATEGY_COUNT ? &collage__strategy_table[s] : NULL;
}

const char *collage_strategy_name(collage_strategy s) {
    return (unsigned)s < COLLAGE_STRATEGY_COUNT ? collage__strategy_table[s].name : "unknown";
}

collage_status collage_strategy_parse(const char *name, collage_strategy *out) {
    if (!name || !out) return COLLAGE_ERR_NULL;
    for (int i = 0; i < COLLAGE_STRATEGY_COUNT; i++)
        if (!strcmp(name, collage__strategy_table[i].name)) { *out = (collage_strategy)i; return COLLAGE_OK; }
    for (int i = 0; i < COLLAGE_STRATEGY_COUNT; i++) {
        const char *alias = collage__strategy_table[i].alias;
        if (alias && !strcmp(name, alias)) { *out = (collage_strategy)i; return COLLAGE_OK; }
    }
    return COLLAGE_ERR_ARG;
}

int collage_strategy_is_fp32(collage_strategy s) {
    return (unsigned)s < COLLAGE_STRATEGY_COUNT &&
           collage__strategy_table[s].word[COLLAGE_ROLE_WEIGHTS].format == COLLAGE_WORD_FP32;
}

collage_memory collage_strategy_memory(collage_strategy s) {
    collage_memory r = {0};
    if ((unsigned)s >= COLLAGE_STRATEGY_COUNT) return r;
    const collage_state_word *w = collage__strategy_table[s].word;
    r.weights = w[COLLAGE_ROLE_WEIGHTS].bytes;
    r.compensation = w[COLLAGE_ROLE_COMPENSATION].bytes + w[COLLAGE_ROLE_KAHAN].bytes +
                     w[COLLAGE_ROLE_REMAINDER].bytes + w[COLLAGE_ROLE_DV].bytes;
    r.m = w[COLLAGE_ROLE_M].bytes;
    r.v = w[COLLAGE_ROLE_V].bytes;
    r.master = w[COLLAGE_ROLE_MASTER].bytes;
    r.grad = w[COLLAGE_ROLE_WEIGHTS].bytes; /* the gradient has the weights' format */
    r.total = r.weights + r.compensation + r.m + r.v + r.master + r.grad;
    return r;
}

const char *collage_word_role_name(collage_word_role r) {
    static const char *const names[COLLAGE_ROLE_COUNT] = {
        [COLLAGE_ROLE_WEIGHTS] = "θ", [COLLAGE_ROLE_M] = "m", [COLLAGE_ROLE_V] = "v",
        [COLLAGE_ROLE_COMPENSATION] = "δθ", [COLLAGE_ROLE_KAHAN] = "c", [COLLAGE_ROLE_REMAINDER] = "remainder",
        [COLLAGE_ROLE_DV] = "δv", [COLLAGE_ROLE_MASTER] = "master"};
    return (unsigned)r < COLLAGE_ROLE_COUNT ? names[r] : "unknown";
}

const char *collage_word_format_name(collage_word_format f) {
    static const char *const names[COLLAGE_WORD_FORMAT_COUNT] = {
        [COLLAGE_WORD_NONE] = "none", [COLLAGE_WORD_FP32] = "fp32", [COLLAGE_WORD_BF16] = "bf16",
        [COLLAGE_WORD_FP16] = "fp16", [COLLAGE_WORD_INT16] = "int16", [COLLAGE_WORD_Q8] = "q8"};
    return (unsigned)f < COLLAGE_WORD_FORMAT_COUNT ? names[f] : "unknown";
}

size_t collage__word_size(collage_word_format f) {
    switch (f) {
    case COLLAGE_WORD_FP32: return 4;
    case COLLAGE_WORD_BF16:
    case COLLAGE_WORD_FP16:
    case COLLAGE_WORD_INT16: return 2;
    default: return 0; /* none, or Q8: where its block scales go is not defined yet */
    }
}

/* The format the step's slabs (adamw_impl.h adamw_slabs) give each role but θ, for arithmetic a. */
static collage_word_format step_format(collage_word_role r, collage_word_format a) {
    switch (r) {
    case COLLAGE_ROLE_M:
    case COLLAGE_ROLE_V: return a;
    case COLLAGE_ROLE_REMAINDER: return COLLAGE_WORD_INT16;
    case COLLAGE_ROLE_MASTER: return COLLAGE_WORD_FP32;
    default: return COLLAGE_WORD_BF16; /* δθ, c, δv */
    }
}

collage_status collage__strategy_check(collage_strategy s) {
    if ((unsigned)s >= COLLAGE_STRATEGY_COUNT) return COLLAGE_ERR_ARG;
    const collage_strategy_info *T = &collage__strategy_table[s];
    if (T->arith != COLLAGE_WORD_FP32 && T->arith != COLLAGE_WORD_BF16) return COLLAGE_ERR_UNSUPPORTED;
    if (!strategy_has(s, COLLAGE_ROLE_WEIGHTS) || !strategy_has(s, COLLAGE_ROLE_M) || !strategy_has(s, COLLAGE_ROLE_V))
        return COLLAGE_ERR_UNSUPPORTED;
    for (int r = 0; r < COLLAGE_ROLE_COUNT; r++) {
        collage_word_format f = T->word[r].format;
        if (f == COLLAGE_WORD_NONE) continue;
        if (collage__word_size(f) == 0 || T->word[r].bytes != (double)collage__word_size(f))
            return COLLAGE_ERR_UNSUPPORTED;
        if (r == COLLAGE_ROLE_WEIGHTS) { /* bf16 for either arithmetic, fp32 only with fp32 arithmetic */
            if (f != COLLAGE_WORD_BF16 && !(f == COLLAGE_WORD_FP32 && T->arith == f)) return COLLAGE_ERR_UNSUPPORTED;
        } else if (f != step_format((collage_word_role)r, T->arith))
            return COLLAGE_ERR_UNSUPPORTED;
    }
    return COLLAGE_OK;
}
