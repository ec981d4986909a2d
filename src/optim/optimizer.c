/* optimizer.c — the table of optimizers (collage.h collage_optimizer_info): their names, which moments
 * they keep, their default β, and which strategies each can step. The update lines are in adamw_elem.h
 * (ce_step: AdamW; ce_optim_step: Lion, SGD); the weight scheme that applies an update is the strategy's. */
#include "adamw_impl.h"
#include "optim.h"

static const collage_optimizer_info OPTIMIZERS[COLLAGE_OPTIM_COUNT] = {
    [COLLAGE_OPTIM_ADAMW] = {.name = "adamw", .has_v = 1, .beta1 = 0.9, .beta2 = 0.999, .m_is = "the first moment"},
    [COLLAGE_OPTIM_LION] = {.name = "lion", .has_v = 0, .beta1 = 0.9, .beta2 = 0.99, .m_is = "the momentum"},
    [COLLAGE_OPTIM_SGD] = {.name = "sgd", .has_v = 0, .beta1 = 0.0, .beta2 = 0.0, .m_is = "the momentum buffer"},
};

const collage_optimizer_info *collage_optimizer_get(collage_optimizer o) {
    return (unsigned)o < COLLAGE_OPTIM_COUNT ? &OPTIMIZERS[o] : NULL;
}
const char *collage_optimizer_name(collage_optimizer o) {
    return (unsigned)o < COLLAGE_OPTIM_COUNT ? OPTIMIZERS[o].name : "?";
}
collage_status collage_optimizer_parse(const char *name, collage_optimizer *out) {
    if (!name || !out) return COLLAGE_ERR_NULL;
    for (int i = 0; i < COLLAGE_OPTIM_COUNT; i++)
        if (!strcmp(name, OPTIMIZERS[i].name)) { *out = (collage_optimizer)i; return COLLAGE_OK; }
    return COLLAGE_ERR_ARG;
}

collage_status collage_optimizer_check(collage_optimizer o, collage_strategy s, char *why, size_t cap) {
    if (why && cap) why[0] = 0;
    if (!collage_optimizer_get(o))
        return collage__fail(why, cap, COLLAGE_ERR_ARG, "unknown optimizer %d (adamw, lion or sgd)", (int)o);
    if (!collage_strategy_valid(s)) return collage__fail(why, cap, COLLAGE_ERR_ARG, "unknown strategy %d", (int)s);
    /* ECO feeds θ's rounding error back through a momentum whose update is linear in it (AdamW's m,
     * SGD's buffer); Lion's update is the sign of its momentum, and ECO defines no feedback through a sign */
    if (o == COLLAGE_OPTIM_LION && strategy_parts_of(s).weights == COLLAGE_SCHEME_ECO)
        return collage__fail(why, cap, COLLAGE_ERR_ARG,
                             "'%s' feeds θ's rounding error back into a momentum the update is linear in, and lion's "
                             "update is its sign; take adamw or sgd, or bf16-sr for lion", collage_strategy_name(s));
    if (OPTIMIZERS[o].has_v) return COLLAGE_OK;
    /* a second moment kept as a pair is the strategy's point (collage-plus); without v it has none */
    if (strategy_has(s, COLLAGE_ROLE_DV) || s == COLLAGE_PLUS_V1)
        return collage__fail(why, cap, COLLAGE_ERR_ARG,
                             "'%s' keeps the second moment v as a pair (v, δv), and %s has no second moment; "
                             "take its weight scheme alone (e.g. collage-light)", collage_strategy_name(s),
                             OPTIMIZERS[o].name);
    return COLLAGE_OK;
}

collage_memory collage_optimizer_memory(collage_optimizer o, collage_strategy s) {
    collage_memory r = collage_strategy_memory(s);
    const collage_optimizer_info *I = collage_optimizer_get(o);
    if (I && !I->has_v) {
        r.total -= r.v;
        r.v = 0;
    }
    return r;
}
