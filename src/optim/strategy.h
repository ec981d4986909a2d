/* strategy.h — the strategy table: one row per precision strategy (collage.h collage_strategy_info),
 * with its name, the words it stores by role (format, bytes per parameter), the format its AdamW
 * lines round to, and where it keeps an update too small for θ. Allocation, state files, the step's
 * slabs, the reference and the kernels ask this table which words exist; a strategy is a row here
 * plus its arithmetic lines in adamw_ref.c and adamw_kernel.inc (docs/architecture.md, "To add a
 * precision strategy"). */
#ifndef COLLAGE_STRATEGY_H
#define COLLAGE_STRATEGY_H

#include "collage.h"

/* One word of each kind: format, block (8-bit words only), bytes per parameter, derived. */
#define WORD_FP32 {COLLAGE_WORD_FP32, 0, 4.0, 0}
#define WORD_BF16 {COLLAGE_WORD_BF16, 0, 2.0, 0}
#define WORD_BF16_DERIVED {COLLAGE_WORD_BF16, 0, 2.0, 1}
#define WORD_FP16 {COLLAGE_WORD_FP16, 0, 2.0, 0}
#define WORD_FP16_DERIVED {COLLAGE_WORD_FP16, 0, 2.0, 1}
#define WORD_INT16 {COLLAGE_WORD_INT16, 0, 2.0, 0}
#define WORD_BYTE {COLLAGE_WORD_BYTE, 0, 1.0, 0}
/* The parts of a preset (collage.h collage_composition). */
#define PARTS(W, M, V) {COLLAGE_SCHEME_##W, COLLAGE_MOMENT_##M, COLLAGE_MOMENT_##V, 0}

/* The table is static const here rather than in strategy.c so that the kernels, compiled once per
 * strategy with the strategy a constant, fold every question they ask of it into a constant: no
 * lookup and no branch is left in their loops. strategy.c hands out this row through
 * collage_strategy_get. A composed strategy's row is made from its parts by the same rules
 * (strategy.c compose_row; test_strategy_table checks that the presets' rows follow them), and the
 * questions below answer for it from its number alone. */
static const collage_strategy_info collage__strategy_table[COLLAGE_STRATEGY_COUNT] = {
    [COLLAGE_FP32] = {.name = "fp32", .arith = COLLAGE_WORD_FP32,
                      .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_FP32, [COLLAGE_ROLE_M] = WORD_FP32,
                               [COLLAGE_ROLE_V] = WORD_FP32},
                      .parts = PARTS(FP32, FP32, FP32)},
    [COLLAGE_BF16] = {.name = "bf16", .arith = COLLAGE_WORD_BF16,
                      .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_BF16, [COLLAGE_ROLE_M] = WORD_BF16,
                               [COLLAGE_ROLE_V] = WORD_BF16},
                      .parts = PARTS(BF16, BF16, BF16)},
    [COLLAGE_LIGHT] = {.name = "collage-light", .alias = "light", .arith = COLLAGE_WORD_BF16,
                       .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_BF16, [COLLAGE_ROLE_M] = WORD_BF16,
                                [COLLAGE_ROLE_V] = WORD_BF16, [COLLAGE_ROLE_COMPENSATION] = WORD_BF16},
                       .keeps_update_in = "its compensation word δθ", .parts = PARTS(MCF, BF16, BF16)},
    [COLLAGE_PLUS] = {.name = "collage-plus", .alias = "plus", .arith = COLLAGE_WORD_BF16,
                      .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_BF16, [COLLAGE_ROLE_M] = WORD_BF16,
                               [COLLAGE_ROLE_V] = WORD_BF16, [COLLAGE_ROLE_COMPENSATION] = WORD_BF16,
                               [COLLAGE_ROLE_DV] = WORD_BF16},
                      .keeps_update_in = "its compensation word δθ", .parts = PARTS(MCF, BF16, MCF)},
    [COLLAGE_BF16_FP32_STATES] = {.name = "bf16-fp32-states", .arith = COLLAGE_WORD_FP32,
                                  .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_BF16, [COLLAGE_ROLE_M] = WORD_FP32,
                                           [COLLAGE_ROLE_V] = WORD_FP32},
                                  .parts = PARTS(BF16, FP32, FP32)},
    [COLLAGE_BF16_MASTER] = {.name = "bf16-master", .arith = COLLAGE_WORD_FP32,
                             .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_BF16_DERIVED, [COLLAGE_ROLE_M] = WORD_FP32,
                                      [COLLAGE_ROLE_V] = WORD_FP32, [COLLAGE_ROLE_MASTER] = WORD_FP32},
                             .keeps_update_in = "its fp32 master weights", .parts = PARTS(MASTER, FP32, FP32)},
    [COLLAGE_BF16_KAHAN] = {.name = "bf16-kahan", .arith = COLLAGE_WORD_BF16,
                            .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_BF16, [COLLAGE_ROLE_M] = WORD_BF16,
                                     [COLLAGE_ROLE_V] = WORD_BF16, [COLLAGE_ROLE_KAHAN] = WORD_BF16},
                            .keeps_update_in = "its Kahan buffer", .parts = PARTS(KAHAN, BF16, BF16)},
    [COLLAGE_BF16_SR] = {.name = "bf16-sr", .arith = COLLAGE_WORD_BF16,
                         .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_BF16, [COLLAGE_ROLE_M] = WORD_BF16,
                                  [COLLAGE_ROLE_V] = WORD_BF16},
                         .parts = PARTS(SR, BF16, BF16)},
    [COLLAGE_BF16_REMAINDER] = {.name = "bf16-remainder", .arith = COLLAGE_WORD_BF16,
                                .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_BF16, [COLLAGE_ROLE_M] = WORD_BF16,
                                         [COLLAGE_ROLE_V] = WORD_BF16, [COLLAGE_ROLE_REMAINDER] = WORD_INT16},
                                .keeps_update_in = "its remainder bits", .parts = PARTS(REMAINDER, BF16, BF16)},
    [COLLAGE_PLUS_V1] = {.name = "collage-plus-v1", .arith = COLLAGE_WORD_BF16,
                         .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_BF16, [COLLAGE_ROLE_M] = WORD_BF16,
                                  [COLLAGE_ROLE_V] = WORD_BF16, [COLLAGE_ROLE_COMPENSATION] = WORD_BF16,
                                  [COLLAGE_ROLE_DV] = WORD_BF16},
                         .keeps_update_in = "its compensation word δθ", .parts = PARTS(MCF, BF16, MCF)},
    [COLLAGE_FP16] = {.name = "fp16", .arith = COLLAGE_WORD_FP16,
                      .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_FP16, [COLLAGE_ROLE_M] = WORD_FP16,
                               [COLLAGE_ROLE_V] = WORD_FP16},
                      .parts = PARTS(FP16, FP16, FP16)},
    [COLLAGE_FP16_LIGHT] = {.name = "fp16-collage-light", .alias = "fp16-light", .arith = COLLAGE_WORD_FP16,
                            .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_FP16, [COLLAGE_ROLE_M] = WORD_FP16,
                                     [COLLAGE_ROLE_V] = WORD_FP16, [COLLAGE_ROLE_COMPENSATION] = WORD_FP16},
                            .keeps_update_in = "its compensation word δθ", .parts = PARTS(FP16_MCF, FP16, FP16)},
    [COLLAGE_FP16_PLUS] = {.name = "fp16-collage-plus", .alias = "fp16-plus", .arith = COLLAGE_WORD_FP16,
                           .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_FP16, [COLLAGE_ROLE_M] = WORD_FP16,
                                    [COLLAGE_ROLE_V] = WORD_FP16, [COLLAGE_ROLE_COMPENSATION] = WORD_FP16,
                                    [COLLAGE_ROLE_DV] = WORD_FP16},
                           .keeps_update_in = "its compensation word δθ", .parts = PARTS(FP16_MCF, FP16, FP16_MCF)},
    [COLLAGE_FP16_MASTER] = {.name = "fp16-master", .arith = COLLAGE_WORD_FP32,
                             .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_FP16_DERIVED, [COLLAGE_ROLE_M] = WORD_FP32,
                                      [COLLAGE_ROLE_V] = WORD_FP32, [COLLAGE_ROLE_MASTER] = WORD_FP32},
                             .keeps_update_in = "its fp32 master weights", .parts = PARTS(FP16_MASTER, FP32, FP32)},
    [COLLAGE_BF16_C8] = {.name = "bf16-c8", .arith = COLLAGE_WORD_BF16,
                         .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_BF16, [COLLAGE_ROLE_M] = WORD_BF16,
                                  [COLLAGE_ROLE_V] = WORD_BF16, [COLLAGE_ROLE_CORRECTION] = WORD_BYTE},
                         .keeps_update_in = "its correction byte e", .parts = PARTS(C8, BF16, BF16)},
    [COLLAGE_ECO] = {.name = "eco", .arith = COLLAGE_WORD_BF16,
                     .word = {[COLLAGE_ROLE_WEIGHTS] = WORD_BF16, [COLLAGE_ROLE_M] = WORD_BF16,
                              [COLLAGE_ROLE_V] = WORD_BF16},
                     .keeps_update_in = "its first moment m", .parts = PARTS(ECO, BF16, BF16)},
};

/* ------------------------------------------------------------------ composed strategies */
/* A composed strategy's number: COLLAGE_STRATEGY_COMPOSED + w·256 + m·16 + v + 4096·sr (collage.h). */
#define STRATEGY_INL static inline __attribute__((always_inline))
STRATEGY_INL int strategy_composed(collage_strategy s) {
    unsigned u = (unsigned)s - COLLAGE_STRATEGY_COMPOSED;
    return (unsigned)s >= COLLAGE_STRATEGY_COMPOSED && u < 0x2000u && (u >> 8 & 15u) < COLLAGE_SCHEME_COUNT &&
           (u >> 4 & 15u) < COLLAGE_MOMENT_COUNT && (u & 15u) < COLLAGE_MOMENT_COUNT;
}
/* The parts of s: a preset's from the table, a composition's from its number (s must be one of them). */
STRATEGY_INL collage_composition strategy_parts_of(collage_strategy s) {
    if ((unsigned)s < COLLAGE_STRATEGY_COUNT) return collage__strategy_table[s].parts;
    unsigned u = (unsigned)s - COLLAGE_STRATEGY_COMPOSED;
    return (collage_composition){(collage_weight_scheme)(u >> 8 & 15u), (collage_moment_format)(u >> 4 & 15u),
                                 (collage_moment_format)(u & 15u), (int)(u >> 12 & 1u)};
}
/* The format of θ (and of the gradient) under weight scheme w. */
STRATEGY_INL collage_word_format scheme_weight_format(collage_weight_scheme w) {
    return w == COLLAGE_SCHEME_FP32 ? COLLAGE_WORD_FP32
           : (w == COLLAGE_SCHEME_FP16 || w == COLLAGE_SCHEME_FP16_MCF || w == COLLAGE_SCHEME_FP16_MASTER) ? COLLAGE_WORD_FP16
                                                                                                            : COLLAGE_WORD_BF16;
}
STRATEGY_INL int scheme_has_master(collage_weight_scheme w) {
    return w == COLLAGE_SCHEME_MASTER || w == COLLAGE_SCHEME_FP16_MASTER;
}
/* The word a moment of format f is stored in (the high word of a pair). */
STRATEGY_INL collage_word_format moment_word_format(collage_moment_format f) {
    switch (f) {
    case COLLAGE_MOMENT_FP32: return COLLAGE_WORD_FP32;
    case COLLAGE_MOMENT_BF16:
    case COLLAGE_MOMENT_MCF: return COLLAGE_WORD_BF16;
    case COLLAGE_MOMENT_FP16:
    case COLLAGE_MOMENT_FP16_MCF: return COLLAGE_WORD_FP16;
    case COLLAGE_MOMENT_INT8: return COLLAGE_WORD_INT8;
    case COLLAGE_MOMENT_E4M3: return COLLAGE_WORD_E4M3;
    default: return COLLAGE_WORD_NONE;
    }
}
STRATEGY_INL int moment_is_pair(collage_moment_format f) {
    return f == COLLAGE_MOMENT_MCF || f == COLLAGE_MOMENT_FP16_MCF;
}
STRATEGY_INL int word_is_q8(collage_word_format f) { return f == COLLAGE_WORD_INT8 || f == COLLAGE_WORD_E4M3; }
/* The word of role r of a strategy with parts p (the rules every row follows). */
STRATEGY_INL collage_word_format parts_word(collage_composition p, collage_word_role r) {
    switch (r) {
    case COLLAGE_ROLE_WEIGHTS: return scheme_weight_format(p.weights);
    case COLLAGE_ROLE_M: return moment_word_format(p.m);
    case COLLAGE_ROLE_V: return moment_word_format(p.v);
    case COLLAGE_ROLE_COMPENSATION:
        return p.weights == COLLAGE_SCHEME_MCF ? COLLAGE_WORD_BF16 : p.weights == COLLAGE_SCHEME_FP16_MCF ? COLLAGE_WORD_FP16
                                                                                                          : COLLAGE_WORD_NONE;
    case COLLAGE_ROLE_KAHAN: return p.weights == COLLAGE_SCHEME_KAHAN ? COLLAGE_WORD_BF16 : COLLAGE_WORD_NONE;
    case COLLAGE_ROLE_REMAINDER: return p.weights == COLLAGE_SCHEME_REMAINDER ? COLLAGE_WORD_INT16 : COLLAGE_WORD_NONE;
    case COLLAGE_ROLE_DV: return moment_is_pair(p.v) ? moment_word_format(p.v) : COLLAGE_WORD_NONE;
    case COLLAGE_ROLE_MASTER: return scheme_has_master(p.weights) ? COLLAGE_WORD_FP32 : COLLAGE_WORD_NONE;
    case COLLAGE_ROLE_CORRECTION: return p.weights == COLLAGE_SCHEME_C8 ? COLLAGE_WORD_BYTE : COLLAGE_WORD_NONE;
    default: return COLLAGE_WORD_NONE;
    }
}
/* What the lines round to: the 16-bit format of θ where θ has no master and both moments are stored in
 * it (plain or as a pair); fp32 otherwise (a moment in fp32 or 8 bits, fp32 weights, a master). */
STRATEGY_INL collage_word_format parts_arith(collage_composition p) {
    collage_word_format w = scheme_weight_format(p.weights);
    if (w == COLLAGE_WORD_FP32 || scheme_has_master(p.weights)) return COLLAGE_WORD_FP32;
    return moment_word_format(p.m) == w && moment_word_format(p.v) == w ? w : COLLAGE_WORD_FP32;
}

/* The questions asked of the table, for a valid strategy (a preset, or a composition: callers check
 * collage_strategy_valid first). Always inlined, so that in the kernels the answer is a constant from
 * their first pass on. */
STRATEGY_INL const collage_strategy_info *strategy_row(collage_strategy s) { return &collage__strategy_table[s]; }
/* The format of strategy s's word of role r (COLLAGE_WORD_NONE: it has none). */
STRATEGY_INL collage_word_format strategy_word(collage_strategy s, collage_word_role r) {
    if ((unsigned)s < COLLAGE_STRATEGY_COUNT) return collage__strategy_table[s].word[r].format;
    return parts_word(strategy_parts_of(s), r);
}
/* Whether strategy s stores a word of role r. */
STRATEGY_INL int strategy_has(collage_strategy s, collage_word_role r) {
    return strategy_word(s, r) != COLLAGE_WORD_NONE;
}
STRATEGY_INL collage_word_format strategy_arith(collage_strategy s) {
    if ((unsigned)s < COLLAGE_STRATEGY_COUNT) return collage__strategy_table[s].arith;
    return parts_arith(strategy_parts_of(s));
}
/* Whether s's weights (and so its gradients) are fp32. */
STRATEGY_INL int strategy_weights_fp32(collage_strategy s) {
    return strategy_word(s, COLLAGE_ROLE_WEIGHTS) == COLLAGE_WORD_FP32;
}
/* Whether s keeps a bf16 value beside θ that the kept weight adds to it (δθ or Kahan's c). */
STRATEGY_INL int strategy_has_bf16_comp(collage_strategy s) {
    return strategy_word(s, COLLAGE_ROLE_COMPENSATION) == COLLAGE_WORD_BF16 ||
           strategy_word(s, COLLAGE_ROLE_KAHAN) == COLLAGE_WORD_BF16;
}
/* The role of s's word beside θ in the step's comp slab (δθ, c or the remainder); COLLAGE_ROLE_COUNT
 * where it has none. */
STRATEGY_INL collage_word_role strategy_comp_role(collage_strategy s) {
    return strategy_has(s, COLLAGE_ROLE_COMPENSATION) ? COLLAGE_ROLE_COMPENSATION
           : strategy_has(s, COLLAGE_ROLE_KAHAN)      ? COLLAGE_ROLE_KAHAN
           : strategy_has(s, COLLAGE_ROLE_REMAINDER)  ? COLLAGE_ROLE_REMAINDER
                                                      : COLLAGE_ROLE_COUNT;
}
/* Whether s stores a moment in 8 bits (its step then goes by blocks of COLLAGE_QBLOCK). */
STRATEGY_INL int strategy_has_q8(collage_strategy s) {
    return word_is_q8(strategy_word(s, COLLAGE_ROLE_M)) || word_is_q8(strategy_word(s, COLLAGE_ROLE_V));
}

/* Bytes one element of a word of format f takes in memory and in the state file (an 8-bit word's
 * code; its block scales come after the codes); 0 for COLLAGE_WORD_NONE. */
size_t collage__word_size(collage_word_format f);
/* The 8-bit code a word of format f in role r uses (collage.h collage_qcode): the dynamic code signed
 * for m, unsigned for v; e4m3. f must be an 8-bit format. */
collage_qcode collage__word_qcode(collage_word_format f, collage_word_role r);
/* COLLAGE_OK when s is a preset or a valid composition and its row keeps the rules of parts_word
 * (every word in the format its role takes); COLLAGE_ERR_ARG for an unknown strategy. */
collage_status collage__strategy_check(collage_strategy s);

#endif
