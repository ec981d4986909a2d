/* strategy.c — the public side of the strategy table (strategy.h): names, aliases and the composition
 * syntax ("collage-light+m=int8,v=int8"), the rows themselves (the presets' from the table, a composed
 * strategy's made once from its parts), the memory report as the sum of a row's words, and the check
 * that a row keeps the rules every word follows. */
#include "strategy.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const SCHEME_NAMES[COLLAGE_SCHEME_COUNT] = {
    [COLLAGE_SCHEME_FP32] = "fp32", [COLLAGE_SCHEME_BF16] = "bf16", [COLLAGE_SCHEME_MCF] = "collage-light",
    [COLLAGE_SCHEME_SR] = "bf16-sr", [COLLAGE_SCHEME_KAHAN] = "bf16-kahan", [COLLAGE_SCHEME_REMAINDER] = "bf16-remainder",
    [COLLAGE_SCHEME_MASTER] = "bf16-master", [COLLAGE_SCHEME_FP16] = "fp16",
    [COLLAGE_SCHEME_FP16_MCF] = "fp16-collage-light", [COLLAGE_SCHEME_FP16_MASTER] = "fp16-master",
    [COLLAGE_SCHEME_C8] = "bf16-c8", [COLLAGE_SCHEME_ECO] = "eco"};
static const char *const MOMENT_NAMES[COLLAGE_MOMENT_COUNT] = {
    [COLLAGE_MOMENT_FP32] = "fp32", [COLLAGE_MOMENT_BF16] = "bf16", [COLLAGE_MOMENT_MCF] = "mcf",
    [COLLAGE_MOMENT_FP16] = "fp16", [COLLAGE_MOMENT_FP16_MCF] = "fp16-mcf", [COLLAGE_MOMENT_INT8] = "int8",
    [COLLAGE_MOMENT_E4M3] = "e4m3"};

const char *collage_weight_scheme_name(collage_weight_scheme w) {
    return (unsigned)w < COLLAGE_SCHEME_COUNT ? SCHEME_NAMES[w] : "unknown";
}
const char *collage_moment_format_name(collage_moment_format f) {
    return (unsigned)f < COLLAGE_MOMENT_COUNT ? MOMENT_NAMES[f] : "unknown";
}

static int moment_is_q8(collage_moment_format f) { return f == COLLAGE_MOMENT_INT8 || f == COLLAGE_MOMENT_E4M3; }

/* The composition rules: known parts, pairs for v only, stochastic re-quantization only with an
 * 8-bit state. */
static int parts_ok(const collage_composition *c) {
    return (unsigned)c->weights < COLLAGE_SCHEME_COUNT && (unsigned)c->m < COLLAGE_MOMENT_COUNT &&
           (unsigned)c->v < COLLAGE_MOMENT_COUNT && !moment_is_pair(c->m) && (c->sr_states == 0 || c->sr_states == 1) &&
           (!c->sr_states || moment_is_q8(c->m) || moment_is_q8(c->v));
}

static int same_parts(collage_composition a, collage_composition b) {
    return a.weights == b.weights && a.m == b.m && a.v == b.v && a.sr_states == b.sr_states;
}

collage_status collage_strategy_compose(const collage_composition *c, collage_strategy *out) {
    if (!c || !out) return COLLAGE_ERR_NULL;
    if (!parts_ok(c)) return COLLAGE_ERR_ARG;
    for (int i = 0; i < COLLAGE_STRATEGY_COUNT; i++) /* the first preset with these parts (not plus-v1) */
        if (i != COLLAGE_PLUS_V1 && same_parts(collage__strategy_table[i].parts, *c)) {
            *out = (collage_strategy)i;
            return COLLAGE_OK;
        }
    *out = (collage_strategy)(COLLAGE_STRATEGY_COMPOSED + ((unsigned)c->weights << 8) + ((unsigned)c->m << 4) +
                              (unsigned)c->v + ((unsigned)c->sr_states << 12));
    return COLLAGE_OK;
}

int collage_strategy_valid(collage_strategy s) {
    if ((unsigned)s < COLLAGE_STRATEGY_COUNT) return 1;
    if (!strategy_composed(s)) return 0;
    collage_composition p = strategy_parts_of(s);
    collage_strategy back;
    return collage_strategy_compose(&p, &back) == COLLAGE_OK && back == s; /* one number per strategy */
}

collage_status collage_strategy_parts(collage_strategy s, collage_composition *out) {
    if (!out) return COLLAGE_ERR_NULL;
    if (!collage_strategy_valid(s)) return COLLAGE_ERR_ARG;
    *out = strategy_parts_of(s);
    return COLLAGE_OK;
}

/* ------------------------------------------------------------------ composed rows */
/* The preset a composed name is spelled from: of the presets with its weight scheme (collage-plus-v1
 * aside), the one whose moments differ from its own in the fewest parts, the first in table order
 * on a tie. Every scheme has a preset. */
static int name_base(collage_composition p) {
    int best = -1, best_d = 3;
    for (int i = 0; i < COLLAGE_STRATEGY_COUNT; i++) {
        const collage_composition q = collage__strategy_table[i].parts;
        if (i == COLLAGE_PLUS_V1 || q.weights != p.weights) continue;
        int d = (q.m != p.m) + (q.v != p.v);
        if (d < best_d) { best = i; best_d = d; }
    }
    return best;
}

static const char *scheme_keeps(collage_weight_scheme w) {
    switch (w) {
    case COLLAGE_SCHEME_MCF:
    case COLLAGE_SCHEME_FP16_MCF: return "its compensation word δθ";
    case COLLAGE_SCHEME_KAHAN: return "its Kahan buffer";
    case COLLAGE_SCHEME_REMAINDER: return "its remainder bits";
    case COLLAGE_SCHEME_C8: return "its correction byte e";
    case COLLAGE_SCHEME_ECO: return "its first moment m";
    case COLLAGE_SCHEME_MASTER:
    case COLLAGE_SCHEME_FP16_MASTER: return "its fp32 master weights";
    default: return NULL;
    }
}

/* A word of format f in a row: its bytes per parameter (an 8-bit word's block scale included). */
static collage_state_word make_word(collage_word_format f, int derived) {
    collage_state_word w = {f, 0, 0.0, derived};
    if (word_is_q8(f)) { w.block = COLLAGE_QBLOCK; w.bytes = 1.0 + 4.0 / COLLAGE_QBLOCK; }
    else w.bytes = (double)collage__word_size(f);
    return w;
}

/* The row of a strategy with parts p, by the rules of parts_word: what the presets' rows hold. */
static void compose_row(collage_composition p, collage_strategy_info *row, char *name, size_t cap) {
    memset(row, 0, sizeof *row);
    for (int r = 0; r < COLLAGE_ROLE_COUNT; r++)
        row->word[r] = make_word(parts_word(p, (collage_word_role)r), r == COLLAGE_ROLE_WEIGHTS && scheme_has_master(p.weights));
    row->arith = parts_arith(p);
    row->keeps_update_in = scheme_keeps(p.weights);
    row->parts = p;
    const int b = name_base(p);
    const collage_composition q = collage__strategy_table[b].parts;
    size_t len = (size_t)snprintf(name, cap, "%s", collage__strategy_table[b].name);
    const char *sep = "+";
    if (q.m != p.m && len < cap) { len += (size_t)snprintf(name + len, cap - len, "%sm=%s", sep, MOMENT_NAMES[p.m]); sep = ","; }
    if (q.v != p.v && len < cap) { len += (size_t)snprintf(name + len, cap - len, "%sv=%s", sep, MOMENT_NAMES[p.v]); sep = ","; }
    if (p.sr_states && len < cap) snprintf(name + len, cap - len, "%sq=sr", sep);
    row->name = name;
}

/* The composed rows, made on first use and kept for the life of the process (their pointers and
 * names stay valid): one slot per number, filled under a lock, read without one once published. */
#define COMPOSED_SLOTS 0x2000
typedef struct {
    collage_strategy_info row;
    char name[72];
    int ready;
} composed_slot;
static composed_slot *g_composed;
static pthread_mutex_t g_composed_lock = PTHREAD_MUTEX_INITIALIZER;

static const collage_strategy_info *composed_row(collage_strategy s) {
    composed_slot *slots = __atomic_load_n(&g_composed, __ATOMIC_ACQUIRE);
    const unsigned i = (unsigned)s - COLLAGE_STRATEGY_COMPOSED;
    if (slots && __atomic_load_n(&slots[i].ready, __ATOMIC_ACQUIRE)) return &slots[i].row;
    pthread_mutex_lock(&g_composed_lock);
    if (!g_composed) __atomic_store_n(&g_composed, calloc(COMPOSED_SLOTS, sizeof(composed_slot)), __ATOMIC_RELEASE);
    slots = g_composed;
    const collage_strategy_info *row = NULL;
    if (slots) {
        if (!slots[i].ready) {
            compose_row(strategy_parts_of(s), &slots[i].row, slots[i].name, sizeof slots[i].name);
            __atomic_store_n(&slots[i].ready, 1, __ATOMIC_RELEASE);
        }
        row = &slots[i].row;
    }
    pthread_mutex_unlock(&g_composed_lock);
    return row;
}

const collage_strategy_info *collage_strategy_get(collage_strategy s) {
    if ((unsigned)s < COLLAGE_STRATEGY_COUNT) return &collage__strategy_table[s];
    return collage_strategy_valid(s) ? composed_row(s) : NULL;
}

const char *collage_strategy_name(collage_strategy s) {
    const collage_strategy_info *row = collage_strategy_get(s);
    return row ? row->name : "unknown";
}

/* ------------------------------------------------------------------ parsing */
static _Thread_local char g_parse_err[160];

static collage_status parse_fail(const char *fmt, const char *a, const char *b) {
    snprintf(g_parse_err, sizeof g_parse_err, fmt, a, b);
    return COLLAGE_ERR_ARG;
}

const char *collage_strategy_parse_error(void) { return g_parse_err; }

static int preset_by_name(const char *name, size_t len) {
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < COLLAGE_STRATEGY_COUNT; i++) {
            const char *n = pass ? collage__strategy_table[i].alias : collage__strategy_table[i].name;
            if (n && strlen(n) == len && !strncmp(name, n, len)) return i;
        }
    return -1;
}

/* One "key=value" part of a composition into c; seen marks the keys already given. */
static collage_status parse_part(const char *part, collage_composition *c, unsigned *seen) {
    char key[16], val[24];
    const char *eq = strchr(part, '=');
    if (!eq || eq == part || (size_t)(eq - part) >= sizeof key || strlen(eq + 1) >= sizeof val || !eq[1])
        return parse_fail("'%s%s' is not KEY=VALUE (m=FORMAT, v=FORMAT or q=sr)", part, "");
    snprintf(key, sizeof key, "%.*s", (int)(eq - part), part);
    snprintf(val, sizeof val, "%s", eq + 1);
    const unsigned bit = !strcmp(key, "m") ? 1u : !strcmp(key, "v") ? 2u : !strcmp(key, "q") ? 4u : 0u;
    if (!bit) return parse_fail("unknown part '%s' in '%s' (m, v or q)", key, part);
    if (*seen & bit) return parse_fail("'%s' is given twice%s", key, "");
    *seen |= bit;
    if (bit == 4u) {
        if (strcmp(val, "sr") && strcmp(val, "rn")) return parse_fail("q=%s: q takes sr (stochastic) or rn (to nearest)%s", val, "");
        c->sr_states = !strcmp(val, "sr");
        return COLLAGE_OK;
    }
    int f = -1;
    for (int k = 0; k < COLLAGE_MOMENT_COUNT; k++)
        if (!strcmp(val, MOMENT_NAMES[k])) f = k;
    if (f < 0) return parse_fail("%s=%s: the formats are fp32, bf16, mcf, fp16, fp16-mcf, int8, e4m3", key, val);
    if (bit == 1u && moment_is_pair((collage_moment_format)f))
        return parse_fail("m=%s: %s is a second-moment format only", val, val);
    if (bit == 1u) c->m = (collage_moment_format)f;
    else c->v = (collage_moment_format)f;
    return COLLAGE_OK;
}

collage_status collage_strategy_parse(const char *name, collage_strategy *out) {
    if (!name || !out) return COLLAGE_ERR_NULL;
    g_parse_err[0] = 0;
    const char *plus = strchr(name, '+');
    const size_t blen = plus ? (size_t)(plus - name) : strlen(name);
    const int base = preset_by_name(name, blen);
    if (base < 0) {
        snprintf(g_parse_err, sizeof g_parse_err, "unknown strategy '%.*s'", (int)(blen < 100 ? blen : 100), name);
        return COLLAGE_ERR_ARG;
    }
    if (!plus) { *out = (collage_strategy)base; return COLLAGE_OK; }
    if (base == COLLAGE_PLUS_V1)
        return parse_fail("collage-plus-v1 takes no parts: it reproduces the published code as it is%s%s", "", "");
    collage_composition c = collage__strategy_table[base].parts;
    unsigned seen = 0;
    char buf[128];
    if (strlen(plus + 1) >= sizeof buf) return parse_fail("'%s' is too long%s", name, "");
    snprintf(buf, sizeof buf, "%s", plus + 1);
    if (!buf[0]) return parse_fail("'%s' ends at '+': give m=FORMAT, v=FORMAT or q=sr after it%s", name, "");
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        collage_status st = parse_part(t, &c, &seen);
        if (st) return st;
    }
    if (c.sr_states && !moment_is_q8(c.m) && !moment_is_q8(c.v))
        return parse_fail("q=sr re-quantizes 8-bit states, and '%s' has none%s", name, "");
    return collage_strategy_compose(&c, out);
}

/* ------------------------------------------------------------------ questions */
int collage_strategy_is_fp32(collage_strategy s) {
    return collage_strategy_valid(s) && strategy_word(s, COLLAGE_ROLE_WEIGHTS) == COLLAGE_WORD_FP32;
}
int collage_strategy_is_fp16(collage_strategy s) {
    return collage_strategy_valid(s) && strategy_word(s, COLLAGE_ROLE_WEIGHTS) == COLLAGE_WORD_FP16;
}

collage_memory collage_strategy_memory(collage_strategy s) {
    collage_memory r = {0};
    const collage_strategy_info *T = collage_strategy_get(s);
    if (!T) return r;
    const collage_state_word *w = T->word;
    r.weights = w[COLLAGE_ROLE_WEIGHTS].bytes;
    r.compensation = w[COLLAGE_ROLE_COMPENSATION].bytes + w[COLLAGE_ROLE_KAHAN].bytes +
                     w[COLLAGE_ROLE_REMAINDER].bytes + w[COLLAGE_ROLE_DV].bytes + w[COLLAGE_ROLE_CORRECTION].bytes;
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
        [COLLAGE_ROLE_DV] = "δv", [COLLAGE_ROLE_MASTER] = "master", [COLLAGE_ROLE_CORRECTION] = "e"};
    return (unsigned)r < COLLAGE_ROLE_COUNT ? names[r] : "unknown";
}

const char *collage_word_format_name(collage_word_format f) {
    static const char *const names[COLLAGE_WORD_FORMAT_COUNT] = {
        [COLLAGE_WORD_NONE] = "none", [COLLAGE_WORD_FP32] = "fp32", [COLLAGE_WORD_BF16] = "bf16",
        [COLLAGE_WORD_FP16] = "fp16", [COLLAGE_WORD_INT16] = "int16", [COLLAGE_WORD_INT8] = "int8",
        [COLLAGE_WORD_E4M3] = "e4m3", [COLLAGE_WORD_BYTE] = "byte"};
    return (unsigned)f < COLLAGE_WORD_FORMAT_COUNT ? names[f] : "unknown";
}

size_t collage__word_size(collage_word_format f) {
    switch (f) {
    case COLLAGE_WORD_FP32: return 4;
    case COLLAGE_WORD_BF16:
    case COLLAGE_WORD_FP16:
    case COLLAGE_WORD_INT16: return 2;
    case COLLAGE_WORD_INT8:
    case COLLAGE_WORD_E4M3:
    case COLLAGE_WORD_BYTE: return 1;
    default: return 0;
    }
}

collage_qcode collage__word_qcode(collage_word_format f, collage_word_role r) {
    if (f == COLLAGE_WORD_E4M3) return COLLAGE_QCODE_E4M3;
    return r == COLLAGE_ROLE_V ? COLLAGE_QCODE_DYN_UNSIGNED : COLLAGE_QCODE_DYN_SIGNED;
}

collage_status collage__strategy_check(collage_strategy s) {
    if (!collage_strategy_valid(s)) return COLLAGE_ERR_ARG;
    const collage_strategy_info *T = collage_strategy_get(s);
    if (!T) return COLLAGE_ERR_NOMEM;
    for (int r = 0; r < COLLAGE_ROLE_COUNT; r++) {
        const collage_word_format f = T->word[r].format;
        if (f != parts_word(T->parts, (collage_word_role)r) || (f && T->word[r].bytes != make_word(f, 0).bytes))
            return COLLAGE_ERR_ARG;
    }
    return T->arith == parts_arith(T->parts) ? COLLAGE_OK : COLLAGE_ERR_ARG;
}
