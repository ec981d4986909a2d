/* infer.c — `collage eval` (the mean loss of a checkpoint on data) and `collage sample` (text from a
 * checkpoint). A checkpoint is a model file of a family's format or a folder written by train --save. */
#include "cli.h"
#include "collage_run.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The model of a checkpoint, in fp32, for batches of maxB × maxT (maxT 0: the model's context). */
static collage_model *load_model(const char *arg, int maxB, int maxT, float **params, collage_model_config *c) {
    char path[4096], err[1024] = "";
    collage_checkpoint_model_path(arg, path, sizeof path);
    int file_bf16;
    if (collage_model_read_header(path, c, &file_bf16, err, sizeof err) != COLLAGE_OK) {
        fprintf(stderr, "collage: %s\nhint: --checkpoint takes a model file (llm.c GPT-2, llama2.c) or a folder written by train --save\n", err);
        return NULL;
    }
    if (maxT == 0) maxT = c->max_seq_len; /* the model's whole context */
    if (maxT > c->max_seq_len) {
        fprintf(stderr, "collage: --seq %d exceeds the model's context %d\n", maxT, c->max_seq_len);
        return NULL;
    }
    size_t n = collage_model_num_params(c);
    *params = malloc(n * sizeof(float));
    collage_model *m = NULL;
    if (!*params || collage_model_load_file(path, c, *params, 0, err, sizeof err) != COLLAGE_OK ||
        collage_model_create(c, COLLAGE_REAL_FP32, maxB, maxT, &m) != COLLAGE_OK) {
        fprintf(stderr, "collage: cannot load '%s': %s\n", path, err);
        free(*params);
        *params = NULL;
        return NULL;
    }
    return m;
}

static collage_tokenizer *tokenizer_for(const char *name, int vocab) {
    collage_tokenizer_kind k = vocab > 256 ? COLLAGE_TOKENIZER_GPT2 : COLLAGE_TOKENIZER_BYTE;
    if (name && collage_tokenizer_kind_parse(name, &k) != COLLAGE_OK) {
        fprintf(stderr, "collage: unknown --tokenizer '%s'\nhint: byte or gpt2\n", name);
        return NULL;
    }
    char err[1024];
    collage_tokenizer *t = NULL;
    if (collage_tokenizer_create(k, NULL, &t, err, sizeof err) != COLLAGE_OK) {
        fprintf(stderr, "collage: %s\n", err);
        return NULL;
    }
    if (collage_tokenizer_vocab_size(t) != vocab) {
        fprintf(stderr, "collage: the %s tokenizer has %d symbols but the model has %d\nhint: pass the tokenizer the model was trained with\n",
                collage_tokenizer_kind_name(k), collage_tokenizer_vocab_size(t), vocab);
        collage_tokenizer_free(t);
        return NULL;
    }
    return t;
}

/* ---------------------------------------------------------------- eval */
typedef struct { const char *ck, *data, *tokname; int B, T, batches, json; } eval_opts;

static int parse_eval(int argc, char **argv, eval_opts *o) {
    *o = (eval_opts){.B = 8, .T = 64, .batches = 50};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--checkpoint")) o->ck = v;
        else if (!strcmp(a, "--data")) o->data = v;
        else if (!strcmp(a, "--tokenizer")) o->tokname = v;
        else if (!strcmp(a, "--batch")) bad = cli_parse_int(a, v, &o->B);
        else if (!strcmp(a, "--seq")) bad = cli_parse_int(a, v, &o->T);
        else if (!strcmp(a, "--batches")) bad = cli_parse_int(a, v, &o->batches);
        else if (!strcmp(a, "--json")) { o->json = 1; continue; }
        else {
            fprintf(stderr, "collage eval: unknown option '%s'\nusage: collage eval --checkpoint PATH [--data PATH] "
                            "[--tokenizer byte|gpt2] [--batch B] [--seq T] [--batches N] [--json]\n", a);
            return -1;
        }
        if (bad) return -1;
        if (!v) { fprintf(stderr, "collage eval: %s needs a value\n", a); return -1; }
        i++;
    }
    if (!o->ck) { fprintf(stderr, "collage eval: --checkpoint PATH is required\n"); return -1; }
    if (o->B < 1 || o->T < 1 || o->batches < 1) {
        fprintf(stderr, "collage eval: --batch, --seq and --batches must be positive\n");
        return -1;
    }
    return 0;
}

int cmd_eval(int argc, char **argv) {
    eval_opts o;
    if (parse_eval(argc, argv, &o)) return 2;
    collage_model_config c;
    float *params = NULL;
    collage_model *m = load_model(o.ck, o.B, o.T, &params, &c);
    if (!m) return 1;
    collage_tokenizer *tok = tokenizer_for(o.tokname, c.vocab_size);
    char err[1024];
    collage_loader_config lc = {.path = o.data, .tokenizer = tok, .B = o.B, .T = o.T, .val_fraction = -1, .sequential = 1};
    collage_loader *ld = NULL;
    int rc = 1;
    if (tok && collage_loader_create(&lc, &ld, err, sizeof err) == COLLAGE_OK) {
        uint64_t per = collage_loader_steps_per_epoch(ld, COLLAGE_SPLIT_TRAIN);
        int nb = (uint64_t)o.batches < per ? o.batches : (int)per;
        double loss = (double)NAN;
        collage_eval_loss(m, params, ld, COLLAGE_SPLIT_TRAIN, o.B, o.T, nb, &loss);
        if (isnan(loss)) fprintf(stderr, "collage eval: the data hold fewer than %d x %d tokens\n", o.B, o.T + 1);
        else {
            long long tokens = (long long)nb * o.B * o.T;
            if (o.json) printf("{\"loss\":%.6f,\"tokens\":%lld,\"batches\":%d}\n", loss, tokens, nb);
            else printf("loss %.4f over %d batches (%lld tokens)\n", loss, nb, tokens);
            rc = 0;
        }
    } else if (tok) fprintf(stderr, "collage eval: %s\n", err);
    collage_loader_free(ld);
    collage_tokenizer_free(tok);
    collage_model_free(m);
    free(params);
    return rc;
}

/* ---------------------------------------------------------------- sample */
typedef struct { const char *ck, *prompt, *tokname; int ntok; double temp; size_t seed; } sample_opts;

static int parse_sample(int argc, char **argv, sample_opts *o) {
    *o = (sample_opts){.prompt = "\n", .ntok = 200, .temp = 0.8, .seed = 42};
    for (int i = 0; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--checkpoint")) o->ck = v;
        else if (!strcmp(a, "--prompt")) o->prompt = v;
        else if (!strcmp(a, "--tokenizer")) o->tokname = v;
        else if (!strcmp(a, "--tokens")) bad = cli_parse_int(a, v, &o->ntok);
        else if (!strcmp(a, "--temperature")) bad = cli_parse_double(a, v, &o->temp);
        else if (!strcmp(a, "--seed")) bad = cli_parse_size(a, v, &o->seed);
        else {
            fprintf(stderr, "collage sample: unknown option '%s'\nusage: collage sample --checkpoint PATH [--prompt TEXT] "
                            "[--tokens N] [--temperature X] [--seed N]\n", a);
            return -1;
        }
        if (bad) return -1;
        if (!v) { fprintf(stderr, "collage sample: %s needs a value\n", a); return -1; }
    }
    if (!o->ck) { fprintf(stderr, "collage sample: --checkpoint PATH is required\n"); return -1; }
    return 0;
}

/* Tokens after the n prompt ids, written as they come; 0, or -1 when the model failed. */
static int generate(collage_model *m, const float *params, const collage_tokenizer *tok, const sample_opts *o,
                    uint16_t *ids, size_t n, int *ctx, float *logits) {
    const collage_model_config *c = collage_model_get_config(m);
    uint64_t key = collage_rand_key(o->seed, 0);
    for (int t = 0; t < o->ntok; t++) {
        int T = (int)n < c->max_seq_len ? (int)n : c->max_seq_len;
        for (int i = 0; i < T; i++) ctx[i] = ids[n - (size_t)T + (size_t)i];
        if (collage_model_next_logits(m, params, ctx, T, logits) != COLLAGE_OK) return -1;
        int next = collage_sample_logits(logits, c->vocab_size, (float)o->temp, key, (uint64_t)t);
        if (next < 0) return -1;
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
    if (parse_sample(argc, argv, &o)) return 2;
    collage_model_config c;
    float *params = NULL;
    collage_model *m = load_model(o.ck, 1, 0, &params, &c);
    if (!m) return 1;
    collage_tokenizer *tok = tokenizer_for(o.tokname, c.vocab_size);
    size_t plen = strlen(o.prompt), n = 0;
    uint16_t *ids = malloc(sizeof(uint16_t) * (plen + (size_t)o.ntok + 1));
    int *ctx = malloc(sizeof(int) * (size_t)c.max_seq_len);
    float *logits = malloc(sizeof(float) * (size_t)c.vocab_size);
    int rc = 1;
    if (tok && ids && ctx && logits && collage_tokenizer_encode(tok, o.prompt, plen, ids, &n) == COLLAGE_OK && n > 0) {
        fwrite(o.prompt, 1, plen, stdout);
        generate(m, params, tok, &o, ids, n, ctx, logits);
        fputc('\n', stdout);
        rc = 0;
    } else if (tok) fprintf(stderr, "collage sample: cannot encode the prompt (empty?)\n");
    free(ids); free(ctx); free(logits);
    collage_tokenizer_free(tok);
    collage_model_free(m);
    free(params);
    return rc;
}
