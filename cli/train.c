/* train.c — `collage train`, `collage eval` and `collage sample`: a GPT trained with any precision
 * strategy on real text (the fortunes corpus by default), llm.c-format checkpoints, exact resume,
 * a JSON log per step, and a progress bar with ETA on a terminal. */
#include "cli.h"
#include "gpt2_ckpt.h"
#include "internal.h" /* collage_atomic_*: the manifest is written like every other file */
#include "collage_data.h"
#include "dist.h"
#include "gpt2.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define MANIFEST_MAGIC "collage-train 1"
#define VAL_BATCHES 8

typedef struct {
    const char *data, *tokenizer, *model, *save, *resume, *log, *summary;
    collage_strategy strategy;
    int layers, heads, dim;     /* 0: from the preset */
    int steps, stop_after, batch, seq, warmup, eval_every, threads, accum;
    double lr, beta1, beta2, eps, wd, clip;
    uint64_t seed;
    int quiet;
    int steps_given; /* --steps was on the command line */
    unsigned given;  /* G_* bits: flags that shape the run, given on the command line */
} train_opts;

/* The flags a resumed run takes from its manifest; given explicitly, they must agree with it. */
enum { G_TOKENIZER = 1u << 0, G_MODEL = 1u << 1, G_LAYERS = 1u << 2, G_HEADS = 1u << 3, G_DIM = 1u << 4,
       G_BATCH = 1u << 5, G_SEQ = 1u << 6, G_WARMUP = 1u << 7, G_LR = 1u << 8, G_BETA1 = 1u << 9,
       G_BETA2 = 1u << 10, G_EPS = 1u << 11, G_WD = 1u << 12, G_CLIP = 1u << 13, G_SEED = 1u << 14 };

static void train_usage(FILE *f) {
    fprintf(f,
            "usage: collage train [options]\n"
            "  --data PATH         text file, folder of text files, or llm.c .bin shard(s)\n"
            "                      (default: the English fortunes of Debian's fortunes package)\n"
            "  --tokenizer NAME    byte (default) | gpt2\n"
            "  --model PRESET      tiny (default) | small | gpt2; or set --layers --heads --dim\n"
            "  --precision S       fp32 | bf16 | collage-light (default) | collage-plus | bf16-fp32-states |\n"
            "                      bf16-master | bf16-kahan | bf16-sr | bf16-remainder | collage-plus-v1\n"
            "  --steps N           training steps, the length of the schedule (default 1000)\n"
            "  --stop-after N      stop after N steps (the schedule still spans --steps)\n"
            "  --batch B --seq T   sequences per step and their length (default 16, 64)\n"
            "  --lr X --warmup N   peak learning rate (1e-3) after N linear warm-up steps (default steps/20),\n"
            "                      then cosine decay to a tenth\n"
            "  --beta1 X --beta2 X --eps X --wd X --clip X   AdamW (0.9, 0.95, 1e-8, 0.1, 1.0)\n"
            "  --seed N --threads N --eval-every N (default steps/10)\n"
            "  --save DIR          write model.bin (llm.c format), optimizer.state and train.state there\n"
            "  --resume DIR        continue a run saved with --save, bit for bit\n"
            "  --log FILE          one JSON object per step\n"
            "  --summary FILE      one JSON object for the whole run, written atomically at its end\n"
            "  --accum A           micro-batches per rank per step (default 1): the gradient of the batch is\n"
            "                      summed over ranks x A micro-batches in a fixed order\n"
            "data parallel: mpirun -np N collage train ... (--batch stays the global batch; each rank reads\n"
            "its 1/N of it and holds 1/N of the optimizer state; see README)\n");
}

static int parse_train(int argc, char **argv, train_opts *o) {
    *o = (train_opts){.strategy = COLLAGE_LIGHT, .model = "tiny", .tokenizer = "byte", .steps = 1000, .batch = 16,
                      .seq = 0, .warmup = -1, .eval_every = -1, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95,
                      .eps = 1e-8, .wd = 0.1, .clip = 1.0, .seed = 1337, .accum = 1};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        size_t z;
        int bad = 0, used = 1;
        if (!strcmp(a, "--data")) o->data = v;
        else if (!strcmp(a, "--tokenizer")) { o->tokenizer = v; o->given |= G_TOKENIZER; }
        else if (!strcmp(a, "--model")) { o->model = v; o->given |= G_MODEL; }
        else if (!strcmp(a, "--save")) o->save = v;
        else if (!strcmp(a, "--resume")) o->resume = v;
        else if (!strcmp(a, "--log")) o->log = v;
        else if (!strcmp(a, "--summary")) o->summary = v;
        else if (!strcmp(a, "--precision")) {
            if (!v || collage_strategy_parse(v, &o->strategy) != COLLAGE_OK) {
                fprintf(stderr, "collage train: unknown --precision '%s'\nhint: collage train --help lists the strategies\n", v ? v : "");
                return -1;
            }
        } else if (!strcmp(a, "--layers")) { bad = cli_parse_int(a, v, &o->layers); o->given |= G_LAYERS; }
        else if (!strcmp(a, "--heads")) { bad = cli_parse_int(a, v, &o->heads); o->given |= G_HEADS; }
        else if (!strcmp(a, "--dim")) { bad = cli_parse_int(a, v, &o->dim); o->given |= G_DIM; }
        else if (!strcmp(a, "--steps")) { bad = cli_parse_int(a, v, &o->steps); o->steps_given = 1; }
        else if (!strcmp(a, "--stop-after")) bad = cli_parse_int(a, v, &o->stop_after);
        else if (!strcmp(a, "--batch")) { bad = cli_parse_int(a, v, &o->batch); o->given |= G_BATCH; }
        else if (!strcmp(a, "--seq")) { bad = cli_parse_int(a, v, &o->seq); o->given |= G_SEQ; }
        else if (!strcmp(a, "--warmup")) { bad = cli_parse_int(a, v, &o->warmup); o->given |= G_WARMUP; }
        else if (!strcmp(a, "--eval-every")) bad = cli_parse_int(a, v, &o->eval_every);
        else if (!strcmp(a, "--threads")) bad = cli_parse_int(a, v, &o->threads);
        else if (!strcmp(a, "--accum")) bad = cli_parse_int(a, v, &o->accum);
        else if (!strcmp(a, "--seed")) { bad = cli_parse_size(a, v, &z); o->seed = z; o->given |= G_SEED; }
        else if (!strcmp(a, "--lr")) { bad = cli_parse_double(a, v, &o->lr); o->given |= G_LR; }
        else if (!strcmp(a, "--beta1")) { bad = cli_parse_double(a, v, &o->beta1); o->given |= G_BETA1; }
        else if (!strcmp(a, "--beta2")) { bad = cli_parse_double(a, v, &o->beta2); o->given |= G_BETA2; }
        else if (!strcmp(a, "--eps")) { bad = cli_parse_double(a, v, &o->eps); o->given |= G_EPS; }
        else if (!strcmp(a, "--wd")) { bad = cli_parse_double(a, v, &o->wd); o->given |= G_WD; }
        else if (!strcmp(a, "--clip")) { bad = cli_parse_double(a, v, &o->clip); o->given |= G_CLIP; }
        else if (!strcmp(a, "--quiet")) { o->quiet = 1; used = 0; }
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { if (dist_rank() == 0) train_usage(stdout); return 1; }
        else {
            fprintf(stderr, "collage train: unknown option '%s'\nhint: collage train --help\n", a);
            return -1;
        }
        if (bad) return -1;
        if (used) {
            if (!v) { fprintf(stderr, "collage train: %s needs a value\n", a); return -1; }
            i++;
        }
    }
    if (o->steps < 1 || o->batch < 1 || o->accum < 1 || o->lr < 0 || !(o->beta1 > 0 && o->beta1 < 1) || !(o->beta2 > 0 && o->beta2 < 1) ||
        o->eps <= 0 || o->wd < 0 || o->clip < 0) {
        fprintf(stderr, "collage train: --steps, --batch and --accum must be positive, betas in (0, 1), eps > 0, lr/wd/clip >= 0\n");
        return -1;
    }
    if (o->warmup < 0) o->warmup = o->steps / 20;
    if (o->eval_every < 0) o->eval_every = o->steps / 10 > 0 ? o->steps / 10 : 1;
    if (o->stop_after <= 0 || o->stop_after > o->steps) o->stop_after = o->steps;
    return 0;
}

/* Linear warm-up to lr, then cosine decay to lr/10 at the last step. */
static double lr_at(const train_opts *o, int step) {
    if (step < o->warmup) return o->lr * (double)(step + 1) / (double)o->warmup;
    double span = (double)(o->steps - o->warmup), p = span > 0 ? (double)(step - o->warmup) / span : 1.0;
    double minlr = o->lr * 0.1;
    return minlr + 0.5 * (o->lr - minlr) * (1.0 + cos(M_PI * p));
}

static long peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024;
}

/* The manifest: every setting that shapes the run, so that --resume continues the same run. */
static int write_manifest(const char *dir, const train_opts *o, const collage_gpt_config *c, int step,
                          uint64_t fingerprint, int ranks, int accum) {
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/train.state", dir);
    collage_atomic_file af;
    if (collage_atomic_open(&af, path, err, sizeof err)) { fprintf(stderr, "collage train: %s\n", err); return -1; }
    fprintf(af.f, "%s\nstep %d\nprecision %s\ntokenizer %s\nvocab %d\npadded_vocab %d\nmax_seq %d\nlayers %d\nheads %d\n"
                  "dim %d\nbatch %d\nseq %d\nsteps %d\nwarmup %d\nlr %.17g\nbeta1 %.17g\nbeta2 %.17g\neps %.17g\n"
                  "wd %.17g\nclip %.17g\nseed %llu\ndata_fingerprint %llu\nranks %d\naccum %d\n",
            MANIFEST_MAGIC, step, collage_strategy_name(o->strategy), o->tokenizer, c->vocab_size,
            c->padded_vocab_size, c->max_seq_len, c->num_layers, c->num_heads, c->channels, o->batch, o->seq,
            o->steps, o->warmup, o->lr, o->beta1, o->beta2, o->eps, o->wd, o->clip, (unsigned long long)o->seed,
            (unsigned long long)fingerprint, ranks, accum);
    if (collage_atomic_commit(&af, err, sizeof err)) { fprintf(stderr, "collage train: %s\n", err); return -1; }
    return 0;
}

typedef struct { char key[32]; char val[256]; } kv;

static int read_manifest(const char *dir, kv *items, int cap) {
    char path[4096], line[512];
    snprintf(path, sizeof path, "%s/train.state", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "collage train: cannot open '%s': %s\nhint: --resume takes a folder written by --save\n", path,
                strerror(errno));
        return -1;
    }
    int n = 0;
    if (!fgets(line, sizeof line, f) || strncmp(line, MANIFEST_MAGIC, strlen(MANIFEST_MAGIC)) != 0) {
        fprintf(stderr, "collage train: '%s' is not a collage training state (wrong first line)\n", path);
        fclose(f);
        return -1;
    }
    while (n < cap && fgets(line, sizeof line, f)) {
        if (sscanf(line, "%31s %255[^\n]", items[n].key, items[n].val) == 2) n++;
    }
    fclose(f);
    return n;
}
static const char *kv_get(const kv *items, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (!strcmp(items[i].key, key)) return items[i].val;
    return NULL;
}

/* Resume: the saved run's settings replace the flags that shape the run; a flag given explicitly with
 * a different value is an error (it would silently change the run). */
static int apply_manifest(const char *dir, train_opts *o, int *step, uint64_t *fingerprint, int *ranks, int *accum) {
    kv it[64];
    int n = read_manifest(dir, it, 64);
    if (n < 0) return -1;
    const char *need[] = {"step", "precision", "tokenizer", "layers", "heads", "dim", "batch", "seq", "steps", "warmup",
                          "lr", "beta1", "beta2", "eps", "wd", "clip", "seed", "data_fingerprint", "max_seq"};
    for (size_t i = 0; i < sizeof need / sizeof *need; i++)
        if (!kv_get(it, n, need[i])) {
            fprintf(stderr, "collage train: '%s/train.state' lacks '%s'\n", dir, need[i]);
            return -1;
        }
    *step = atoi(kv_get(it, n, "step"));
    collage_strategy s;
    if (collage_strategy_parse(kv_get(it, n, "precision"), &s) != COLLAGE_OK) return -1;
    if (s != o->strategy) {
        fprintf(stderr, "collage train: '%s' holds a %s run; this command asks for %s\nhint: pass --precision %s\n",
                dir, collage_strategy_name(s), collage_strategy_name(o->strategy), collage_strategy_name(s));
        return -1;
    }
    /* every flag given explicitly must agree with the saved run (o still holds the command line's) */
    char why[600] = "", was[600] = "";
    const char *flag = NULL;
#define MUST_INT(bit, name, key, field)                                                                        \
    if (!flag && (o->given & (bit)) && o->field != atoi(kv_get(it, n, key))) {                             \
        flag = name;                                                                                          \
        snprintf(why, sizeof why, "%s %d", name, o->field);                                                \
        snprintf(was, sizeof was, "%s %s", key, kv_get(it, n, key));                                          \
    }
#define MUST_DBL(bit, name, key, field)                                                                        \
    if (!flag && (o->given & (bit)) && o->field != strtod(kv_get(it, n, key), NULL)) {                     \
        flag = name;                                                                                          \
        snprintf(why, sizeof why, "%s %g", name, o->field);                                                \
        snprintf(was, sizeof was, "%s %s", key, kv_get(it, n, key));                                          \
    }
    MUST_INT(G_LAYERS, "--layers", "layers", layers)
    MUST_INT(G_HEADS, "--heads", "heads", heads)
    MUST_INT(G_DIM, "--dim", "dim", dim)
    MUST_INT(G_BATCH, "--batch", "batch", batch)
    MUST_INT(G_SEQ, "--seq", "seq", seq)
    MUST_INT(G_WARMUP, "--warmup", "warmup", warmup)
    MUST_DBL(G_LR, "--lr", "lr", lr)
    MUST_DBL(G_BETA1, "--beta1", "beta1", beta1)
    MUST_DBL(G_BETA2, "--beta2", "beta2", beta2)
    MUST_DBL(G_EPS, "--eps", "eps", eps)
    MUST_DBL(G_WD, "--wd", "wd", wd)
    MUST_DBL(G_CLIP, "--clip", "clip", clip)
#undef MUST_INT
#undef MUST_DBL
    if (!flag && (o->given & G_SEED) && o->seed != strtoull(kv_get(it, n, "seed"), NULL, 10)) {
        flag = "--seed";
        snprintf(why, sizeof why, "--seed %llu", (unsigned long long)o->seed);
        snprintf(was, sizeof was, "seed %s", kv_get(it, n, "seed"));
    }
    if (!flag && (o->given & G_TOKENIZER) && strcmp(o->tokenizer, kv_get(it, n, "tokenizer"))) {
        flag = "--tokenizer";
        snprintf(why, sizeof why, "--tokenizer %.200s", o->tokenizer);
        snprintf(was, sizeof was, "tokenizer %.200s", kv_get(it, n, "tokenizer"));
    }
    if (!flag && (o->given & G_MODEL)) {
        collage_gpt_config pc; /* the preset, with --layers --heads --dim over it as a new run would have it */
        int known = collage_gpt_preset(o->model, &pc) == COLLAGE_OK;
        if (o->given & G_LAYERS) pc.num_layers = o->layers;
        if (o->given & G_HEADS) pc.num_heads = o->heads;
        if (o->given & G_DIM) pc.channels = o->dim;
        if (!known || pc.num_layers != atoi(kv_get(it, n, "layers")) ||
            pc.num_heads != atoi(kv_get(it, n, "heads")) || pc.channels != atoi(kv_get(it, n, "dim"))) {
            flag = "--model";
            snprintf(why, sizeof why, "--model %.200s", o->model);
            snprintf(was, sizeof was, "%.20s layers, %.20s heads, dim %.20s", kv_get(it, n, "layers"),
                     kv_get(it, n, "heads"), kv_get(it, n, "dim"));
        }
    }
    if (flag) {
        fprintf(stderr, "collage train: %s differs from the run saved in '%s' (%s there)\nhint: --resume continues "
                        "that run as it was set up; drop %s (only --steps may change: it extends the schedule), or "
                        "start a new run with --save\n", why, dir, was, flag);
        return -1;
    }
    static char tok[256];
    snprintf(tok, sizeof tok, "%s", kv_get(it, n, "tokenizer"));
    o->tokenizer = tok;
    o->layers = atoi(kv_get(it, n, "layers")); o->heads = atoi(kv_get(it, n, "heads"));
    o->dim = atoi(kv_get(it, n, "dim")); o->batch = atoi(kv_get(it, n, "batch"));
    o->seq = atoi(kv_get(it, n, "seq"));
    if (!o->steps_given) o->steps = atoi(kv_get(it, n, "steps")); /* else: the schedule is extended */
    o->warmup = atoi(kv_get(it, n, "warmup"));
    o->lr = strtod(kv_get(it, n, "lr"), NULL); o->beta1 = strtod(kv_get(it, n, "beta1"), NULL);
    o->beta2 = strtod(kv_get(it, n, "beta2"), NULL); o->eps = strtod(kv_get(it, n, "eps"), NULL);
    o->wd = strtod(kv_get(it, n, "wd"), NULL); o->clip = strtod(kv_get(it, n, "clip"), NULL);
    o->seed = strtoull(kv_get(it, n, "seed"), NULL, 10);
    *fingerprint = strtoull(kv_get(it, n, "data_fingerprint"), NULL, 10);
    /* runs saved before data parallelism: one rank, one micro-batch */
    *ranks = kv_get(it, n, "ranks") ? atoi(kv_get(it, n, "ranks")) : 1;
    *accum = kv_get(it, n, "accum") ? atoi(kv_get(it, n, "accum")) : 1;
    if (*ranks < 1 || *accum < 1) {
        fprintf(stderr, "collage train: '%s/train.state' has ranks %d, accum %d\n", dir, *ranks, *accum);
        return -1;
    }
    o->model = NULL;
    return atoi(kv_get(it, n, "max_seq"));
}

/* JSON has no NaN: a missing figure is null. */
static void json_num(FILE *f, const char *key, double x, const char *fmt) {
    fprintf(f, ",\"%s\":", key);
    if (isfinite(x)) fprintf(f, fmt, x);
    else fputs("null", f);
}

/* --summary: the whole run as one JSON object (what `collage compare` tabulates), written atomically. */
static int write_summary(const char *path, const train_opts *o, size_t n, int ran, double secs, double tokens,
                         double last_loss, double tail_loss, double val, double edq_ratio, double lost, double bpp,
                         int ranks, int micro, double state_mb, double comm_s) {
    char err[512];
    collage_atomic_file af;
    if (collage_atomic_open(&af, path, err, sizeof err)) { fprintf(stderr, "collage train: --summary: %s\n", err); return -1; }
    fprintf(af.f, "{\"precision\":\"%s\",\"beta2\":%.10g,\"seed\":%llu,\"params\":%zu,\"steps\":%d,\"steps_run\":%d",
            collage_strategy_name(o->strategy), o->beta2, (unsigned long long)o->seed, n, o->steps, ran);
    json_num(af.f, "final_loss", last_loss, "%.6f");
    json_num(af.f, "tail_loss", tail_loss, "%.6f");
    json_num(af.f, "val_loss", val, "%.6f");
    json_num(af.f, "edq_ratio", edq_ratio, "%.6f");
    json_num(af.f, "lost", lost, "%.6f");
    json_num(af.f, "bytes_per_param", bpp, "%.2f");
    json_num(af.f, "tokens_per_s", tokens / secs, "%.1f");
    json_num(af.f, "ms_per_step", 1e3 * secs / ran, "%.3f");
    fprintf(af.f, ",\"ranks\":%d,\"micro_batches\":%d", ranks, micro);
    json_num(af.f, "optimizer_state_mb_per_rank", state_mb, "%.4f");
    json_num(af.f, "comm_ms_per_step", 1e3 * comm_s / ran, "%.3f");
    fprintf(af.f, ",\"peak_rss_mb\":%ld}\n", peak_rss_mb());
    if (collage_atomic_commit(&af, err, sizeof err)) { fprintf(stderr, "collage train: --summary: %s\n", err); return -1; }
    return 0;
}

static void progress(const train_opts *o, int step, int total, double loss, double tps, double eta_s, int tty) {
    if (o->quiet) return;
    if (tty) {
        int w = 30, fill = (int)((double)w * step / total);
        fprintf(stderr, "\r[%.*s%*s] %d/%d loss %.4f %.0f tok/s ETA %dm%02ds ", fill,
                "##############################", w - fill, "", step, total, loss, tps, (int)eta_s / 60, (int)eta_s % 60);
        if (step == total) fputc('\n', stderr);
    }
}

static int model_shape(train_opts *o, const collage_tokenizer *tok, int max_seq, collage_gpt_config *c) {
    if (o->model) {
        if (collage_gpt_preset(o->model, c) != COLLAGE_OK) {
            fprintf(stderr, "collage train: unknown --model '%s'\nhint: tiny, small or gpt2, or --layers --heads --dim\n", o->model);
            return -1;
        }
    } else {
        collage_gpt_preset("tiny", c);
    }
    if (o->layers) c->num_layers = o->layers;
    if (o->heads) c->num_heads = o->heads;
    if (o->dim) c->channels = o->dim;
    o->layers = c->num_layers; o->heads = c->num_heads; o->dim = c->channels;
    c->vocab_size = collage_tokenizer_vocab_size(tok);
    c->padded_vocab_size = collage_gpt_pad_vocab(c->vocab_size);
    if (o->seq <= 0) o->seq = c->max_seq_len < 64 ? c->max_seq_len : 64;
    if (max_seq > 0) c->max_seq_len = max_seq;
    else if (o->seq > c->max_seq_len) c->max_seq_len = o->seq;
    char msg[256];
    if (collage_gpt_check(c, o->batch, o->seq, msg, sizeof msg) != COLLAGE_OK) {
        fprintf(stderr, "collage train: bad model shape: %s\nhint: --heads must divide --dim; --seq at most the context\n", msg);
        return -1;
    }
    return 0;
}

static double eval_loss(collage_gpt *m, const void *params, const collage_loader *ld, collage_split split, int B, int T,
                        int batches, int32_t *in, int32_t *tg) {
    double sum = 0;
    int done = 0;
    uint64_t per_epoch = collage_loader_steps_per_epoch(ld, split);
    if (per_epoch == 0) return (double)NAN;
    if ((uint64_t)batches > per_epoch) batches = (int)per_epoch;
    for (int b = 0; b < batches; b++) {
        double loss;
        if (collage_loader_batch(ld, split, (uint64_t)b, 0, 1, in, tg) != COLLAGE_OK) break;
        if (collage_gpt_forward(m, params, in, tg, B, T, &loss) != COLLAGE_OK) break;
        sum += loss;
        done++;
    }
    return done ? sum / done : (double)NAN;
}

/* "rank 2: " before a message that may concern one rank only, when there are several */
static const char *rank_tag(void) {
    static char t[32];
    if (dist_size() == 1) return "";
    snprintf(t, sizeof t, "rank %d: ", dist_rank());
    return t;
}

/* The optimizer files of a checkpoint: one per rank, optimizer.state for a single rank. */
static void opt_path(char *out, size_t cap, const char *dir, int r, int nranks) {
    if (nranks == 1) snprintf(out, cap, "%s/optimizer.state", dir);
    else snprintf(out, cap, "%s/optimizer.rank%d-of-%d.state", dir, r, nranks);
}

/* Mean loss of one global batch of the split, computed as the training step does: micro-batch
 * k = rank·A + a of M on this rank, the M losses gathered and added in k order. NaN if a forward
 * failed on any rank (every rank still takes part in the gather). */
static double global_loss(const double *mine, int A, int M) {
    double all[4096], sum = 0;
    if (M > 4096) return (double)NAN;
    dist_allgather_doubles(mine, A, all);
    for (int k = 0; k < M; k++) sum += all[k];
    return sum / M;
}

static double eval_loss_dist(collage_gpt *m, const void *params, const collage_loader *ld, collage_split split, int Bm,
                             int T, int batches, int A, int M, int32_t *in, int32_t *tg) {
    uint64_t per_epoch = collage_loader_steps_per_epoch(ld, split);
    if (per_epoch == 0) return (double)NAN;
    if ((uint64_t)batches > per_epoch) batches = (int)per_epoch;
    double sum = 0, mine[256];
    for (int b = 0; b < batches; b++) {
        for (int a = 0; a < A; a++) {
            int k = dist_rank() * A + a;
            mine[a] = (double)NAN;
            if (collage_loader_batch(ld, split, (uint64_t)b, k, M, in, tg) == COLLAGE_OK)
                collage_gpt_forward(m, params, in, tg, Bm, T, &mine[a]);
        }
        sum += global_loss(mine, A, M);
    }
    return batches ? sum / batches : (double)NAN;
}

/* Every rank states whether it failed; all stop together, rank 0 says so. Returns 1 to stop. */
static int stop_all(int failed, const char *where) {
    int any = dist_any(failed);
    if (any && dist_rank() == 0 && dist_size() > 1)
        fprintf(stderr, "collage train: %s failed (rank %d of %d; the messages are above); every rank stops\n", where,
                any - 1, dist_size());
    return any != 0;
}

/* EDQ of the whole slab from every rank's shard, combined in rank order. */
static collage_edq edq_all(const collage_edq *mine) {
    double v[5] = {mine->sum_dot, mine->sum_dot_state, mine->sum_nn, (double)mine->lost_count, (double)mine->updates};
    double all[5 * 1024];
    collage_edq parts[1024];
    int P = dist_size();
    if (P > 1024) return *mine;
    dist_allgather_doubles(v, 5, all);
    for (int k = 0; k < P; k++)
        parts[k] = (collage_edq){.sum_dot = all[5 * k], .sum_dot_state = all[5 * k + 1], .sum_nn = all[5 * k + 2],
                                 .lost_count = (uint64_t)all[5 * k + 3], .updates = (uint64_t)all[5 * k + 4]};
    return collage_edq_combine(parts, P);
}

/* Resume: this rank's shard from the saved one (same rank count) or from the saved shards it
 * overlaps (another rank count: re-sharding). Returns 0 or -1 with a message. */
static int load_shard(collage_adamw *opt, const char *dir, int saved_ranks, size_t n, size_t lo, size_t hi, int start) {
    char path[4096];
    int P = dist_size(), R = dist_rank();
    if (saved_ranks == P) {
        opt_path(path, sizeof path, dir, R, P);
        if (collage_adamw_load(opt, path) != COLLAGE_OK) {
            fprintf(stderr, "collage train: rank %d: %s\n", R, collage_adamw_error(opt));
            return -1;
        }
    } else {
        size_t got = 0;
        for (int k = 0; k < saved_ranks; k++) {
            size_t a, b, c = 0;
            dist_bounds(n, saved_ranks, k, &a, &b);
            if (b <= lo || a >= hi) continue;
            opt_path(path, sizeof path, dir, k, saved_ranks);
            if (collage_adamw_load_part(opt, path, &c) != COLLAGE_OK) {
                fprintf(stderr, "collage train: rank %d: %s\n", R, collage_adamw_error(opt));
                return -1;
            }
            got += c;
        }
        if (got != hi - lo) {
            fprintf(stderr, "collage train: rank %d: the %d saved shards in '%s' cover %zu of its %zu parameters\n", R,
                    saved_ranks, dir, got, hi - lo);
            return -1;
        }
    }
    if (collage_adamw_steps(opt) != (uint64_t)start) {
        fprintf(stderr, "collage train: rank %d: '%s' holds step %llu but train.state says %d\n", R, dir,
                (unsigned long long)collage_adamw_steps(opt), start);
        return -1;
    }
    return 0;
}

/* --save: rank 0 makes the folder; each rank writes its shard; rank 0 then writes model.bin and,
 * last, the manifest that commits the checkpoint. Every file atomic; every rank learns the outcome. */
static int save_all(const train_opts *o, const collage_gpt_config *c, collage_adamw *opt, const void *params, size_t n,
                    int bf16, int step, uint64_t fp, int accum) {
    int R = dist_rank(), P = dist_size(), bad = 0;
    char path[4096], err[1024];
    if (R == 0 && cli_mkdir_p(o->save) != 0) {
        fprintf(stderr, "collage train: cannot create --save folder '%s': %s\n", o->save, strerror(errno));
        bad = 1;
    }
    if (stop_all(bad, "--save")) return -1;
    opt_path(path, sizeof path, o->save, R, P);
    if (collage_adamw_save(opt, path) != COLLAGE_OK) {
        fprintf(stderr, "collage train: rank %d: %s\n", R, collage_adamw_error(opt));
        bad = 1;
    }
    if (stop_all(bad, "--save")) return -1;
    if (R == 0) {
        snprintf(path, sizeof path, "%s/model.bin", o->save);
        float *w32 = bf16 ? malloc(n * sizeof(float)) : (float *)params;
        collage_status st = COLLAGE_ERR_NOMEM;
        if (w32) {
            if (bf16) collage_bf16_to_f32_row(w32, params, n); /* exact: llm.c's fp32 format loads everywhere */
            st = collage_ckpt_save_model(path, c, w32, 0, err, sizeof err);
            if (bf16) free(w32);
            if (st) fprintf(stderr, "collage train: %s\n", err);
        } else fprintf(stderr, "collage train: out of memory writing '%s'\n", path);
        if (st) bad = 1;
        if (!bad && write_manifest(o->save, o, c, step, fp, P, accum)) bad = 1; /* last: it commits the checkpoint */
    }
    if (stop_all(bad, "--save")) return -1;
    return 0;
}

static int train_main(int argc, char **argv) {
    train_opts o;
    int pr = parse_train(argc, argv, &o);
    if (pr) return pr > 0 ? 0 : 2;
    const int P = dist_size(), R = dist_rank();
    if (R != 0) o.quiet = 1; /* only rank 0 prints, logs and writes the summary */
    int start = 0, max_seq = 0, saved_ranks = 1, saved_micro = 1;
    uint64_t saved_fp = 0;
    if (o.resume) {
        max_seq = apply_manifest(o.resume, &o, &start, &saved_fp, &saved_ranks, &saved_micro);
        if (stop_all(max_seq < 0, "--resume")) return 1;
        if (o.stop_after <= start || o.stop_after > o.steps) o.stop_after = o.steps;
    }
    const int A = o.accum, M = P * A; /* micro-batches per rank, in all */
    if (o.batch % M != 0 || M > 4096 || A > 256) {
        if (R == 0)
            fprintf(stderr, "collage train: --batch %d must split into %d ranks x %d micro-batches (--accum) of equal size\n"
                            "hint: a --batch that is a multiple of %d\n", o.batch, P, A, M);
        return 2;
    }
    const int Bm = o.batch / M;
    if (o.threads > 0) collage_set_threads(o.threads);
#ifdef _OPENMP
    if (o.threads > 0) omp_set_num_threads(o.threads);
#endif
    char err[1024];
    collage_tokenizer_kind tk;
    if (collage_tokenizer_kind_parse(o.tokenizer, &tk) != COLLAGE_OK) {
        if (R == 0) fprintf(stderr, "collage train: unknown --tokenizer '%s'\nhint: byte or gpt2\n", o.tokenizer);
        return 2;
    }
    collage_tokenizer *tok = NULL;
    collage_loader *ld = NULL;
    collage_gpt *m = NULL;
    collage_adamw *opt = NULL;
    void *params = NULL, *gshard = NULL;
    float *gacc = NULL;
    int32_t *in = NULL, *tg = NULL;
    FILE *logf = NULL;
    int rc = 1, bad = 0;
    collage_gpt_config c;
    size_t n = 0, lo = 0, hi = 0;
    int bf16 = o.strategy != COLLAGE_FP32;
    size_t wb = bf16 ? 2 : 4;
    uint64_t fp = 0;
    /* set-up: each rank on its own (no collective until stop_all), so a failure on one rank cannot hang */
    if (collage_tokenizer_create(tk, NULL, &tok, err, sizeof err) != COLLAGE_OK) {
        fprintf(stderr, "collage train: %s\nhint: scripts/setup.sh installs the GPT-2 vocabulary\n", err);
        bad = 1; goto setup_done;
    }
    if (model_shape(&o, tok, max_seq, &c)) { rc = 2; bad = 1; goto setup_done; }
    collage_loader_config lc = {.path = o.data, .tokenizer = tok, .B = o.batch, .T = o.seq, .seed = o.seed};
    if (collage_loader_create(&lc, &ld, err, sizeof err) != COLLAGE_OK) {
        fprintf(stderr, "collage train: %s%s\nhint: --data takes a text file, a folder of text files or llm.c .bin shards\n",
                rank_tag(), err);
        bad = 1; goto setup_done;
    }
    fp = collage_loader_fingerprint(ld);
    if (o.resume && fp != saved_fp) {
        fprintf(stderr, "collage train: the data differ from the run saved in '%s'\nhint: pass the same --data and --tokenizer\n", o.resume);
        bad = 1; goto setup_done;
    }
    collage_status st = collage_gpt_create(&c, bf16 ? COLLAGE_GPT_BF16 : COLLAGE_GPT_FP32, Bm, o.seq, &m);
    n = collage_gpt_num_params(&c);
    dist_bounds(n, P, R, &lo, &hi);
    if (hi == lo || n / (size_t)P > (size_t)INT32_MAX) {
        fprintf(stderr, "collage train: %zu parameters do not split into %d shards of whole %zu-element chunks\n", n, P,
                DIST_CHUNK);
        bad = 1; goto setup_done;
    }
    collage_param_group groups[COLLAGE_GPT_NTENSORS];
    int ng = collage_gpt_param_groups(&c, o.wd, groups);
    params = aligned_alloc(64, (n * wb + 63) & ~(size_t)63);
    collage_adamw_config ac = {.strategy = o.strategy, .n = hi - lo, .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps,
                               .weight_decay = o.wd, .groups = groups, .n_groups = ng, .clip = o.clip,
                               .skip_nonfinite = 1, .edq = 1, .seed = o.seed, .params = (char *)params + lo * wb,
                               .index0 = lo, .total = n};
    if (st == COLLAGE_OK && !params) st = COLLAGE_ERR_NOMEM;
    if (st == COLLAGE_OK) st = collage_adamw_create(&ac, &opt);
    in = malloc(sizeof(int32_t) * (size_t)Bm * (size_t)o.seq);
    tg = malloc(sizeof(int32_t) * (size_t)Bm * (size_t)o.seq);
    if (M > 1) gshard = malloc((hi - lo) * wb);
    if (A > 1) gacc = malloc(n * sizeof(float));
    if (st != COLLAGE_OK || !in || !tg || (M > 1 && !gshard) || (A > 1 && !gacc)) {
        fprintf(stderr, "collage train: %scannot create the model or optimizer (%zu parameters): %s\nhint: a smaller --model or --batch\n",
                rank_tag(), n, m ? collage_gpt_error(m) : collage_status_str(st));
        bad = 1; goto setup_done;
    }
    if (o.resume) {
        if (load_shard(opt, o.resume, saved_ranks, n, lo, hi, start)) { bad = 1; goto setup_done; }
        if (saved_ranks * saved_micro != M && !o.quiet)
            printf("collage train: resuming a run of %d x %d micro-batches with %d x %d: the state is re-sharded exactly, "
                   "but gradient sums now round as %d micro-batches do\n", saved_ranks, saved_micro, P, A, M);
    } else {
        float *w0 = malloc(n * sizeof(float));
        if (!w0 || collage_gpt_init_weights(&c, o.seed, w0, n) != COLLAGE_OK) {
            fprintf(stderr, "collage train: cannot initialise %zu weights (out of memory?)\n", n);
            free(w0); bad = 1; goto setup_done;
        }
        collage_adamw_set_weights_f32(opt, w0 + lo, hi - lo);
        free(w0);
    }
    if (R == 0 && o.log && !(logf = fopen(o.log, o.resume ? "a" : "w"))) {
        fprintf(stderr, "collage train: cannot write --log '%s': %s\n", o.log, strerror(errno));
        bad = 1; goto setup_done;
    }
setup_done:
    if (stop_all(bad, "set-up")) goto done;
    dist_allgather(params, wb, n); /* every rank's shard of the weights to every rank */
    collage_memory mem = collage_adamw_memory(opt);
    /* optimizer state per parameter (m, v, compensation, master), on the largest shard */
    double state_bpp = mem.m + mem.v + mem.compensation + mem.master;
    size_t max_shard = 0;
    for (int k = 0; k < P; k++) {
        size_t a, b;
        dist_bounds(n, P, k, &a, &b);
        if (b - a > max_shard) max_shard = b - a;
    }
    double state_mb = state_bpp * (double)max_shard / 1e6;
    int tty = isatty(2) && !o.quiet;
    if (!o.quiet) {
        printf("collage train: %s, %zu parameters (L%d H%d C%d, context %d, vocab %d), %s tokenizer, %zu train tokens\n"
               "  precision %s (%.0f bytes/param of training state), batch %d x %d, %d steps, lr %g, beta2 %g, %d threads\n",
               o.model ? o.model : "custom", n, c.num_layers, c.num_heads, c.channels, c.max_seq_len, c.vocab_size,
               o.tokenizer, (size_t)collage_loader_windows(ld, COLLAGE_SPLIT_TRAIN) * (size_t)o.seq,
               collage_strategy_name(o.strategy), mem.total, o.batch, o.seq, o.steps, o.lr, o.beta2,
               collage_get_threads());
        if (dist_mpi() || M > 1)
            printf("  data parallel: %d rank%s x %d micro-batch%s of %d sequences; optimizer state %.2f MB per rank "
                   "(%.2f MB unsharded)\n", P, P > 1 ? "s" : "", A, A > 1 ? "es" : "", Bm, state_mb,
                   state_bpp * (double)n / 1e6);
    }
    double t_start = cli_now(), tokens_done = 0, last_loss = (double)NAN, last_val = (double)NAN, comm0 = dist_comm_seconds();
    double sum_edq_ratio = 0, sum_lost = 0, sum_tail = 0;
    int last_step = start, n_edq = 0, n_tail = 0, tail_from = o.stop_after - (o.stop_after / 20 > 0 ? o.stop_after / 20 : 1);
    void *gm = collage_gpt_grads(m);
    for (int step = start; step < o.stop_after; step++) {
        double t0 = cli_now(), c0 = dist_comm_seconds(), mine[256];
        for (int a = 0; a < A && !bad; a++) { /* this rank's micro-batches, in order */
            collage_loader_batch(ld, COLLAGE_SPLIT_TRAIN, (uint64_t)step, R * A + a, M, in, tg);
            collage_gpt_zero_grad(m);
            if (collage_gpt_forward(m, params, in, tg, Bm, o.seq, &mine[a]) != COLLAGE_OK ||
                collage_gpt_backward(m) != COLLAGE_OK) {
                fprintf(stderr, "collage train: %sstep %d: %s\n", rank_tag(), step + 1, collage_gpt_error(m));
                bad = 1;
            } else if (A > 1) dist_accumulate(gacc, gm, bf16, n, a > 0);
        }
        if (stop_all(bad, "a training step")) goto done;
        double loss = global_loss(mine, A, M);
        /* the gradient of the whole batch, this rank's shard of it: sums in a fixed order */
        const void *g = gm;
        if (M > 1) {
            if (dist_reduce_scatter(A > 1 ? (const void *)gacc : gm, A > 1 ? 0 : bf16, n, M, gshard, bf16)) {
                fprintf(stderr, "collage train: out of memory in the gradient reduction\n");
                dist_abort(1);
            }
            g = gshard;
        }
        double sumsq = dist_grad_sumsq(g, bf16, n);
        double lr = lr_at(&o, step);
        collage_step_stats ss;
        collage_status os = collage_adamw_step_sumsq(opt, g, lr, sumsq, &ss);
        if (os == COLLAGE_ERR_NONFINITE) {
            if (!o.quiet) fprintf(stderr, "\ncollage train: step %d: %s\n", step + 1, collage_adamw_error(opt));
        } else if (os != COLLAGE_OK) { /* the same on every rank: the same lr, the same global norm */
            fprintf(stderr, "collage train: optimizer: %s\n", collage_status_str(os));
            goto done;
        }
        dist_allgather(params, wb, n); /* the updated weights to every rank */
        collage_edq edq = edq_all(&ss.edq);
        double comm_ms = (dist_comm_seconds() - c0) * 1e3;
        double ms = (cli_now() - t0) * 1e3, tps = (double)o.batch * o.seq / (ms * 1e-3);
        tokens_done += (double)o.batch * o.seq;
        last_loss = loss;
        last_step = step + 1;
        if (!ss.skipped && isfinite(edq.edq_ratio)) { sum_edq_ratio += edq.edq_ratio; sum_lost += edq.lost; n_edq++; }
        if (step >= tail_from) { sum_tail += loss; n_tail++; }
        double val = (double)NAN;
        int is_eval = (step + 1) % o.eval_every == 0 || step + 1 == o.stop_after;
        if (is_eval && collage_loader_has_val(ld))
            val = eval_loss_dist(m, params, ld, COLLAGE_SPLIT_VAL, Bm, o.seq, VAL_BATCHES, A, M, in, tg);
        if (!isnan(val)) last_val = val;
        if (logf) {
            fprintf(logf, "{\"step\":%d,\"loss\":%.6f,\"lr\":%.6g,\"grad_norm\":%.6g,\"edq\":%.6g,\"edq_ratio\":%.6f,"
                          "\"lost\":%.6f,\"edq_state_ratio\":%.6f,\"tokens_per_s\":%.1f,\"ms\":%.2f,\"skipped\":%d",
                    step + 1, loss, lr, ss.grad_norm, edq.edq, edq.edq_ratio, edq.lost, edq.edq_state_ratio, tps, ms,
                    ss.skipped);
            if (dist_mpi()) fprintf(logf, ",\"comm_ms\":%.3f", comm_ms);
            if (!isnan(val)) fprintf(logf, ",\"val_loss\":%.6f", val);
            fprintf(logf, "}\n");
            fflush(logf);
        }
        double elapsed = cli_now() - t_start, eta = elapsed / (step + 1 - start) * (o.stop_after - step - 1);
        if (tty) progress(&o, step + 1, o.stop_after, loss, tokens_done / elapsed, eta, 1);
        int every = o.steps / 50 > 0 ? o.steps / 50 : 1; /* plain lines: about 50 per run, plus evals */
        if (!o.quiet && (is_eval || (!tty && (step + 1) % every == 0))) {
            if (tty) fputc('\n', stderr);
            char vs[32] = "";
            if (!isnan(val)) snprintf(vs, sizeof vs, "  val %.4f", val);
            printf("step %5d/%d  loss %.4f%s  lr %.2e  norm %.3f  edq %.3f  lost %5.1f%%  %.0f ms  %.0f tok/s\n",
                   step + 1, o.steps, loss, vs, lr, ss.grad_norm, edq.edq_ratio, 100 * edq.lost, ms, tps);
            fflush(stdout);
        }
    }
    double total_s = cli_now() - t_start, comm_s = dist_comm_seconds() - comm0;
    int ran = last_step - start;
    if (!o.quiet && ran > 0) {
        printf("done: %d steps in %.1f s, %.1f ms/step, %.0f tokens/s, final loss %.4f; %.0f bytes/param of training state "
               "(%.1f MB), peak RSS %ld MB\n",
               ran, total_s, 1e3 * total_s / ran, tokens_done / total_s, last_loss, mem.total, mem.total * (double)n / 1e6,
               peak_rss_mb());
        if (dist_mpi())
            printf("communication (rank 0): %.1f ms/step of %.1f (%.1f%%), %d rank%s\n", 1e3 * comm_s / ran,
                   1e3 * total_s / ran, 100 * comm_s / total_s, P, P > 1 ? "s" : "");
    }
    if (R == 0 && o.summary && ran > 0 &&
        write_summary(o.summary, &o, n, ran, total_s, tokens_done, last_loss, n_tail ? sum_tail / n_tail : last_loss, last_val,
                      n_edq ? sum_edq_ratio / n_edq : (double)NAN, n_edq ? sum_lost / n_edq : (double)NAN, mem.total,
                      P, M, state_mb, comm_s))
        bad = 1;
    if (stop_all(bad, "--summary")) goto done;
    if (o.save) {
        if (save_all(&o, &c, opt, params, n, bf16, last_step, fp, A)) goto done;
        if (!o.quiet)
            printf("saved step %d to %s/ (model.bin in llm.c format, %s, train.state)\n", last_step, o.save,
                   P > 1 ? "one optimizer state per rank" : "optimizer.state");
    }
    rc = 0;
done:
    if (logf) fclose(logf);
    free(in); free(tg); free(gshard); free(gacc);
    collage_adamw_free(opt);
    free(params);
    collage_gpt_free(m);
    collage_loader_free(ld);
    collage_tokenizer_free(tok);
    return rc;
}

int cmd_train(int argc, char **argv) {
    if (dist_init(&argc, &argv) != 0) {
        fprintf(stderr, "collage train: MPI could not start\n");
        return 1;
    }
    int rc = train_main(argc, argv);
    dist_finalize();
    return rc;
}

/* ------------------------------------------------------------------ eval and sample */
/* A checkpoint argument is an llm.c model file or a folder written by --save. */
static void checkpoint_path(const char *arg, char *out, size_t cap) {
    struct stat sb;
    if (stat(arg, &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(out, cap, "%s/model.bin", arg);
    else snprintf(out, cap, "%s", arg);
}

static collage_gpt *load_model(const char *arg, int maxB, int maxT, float **params, collage_gpt_config *c) {
    char path[4096], err[1024];
    checkpoint_path(arg, path, sizeof path);
    int file_bf16;
    if (collage_ckpt_read_header(path, c, &file_bf16, err, sizeof err) != COLLAGE_OK) {
        fprintf(stderr, "collage: %s\nhint: --checkpoint takes a model.bin (llm.c format) or a folder written by train --save\n", err);
        return NULL;
    }
    if (maxT == 0) maxT = c->max_seq_len; /* the model's whole context */
    if (maxT > c->max_seq_len) {
        fprintf(stderr, "collage: --seq %d exceeds the model's context %d\n", maxT, c->max_seq_len);
        return NULL;
    }
    size_t n = collage_gpt_num_params(c);
    *params = malloc(n * sizeof(float));
    collage_gpt *m = NULL;
    if (!*params || collage_ckpt_load_model(path, c, *params, 0, err, sizeof err) != COLLAGE_OK ||
        collage_gpt_create(c, COLLAGE_GPT_FP32, maxB, maxT, &m) != COLLAGE_OK) {
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

int cmd_eval(int argc, char **argv) {
    const char *ck = NULL, *data = NULL, *tokname = NULL;
    int B = 8, T = 64, batches = 50, json = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--checkpoint")) ck = v;
        else if (!strcmp(a, "--data")) data = v;
        else if (!strcmp(a, "--tokenizer")) tokname = v;
        else if (!strcmp(a, "--batch")) bad = cli_parse_int(a, v, &B);
        else if (!strcmp(a, "--seq")) bad = cli_parse_int(a, v, &T);
        else if (!strcmp(a, "--batches")) bad = cli_parse_int(a, v, &batches);
        else if (!strcmp(a, "--json")) { json = 1; continue; }
        else {
            fprintf(stderr, "collage eval: unknown option '%s'\nusage: collage eval --checkpoint PATH [--data PATH] "
                            "[--tokenizer byte|gpt2] [--batch B] [--seq T] [--batches N] [--json]\n", a);
            return 2;
        }
        if (bad) return 2;
        if (!v) { fprintf(stderr, "collage eval: %s needs a value\n", a); return 2; }
        i++;
    }
    if (!ck) { fprintf(stderr, "collage eval: --checkpoint PATH is required\n"); return 2; }
    if (B < 1 || T < 1 || batches < 1) { fprintf(stderr, "collage eval: --batch, --seq and --batches must be positive\n"); return 2; }
    collage_gpt_config c;
    float *params = NULL;
    collage_gpt *m = load_model(ck, B, T, &params, &c);
    if (!m) return 1;
    collage_tokenizer *tok = tokenizer_for(tokname, c.vocab_size);
    char err[1024];
    collage_loader_config lc = {.path = data, .tokenizer = tok, .B = B, .T = T, .val_fraction = -1, .sequential = 1};
    collage_loader *ld = NULL;
    int rc = 1;
    int32_t *in = malloc(sizeof(int32_t) * (size_t)B * T), *tg = malloc(sizeof(int32_t) * (size_t)B * T);
    if (tok && in && tg && collage_loader_create(&lc, &ld, err, sizeof err) == COLLAGE_OK) {
        uint64_t per = collage_loader_steps_per_epoch(ld, COLLAGE_SPLIT_TRAIN);
        int nb = (uint64_t)batches < per ? batches : (int)per;
        double loss = eval_loss(m, params, ld, COLLAGE_SPLIT_TRAIN, B, T, nb, in, tg);
        if (isnan(loss)) fprintf(stderr, "collage eval: the data hold fewer than %d x %d tokens\n", B, T + 1);
        else {
            if (json) printf("{\"loss\":%.6f,\"tokens\":%lld,\"batches\":%d}\n", loss, (long long)nb * B * T, nb);
            else printf("loss %.4f over %d batches (%lld tokens)\n", loss, nb, (long long)nb * B * T);
            rc = 0;
        }
    } else if (tok && !ld) fprintf(stderr, "collage eval: %s\n", err);
    free(in); free(tg);
    collage_loader_free(ld);
    collage_tokenizer_free(tok);
    collage_gpt_free(m);
    free(params);
    return rc;
}

int cmd_sample(int argc, char **argv) {
    const char *ck = NULL, *prompt = "\n", *tokname = NULL;
    int ntok = 200;
    double temp = 0.8;
    size_t seed = 42;
    for (int i = 0; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--checkpoint")) ck = v;
        else if (!strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "--tokenizer")) tokname = v;
        else if (!strcmp(a, "--tokens")) bad = cli_parse_int(a, v, &ntok);
        else if (!strcmp(a, "--temperature")) bad = cli_parse_double(a, v, &temp);
        else if (!strcmp(a, "--seed")) bad = cli_parse_size(a, v, &seed);
        else {
            fprintf(stderr, "collage sample: unknown option '%s'\nusage: collage sample --checkpoint PATH [--prompt TEXT] "
                            "[--tokens N] [--temperature X] [--seed N]\n", a);
            return 2;
        }
        if (bad) return 2;
        if (!v) { fprintf(stderr, "collage sample: %s needs a value\n", a); return 2; }
    }
    if (!ck) { fprintf(stderr, "collage sample: --checkpoint PATH is required\n"); return 2; }
    collage_gpt_config c;
    float *params = NULL;
    collage_gpt *m = load_model(ck, 1, 0, &params, &c);
    if (!m) return 1;
    collage_tokenizer *tok = tokenizer_for(tokname, c.vocab_size);
    size_t plen = strlen(prompt);
    uint16_t *ids = malloc(sizeof(uint16_t) * (plen + (size_t)ntok + 1));
    int *ctx = malloc(sizeof(int) * (size_t)c.max_seq_len);
    float *logits = malloc(sizeof(float) * (size_t)c.vocab_size);
    int rc = 1;
    size_t n = 0;
    if (tok && ids && ctx && logits && collage_tokenizer_encode(tok, prompt, plen, ids, &n) == COLLAGE_OK && n > 0) {
        fwrite(prompt, 1, plen, stdout);
        uint64_t key = collage_rand_key(seed, 0);
        for (int t = 0; t < ntok; t++) {
            int T = (int)n < c.max_seq_len ? (int)n : c.max_seq_len;
            for (int i = 0; i < T; i++) ctx[i] = ids[n - (size_t)T + (size_t)i];
            if (collage_gpt_next_logits(m, params, ctx, T, logits) != COLLAGE_OK) break;
            int next = collage_gpt_sample(logits, c.vocab_size, (float)temp, key, (uint64_t)t);
            if (next < 0) break;
            ids[n++] = (uint16_t)next;
            size_t len;
            const char *s = collage_tokenizer_token(tok, next, &len);
            if (s) fwrite(s, 1, len, stdout);
            fflush(stdout);
        }
        fputc('\n', stdout);
        rc = 0;
    } else if (tok) fprintf(stderr, "collage sample: cannot encode the prompt (empty?)\n");
    free(ids); free(ctx); free(logits);
    collage_tokenizer_free(tok);
    collage_gpt_free(m);
    free(params);
    return rc;
}
