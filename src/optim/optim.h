/* optim.h — what the optimizer object shares with the update lines of the optimizers other than AdamW
 * (Lion and SGD, numerics.md §14: their element lines in adamw_elem.h, their reference in adamw_ref.c). */
#ifndef COLLAGE_OPTIM_H
#define COLLAGE_OPTIM_H

#include "adamw_impl.h"

/* Whether optimizer o keeps strategy s's word of role r (Lion and SGD keep no v). */
static inline int optim_has_word(collage_optimizer o, collage_strategy s, collage_word_role r) {
    return strategy_has(s, r) && !(r == COLLAGE_ROLE_V && o != COLLAGE_OPTIM_ADAMW);
}

/* Lion's and SGD's scalar reference over elements [a, b) of one block (k->opt says which; the block's
 * lr·wd and wd in k): each element's update from g and m by the lines of numerics.md §14 in the
 * strategy's arithmetic (strategy_arith), then applied by its weight scheme (adamw_elem.h ce_optim_step). m must not be an 8-bit
 * word (those go by collage__optim_q8_ref). */
void collage__optim_block_ref(collage_strategy s, const adamw_slabs *S, size_t a, size_t b, const adamw_k *k,
                              adamw_acc *acc);
/* The vector twins of collage__optim_block_ref (optim_kernel.inc): bit for bit the same words, EDQ's
 * counts exactly and its sums as numerics.md §7 says. */
void collage__optim_block_avx512(collage_strategy s, const adamw_slabs *S, size_t a, size_t b, const adamw_k *k,
                                 adamw_acc *acc);
void collage__optim_block_avx2(collage_strategy s, const adamw_slabs *S, size_t a, size_t b, const adamw_k *k,
                               adamw_acc *acc);
/* As collage__adamw_code_spans_*: of Lion's and SGD's loop functions, how many have a code span of their
 * own (*loops: how many there are); −1 where the kernel is not compiled in. */
int collage__optim_code_spans_avx512(int *loops);
int collage__optim_code_spans_avx2(int *loops);
/* Lion's and SGD's scalar reference over pieces covering whole blocks of COLLAGE_QBLOCK slab elements (adamw_impl.h adamw_piece),
 * for a strategy with an 8-bit word: an 8-bit m is read for the block, its new fp32 values re-quantized
 * as a block after the updates. */
void collage__optim_q8_ref(collage_strategy s, const adamw_slabs *S, const adamw_piece *P, int np, const adamw_k *k);

#endif
