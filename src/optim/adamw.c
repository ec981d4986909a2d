/* adamw.c — the AdamW optimizer object: its state words (allocated, saved and loaded as the strategy
 * table lists them, strategy.h), parameter groups, the step driver (gradient norm, clipping,
 * non-finite check, OpenMP over fixed blocks, EDQ combined in block order so nothing depends on the
 * thread count), and atomic save/load of every state word. */
#include "adamw_impl.h"
#include "optim.h"
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <unistd.h>

#define BLOCK ((size_t)1 << 14) /* elements per work item: a fixed split, whatever the threads */

typedef struct {
    size_t a, b;
    int group; /* index into groups; n_groups = "no group" */
} block_t;

/* One scalar's tie-freeness (adamw_impl.h collage__adamw_tie_free_*), remembered: eps and lr·wd seldom
 * change, the step size every step. */
typedef struct { uint32_t c; int kind, ok, used; } tie_memo;
#define TIE_MEMO 8
/* The proof takes about 2.4 µs a scalar (12 for eps's, once; 2.4-5 µs a step) and saves 3-11% of a
 * bf16 step (at 2^20 elements on two threads: about 65 µs for collage-plus, 12 µs for collage-light,
 * the least): by default (COLLAGE_TIE_PROOF_MIN) it is tried where the optimizer holds 2^20 elements
 * or more, below which it could cost more than it saves. collage_adamw_set_tie_proof moves the
 * threshold per optimizer: the tests take it to 0 so that their small states take both kinds of loop. */

struct collage_adamw {
    collage_adamw_config cfg;
    collage_param_group *groups; /* in the caller's order: group indices are the caller's */
    int *order;                  /* group indices sorted by offset */
    int n_groups;
    void *word[COLLAGE_ROLE_COUNT]; /* by role, NULL where the strategy has none; θ is the params slab */
    unsigned owned;                 /* bit r: word[r] was allocated here (not the caller's) */
    uint64_t t;
    int synced;
    block_t *blocks;
    size_t n_blocks;
    /* 8-bit strategies: the blocks again as pieces (adamw_impl.h), and the work items: pieces
     * [qitem[j], qitem[j + 1]) cover whole blocks of COLLAGE_QBLOCK slab elements */
    adamw_piece *pieces;
    size_t *qitem, n_qitems;
    double grad_scale;      /* the gradients come multiplied by this (loss scaling); 1 by default */
    adamw_acc *acc;
    collage_edq *group_edq; /* n_groups + 1 */
    double (*gsum)[3];      /* n_groups + 1: Σ dot, Σ dot_state, Σ nn of the last step */
    uint64_t *gcount;       /* 2 (n_groups + 1): lost, nonzero */
    int *group_nt;          /* n_groups + 1: this step's nt flag (adamw_k) for each group's blocks */
    /* The step under way, between step_begin and step_end: its scalars, slabs and instruction set, and
     * (collage_adamw_step_many) the index of its first work unit (step_unit) among all the optimizers' units. */
    adamw_k k;
    adamw_slabs S;
    collage_isa isa;
    double lr;
    size_t unit0;
    tie_memo memo[TIE_MEMO];
    int memo_next;
    size_t tie_proof_min;   /* the proof is tried from this many elements on */
    char err[512];
};

static void set_err(collage_adamw *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->err, sizeof o->err, fmt, ap);
    va_end(ap);
}
const char *collage_adamw_error(const collage_adamw *o) { return o ? o->err : "no optimizer"; }

static void *zalloc(size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (p) memset(p, 0, bytes);
    return p;
}


/* Group G clipped to the shard [index0, index0 + n), in the shard's coordinates (may be empty). */
static void group_local(const collage_adamw *o, int G, size_t *a, size_t *b) {
    size_t lo = o->cfg.index0, hi = lo + o->cfg.n, ga = o->groups[G].offset, gb = ga + o->groups[G].count;
    ga = ga < lo ? lo : ga > hi ? hi : ga;
    gb = gb < lo ? lo : gb > hi ? hi : gb;
    *a = ga - lo;
    *b = gb - lo;
}

/* The end of the block that starts at x and may reach b: x + BLOCK; for an 8-bit strategy the next
 * multiple of BLOCK in slab coordinates, so that blocks end on the scales' blocks where they can. */
static size_t block_end(const collage_adamw *o, size_t x, size_t b) {
    size_t e = x + BLOCK;
    if (strategy_has_q8(o->cfg.strategy)) e = ((o->cfg.index0 + x) / BLOCK + 1) * BLOCK - o->cfg.index0;
    return e < b ? e : b;
}

/* Split [0, n) into fixed blocks that never straddle a group boundary. */
static collage_status make_blocks(collage_adamw *o) {
    size_t n = o->cfg.n, cap = n / BLOCK + 2 * (size_t)o->n_groups + 2, nb = 0;
    o->blocks = malloc(cap * sizeof(block_t));
    if (!o->blocks) return COLLAGE_ERR_NOMEM;
    size_t pos = 0;
    for (int gi = 0; gi <= o->n_groups; gi++) {
        int G = gi < o->n_groups ? o->order[gi] : o->n_groups; /* groups in offset order */
        size_t ga = n, gb = n;
        if (gi < o->n_groups) group_local(o, G, &ga, &gb);
        for (int pass = 0; pass < 2; pass++) { /* pass 0: the gap before group G; pass 1: the group */
            size_t a = pass ? ga : pos, b = pass ? gb : ga;
            if (pass && gi == o->n_groups) break;
            for (size_t x = a; x < b; x = block_end(o, x, b)) {
                if (nb == cap) {
                    cap *= 2;
                    block_t *nbp = realloc(o->blocks, cap * sizeof(block_t));
                    if (!nbp) return COLLAGE_ERR_NOMEM;
                    o->blocks = nbp;
                }
                o->blocks[nb++] = (block_t){x, block_end(o, x, b), pass ? G : o->n_groups};
            }
            if (pass) pos = b;
        }
    }
    o->n_blocks = nb;
    return COLLAGE_OK;
}

/* An 8-bit strategy's work items: runs of consecutive blocks, each ending where a block ends on a
 * multiple of COLLAGE_QBLOCK in slab coordinates (or at the shard's end), so that no scale's block is
 * split between two threads. */
static collage_status make_qitems(collage_adamw *o) {
    if (!strategy_has_q8(o->cfg.strategy)) return COLLAGE_OK;
    o->pieces = calloc(o->n_blocks, sizeof *o->pieces);
    o->qitem = calloc(o->n_blocks + 1, sizeof *o->qitem);
    if (!o->pieces || !o->qitem) return COLLAGE_ERR_NOMEM;
    size_t nq = 0;
    for (size_t i = 0; i < o->n_blocks; i++) {
        const block_t *B = &o->blocks[i];
        o->pieces[i] = (adamw_piece){B->a, B->b, 0.0f, NULL, 0.0f};
        if (i == 0 || (o->cfg.index0 + B->a) % COLLAGE_QBLOCK == 0) o->qitem[nq++] = i; /* a block starts here */
    }
    o->qitem[nq] = o->n_blocks;
    o->n_qitems = nq;
    return COLLAGE_OK;
}

/* An 8-bit word's scales: one per block of COLLAGE_QBLOCK slab elements the shard holds (index0 is a
 * multiple of COLLAGE_QBLOCK). */
static size_t n_scales(size_t n) { return (n + COLLAGE_QBLOCK - 1) / COLLAGE_QBLOCK; }
/* Bytes of the codes part of a word of n elements in memory: 8-bit codes padded to 64 bytes, then the
 * scales. */
static size_t codes_bytes(size_t n) { return (n + 63) & ~(size_t)63; }

/* A word's bytes in the state file for n elements: the elements, then an 8-bit word's scales. */
static size_t word_file_bytes(collage_word_format f, size_t n) {
    return n * collage__word_size(f) + (word_is_q8(f) ? n_scales(n) * sizeof(float) : 0);
}

/* Where the scales of 8-bit word r lie (after its codes), NULL for another word. */
static float *word_scales(const collage_adamw *o, collage_word_role r) {
    if (!word_is_q8(strategy_word(o->cfg.strategy, r)) || !o->word[r]) return NULL;
    return (float *)((char *)o->word[r] + codes_bytes(o->cfg.n));
}

/* Every word the strategy's row lists, n elements each: the caller's slab where given (params for θ,
 * words[r] for the others; an 8-bit word's codes padded to 64 bytes, then its scales), else allocated
 * here and zeroed (8-bit codes: the code of 0, scale 0). */
static collage_status alloc_words(collage_adamw *o, const collage_adamw_config *cfg) {
    const collage_strategy s = o->cfg.strategy;
    for (int r = 0; r < COLLAGE_ROLE_COUNT; r++) {
        const collage_word_format f = strategy_word(s, (collage_word_role)r);
        if (!optim_has_word(o->cfg.optimizer, s, (collage_word_role)r)) continue;
        o->word[r] = r == COLLAGE_ROLE_WEIGHTS ? cfg->params : cfg->words[r];
        if (o->word[r]) continue;
        const size_t n = o->cfg.n;
        o->word[r] = zalloc(word_is_q8(f) ? codes_bytes(n) + n_scales(n) * sizeof(float) : n * collage__word_size(f));
        if (!o->word[r]) return COLLAGE_ERR_NOMEM;
        o->owned |= 1u << r;
        if (word_is_q8(f)) memset(o->word[r], collage_qcode_zero(collage__word_qcode(f, (collage_word_role)r)), n);
    }
    return COLLAGE_OK;
}

collage_status collage_adamw_create(const collage_adamw_config *cfg, collage_adamw **out) {
    if (!cfg || !out) return COLLAGE_ERR_NULL;
    *out = NULL;
    collage_status sc = collage__strategy_check(cfg->strategy); /* an unknown strategy, or an unbuilt word */
    if (sc != COLLAGE_OK) return sc;
    if (cfg->n == 0) return COLLAGE_ERR_SIZE;
    if (cfg->n_groups < 0 || (cfg->n_groups > 0 && !cfg->groups)) return COLLAGE_ERR_ARG;
    collage_adamw *o = calloc(1, sizeof *o);
    if (!o) return COLLAGE_ERR_NOMEM;
    o->cfg = *cfg;
    o->tie_proof_min = COLLAGE_TIE_PROOF_MIN;
    const collage_optimizer_info *oi = collage_optimizer_get(cfg->optimizer);
    if (!oi || collage_optimizer_check(cfg->optimizer, cfg->strategy, o->err, sizeof o->err) != COLLAGE_OK) {
        free(o);
        return COLLAGE_ERR_ARG;
    }
    if (o->cfg.beta1 == 0) o->cfg.beta1 = oi->beta1;
    if (o->cfg.beta2 == 0) o->cfg.beta2 = oi->beta2;
    if (o->cfg.eps == 0) o->cfg.eps = 1e-8;
    if (o->cfg.total == 0 && o->cfg.index0 == 0) o->cfg.total = cfg->n;
    size_t total = o->cfg.total;
    collage_status st = COLLAGE_OK;
    if (o->cfg.index0 > total || cfg->n > total - o->cfg.index0) st = COLLAGE_ERR_SIZE;
    else if (strategy_has_q8(cfg->strategy) && (o->cfg.index0 % COLLAGE_QBLOCK != 0 ||
                                                 (o->cfg.index0 + cfg->n != total && (o->cfg.index0 + cfg->n) % COLLAGE_QBLOCK != 0)))
        st = COLLAGE_ERR_SIZE; /* a shard of 8-bit states holds whole blocks of their scales */
    o->grad_scale = 1.0;
    const int sgd = cfg->optimizer == COLLAGE_OPTIM_SGD; /* SGD reads μ and dampening, not the β */
    if (!((sgd || (o->cfg.beta1 > 0 && o->cfg.beta1 < 1 && o->cfg.beta2 > 0 && o->cfg.beta2 < 1)) && o->cfg.eps > 0 &&
          o->cfg.weight_decay >= 0 && o->cfg.clip >= 0 && isfinite(o->cfg.weight_decay) && isfinite(o->cfg.clip)))
        st = COLLAGE_ERR_ARG;
    if (sgd && !(o->cfg.momentum >= 0 && o->cfg.momentum < 1 && o->cfg.dampening >= 0 && o->cfg.dampening <= 1 &&
                 (!o->cfg.nesterov || (o->cfg.momentum > 0 && o->cfg.dampening == 0))))
        st = COLLAGE_ERR_ARG; /* Nesterov needs momentum and no dampening, as in PyTorch */
    if (sgd && strategy_parts_of(cfg->strategy).weights == COLLAGE_SCHEME_ECO && !(o->cfg.momentum > 0 && !o->cfg.nesterov))
        st = COLLAGE_ERR_ARG; /* ECO's error goes into the momentum buffer: one, and heavy-ball's form */
    /* the fp16 lines round den = RN(RN(√v) + eps): an eps that is 0 in fp16 gives den = 0 where v underflows */
    if (cfg->optimizer == COLLAGE_OPTIM_ADAMW && strategy_arith(cfg->strategy) == COLLAGE_WORD_FP16 &&
        !(lp_f32(COLLAGE_FMT_FP16, lp_rn(COLLAGE_FMT_FP16, (float)o->cfg.eps)) > 0))
        st = COLLAGE_ERR_ARG;
    o->n_groups = cfg->n_groups;
    if (st == COLLAGE_OK && o->n_groups) {
        o->groups = calloc((size_t)o->n_groups, sizeof *o->groups);
        if (!o->groups) st = COLLAGE_ERR_NOMEM;
        for (int i = 0; st == COLLAGE_OK && i < o->n_groups; i++) {
            o->groups[i] = cfg->groups[i];
            o->groups[i].name = strdup(cfg->groups[i].name ? cfg->groups[i].name : "group");
            if (!o->groups[i].name) st = COLLAGE_ERR_NOMEM;
        }
        o->order = calloc((size_t)o->n_groups, sizeof *o->order);
        if (!o->order) st = COLLAGE_ERR_NOMEM;
        for (int i = 0; st == COLLAGE_OK && i < o->n_groups; i++) { /* insertion sort by offset */
            int j = i;
            for (; j > 0 && o->groups[o->order[j - 1]].offset > o->groups[i].offset; j--) o->order[j] = o->order[j - 1];
            o->order[j] = i;
        }
        for (int i = 0; st == COLLAGE_OK && i < o->n_groups; i++) {
            const collage_param_group *g = &o->groups[o->order[i]], *prev = i ? &o->groups[o->order[i - 1]] : NULL;
            if (g->count == 0 || g->offset > total || g->count > total - g->offset) st = COLLAGE_ERR_SIZE;
            else if (prev && g->offset < prev->offset + prev->count) st = COLLAGE_ERR_SIZE;
            else if (!(g->weight_decay >= 0) || !isfinite(g->weight_decay)) st = COLLAGE_ERR_ARG;
        }
    }
    if (st == COLLAGE_OK) st = alloc_words(o, cfg);
    if (st == COLLAGE_OK) {
        o->group_edq = calloc((size_t)o->n_groups + 1, sizeof *o->group_edq);
        o->gsum = calloc((size_t)o->n_groups + 1, sizeof *o->gsum);
        o->gcount = calloc(2 * ((size_t)o->n_groups + 1), sizeof *o->gcount);
        o->group_nt = calloc((size_t)o->n_groups + 1, sizeof *o->group_nt);
        if (!o->group_edq || !o->gsum || !o->gcount || !o->group_nt) st = COLLAGE_ERR_NOMEM;
    }
    if (st == COLLAGE_OK) st = make_blocks(o);
    if (st == COLLAGE_OK) st = make_qitems(o);
    if (st == COLLAGE_OK) {
        o->acc = zalloc(o->n_blocks * sizeof(adamw_acc));
        if (!o->acc) st = COLLAGE_ERR_NOMEM;
    }
    if (st != COLLAGE_OK) { collage_adamw_free(o); return st; }
    o->cfg.groups = NULL;
    *out = o;
    return COLLAGE_OK;
}

void collage_adamw_free(collage_adamw *o) {
    if (!o) return;
    for (int i = 0; o->groups && i < o->n_groups; i++) free((void *)o->groups[i].name);
    free(o->groups);
    free(o->order);
    for (int r = 0; r < COLLAGE_ROLE_COUNT; r++)
        if (o->owned >> r & 1u) free(o->word[r]);
    free(o->blocks); free(o->acc); free(o->group_edq); free(o->gsum); free(o->gcount);
    free(o->pieces); free(o->qitem);
    free(o->group_nt);
    free(o);
}

void *collage_adamw_params(collage_adamw *o) { return o ? o->word[COLLAGE_ROLE_WEIGHTS] : NULL; }
void *collage_adamw_word(collage_adamw *o, collage_word_role r) {
    return o && (unsigned)r < COLLAGE_ROLE_COUNT ? o->word[r] : NULL;
}
collage_status collage_adamw_set_steps(collage_adamw *o, uint64_t steps, int synced) {
    if (!o) return COLLAGE_ERR_NULL;
    o->t = steps;
    o->synced = synced != 0;
    return COLLAGE_OK;
}
int collage_adamw_synced(const collage_adamw *o) { return o ? o->synced : 0; }
size_t collage_adamw_size(const collage_adamw *o) { return o ? o->cfg.n : 0; }
collage_strategy collage_adamw_strategy(const collage_adamw *o) { return o ? o->cfg.strategy : COLLAGE_STRATEGY_COUNT; }
collage_optimizer collage_adamw_optimizer(const collage_adamw *o) { return o ? o->cfg.optimizer : COLLAGE_OPTIM_COUNT; }
uint64_t collage_adamw_steps(const collage_adamw *o) { return o ? o->t : 0; }
collage_memory collage_adamw_memory(const collage_adamw *o) {
    collage_memory z = {0};
    return o ? collage_optimizer_memory(o->cfg.optimizer, o->cfg.strategy) : z;
}
int collage_adamw_n_groups(const collage_adamw *o) { return o ? o->n_groups : 0; }
const char *collage_adamw_group_name(const collage_adamw *o, int g) {
    if (!o || g < -1 || g >= o->n_groups) return NULL;
    return g < 0 ? "(ungrouped)" : o->groups[g].name;
}
collage_status collage_adamw_set_tie_proof(collage_adamw *o, size_t min_elements) {
    if (!o) return COLLAGE_ERR_NULL;
    o->tie_proof_min = min_elements;
    return COLLAGE_OK;
}
collage_status collage_adamw_set_grad_scale(collage_adamw *o, double scale) {
    if (!o) return COLLAGE_ERR_NULL;
    if (!(scale > 0) || !isfinite(scale)) return COLLAGE_ERR_ARG;
    o->grad_scale = scale;
    return COLLAGE_OK;
}
collage_status collage_adamw_set_edq(collage_adamw *o, int on) {
    if (!o) return COLLAGE_ERR_NULL;
    o->cfg.edq = on != 0;
    return COLLAGE_OK;
}
collage_status collage_adamw_group_edq(const collage_adamw *o, int g, collage_edq *out) {
    if (!o || !out) return COLLAGE_ERR_NULL;
    if (g < -1 || g >= o->n_groups) return COLLAGE_ERR_ARG;
    *out = o->group_edq[g < 0 ? o->n_groups : g];
    return COLLAGE_OK;
}

/* The word beside θ that the kept weight is made of (δθ, c or the remainder), or NULL. */
static uint16_t *comp_word(const collage_adamw *o) {
    collage_word_role r = strategy_comp_role(o->cfg.strategy);
    return r < COLLAGE_ROLE_COUNT ? o->word[r] : NULL;
}

/* θ's 16-bit format (and that of δθ): fp16 or bf16. */
static collage_format theta_format(const collage_adamw *o) {
    return strategy_word(o->cfg.strategy, COLLAGE_ROLE_WEIGHTS) == COLLAGE_WORD_FP16 ? COLLAGE_FMT_FP16 : COLLAGE_FMT_BF16;
}

/* The kept value's words from θ alone: zero compensation (δθ, c, remainder), master = θ. */
static void sync_from_weights(collage_adamw *o) {
    const uint16_t *w = o->word[COLLAGE_ROLE_WEIGHTS];
    float *master = o->word[COLLAGE_ROLE_MASTER];
    uint16_t *comp = comp_word(o);
    const collage_format f = theta_format(o);
    if (master)
        for (size_t i = 0; i < o->cfg.n; i++) master[i] = lp_f32(f, w[i]);
    if (comp) memset(comp, 0, o->cfg.n * 2);
    if (o->word[COLLAGE_ROLE_CORRECTION]) memset(o->word[COLLAGE_ROLE_CORRECTION], 0, o->cfg.n);
    o->synced = 1;
}

/* The kept value from fp32 weights, by the roles of the strategy's words: θ alone (fp32 or its RN),
 * θ and an fp32 master, θ and the exact difference (δθ, c), θ and the remainder, or θ and the
 * correction byte of w rounded to 16 significant bits (a NaN: θ its bf16 NaN, e = 0). */
collage_status collage_adamw_set_weights_f32(collage_adamw *o, const float *w, size_t n) {
    if (!o || !w) return COLLAGE_ERR_NULL;
    if (n != o->cfg.n) return COLLAGE_ERR_SIZE;
    collage_strategy s = o->cfg.strategy;
    float *w32 = o->word[COLLAGE_ROLE_WEIGHTS], *master = o->word[COLLAGE_ROLE_MASTER];
    uint16_t *w16 = o->word[COLLAGE_ROLE_WEIGHTS], *comp = comp_word(o);
    int8_t *corr = o->word[COLLAGE_ROLE_CORRECTION];
    const int fp32 = collage_strategy_is_fp32(s), rem = strategy_has(s, COLLAGE_ROLE_REMAINDER);
    const collage_format f = theta_format(o);
    for (size_t i = 0; i < n; i++) {
        if (fp32) { w32[i] = w[i]; continue; }
        if (corr) {
            const float q = bits_f32(c8_rn16_bits(f32_bits(w[i])));
            w16[i] = w[i] != w[i] ? bf16_rn_bits(w[i]) : c8_theta(q);
            corr[i] = w[i] != w[i] ? 0 : c8_byte(q, w16[i]);
            continue;
        }
        if (rem) {
            w16[i] = rem_theta(w[i]);
            comp[i] = rem_low(w[i], w16[i]);
            continue;
        }
        w16[i] = lp_rn(f, w[i]);
        if (master) master[i] = w[i];
        if (comp) comp[i] = lp_rn(f, w[i] - lp_f32(f, w16[i])); /* exact in bf16; fp16: RN of it */
    }
    o->synced = 1;
    return COLLAGE_OK;
}

collage_status collage_adamw_kept_f64(const collage_adamw *o, double *out, size_t n) {
    if (!o || !out) return COLLAGE_ERR_NULL;
    if (n != o->cfg.n) return COLLAGE_ERR_SIZE;
    collage_strategy s = o->cfg.strategy;
    const float *w32 = o->word[COLLAGE_ROLE_WEIGHTS], *master = o->word[COLLAGE_ROLE_MASTER];
    const uint16_t *w16 = o->word[COLLAGE_ROLE_WEIGHTS], *comp = comp_word(o);
    const int8_t *corr = o->word[COLLAGE_ROLE_CORRECTION];
    const int fp32 = collage_strategy_is_fp32(s), rem = strategy_has(s, COLLAGE_ROLE_REMAINDER);
    const collage_format f = theta_format(o);
    int synced = o->synced;
    for (size_t i = 0; i < n; i++) {
        if (fp32) out[i] = (double)w32[i];
        else if (!synced) out[i] = (double)lp_f32(f, w16[i]);
        else if (master) out[i] = (double)master[i];
        else if (rem) out[i] = (double)rem_join(w16[i], comp[i]);
        else if (corr) out[i] = (double)c8_join(w16[i], corr[i]);
        else if (comp) out[i] = (double)lp_f32(f, w16[i]) + (double)lp_f32(f, comp[i]);
        else out[i] = (double)lp_f32(f, w16[i]);
    }
    return COLLAGE_OK;
}

/* Element i of a slab of bf16 (kind 1), fp16 (kind 2) or fp32 (kind 0) values, in double. */
static double sq_elem(const void *x, int kind, size_t i) {
    return kind == 1 ? (double)bf16_f32(((const uint16_t *)x)[i])
           : kind == 2 ? (double)lp_f32(COLLAGE_FMT_FP16, ((const uint16_t *)x)[i])
                       : (double)((const float *)x)[i];
}

/* Σ x² of x[a, b) (bf16 or fp16 bits, or fp32: sq_elem's kind), in double. Each square is exact (8-, 11- or 24-bit significands
 * squared fit double's 53), summed into 16 interleaved partial sums (element i into lane (i − a) mod 16)
 * that are then added as a fixed pairwise tree: the bits depend only on (x, a, b), never on the threads
 * or the compiler's vectoriser, and the 16 independent chains keep the loop at memory speed instead of
 * one add's latency per element. Non-finite elements give a non-finite sum (the squares are ≥ 0, so
 * +Inf cannot cancel). collage__sumsq_ref is the scalar loop; collage__sumsq has the SIMD kernels
 * (lowp_x86.c) fill the same 16 lanes whole groups at a time, then the same tail and tree. */
static double sumsq_tail(const void *x, int kind, size_t i, size_t b, double l[16]) {
    for (int j = 0; i < b; i++, j++) {
        const double d = sq_elem(x, kind, i);
        l[j] += d * d;
    }
    for (int w = 8; w; w >>= 1)
        for (int j = 0; j < w; j++) l[j] += l[j + w];
    return l[0];
}

double collage__sumsq_ref(const void *x, int kind, size_t a, size_t b) {
    double l[16] = {0};
    size_t i = a;
    for (; b - i >= 16; i += 16)
        for (int j = 0; j < 16; j++) {
            const double d = sq_elem(x, kind, i + j);
            l[j] += d * d;
        }
    return sumsq_tail(x, kind, i, b, l);
}

double collage__sumsq(const void *x, int kind, size_t a, size_t b) {
    collage_isa isa = collage_get_isa();
    if (isa == COLLAGE_ISA_SCALAR || b - a < 16) return collage__sumsq_ref(x, kind, a, b);
    double l[16] = {0};
    const size_t groups = (b - a) / 16;
    if (isa == COLLAGE_ISA_AVX512) collage__sumsq16_avx512(x, kind, a, groups, l);
    else collage__sumsq16_avx2(x, kind, a, groups, l);
    return sumsq_tail(x, kind, a + 16 * groups, b, l);
}

/* The tensor that holds chunk c of all the tensors' chunks: the last j with first[j] <= c (an empty
 * tensor's first equals the next one's, so the last such j is never empty). */
static int chunk_owner(const size_t *first, int k, size_t c) {
    int lo = 0, hi = k - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (first[mid] <= c) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

collage_status collage_sumsq_chunks_many(const void *const *xs, const size_t *ns, int k, int bf16, size_t chunk,
                                         double *out) {
    if (k < 0 || (k > 0 && chunk == 0)) return COLLAGE_ERR_SIZE;
    if (k == 0) return COLLAGE_OK;
    if (!xs || !ns) return COLLAGE_ERR_NULL;
    size_t few[17], *first = k < 17 ? few : malloc(((size_t)k + 1) * sizeof *first), elems = 0;
    if (!first) return COLLAGE_ERR_NOMEM;
    first[0] = 0;
    for (int j = 0; j < k; j++) {
        if (ns[j] && !xs[j]) { if (first != few) free(first); return COLLAGE_ERR_NULL; }
        first[j + 1] = first[j] + (ns[j] ? (ns[j] - 1) / chunk + 1 : 0);
        elems += ns[j];
    }
    if (first[k] && !out) { if (first != few) free(first); return COLLAGE_ERR_NULL; }
    const long nc = (long)first[k];
    const int nt = collage__threads();
    (void)nt; (void)elems; /* unused without OpenMP */
#pragma omp parallel for schedule(static) num_threads(nt) if (elems >= ((size_t)1 << 16))
    for (long c = 0; c < nc; c++) {
        const int j = chunk_owner(first, k, (size_t)c);
        const size_t n = ns[j], a = ((size_t)c - first[j]) * chunk, b = n - a > chunk ? a + chunk : n;
        out[c] = collage__sumsq(xs[j], bf16, a, b);
    }
    if (first != few) free(first);
    return COLLAGE_OK;
}

collage_status collage_sumsq_chunks(const void *x, int bf16, size_t n, size_t chunk, double *out) {
    if (n == 0) return COLLAGE_OK;
    if (!x || !out) return COLLAGE_ERR_NULL;
    return collage_sumsq_chunks_many(&x, &n, 1, bf16, chunk, out);
}

/* Σ g² per block (double), and whether any element is NaN/Inf. bf16: sq_elem's kind of the gradient. */
static void grad_sq_block(int bf16, const void *g, size_t a, size_t b, adamw_acc *acc, int ref) {
    const double sum = ref ? collage__sumsq_ref(g, bf16, a, b) : collage__sumsq(g, bf16, a, b);
    acc->gsq = sum;
    acc->nonfinite = !isfinite(sum);
}

static void edq_finish(collage_edq *e, double dot, double dot_state, double nn, uint64_t lost, uint64_t nz) {
    double norm = sqrt(nn);
    e->sum_dot = dot;
    e->sum_dot_state = dot_state;
    e->sum_nn = nn;
    e->lost_count = lost;
    e->update_norm = norm;
    e->updates = nz;
    e->edq = nn > 0 ? dot / norm : 0;
    e->edq_ratio = nn > 0 ? dot / nn : 1;
    e->edq_state = nn > 0 ? dot_state / norm : 0;
    e->edq_state_ratio = nn > 0 ? dot_state / nn : 1;
    e->lost = nz ? (double)lost / (double)nz : 0;
}

collage_edq collage_edq_combine(const collage_edq *parts, int k) {
    double dot = 0, ds = 0, nn = 0;
    uint64_t lost = 0, nz = 0;
    for (int i = 0; parts && i < k; i++) {
        dot += parts[i].sum_dot; ds += parts[i].sum_dot_state; nn += parts[i].sum_nn;
        lost += parts[i].lost_count; nz += parts[i].updates;
    }
    collage_edq e = {0};
    edq_finish(&e, dot, ds, nn, lost, nz);
    return e;
}

/* The gradient's format as sq_elem's kind: that of the weights. */
static int grad_kind(const collage_adamw *o) {
    const collage_word_format f = strategy_word(o->cfg.strategy, COLLAGE_ROLE_WEIGHTS);
    return f == COLLAGE_WORD_BF16 ? 1 : f == COLLAGE_WORD_FP16 ? 2 : 0;
}

/* Σ g² over the blocks, in block order (the blocks' partials computed in parallel). */
static double grad_sumsq(collage_adamw *o, const void *grads, int nt, int ref) {
    long nb = (long)o->n_blocks;
    const int bf16 = grad_kind(o); /* the gradient has the weights' format */
    (void)nt; /* unused without OpenMP */
#pragma omp parallel for schedule(static) num_threads(nt) if (o->cfg.n > BLOCK) /* a block or less: the caller alone */
    for (long bi = 0; bi < nb; bi++) grad_sq_block(bf16, grads, o->blocks[bi].a, o->blocks[bi].b, &o->acc[bi], ref);
    double sum = 0;
    int bad = 0;
    for (long bi = 0; bi < nb; bi++) { sum += o->acc[bi].gsq; bad |= o->acc[bi].nonfinite; }
    return bad && isfinite(sum) ? (double)INFINITY : sum;
}

collage_status collage_adamw_grad_sumsq(const collage_adamw *oc, const void *grads, double *out) {
    collage_adamw *o = (collage_adamw *)oc; /* only the scratch partials are written */
    if (!o || !grads || !out) return COLLAGE_ERR_NULL;
    *out = grad_sumsq(o, grads, collage__threads(), 0);
    return COLLAGE_OK;
}

/* fp32(lr·wd) of group g's blocks (g = n_groups: the elements in no group), as the kernels get it and as
 * its proof must see it. */
static float group_lrwd(const collage_adamw *o, int g, double lr) {
    return (float)(lr * (g < o->n_groups ? o->groups[g].weight_decay : o->cfg.weight_decay));
}

/* fp32(wd) of group g's blocks: SGD's L2 decay. */
static float group_wd(const collage_adamw *o, int g) {
    return (float)(g < o->n_groups ? o->groups[g].weight_decay : o->cfg.weight_decay);
}

/* Whether no bf16 operand makes the scalar c a tie on its kernel lines (kind 0: x·c, 1: RN(√x) + c), by
 * the kernel of this ISA trying them all; answers are remembered per scalar. */
static int tie_free(collage_adamw *o, collage_isa isa, int kind, float c) {
    if (kind == 0 && c == 0.0f) return 1; /* lr·wd = 0: every product is ±0 (or a NaN with zero low bits) */
    for (int i = 0; i < TIE_MEMO; i++) {
        const tie_memo *e = &o->memo[i];
        if (e->used && e->kind == kind && e->c == f32_bits(c)) return e->ok;
    }
    int ok = isa == COLLAGE_ISA_AVX512 ? collage__adamw_tie_free_avx512(kind, c)
             : isa == COLLAGE_ISA_AVX2 ? collage__adamw_tie_free_avx2(kind, c)
                                       : 0;
    o->memo[o->memo_next] = (tie_memo){f32_bits(c), kind, ok, 1};
    o->memo_next = (o->memo_next + 1) % TIE_MEMO;
    return ok;
}

/* The nt level of each group's blocks this step, and the lowest over the blocks: the vector kernels'
 * bf16 loops round the lines with the step size, lr·wd, eps and the clipping factor half up (two
 * instructions instead of four) where none of those scalars can meet a tie (adamw_kernel.inc rn_k);
 * results are the same either way. Lion's and SGD's loops have no such form (optim_kernel.inc). */
static int set_group_nt(collage_adamw *o, collage_isa isa, const adamw_k *k, double lr) {
    collage_strategy s = o->cfg.strategy;
    int all = (isa == COLLAGE_ISA_AVX512 || isa == COLLAGE_ISA_AVX2) && strategy_arith(s) == COLLAGE_WORD_BF16 &&
              o->cfg.optimizer == COLLAGE_OPTIM_ADAMW &&
              o->cfg.n >= o->tie_proof_min &&
              tie_free(o, isa, 0, k->neg_step) && tie_free(o, isa, 1, k->eps) &&
              (!k->clip || tie_free(o, isa, 0, k->coef));
    /* 2: collage-plus's products with bf16(β2) too (where it is not 1: then they are skipped) */
    int lvl = 1 + (all && strategy_has(s, COLLAGE_ROLE_DV) && k->b2hi != 0x3f80 && tie_free(o, isa, 0, bf16_f32(k->b2hi)));
    for (int g = 0; g <= o->n_groups; g++)
        o->group_nt[g] = all && tie_free(o, isa, 0, group_lrwd(o, g, lr)) ? lvl : 0;
    int least = all ? lvl : 0; /* the lowest level of any block */
    for (size_t b = 0; b < o->n_blocks && least; b++)
        if (o->group_nt[o->blocks[b].group] < least) least = o->group_nt[o->blocks[b].group];
    return least;
}

/* An 8-bit strategy's pieces for the step under way: each with its group's lr·wd and its block's EDQ
 * sums (zeroed). */
static void q8_prepare(collage_adamw *o) {
    for (size_t bi = 0; bi < o->n_blocks; bi++) {
        o->pieces[bi].lrwd = group_lrwd(o, o->blocks[bi].group, o->lr);
        o->pieces[bi].wd = group_wd(o, o->blocks[bi].group);
        o->pieces[bi].acc = o->cfg.edq ? &o->acc[bi] : NULL;
        if (o->cfg.edq) memset(&o->acc[bi], 0, sizeof o->acc[bi]);
    }
}

static int lr_ok(collage_adamw *o, double lr) {
    if (isfinite(lr) && lr >= 0) return 1;
    set_err(o, "learning rate %g is not a finite non-negative number", lr);
    return 0;
}

/* The first part of a step: Σg² (given_sumsq where have_sumsq: the whole slab's, for a shard; else
 * summed here), the non-finite check, the clipping factor, the kept value's words set from θ on the
 * first step, and the step's scalars, slabs and nt levels in o->k, o->S, o->isa. COLLAGE_ERR_NONFINITE
 * (stats filled, nothing changed) when the step is skipped. */
static collage_status step_begin(collage_adamw *o, const void *grads, double lr, collage_step_stats *stats, int ref,
                                 int have_sumsq, double given_sumsq, int *tie_free_all) {
    adamw_k k = {0};
    k.coef = 1.0f;
    double gnorm = (double)NAN, coef = 1.0;
    if (stats) memset(stats, 0, sizeof *stats);
    const double gscale = o->grad_scale; /* the gradient is gscale × the true one: norms and factors of g / gscale */
    if (o->cfg.clip > 0 || o->cfg.skip_nonfinite) {
        double sum = have_sumsq ? given_sumsq : grad_sumsq(o, grads, ref ? 1 : collage__threads(), ref);
        int bad = !isfinite(sum);
        gnorm = sqrt(sum) / gscale;
        if (bad && o->cfg.skip_nonfinite) {
            if (stats) { stats->skipped = 1; stats->step = o->t; stats->grad_norm = gnorm; stats->clip_coef = 1; }
            set_err(o, "gradient holds NaN or Inf at step %llu; step skipped", (unsigned long long)(o->t + 1));
            return COLLAGE_ERR_NONFINITE;
        }
        if (o->cfg.clip > 0 && gnorm > o->cfg.clip) coef = o->cfg.clip / (gnorm + 1e-6);
    }
    if (!o->synced) sync_from_weights(o);
    uint64_t t = o->t + 1;
    double b1 = o->cfg.beta1, b2 = o->cfg.beta2;
    double step_size = lr * sqrt(1.0 - pow(b2, (double)t)) / (1.0 - pow(b1, (double)t));
    if (o->cfg.optimizer != COLLAGE_OPTIM_ADAMW) step_size = lr; /* Lion and SGD: no bias correction */
    if (o->cfg.optimizer == COLLAGE_OPTIM_SGD) { b1 = o->cfg.momentum; b2 = 0.5; } /* b2: unused */
    o->lr = lr;
    k.b1 = (float)b1; k.omb1 = (float)(1.0 - b1);
    if (o->cfg.optimizer == COLLAGE_OPTIM_SGD) k.omb1 = (float)(1.0 - o->cfg.dampening);
    k.opt = (int)o->cfg.optimizer;
    k.first = t == 1;
    k.nesterov = o->cfg.nesterov != 0;
    k.decoupled = o->cfg.decoupled != 0;
    k.b2 = (float)b2; k.omb2 = (float)(1.0 - b2);
    k.eps = (float)o->cfg.eps;
    k.neg_step = (float)-step_size;
    /* ECO's feedback factor (numerics.md §6): Lion has none (ECO refuses it) */
    k.eco = step_size != 0.0 && b1 > 0.0 && o->cfg.optimizer != COLLAGE_OPTIM_LION ? (float)((1.0 / b1 - 1.0) / -step_size) : 0.0f;
    k.coef = (float)(coef / gscale);
    k.clip = coef / gscale != 1.0;
    collage_lp_pair sp = collage_lp_split(COLLAGE_FMT_BF16, b2), sh = collage_lp_split(COLLAGE_FMT_FP16, b2);
    k.b2hi = sp.hi; k.b2lo = sp.lo;
    k.h2hi = sh.hi; k.h2lo = sh.lo;
    k.key = collage_rand_key(o->cfg.seed, t);
    k.index0 = o->cfg.index0;
    o->S = (adamw_slabs){o->word[COLLAGE_ROLE_WEIGHTS], grads, o->word[COLLAGE_ROLE_M], o->word[COLLAGE_ROLE_V],
                         comp_word(o), o->word[COLLAGE_ROLE_DV], o->word[COLLAGE_ROLE_MASTER],
                         word_scales(o, COLLAGE_ROLE_M), word_scales(o, COLLAGE_ROLE_V), o->word[COLLAGE_ROLE_CORRECTION]};
    o->isa = ref ? COLLAGE_ISA_SCALAR : collage_get_isa();
    *tie_free_all = set_group_nt(o, o->isa, &k, o->lr);
    o->k = k;
    if (strategy_has_q8(o->cfg.strategy)) q8_prepare(o);
    if (stats) { stats->grad_norm = gnorm; stats->clip_coef = coef; }
    return COLLAGE_OK;
}

/* Block bi of the step under way (threads own disjoint blocks). */
static void step_block(collage_adamw *o, long bi) {
    const block_t *B = &o->blocks[bi];
    adamw_k kb = o->k;
    kb.lrwd = group_lrwd(o, B->group, o->lr);
    kb.nt = o->group_nt[B->group];
    kb.wd = group_wd(o, B->group);
    adamw_acc *acc = o->cfg.edq ? &o->acc[bi] : NULL;
    if (acc) memset(acc, 0, sizeof *acc);
    if (o->cfg.optimizer != COLLAGE_OPTIM_ADAMW) {
        if (o->isa == COLLAGE_ISA_AVX512) collage__optim_block_avx512(o->cfg.strategy, &o->S, B->a, B->b, &kb, acc);
        else if (o->isa == COLLAGE_ISA_AVX2) collage__optim_block_avx2(o->cfg.strategy, &o->S, B->a, B->b, &kb, acc);
        else collage__optim_block_ref(o->cfg.strategy, &o->S, B->a, B->b, &kb, acc);
    }
    else if (o->isa == COLLAGE_ISA_AVX512) collage__adamw_block_avx512(o->cfg.strategy, &o->S, B->a, B->b, &kb, acc);
    else if (o->isa == COLLAGE_ISA_AVX2) collage__adamw_block_avx2(o->cfg.strategy, &o->S, B->a, B->b, &kb, acc);
    else collage__adamw_block_ref(o->cfg.strategy, &o->S, B->a, B->b, &kb, acc);
}

/* Work item q of an 8-bit strategy's step under way (make_qitems: whole blocks of scales). */
static void step_qitem(collage_adamw *o, long q) {
    const adamw_piece *P = &o->pieces[o->qitem[q]];
    const int np = (int)(o->qitem[q + 1] - o->qitem[q]);
    const collage_strategy s = o->cfg.strategy;
    if (o->cfg.optimizer != COLLAGE_OPTIM_ADAMW) collage__optim_q8_ref(s, &o->S, P, np, &o->k);
    else if (o->isa == COLLAGE_ISA_AVX512) collage__adamw_q8_avx512(s, &o->S, P, np, &o->k);
    else if (o->isa == COLLAGE_ISA_AVX2) collage__adamw_q8_avx2(s, &o->S, P, np, &o->k);
    else collage__adamw_q8_ref(s, &o->S, P, np, &o->k);
}

/* The step's work units, which threads own whole: its blocks, or an 8-bit strategy's work items. */
static size_t n_units(const collage_adamw *o) { return strategy_has_q8(o->cfg.strategy) ? o->n_qitems : o->n_blocks; }
static void step_unit(collage_adamw *o, long u) {
    if (strategy_has_q8(o->cfg.strategy)) step_qitem(o, u);
    else step_block(o, u);
}

/* The last part: the step counted, EDQ combined in block order (the same sums whatever the threads). */
static void step_end(collage_adamw *o, collage_step_stats *stats, int tie_free_all) {
    o->t++;
    if (stats) { stats->step = o->t; stats->tie_free = tie_free_all; }
    if (!o->cfg.edq) return;
    int ng = o->n_groups;
    double tot[3] = {0}, (*gs)[3] = o->gsum;
    uint64_t tl = 0, tn = 0, *gl = o->gcount;
    memset(gs, 0, ((size_t)ng + 1) * sizeof *gs);
    memset(gl, 0, 2 * ((size_t)ng + 1) * sizeof *gl);
    for (size_t bi = 0; bi < o->n_blocks; bi++) {
        const adamw_acc *A = &o->acc[bi];
        int g = o->blocks[bi].group;
        gs[g][0] += A->dot; gs[g][1] += A->dot_state; gs[g][2] += A->nn;
        gl[2 * g] += A->lost; gl[2 * g + 1] += A->nonzero;
    }
    for (int g = 0; g <= ng; g++) {
        edq_finish(&o->group_edq[g], gs[g][0], gs[g][1], gs[g][2], gl[2 * g], gl[2 * g + 1]);
        tot[0] += gs[g][0]; tot[1] += gs[g][1]; tot[2] += gs[g][2];
        tl += gl[2 * g]; tn += gl[2 * g + 1];
    }
    if (stats) edq_finish(&stats->edq, tot[0], tot[1], tot[2], tl, tn);
}

/* have_sumsq: the gradient's Σg² is given_sumsq (the whole slab's, for a shard); else summed here. */
static collage_status step(collage_adamw *o, const void *grads, double lr, collage_step_stats *stats, int ref,
                           int have_sumsq, double given_sumsq) {
    if (!o || !grads) return COLLAGE_ERR_NULL;
    if (!lr_ok(o, lr)) return COLLAGE_ERR_ARG;
    int tie_free_all = 0;
    collage_status st = step_begin(o, grads, lr, stats, ref, have_sumsq, given_sumsq, &tie_free_all);
    if (st != COLLAGE_OK) return st;
    const int nt = ref ? 1 : collage__threads();
    (void)nt; /* unused without OpenMP */
    const long nu = (long)n_units(o);
#pragma omp parallel for schedule(static) num_threads(nt) if (nu > 1)
    for (long u = 0; u < nu; u++) step_unit(o, u);
    step_end(o, stats, tie_free_all);
    return COLLAGE_OK;
}

/* The optimizer that holds work unit gi of all k optimizers' units (o[j]->unit0 ascending). */
static int owner_of(collage_adamw *const *o, int k, size_t gi) {
    int lo = 0, hi = k - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (o[mid]->unit0 <= gi) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

collage_status collage_adamw_step_many(collage_adamw *const *opts, const void *const *grads, const double *lr, int k,
                                       double grad_sumsq, collage_step_stats *stats) {
    if (k < 0) return COLLAGE_ERR_SIZE;
    if (k && (!opts || !grads || !lr)) return COLLAGE_ERR_NULL;
    for (int j = 0; j < k; j++) {
        if (!opts[j] || !grads[j]) return COLLAGE_ERR_NULL;
        for (int i = 0; i < j; i++)
            if (opts[i] == opts[j]) { set_err(opts[j], "optimizer %d is also optimizer %d of the same step", j, i); return COLLAGE_ERR_ARG; }
        if (!lr_ok(opts[j], lr[j])) return COLLAGE_ERR_ARG;
    }
    collage_status st = COLLAGE_OK;
    int tie[COLLAGE_STEP_MANY_MAX];
    size_t total = 0;
    for (int j0 = 0; j0 < k; j0 += COLLAGE_STEP_MANY_MAX) { /* batches of at most COLLAGE_STEP_MANY_MAX */
        collage_adamw *run[COLLAGE_STEP_MANY_MAX];
        int idx[COLLAGE_STEP_MANY_MAX], m = 0;
        total = 0;
        for (int j = j0; j < k && j < j0 + COLLAGE_STEP_MANY_MAX; j++) {
            collage_status sj = step_begin(opts[j], grads[j], lr[j], stats ? &stats[j] : NULL, 0, 1, grad_sumsq, &tie[m]);
            if (sj != COLLAGE_OK) { st = sj; continue; } /* skipped: a non-finite gradient */
            opts[j]->unit0 = total;
            total += n_units(opts[j]);
            idx[m] = j;
            run[m++] = opts[j];
        }
        const int nt = collage__threads();
        (void)nt; /* unused without OpenMP */
        const long nu = (long)total;
#pragma omp parallel for schedule(static) num_threads(nt)
        for (long gi = 0; gi < nu; gi++) {
            collage_adamw *o = run[owner_of(run, m, (size_t)gi)];
            step_unit(o, gi - (long)o->unit0);
        }
        for (int i = 0; i < m; i++) step_end(run[i], stats ? &stats[idx[i]] : NULL, tie[i]);
    }
    return st;
}

collage_status collage_adamw_step(collage_adamw *o, const void *g, double lr, collage_step_stats *st) {
    return step(o, g, lr, st, 0, 0, 0);
}
collage_status collage_adamw_step_sumsq(collage_adamw *o, const void *g, double lr, double sumsq, collage_step_stats *st) {
    return step(o, g, lr, st, 0, 1, sumsq);
}
collage_status collage_adamw_step_ref(collage_adamw *o, const void *g, double lr, collage_step_stats *st) {
    return step(o, g, lr, st, 1, 0, 0);
}

/* ------------------------------------------------------------------ save and load */
/* File layout (little-endian, as the machine writes it; version 2 for AdamW, 3 for the others):
 *   "CLGADAMW" | u32 version | u32 strategy | u64 n | u64 t | u32 synced | u32 n_groups
 *   | f64 beta1, beta2, eps, weight_decay, clip | u64 seed | u64 index0, total (version 2 and 3)
 *   | u32 optimizer, u32 flags (1: Nesterov, 2: decoupled decay) | f64 momentum, dampening (version 3)
 *   | n_groups × (u64 offset, u64 count, f64 weight_decay, char name[64])   (slab coordinates)
 *   | the strategy's words in the order of their roles (strategy.h): weights | m | v | [δθ, c or the
 *     remainder] | [δv] | [master]   (n elements each: the shard [index0, index0 + n); an 8-bit word's
 *     n codes are followed by its ceil(n / 256) fp32 block scales)
 *   | u64 FNV-1a of everything before. Version 1 (no index0, total: the whole slab) still loads. */
#define ADAMW_MAGIC "CLGADAMW"
#define ADAMW_VERSION 2u
#define ADAMW_VERSION_OPTIM 3u /* an optimizer other than AdamW: its record after the shard's */
#define NAME_LEN 64

typedef struct {
    char magic[8];
    uint32_t version, strategy;
    uint64_t n, t;
    uint32_t synced, n_groups;
    double beta1, beta2, eps, weight_decay, clip;
    uint64_t seed;
} adamw_header;

typedef struct {
    uint64_t index0, total;
} adamw_shard_rec;

typedef struct {
    uint64_t offset, count;
    double weight_decay;
    char name[NAME_LEN];
} adamw_group_rec;

typedef struct {
    uint32_t optimizer, flags;
    double momentum, dampening;
} adamw_optim_rec;

/* The optimizer record of o (AdamW's: all zero, and not written). */
static adamw_optim_rec optim_rec(const collage_adamw *o) {
    adamw_optim_rec r = {(uint32_t)o->cfg.optimizer, 0, 0, 0};
    if (o->cfg.optimizer == COLLAGE_OPTIM_SGD) {
        r.flags = (o->cfg.nesterov ? 1u : 0u) | (o->cfg.decoupled ? 2u : 0u);
        r.momentum = o->cfg.momentum;
        r.dampening = o->cfg.dampening;
    }
    return r;
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t len) {
    const unsigned char *c = p;
    for (size_t i = 0; i < len; i++) { h ^= c[i]; h *= 0x100000001b3ull; }
    return h;
}
#define FNV_INIT 0xcbf29ce484222325ull

/* The words in file order (the order of their roles, collage.h collage_word_role), with their formats. */
static int slab_list(const collage_adamw *o, void **p, collage_word_format *fmt) {
    int k = 0;
    for (int r = 0; r < COLLAGE_ROLE_COUNT; r++) {
        const collage_word_format f = strategy_word(o->cfg.strategy, (collage_word_role)r);
        if (optim_has_word(o->cfg.optimizer, o->cfg.strategy, (collage_word_role)r)) { p[k] = o->word[r]; fmt[k++] = f; }
    }
    return k;
}

static int write_all(FILE *f, const void *p, size_t len, uint64_t *h) {
    *h = fnv1a(*h, p, len);
    return fwrite(p, 1, len, f) == len;
}

collage_status collage_adamw_save(const collage_adamw *oc, const char *path) {
    collage_adamw *o = (collage_adamw *)oc; /* only err is written */
    if (!o || !path) return COLLAGE_ERR_NULL;
    collage_atomic_file af;
    collage_status st = collage_atomic_open(&af, path, o->err, sizeof o->err);
    if (st) return st;
    const int adamw = o->cfg.optimizer == COLLAGE_OPTIM_ADAMW;
    adamw_header h = {{0}, adamw ? ADAMW_VERSION : ADAMW_VERSION_OPTIM, (uint32_t)o->cfg.strategy, o->cfg.n, o->t, (uint32_t)o->synced,
                      (uint32_t)o->n_groups, o->cfg.beta1, o->cfg.beta2, o->cfg.eps, o->cfg.weight_decay,
                      o->cfg.clip, o->cfg.seed};
    memcpy(h.magic, ADAMW_MAGIC, 8);
    adamw_shard_rec sh = {o->cfg.index0, o->cfg.total};
    uint64_t hash = FNV_INIT;
    adamw_optim_rec orec = optim_rec(o);
    int ok = write_all(af.f, &h, sizeof h, &hash) && write_all(af.f, &sh, sizeof sh, &hash) &&
             (adamw || write_all(af.f, &orec, sizeof orec, &hash));
    for (int i = 0; ok && i < o->n_groups; i++) {
        adamw_group_rec g = {o->groups[i].offset, o->groups[i].count, o->groups[i].weight_decay, {0}};
        snprintf(g.name, NAME_LEN, "%s", o->groups[i].name);
        ok = write_all(af.f, &g, sizeof g, &hash);
    }
    void *p[COLLAGE_ROLE_COUNT];
    collage_word_format fm[COLLAGE_ROLE_COUNT];
    int ns = slab_list(o, p, fm);
    for (int i = 0; ok && i < ns; i++) {
        ok = write_all(af.f, p[i], o->cfg.n * collage__word_size(fm[i]), &hash);
        if (ok && word_is_q8(fm[i])) /* the block scales after the codes */
            ok = write_all(af.f, (char *)p[i] + codes_bytes(o->cfg.n), n_scales(o->cfg.n) * sizeof(float), &hash);
    }
    ok = ok && fwrite(&hash, 8, 1, af.f) == 1;
    if (!ok) {
        set_err(o, "cannot write optimizer state to '%s': %s", path, strerror(errno));
        collage_atomic_abort(&af);
        return COLLAGE_ERR_IO;
    }
    return collage_atomic_commit(&af, o->err, sizeof o->err);
}

static collage_status load_fail(collage_adamw *o, FILE *f, collage_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->err, sizeof o->err, fmt, ap);
    va_end(ap);
    if (f) fclose(f);
    return st;
}

/* The header, shard record and group table of f, checked against o; *hash = the FNV-1a of what was
 * read. On failure f is closed and o's error says why. part as for load(). */
static collage_status read_header(collage_adamw *o, FILE *f, const char *path, int part, adamw_header *hp,
                                  adamw_shard_rec *shp, uint64_t *hashp) {
    adamw_header h;
    if (fread(&h, sizeof h, 1, f) != 1)
        return load_fail(o, f, COLLAGE_ERR_FORMAT, "'%s' is too short to be a collage optimizer state", path);
    if (memcmp(h.magic, ADAMW_MAGIC, 8) != 0)
        return load_fail(o, f, COLLAGE_ERR_FORMAT, "'%s' is not a collage optimizer state (wrong magic)", path);
    if (h.version != ADAMW_VERSION && h.version != 1u && h.version != ADAMW_VERSION_OPTIM)
        return load_fail(o, f, COLLAGE_ERR_FORMAT, "'%s' has format version %u; this build reads versions 1 to %u", path,
                         h.version, ADAMW_VERSION_OPTIM);
    uint64_t hash = fnv1a(FNV_INIT, &h, sizeof h);
    adamw_shard_rec sh = {0, h.n};
    if (h.version >= 2) {
        if (fread(&sh, sizeof sh, 1, f) != 1)
            return load_fail(o, f, COLLAGE_ERR_FORMAT, "'%s' is too short to be a collage optimizer state", path);
        hash = fnv1a(hash, &sh, sizeof sh);
    }
    adamw_optim_rec orec = {COLLAGE_OPTIM_ADAMW, 0, 0, 0}, mine = optim_rec(o);
    if (h.version >= ADAMW_VERSION_OPTIM) {
        if (fread(&orec, sizeof orec, 1, f) != 1)
            return load_fail(o, f, COLLAGE_ERR_FORMAT, "'%s' is too short to be a collage optimizer state", path);
        hash = fnv1a(hash, &orec, sizeof orec);
    }
    if (orec.optimizer != mine.optimizer)
        return load_fail(o, f, COLLAGE_ERR_FORMAT, "'%s' holds the state of optimizer '%s' but this optimizer is '%s'", path,
                         collage_optimizer_name((collage_optimizer)orec.optimizer), collage_optimizer_name(o->cfg.optimizer));
    /* μ and dampening give SGD's buffer its meaning, Nesterov and the decay how it was filled */
    if (orec.flags != mine.flags || orec.momentum != mine.momentum || orec.dampening != mine.dampening)
        return load_fail(o, f, COLLAGE_ERR_FORMAT, "'%s' was saved with momentum %g, dampening %g, nesterov %u, decoupled %u "
                         "but the optimizer has %g, %g, %u, %u", path, orec.momentum, orec.dampening, orec.flags & 1u,
                         orec.flags >> 1 & 1u, mine.momentum, mine.dampening, mine.flags & 1u, mine.flags >> 1 & 1u);
    if (h.strategy != (uint32_t)o->cfg.strategy)
        return load_fail(o, f, COLLAGE_ERR_FORMAT, "'%s' holds '%s' state but the optimizer is '%s'", path,
                         collage_strategy_name((collage_strategy)h.strategy), collage_strategy_name(o->cfg.strategy));
    if (sh.total != o->cfg.total || sh.index0 > sh.total || h.n > sh.total - sh.index0 ||
        (strategy_has_q8(o->cfg.strategy) && (sh.index0 % COLLAGE_QBLOCK ||
                                               (sh.index0 + h.n != sh.total && (sh.index0 + h.n) % COLLAGE_QBLOCK))))
        return load_fail(o, f, COLLAGE_ERR_FORMAT, "'%s' holds a slab of %llu parameters but the optimizer's has %zu", path,
                         (unsigned long long)sh.total, o->cfg.total);
    if (!part && (h.n != o->cfg.n || sh.index0 != o->cfg.index0))
        return load_fail(o, f, COLLAGE_ERR_FORMAT, "'%s' holds %llu parameters from %llu but the optimizer has %zu from %zu",
                         path, (unsigned long long)h.n, (unsigned long long)sh.index0, o->cfg.n, o->cfg.index0);
    /* β1 and β2 give m and v their meaning; lr, wd, eps and clipping may change on resume */
    if (h.beta1 != o->cfg.beta1 || h.beta2 != o->cfg.beta2)
        return load_fail(o, f, COLLAGE_ERR_FORMAT, "'%s' was saved with beta1 = %g, beta2 = %g but the optimizer has %g, %g",
                         path, h.beta1, h.beta2, o->cfg.beta1, o->cfg.beta2);
    if (h.n_groups != (uint32_t)o->n_groups)
        return load_fail(o, f, COLLAGE_ERR_FORMAT, "'%s' has %u parameter groups but the optimizer has %d", path,
                         h.n_groups, o->n_groups);
    for (int i = 0; i < o->n_groups; i++) {
        adamw_group_rec g;
        if (fread(&g, sizeof g, 1, f) != 1)
            return load_fail(o, f, COLLAGE_ERR_FORMAT, "'%s' is truncated (in the group table)", path);
        hash = fnv1a(hash, &g, sizeof g);
        if (g.offset != o->groups[i].offset || g.count != o->groups[i].count)
            return load_fail(o, f, COLLAGE_ERR_FORMAT, "'%s': group %d covers [%llu, +%llu) but the optimizer's '%s' covers [%zu, +%zu)",
                             path, i, (unsigned long long)g.offset, (unsigned long long)g.count, o->groups[i].name,
                             o->groups[i].offset, o->groups[i].count);
    }
    *hp = h;
    *shp = sh;
    *hashp = hash;
    return COLLAGE_OK;
}

/* part = 0: the file must hold exactly this optimizer's range; part = 1: any range of the same slab,
 * and only the overlap is read. Nothing is written before the whole file has been validated. */
static collage_status load(collage_adamw *o, const char *path, int part, size_t *copied) {
    if (copied) *copied = 0;
    if (!o || !path) return COLLAGE_ERR_NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return load_fail(o, NULL, COLLAGE_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    adamw_header h = {{0}, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    adamw_shard_rec sh = {0, 0};
    uint64_t hash = 0;
    collage_status st = read_header(o, f, path, part, &h, &sh, &hash);
    if (st != COLLAGE_OK) return st; /* f is closed */
    void *p[COLLAGE_ROLE_COUNT];
    collage_word_format fm[COLLAGE_ROLE_COUNT];
    size_t total = 0;
    int ns = slab_list(o, p, fm);
    for (int i = 0; i < ns; i++) total += word_file_bytes(fm[i], (size_t)h.n);
    long data_at = ftell(f);
    if (fseek(f, 0, SEEK_END) != 0)
        return load_fail(o, f, COLLAGE_ERR_IO, "cannot seek in '%s': %s", path, strerror(errno));
    long size = ftell(f);
    long want = data_at + (long)total + 8;
    if (size != want)
        return load_fail(o, f, COLLAGE_ERR_FORMAT, "'%s' has %ld bytes but a '%s' state of %llu parameters has %ld (%s)",
                         path, size, collage_strategy_name(o->cfg.strategy), (unsigned long long)h.n, want,
                         size < want ? "truncated" : "trailing data");
    /* pass 1: verify the checksum before touching any state word */
    fseek(f, data_at, SEEK_SET);
    char buf[1 << 16];
    for (size_t left = total; left;) {
        size_t c = left < sizeof buf ? left : sizeof buf;
        if (fread(buf, 1, c, f) != c) return load_fail(o, f, COLLAGE_ERR_IO, "read error in '%s'", path);
        hash = fnv1a(hash, buf, c);
        left -= c;
    }
    uint64_t stored;
    if (fread(&stored, 8, 1, f) != 1 || stored != hash)
        return load_fail(o, f, COLLAGE_ERR_FORMAT, "'%s' is corrupt (checksum mismatch)", path);
    /* pass 2: read the overlap of the file's range and ours, slab by slab */
    size_t lo = o->cfg.index0 > sh.index0 ? o->cfg.index0 : (size_t)sh.index0;
    size_t hi = o->cfg.index0 + o->cfg.n < sh.index0 + h.n ? o->cfg.index0 + o->cfg.n : (size_t)(sh.index0 + h.n);
    if (lo >= hi) { fclose(f); return COLLAGE_OK; } /* nothing shared: state untouched */
    long slab_at = data_at;
    for (int i = 0; i < ns; i++) {
        const size_t es = collage__word_size(fm[i]), c = (hi - lo) * es;
        if (fseek(f, slab_at + (long)((lo - sh.index0) * es), SEEK_SET) != 0 ||
            fread((char *)p[i] + (lo - o->cfg.index0) * es, 1, c, f) != c)
            return load_fail(o, f, COLLAGE_ERR_IO, "read error in '%s' (the state may be partly loaded)", path);
        if (word_is_q8(fm[i])) { /* the scales of the blocks [lo, hi) covers: both ends are block ends */
            const size_t b0 = lo / COLLAGE_QBLOCK, b1 = (hi + COLLAGE_QBLOCK - 1) / COLLAGE_QBLOCK, sb = sizeof(float);
            float *mine = (float *)((char *)p[i] + codes_bytes(o->cfg.n)) + (b0 - o->cfg.index0 / COLLAGE_QBLOCK);
            if (fseek(f, slab_at + (long)((size_t)h.n * es + (b0 - sh.index0 / COLLAGE_QBLOCK) * sb), SEEK_SET) != 0 ||
                fread(mine, sb, b1 - b0, f) != b1 - b0)
                return load_fail(o, f, COLLAGE_ERR_IO, "read error in '%s' (the state may be partly loaded)", path);
        }
        slab_at += (long)word_file_bytes(fm[i], (size_t)h.n);
    }
    fclose(f);
    o->t = h.t;
    o->synced = (int)h.synced;
    o->err[0] = 0;
    if (copied) *copied = hi - lo;
    return COLLAGE_OK;
}

collage_status collage_adamw_load(collage_adamw *o, const char *path) { return load(o, path, 0, NULL); }
collage_status collage_adamw_load_part(collage_adamw *o, const char *path, size_t *copied) {
    return load(o, path, 1, copied);
}
