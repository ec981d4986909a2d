/* strategy.h — the strategy table: one row per precision strategy (collage.h collage_strategy_info),
 * with its name, the words it stores by role (format, bytes per parameter), the format its AdamW
 * lines round to, and where it keeps an update too small for θ. Allocation, state files, the step's
 * slabs, the reference and the kernels ask this table which words exist; a strategy is a row here
 * plus its arithmetic lines in adamw_ref.c and adamw_kernel.inc (docs/architecture.md, "To add a
 * precision strategy"). */
#ifndef COLLAGE_STRATEGY_H
#define COLLAGE_STRATEGY_H

#include "collage.h"

/* One word of each kind: format, block (Q8 only), bytes per parameter, derived. */
#define WORD_FP32 {COLLAGE_WORD_FP32, 0, 4.0, 0}
#define WORD_BF16 {COLLAGE_WORD_BF16, 0, 2.0, 0}
#define WORD_BF16_DERIVED {COLLAGE_WORD_BF16, 0, 2.0, 1}
#define WORD_INT16 {COLLAGE_WORD_INT16, 0, 2.0, 0}

/* The table is static const here rather than in strategy.c so that the kernels, compiled once per
 * strategy with the strategy a constant, fold every question they ask of it into a constant: no
 * lookup and no branch is left in their loops. strategy.c hands out this row through
 * collage_strategy_get. */
static const collage_strategy_info collage__strategy_table[COLLAGE_STRATEGY_COUNT] = {
    [COLLAGE_FP32] = {.name = "fp32", .arith = COLLAGE_WORD_FP32,
                      .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_FP32, [COLLAGE_ROLE_M] = WORD_FP32,
                               [COLLAGE_ROLE_V] = WORD_FP32}},
    [COLLAGE_BF16] = {.name = "bf16", .arith = COLLAGE_WORD_BF16,
                      .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_BF16, [COLLAGE_ROLE_M] = WORD_BF16,
                               [COLLAGE_ROLE_V] = WORD_BF16}},
    [COLLAGE_LIGHT] = {.name = "collage-light", .alias = "light", .arith = COLLAGE_WORD_BF16,
                       .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_BF16, [COLLAGE_ROLE_M] = WORD_BF16,
                                [COLLAGE_ROLE_V] = WORD_BF16, [COLLAGE_ROLE_COMPENSATION] = WORD_BF16},
                       .keeps_update_in = "its compensation word δθ"},
    [COLLAGE_PLUS] = {.name = "collage-plus", .alias = "plus", .arith = COLLAGE_WORD_BF16,
                      .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_BF16, [COLLAGE_ROLE_M] = WORD_BF16,
                               [COLLAGE_ROLE_V] = WORD_BF16, [COLLAGE_ROLE_COMPENSATION] = WORD_BF16,
                               [COLLAGE_ROLE_DV] = WORD_BF16},
                      .keeps_update_in = "its compensation word δθ"},
    [COLLAGE_BF16_FP32_STATES] = {.name = "bf16-fp32-states", .arith = COLLAGE_WORD_FP32,
                                  .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_BF16, [COLLAGE_ROLE_M] = WORD_FP32,
                                           [COLLAGE_ROLE_V] = WORD_FP32}},
    [COLLAGE_BF16_MASTER] = {.name = "bf16-master", .arith = COLLAGE_WORD_FP32,
                             .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_BF16_DERIVED, [COLLAGE_ROLE_M] = WORD_FP32,
                                      [COLLAGE_ROLE_V] = WORD_FP32, [COLLAGE_ROLE_MASTER] = WORD_FP32},
                             .keeps_update_in = "its fp32 master weights"},
    [COLLAGE_BF16_KAHAN] = {.name = "bf16-kahan", .arith = COLLAGE_WORD_BF16,
                            .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_BF16, [COLLAGE_ROLE_M] = WORD_BF16,
                                     [COLLAGE_ROLE_V] = WORD_BF16, [COLLAGE_ROLE_KAHAN] = WORD_BF16},
                            .keeps_update_in = "its Kahan buffer"},
    [COLLAGE_BF16_SR] = {.name = "bf16-sr", .arith = COLLAGE_WORD_BF16,
                         .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_BF16, [COLLAGE_ROLE_M] = WORD_BF16,
                                  [COLLAGE_ROLE_V] = WORD_BF16}},
    [COLLAGE_BF16_REMAINDER] = {.name = "bf16-remainder", .arith = COLLAGE_WORD_BF16,
                                .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_BF16, [COLLAGE_ROLE_M] = WORD_BF16,
                                         [COLLAGE_ROLE_V] = WORD_BF16, [COLLAGE_ROLE_REMAINDER] = WORD_INT16},
                                .keeps_update_in = "its remainder bits"},
    [COLLAGE_PLUS_V1] = {.name = "collage-plus-v1", .arith = COLLAGE_WORD_BF16,
                         .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_BF16, [COLLAGE_ROLE_M] = WORD_BF16,
                                  [COLLAGE_ROLE_V] = WORD_BF16, [COLLAGE_ROLE_COMPENSATION] = WORD_BF16,
                                  [COLLAGE_ROLE_DV] = WORD_BF16},
                         .keeps_update_in = "its compensation word δθ"},
};

/* The questions asked of the table, for a valid strategy (callers check s < COLLAGE_STRATEGY_COUNT
 * first). Always inlined, so that in the kernels the answer is a constant from their first pass on. */
#define STRATEGY_INL static inline __attribute__((always_inline))
STRATEGY_INL const collage_strategy_info *strategy_row(collage_strategy s) { return &collage__strategy_table[s]; }
/* Whether strategy s stores a word of role r. */
STRATEGY_INL int strategy_has(collage_strategy s, collage_word_role r) {
    return collage__strategy_table[s].word[r].format != COLLAGE_WORD_NONE;
}
/* Whether s's weights (and so its gradients) are fp32. */
STRATEGY_INL int strategy_weights_fp32(collage_strategy s) {
    return collage__strategy_table[s].word[COLLAGE_ROLE_WEIGHTS].format == COLLAGE_WORD_FP32;
}
/* Whether s keeps a bf16 value beside θ that the kept weight adds to it (δθ or Kahan's c). */
STRATEGY_INL int strategy_has_bf16_comp(collage_strategy s) {
    return collage__strategy_table[s].word[COLLAGE_ROLE_COMPENSATION].format == COLLAGE_WORD_BF16 ||
           collage__strategy_table[s].word[COLLAGE_ROLE_KAHAN].format == COLLAGE_WORD_BF16;
}
/* The role of s's word beside θ in the step's comp slab (δθ, c or the remainder); COLLAGE_ROLE_COUNT
 * where it has none. */
STRATEGY_INL collage_word_role strategy_comp_role(collage_strategy s) {
    return strategy_has(s, COLLAGE_ROLE_COMPENSATION) ? COLLAGE_ROLE_COMPENSATION
           : strategy_has(s, COLLAGE_ROLE_KAHAN)      ? COLLAGE_ROLE_KAHAN
           : strategy_has(s, COLLAGE_ROLE_REMAINDER)  ? COLLAGE_ROLE_REMAINDER
                                                      : COLLAGE_ROLE_COUNT;
}

/* Bytes one element of a word of format f takes in memory and in the state file; 0 for a format
 * whose storage is not implemented (COLLAGE_WORD_NONE, COLLAGE_WORD_Q8). */
size_t collage__word_size(collage_word_format f);
/* COLLAGE_OK when this build's step implements every word of s in the format its row gives (weights
 * fp32 or bf16, moments in the arithmetic's format, δθ, c and δv bf16, the remainder int16, the
 * master fp32); COLLAGE_ERR_UNSUPPORTED otherwise (an 8-bit or fp16 word); COLLAGE_ERR_ARG for an
 * unknown strategy. */
collage_status collage__strategy_check(collage_strategy s);

#endif
