/* infer.c — `collage eval` (the mean loss of a checkpoint on a split of the data, the held-out one by
 * default; for a masked-LM model the masked tokens' loss and accuracy on a fixed mask), `collage sample`
 * (text from a decoder's checkpoint) and `collage fill` (an encoder's top predictions for the masked
 * positions of a text). A checkpoint is a model file of a family's format, a checkpoint folder, or a run
 * folder written by train --save (its newest checkpoint, whose model.bin is checked against its checksum
 * first). */
#include "cli.h"
#include "collage_run.h"
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The model of a checkpoint, in fp32, for batches of maxB × maxT (maxT 0: the model's context); NULL
 * after a message of command cmd, with the exit status in *rc (2: --seq over the model's context). */
static collage_model *load_model(const char *cmd, const char *arg, int maxB, int maxT, float **params,
                                 collage_model_config *c, int *rc) {
    char path[4096], err[1024] = "";
    *rc = 1;
    if (collage_checkpoint_model(arg, path, sizeof path, err, sizeof err) != COLLAGE_OK) {
        fprintf(stderr, "collage %s: --checkpoint: %s\nhint: %s\n", cmd, err, cli_checkpoint_hint(arg));
        return NULL;
    }
    int file_bf16;
    if (collage_model_read_header(path, c, &file_bf16, err, sizeof err) != COLLAGE_OK) {
        fprintf(stderr, "collage %s: --checkpoint: %s\nhint: %s\n", cmd, err, cli_checkpoint_hint(arg));
        return NULL;
    }
    if (maxT == 0) maxT = c->max_seq_len; /* the model's whole context */
    if (maxT > c->max_seq_len) {
        fprintf(stderr, "collage %s: --seq %d exceeds the model's context %d\nhint: --seq %d or less\n", cmd, maxT,
                c->max_seq_len, c->max_seq_len);
        *rc = 2;
        return NULL;
    }
    size_t n = collage_model_num_params(c);
    *params = malloc(n * sizeof(float));
    collage_model *m = NULL;
    collage_status st = *params ? collage_model_load_file(path, c, *params, 0, err, sizeof err) : COLLAGE_ERR_NOMEM;
    const int read = st == COLLAGE_OK;
    if (read) st = collage_model_create(c, COLLAGE_REAL_FP32, maxB, maxT, &m);
    if (st != COLLAGE_OK) {
        if (read || !*params)
            snprintf(err, sizeof err, "%s: a model of %zu parameters for batches of %d x %d", collage_status_str(st), n, maxB,
                     maxT);
        fprintf(stderr, "collage %s: --checkpoint: cannot load '%s': %s\nhint: %s\n", cmd, path, err,
                read || !*params ? "a smaller --batch or --seq" : "the file is damaged, or not of a kind collage reads");
        free(*params);
        *params = NULL;
        return NULL;
    }
    return m;
}

/* The tokenizer of a model of `vocab` text symbols (the model's vocabulary less its added tokens); NULL
 * after a message of command cmd, with the exit status in *rc (2: --tokenizer unknown or not the model's). */
static collage_tokenizer *tokenizer_for(const char *cmd, const char *name, int vocab, int *rc) {
    collage_tokenizer_kind k = vocab > 256 ? COLLAGE_TOKENIZER_GPT2 : COLLAGE_TOKENIZER_BYTE;
    *rc = 2;
    if (name && collage_tokenizer_kind_parse(name, &k) != COLLAGE_OK) {
        fprintf(stderr, "collage %s: unknown --tokenizer '%s'\nhint: byte or gpt2\n", cmd, name);
        return NULL;
    }
    char err[1024];
    collage_tokenizer *t = NULL;
    if (collage_tokenizer_create(k, NULL, &t, err, sizeof err) != COLLAGE_OK) {
        fprintf(stderr, "collage %s: %s\nhint: scripts/gpt2-vocab.sh installs the GPT-2 vocabulary (scripts/setup.sh runs "
                        "it), or set $" COLLAGE_GPT2_VOCAB_ENV "\n", cmd, err);
        *rc = 1;
        return NULL;
    }
    if (collage_tokenizer_vocab_size(t) != vocab) {
        fprintf(stderr, "collage %s: --tokenizer %s has %d symbols but the model has %d\nhint: pass the tokenizer the model "
                        "was trained with\n", cmd, collage_tokenizer_kind_name(k), collage_tokenizer_vocab_size(t), vocab);
        collage_tokenizer_free(t);
        return NULL;
    }
    return t;
}

/* ---------------------------------------------------------------- eval */
typedef struct { const char *ck, *data, *tokname, *split; int B, T, batches, json, threads; } eval_opts;

static void eval_usage(FILE *f) {
    fprintf(f, "usage: collage eval --checkpoint PATH [options]\n"
               "  --checkpoint PATH   model.bin, a checkpoint folder, a run folder (its newest checkpoint), or a\n"
               "                      Hugging Face folder (config.json, model.safetensors: save_pretrained's)\n"
               "  --data PATH         the corpus (default: the fortunes), read as train reads it\n"
               "  --split S           val (default): the held-out last 10%% of the data, as train holds it out;\n"
               "                      train: the other 90%%; all: the whole corpus\n"
               "  --tokenizer NAME    byte | gpt2 (default: the model's vocabulary tells)\n"
               "  --batch B --seq T   sequences per batch and their length (default 8, 64)\n"
               "  --batches N         batches scored, at most one pass over the split (default 50)\n"
               "  --threads N         threads (1 to 4 x the cores; default: all cores)\n"
               "  --json              one JSON object: loss, split, tokens, batches\n");
}


/* 0: run; 1: --help was printed; -1: a bad flag (message printed). */
static int parse_eval(int argc, char **argv, eval_opts *o) {
    *o = (eval_opts){.B = 8, .T = 64, .batches = 50, .split = "val"};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { eval_usage(stdout); return 1; }
        if (!strcmp(a, "--json")) { o->json = 1; continue; }
        if (!strcmp(a, "--checkpoint")) bad = cli_path("eval", a, o->ck = v);
        else if (!strcmp(a, "--data")) bad = cli_path("eval", a, o->data = v);
        else if (!strcmp(a, "--tokenizer")) o->tokname = v;
        else if (!strcmp(a, "--split")) o->split = v;
        else if (!strcmp(a, "--batch")) bad = cli_parse_range("eval", a, v, 1, INT_MAX, &o->B);
        else if (!strcmp(a, "--seq")) bad = cli_parse_range("eval", a, v, 1, INT_MAX, &o->T);
        else if (!strcmp(a, "--batches")) bad = cli_parse_range("eval", a, v, 1, INT_MAX, &o->batches);
        else if (!strcmp(a, "--threads")) bad = cli_parse_threads("eval", v, &o->threads);
        else return cli_unknown("eval", a);
        if (bad) return -1;
        if (!v) return cli_needs_value("eval", a);
        i++;
    }
    if (!o->ck) { fprintf(stderr, "collage eval: --checkpoint PATH is required\nhint: collage eval --help\n"); return -1; }
    if (strcmp(o->split, "val") && strcmp(o->split, "train") && strcmp(o->split, "all")) {
        fprintf(stderr, "collage eval: --split '%s': it takes val, train or all\nhint: collage eval --help\n", o->split);
        return -1;
    }
    return 0;
}

/* The split's words for the output. */
static const char *split_words(const char *split) {
    if (!strcmp(split, "val")) return "the held-out split (the last 10% of the data)";
    if (!strcmp(split, "train")) return "the training split (the first 90% of the data)";
    return "the whole data";
}

/* The loss, and for a masked-LM model the masked tokens' count and accuracy; the data they were read from. */
static void print_scores(const collage_scores *sc, const eval_opts *o, long long tokens, int nb) {
    const int mlm = !isnan(sc->accuracy);
    const char *split = o->split, *data = cli_data_name(o->data);
    if (o->json) {
        printf("{\"loss\":%.6f,\"split\":\"%s\",\"tokens\":%lld,\"batches\":%d,\"data\":\"", sc->loss, split, tokens, nb);
        for (const char *p = data; *p; p++) printf(*p == '"' || *p == '\\' ? "\\%c" : "%c", *p);
        printf("\"");
        if (mlm) printf(",\"masked\":%lld,\"accuracy\":%.6f", sc->scored, sc->accuracy);
        printf("}\n");
    } else if (mlm)
        printf("masked-LM loss %.4f, accuracy %.2f%% on %lld masked tokens (a fixed 15%% of %lld) of %s over %d batch%s "
               "of %s\n", sc->loss, 100 * sc->accuracy, sc->scored, tokens, split_words(split), nb, nb == 1 ? "" : "es", data);
    else printf("loss %.4f on %s: %d batch%s, %lld tokens of %s\n", sc->loss, split_words(split), nb, nb == 1 ? "" : "es",
                tokens, data);
}

int cmd_eval(int argc, char **argv) {
    eval_opts o;
    int pr = parse_eval(argc, argv, &o);
    if (pr) return pr > 0 ? 0 : 2;
    cli_set_threads(o.threads);
    collage_model_config c;
    float *params = NULL;
    int rc = 1;
    collage_model *m = load_model("eval", o.ck, o.B, o.T, &params, &c, &rc);
    if (!m) return rc;
    collage_tokenizer *tok = tokenizer_for("eval", o.tokname, collage_model_text_vocab(&c), &rc);
    if (tok) rc = 1;
    char err[1024];
    /* val and train: the split collage train makes (the last 10% held out); all: no split */
    collage_loader_config lc = {.path = o.data, .tokenizer = tok, .B = o.B, .T = o.T,
                                .val_fraction = strcmp(o.split, "all") ? 0 : -1, .sequential = 1};
    collage_split sp = strcmp(o.split, "val") ? COLLAGE_SPLIT_TRAIN : COLLAGE_SPLIT_VAL;
    collage_loader *ld = NULL;
    if (tok && collage_loader_create(&lc, &ld, err, sizeof err) == COLLAGE_OK) {
        uint64_t per = collage_loader_steps_per_epoch(ld, sp);
        int nb = (uint64_t)o.batches < per ? o.batches : (int)per;
        collage_scores sc = {.loss = (double)NAN};
        if (nb > 0) collage_eval_scores(m, params, ld, sp, o.B, o.T, nb, &sc);
        if (nb <= 0)
            fprintf(stderr, "collage eval: %s of %s holds fewer than %d x %d tokens\nhint: a smaller --batch or --seq, or "
                            "--split all\n", split_words(o.split), cli_data_name(o.data), o.B, o.T + 1);
        else if (!isfinite(sc.loss))
            fprintf(stderr, "collage eval: the loss of '%s' on %s is not a finite number (%g): its weights give non-finite logits\nhint: "
                            "an earlier checkpoint of the run (its step-N folders), or --init from a sound model\n",
                    o.ck, split_words(o.split), sc.loss);
        else {
            print_scores(&sc, &o, (long long)nb * o.B * o.T, nb);
            rc = 0;
        }
    } else if (tok) {
        const char *shard = cli_shard_hint(err, collage_tokenizer_vocab_size(tok) > 256 ? "gpt2" : "byte", 1);
        fprintf(stderr, "collage eval: --data: %s\nhint: %s\n", err,
                shard ? shard : "--data takes a text file, a folder of text files or .bin shards");
    }
    collage_loader_free(ld);
    collage_tokenizer_free(tok);
    collage_model_free(m);
    free(params);
    return rc;
}

/* ---------------------------------------------------------------- sample */
typedef struct { const char *ck, *prompt, *tokname; int ntok, threads; double temp; size_t seed; } sample_opts;

static void sample_usage(FILE *f) {
    fprintf(f, "usage: collage sample --checkpoint PATH [options]\n"
               "  --checkpoint PATH   a decoder's (GPT-2 or LLaMA) model file, a checkpoint folder, a run folder\n"
               "                      (its newest checkpoint), or a Hugging Face folder (GPT2LMHeadModel,\n"
               "                      LlamaForCausalLM)\n"
               "  --prompt TEXT       the text to continue (default: a new line)\n"
               "  --tokens N          tokens to generate (default 200)\n"
               "  --temperature X     0: the most likely token each time; higher: more varied (default 0.8)\n"
               "  --seed N            the same seed gives the same text (default 42)\n"
               "  --tokenizer NAME    byte | gpt2 (default: the model's vocabulary tells)\n"
               "  --threads N         threads (1 to 4 x the cores; default: all cores)\n");
}

/* 0: run; 1: --help was printed; -1: a bad flag (message printed). */
static int parse_sample(int argc, char **argv, sample_opts *o) {
    *o = (sample_opts){.prompt = "\n", .ntok = 200, .temp = 0.8, .seed = 42};
    for (int i = 0; i < argc; i += 2) { /* every option but --help takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { sample_usage(stdout); return 1; }
        if (!strcmp(a, "--checkpoint")) bad = cli_path("sample", a, o->ck = v);
        else if (!strcmp(a, "--prompt")) o->prompt = v;
        else if (!strcmp(a, "--tokenizer")) o->tokname = v;
        else if (!strcmp(a, "--tokens")) bad = cli_parse_range("sample", a, v, 1, INT_MAX, &o->ntok);
        else if (!strcmp(a, "--temperature")) bad = cli_parse_double("sample", a, v, &o->temp);
        else if (!strcmp(a, "--seed")) bad = cli_parse_size("sample", a, v, &o->seed);
        else if (!strcmp(a, "--threads")) bad = cli_parse_threads("sample", v, &o->threads);
        else return cli_unknown("sample", a);
        if (bad) return -1;
        if (!v) return cli_needs_value("sample", a);
    }
    if (!o->ck) { fprintf(stderr, "collage sample: --checkpoint PATH is required\nhint: collage sample --help\n"); return -1; }
    if (!(o->temp >= 0)) {
        fprintf(stderr, "collage sample: --temperature %g: it takes a number >= 0\nhint: collage sample --help\n", o->temp);
        return -1;
    }
    return 0;
}

/* Tokens after the n prompt ids, written as they come; 0, or the 1-based index of the token at which the
 * model failed (its logits not finite: no token can be drawn). */
static int generate(collage_model *m, const float *params, const collage_tokenizer *tok, const sample_opts *o,
                    uint16_t *ids, size_t n, int *ctx, float *logits) {
    const collage_model_config *c = collage_model_get_config(m);
    uint64_t key = collage_rand_key(o->seed, 0);
    for (int t = 0; t < o->ntok; t++) {
        int T = (int)n < c->max_seq_len ? (int)n : c->max_seq_len;
        for (int i = 0; i < T; i++) ctx[i] = ids[n - (size_t)T + (size_t)i];
        if (collage_model_next_logits(m, params, ctx, T, logits) != COLLAGE_OK) return t + 1;
        int next = collage_sample_logits(logits, c->vocab_size, (float)o->temp, key, (uint64_t)t);
        if (next < 0) return t + 1;
        ids[n++] = (uint16_t)next;
        size_t len;
        const char *s = collage_tokenizer_token(tok, next, &len);
        if (s) fwrite(s, 1, len, stdout);
        fflush(stdout);
    }
    return 0;
}

int cmd_sample(int argc, char **argv) {
    sample_opts o;
    int pr = parse_sample(argc, argv, &o);
    if (pr) return pr > 0 ? 0 : 2;
    cli_set_threads(o.threads);
    collage_model_config c;
    float *params = NULL;
    int rc = 1;
    collage_model *m = load_model("sample", o.ck, 1, 0, &params, &c, &rc);
    if (!m) return rc;
    if (!collage_family_generates(c.family)) {
        fprintf(stderr, "collage sample: '%s' holds a %s model, an encoder: it predicts masked tokens and does not "
                        "generate text\nhint: collage fill --checkpoint %s --text \"The [MASK] sat\"\n", o.ck,
                collage_family_name(c.family), o.ck);
        collage_model_free(m);
        free(params);
        return 2;
    }
    collage_tokenizer *tok = tokenizer_for("sample", o.tokname, collage_model_text_vocab(&c), &rc);
    if (tok) rc = 1;
    size_t plen = strlen(o.prompt), n = 0;
    uint16_t *ids = malloc(sizeof(uint16_t) * (plen + (size_t)o.ntok + 1));
    int *ctx = malloc(sizeof(int) * (size_t)c.max_seq_len);
    float *logits = malloc(sizeof(float) * (size_t)c.vocab_size);
    if (tok && ids && ctx && logits && collage_tokenizer_encode(tok, o.prompt, plen, ids, &n) == COLLAGE_OK && n > 0) {
        fwrite(o.prompt, 1, plen, stdout);
        int failed = generate(m, params, tok, &o, ids, n, ctx, logits);
        fputc('\n', stdout);
        fflush(stdout);
        if (failed)
            fprintf(stderr, "collage sample: the logits of '%s' are not finite at token %d of %d: no token can be drawn\n"
                            "hint: an earlier checkpoint of the run (its step-N folders); collage eval shows its loss\n",
                    o.ck, failed, o.ntok);
        rc = failed ? 1 : 0;
    } else if (tok) {
        fprintf(stderr, "collage sample: --prompt '%s' encodes to no token\nhint: a non-empty --prompt, or leave it out (a "
                        "new line)\n", o.prompt);
        rc = 2;
    }
    free(ids); free(ctx); free(logits);
    collage_tokenizer_free(tok);
    collage_model_free(m);
    free(params);
    return rc;
}

/* ---------------------------------------------------------------- fill */
#define FILL_MARK "[MASK]"
#define FILL_TOP_MAX 64
typedef struct { const char *ck, *text, *tokname; int top, json, threads; } fill_opts;

static void fill_usage(FILE *f) {
    fprintf(f, "usage: collage fill --checkpoint PATH --text \"The " FILL_MARK " sat\" [options]\n"
               "  --checkpoint PATH   an encoder's (BERT) model file, a checkpoint folder, or a run folder (its\n"
               "                      newest checkpoint)\n"
               "  --text TEXT         the text, with " FILL_MARK " at each token to predict\n"
               "  --top K             predictions shown per " FILL_MARK " (1 to %d, default 5)\n"
               "  --tokenizer NAME    byte | gpt2 (default: the model's vocabulary tells)\n"
               "  --threads N         threads (1 to 4 x the cores; default: all cores)\n"
               "  --json              one JSON object: each mask's top predictions and the filled text\n",
            FILL_TOP_MAX);
}

/* 0: run; 1: --help was printed; -1: a bad flag (message printed). */
static int parse_fill(int argc, char **argv, fill_opts *o) {
    *o = (fill_opts){.top = 5};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fill_usage(stdout); return 1; }
        if (!strcmp(a, "--json")) { o->json = 1; continue; }
        if (!strcmp(a, "--checkpoint")) bad = cli_path("fill", a, o->ck = v);
        else if (!strcmp(a, "--text")) o->text = v;
        else if (!strcmp(a, "--tokenizer")) o->tokname = v;
        else if (!strcmp(a, "--top")) bad = cli_parse_range("fill", a, v, 1, FILL_TOP_MAX, &o->top);
        else if (!strcmp(a, "--threads")) bad = cli_parse_threads("fill", v, &o->threads);
        else return cli_unknown("fill", a);
        if (bad) return -1;
        if (!v) return cli_needs_value("fill", a);
        i++;
    }
    if (!o->ck || !o->text) {
        fprintf(stderr, "collage fill: %s is required\nhint: collage fill --checkpoint PATH --text \"The " FILL_MARK
                        " sat\"\n", !o->ck ? "--checkpoint PATH" : "--text TEXT");
        return -1;
    }
    return 0;
}

/* The ids of text with every FILL_MARK replaced by the mask token; their positions in pos. -1 when a piece
 * does not encode. ids, pos: strlen(text) + 1 entries. */
static int encode_masked(const collage_tokenizer *tok, const char *text, int mask, int *ids, int *pos, int *npos) {
    size_t n = 0, len = strlen(text);
    uint16_t *piece = malloc(sizeof(uint16_t) * (len + 1));
    if (!piece) return -1;
    *npos = 0;
    for (const char *p = text; *p;) {
        const char *m = strstr(p, FILL_MARK);
        const size_t plen = m ? (size_t)(m - p) : strlen(p);
        size_t k = 0;
        if (plen && collage_tokenizer_encode(tok, p, plen, piece, &k) != COLLAGE_OK) { free(piece); return -1; }
        for (size_t i = 0; i < k; i++) ids[n++] = piece[i];
        if (!m) break;
        pos[(*npos)++] = (int)n;
        ids[n++] = mask;
        p = m + strlen(FILL_MARK);
    }
    free(piece);
    return (int)n;
}

/* A token's bytes for a terminal ("\n" shown as \n, other control bytes as \xNN) or a JSON string. */
static void put_token(const collage_tokenizer *tok, int id) {
    size_t len = 0;
    const char *s = collage_tokenizer_token(tok, id, &len);
    for (size_t i = 0; s && i < len; i++) {
        const unsigned char ch = (unsigned char)s[i];
        if (ch == '\n') fputs("\\n", stdout);
        else if (ch == '"' || ch == '\\') printf("\\%c", ch);
        else if (ch < 32 || ch == 127) printf("\\u%04x", ch);
        else putchar(ch);
    }
}

/* The k most probable of the text tokens [0, V) for one masked position (softmax of its logits in double),
 * best first (the lower id on ties); returns the argmax. */
static int top_k(const float *logits, int V, int k, int *best, double *prob) {
    double mx = -(double)INFINITY, z = 0;
    for (int i = 0; i < V; i++) mx = fmax(mx, (double)logits[i]);
    for (int i = 0; i < V; i++) z += exp((double)logits[i] - mx);
    for (int j = 0; j < k; j++) {
        best[j] = -1;
        for (int i = 0; i < V; i++) {
            int taken = 0;
            for (int q = 0; q < j; q++) taken |= best[q] == i;
            if (!taken && (best[j] < 0 || logits[i] > logits[best[j]])) best[j] = i;
        }
        prob[j] = exp((double)logits[best[j]] - mx) / z;
    }
    return best[0];
}

/* Each masked position's top predictions, then the text with the best of each filled in. */
static void print_fill(const fill_opts *o, const collage_tokenizer *tok, const int *ids, int n, const int *pos, int npos,
                       const float *logits, int Vm, int V) {
    int *fill = malloc(sizeof(int) * (size_t)n), best[FILL_TOP_MAX];
    double prob[FILL_TOP_MAX];
    const int k = o->top < V ? o->top : V; /* top <= FILL_TOP_MAX */
    memcpy(fill, ids, sizeof(int) * (size_t)n);
    printf(o->json ? "{\"masks\":[" : "");
    for (int q = 0; q < npos; q++) {
        fill[pos[q]] = top_k(logits + (size_t)q * Vm, V, k, best, prob);
        printf(o->json ? "%s{\"position\":%d,\"top\":[" : "%s" FILL_MARK " at token %d:", q && o->json ? "," : "", pos[q]);
        for (int j = 0; j < k; j++) {
            printf(o->json ? "%s{\"token\":\"" : "%s '", j && o->json ? "," : "");
            put_token(tok, best[j]);
            printf(o->json ? "\",\"id\":%d,\"p\":%.6f}" : "' (id %d) %.1f%%", best[j], o->json ? prob[j] : 100 * prob[j]);
        }
        printf(o->json ? "]}" : "\n");
    }
    printf(o->json ? "],\"filled\":\"" : "filled: ");
    for (int i = 0; i < n; i++) put_token(tok, fill[i]);
    printf(o->json ? "\"}\n" : "\n");
    free(fill);
}

int cmd_fill(int argc, char **argv) {
    fill_opts o;
    int pr = parse_fill(argc, argv, &o);
    if (pr) return pr > 0 ? 0 : 2;
    cli_set_threads(o.threads);
    collage_model_config c;
    float *params = NULL;
    int rc = 1;
    collage_model *m = load_model("fill", o.ck, 1, 0, &params, &c, &rc);
    if (!m) return rc;
    rc = 2;
    const int V = collage_model_text_vocab(&c), mask = collage_model_mask_token(&c);
    collage_tokenizer *tok = mask < 0 ? NULL : tokenizer_for("fill", o.tokname, V, &rc);
    if (tok) rc = 2;
    const size_t cap = strlen(o.text) + 1;
    int *ids = malloc(sizeof(int) * cap), *pos = malloc(sizeof(int) * cap), n = -1, npos = 0;
    if (mask < 0)
        fprintf(stderr, "collage fill: '%s' holds a %s model, which predicts the next token, not masked ones\n"
                        "hint: collage sample --checkpoint %s --prompt TEXT\n", o.ck, collage_family_name(c.family), o.ck);
    else if (tok && ids && pos && (n = encode_masked(tok, o.text, mask, ids, pos, &npos)) < 0)
        fprintf(stderr, "collage fill: --text cannot be encoded by the %s tokenizer\nhint: --tokenizer, the one the model "
                        "was trained with\n", o.tokname ? o.tokname : "model's");
    else if (tok && npos == 0)
        fprintf(stderr, "collage fill: --text has no " FILL_MARK "\nhint: mark each token to predict, e.g. --text \"The "
                        FILL_MARK " sat\"\n");
    else if (tok && n > c.max_seq_len)
        fprintf(stderr, "collage fill: --text is %d tokens, longer than the model's context of %d\nhint: a shorter text\n",
                n, c.max_seq_len);
    else if (tok) {
        float *logits = malloc(sizeof(float) * (size_t)npos * (size_t)c.vocab_size);
        rc = 1;
        if (logits && collage_model_logits_at(m, params, ids, n, pos, npos, logits) == COLLAGE_OK) {
            print_fill(&o, tok, ids, n, pos, npos, logits, c.vocab_size, V);
            rc = 0;
        } else fprintf(stderr, "collage fill: %s\nhint: a shorter --text\n", collage_model_error(m));
        free(logits);
    }
    free(ids); free(pos);
    collage_tokenizer_free(tok);
    collage_model_free(m);
    free(params);
    return rc;
}
