/* train_report.c — what `collage train` prints and writes besides the checkpoint: the header, a
 * JSON line per step (--log), the progress bar and plain step lines, the run's summary (--summary). */
#include "train.h"
#include "cli.h"
#include "dist.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define MIB(bytes) ((double)(bytes) / 1048576.0)

long peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024;
}

/* JSON has no NaN: a missing figure is null. */
static void json_num(FILE *f, const char *key, double x, const char *fmt) {
    fprintf(f, ",\"%s\":", key);
    if (isfinite(x)) fprintf(f, fmt, x);
    else fputs("null", f);
}


int write_summary(const train_opts *o, const collage_run_info *in, const run_totals *t, double secs, double comm_s) {
    char err[512];
    collage_atomic_file af;
    int ran = t->last_step - t->start;
    if (collage_atomic_open(&af, o->summary, err, sizeof err)) { fprintf(stderr, "collage train: --summary: %s\n", err); return -1; }
    fprintf(af.f, "{\"precision\":\"%s\",\"optimizer\":\"%s\",\"beta2\":%.10g,\"seed\":%llu,\"params\":%zu,\"steps\":%d,"
                  "\"steps_run\":%d", collage_strategy_name(o->cfg.strategy), collage_optimizer_name(o->cfg.optimizer), o->cfg.beta2, (unsigned long long)o->cfg.seed, in->params, o->cfg.steps, ran);
    json_num(af.f, "final_loss", t->last_loss, "%.6f");
    json_num(af.f, "tail_loss", t->n_tail ? t->sum_tail / t->n_tail : t->last_loss, "%.6f");
    json_num(af.f, "val_loss", t->last_val, "%.6f");
    if (!isnan(t->last_acc)) json_num(af.f, "val_accuracy", t->last_acc, "%.6f");
    json_num(af.f, "edq_ratio", t->n_edq ? t->sum_edq_ratio / t->n_edq : (double)NAN, "%.6f");
    json_num(af.f, "lost", t->n_edq ? t->sum_lost / t->n_edq : (double)NAN, "%.6f");
    json_num(af.f, "bytes_per_param", in->memory.total, "%.2f");
    json_num(af.f, "tokens_per_s", t->tokens / t->step_secs, "%.1f"); /* the training steps alone */
    json_num(af.f, "ms_per_step", 1e3 * t->step_secs / ran, "%.3f");
    json_num(af.f, "seconds", secs, "%.3f");
    json_num(af.f, "eval_seconds", t->eval_secs, "%.3f");
    fprintf(af.f, ",\"ranks\":%d,\"micro_batches\":%d", in->ranks, in->ranks * in->accum);
    json_num(af.f, "optimizer_state_mb_per_rank", in->state_mb_per_rank, "%.4f");
    json_num(af.f, "comm_ms_per_step", 1e3 * comm_s / ran, "%.3f");
    fprintf(af.f, ",\"products\":\"%s\",\"weights_mb\":%.1f,\"optimizer_state_mb\":%.1f,\"gradients_mb\":%.1f,"
            "\"activations_mb\":%.1f,\"scratch_mb\":%.1f", in->products, MIB(in->weight_bytes), MIB(in->state_bytes),
            MIB(in->grad_bytes), MIB(in->act_bytes), MIB(in->scratch_bytes));
    fprintf(af.f, ",\"peak_rss_mb\":%ld}\n", peak_rss_mb());
    if (collage_atomic_commit(&af, err, sizeof err)) { fprintf(stderr, "collage train: --summary: %s\n", err); return -1; }
    return 0;
}

/* ", from step S (resumed)", ", stopping after step N (--stop-after)", or both. */
static const char *stop_words(const train_opts *o, int from) {
    static char buf[128];
    int n = 0;
    buf[0] = 0;
    if (from > 0) n = snprintf(buf, sizeof buf, ", from step %d (resumed)", from);
    if (o->stop_after < o->cfg.steps) snprintf(buf + n, sizeof buf - (size_t)n, ", stopping after step %d (--stop-after)", o->stop_after);
    return buf;
}

/* The update rule and its settings: "beta2 0.95" (AdamW, as always printed), "lion, beta1 0.9, beta2 0.99", … */
static const char *optimizer_words(const train_opts *o) {
    static char buf[128];
    const collage_run_config *c = &o->cfg;
    if (c->optimizer == COLLAGE_OPTIM_LION) snprintf(buf, sizeof buf, "lion, beta1 %g, beta2 %g", c->beta1, c->beta2);
    else if (c->optimizer == COLLAGE_OPTIM_SGD)
        snprintf(buf, sizeof buf, "sgd, momentum %g%s, L2 decay", c->momentum, c->nesterov ? " (Nesterov)" : "");
    else snprintf(buf, sizeof buf, "beta2 %g", c->beta2);
    return buf;
}

/* fp4 compute's closing words: how many last layers keep bf16 products. */
static const char *fp4_last(const train_opts *o) {
    static char w[48];
    snprintf(w, sizeof w, o->cfg.fp4_bf16_last ? ", last %d layers bf16)" : ")", o->cfg.fp4_bf16_last);
    return w;
}

void print_header(const train_opts *o, const collage_run_info *in) {
    const collage_model_config *c = &in->model;
    const int th = collage_get_threads();
    printf("collage train: %s, %zu parameters (L%d H%d C%d, context %d, vocab %d), %s tokenizer, %zu train tokens of %s\n"
           "  precision %s%s%s%s (%.4g bytes/param of training state), batch %d x %d, %d thread%s\n",
           o->cfg.model ? o->cfg.model : collage_family_name(c->family), in->params, c->num_layers, c->num_heads, c->channels,
           c->max_seq_len, c->vocab_size, o->cfg.tokenizer, in->train_tokens, cli_data_name(o->cfg.data),
           collage_strategy_name(o->cfg.strategy), o->cfg.fp8 ? ", fp8 compute (" : o->cfg.fp4 ? ", fp4 compute (" : "",
           o->cfg.fp8 ? (o->cfg.fp8_recipe ? o->cfg.fp8_recipe : "delayed")
                      : o->cfg.fp4 ? (o->cfg.fp4_recipe ? o->cfg.fp4_recipe : "nvfp4") : "",
           o->cfg.fp8 ? (o->cfg.fp8_e4m3_all ? ", e4m3)" : ", e4m3/e5m2)") : o->cfg.fp4 ? fp4_last(o) : "", in->memory.total, o->cfg.batch, o->cfg.seq, th, th == 1 ? "" : "s");
    printf("  schedule: %d step%s%s, lr %g after %d warm-up step%s, cosine to %g at step %d; %s\n", o->cfg.steps,
           o->cfg.steps == 1 ? "" : "s", stop_words(o, in->step), o->cfg.lr, o->cfg.warmup, o->cfg.warmup == 1 ? "" : "s",
           o->cfg.lr / 10, o->cfg.steps, optimizer_words(o));
    printf("  products: %s; memory (MiB): weights %.1f, optimizer state %.1f, gradients %.1f, activations %.1f, "
           "scratch %.1f\n", in->products, MIB(in->weight_bytes), MIB(in->state_bytes), MIB(in->grad_bytes),
           MIB(in->act_bytes), MIB(in->scratch_bytes));
    double bpp = in->memory.m + in->memory.v + in->memory.compensation + in->memory.master;
    if (dist_mpi() || in->ranks * in->accum > 1)
        printf("  data parallel: %d rank%s x %d micro-batch%s of %d sequences; optimizer state %.2f MB per rank "
               "(%.2f MB unsharded)\n", in->ranks, in->ranks > 1 ? "s" : "", in->accum, in->accum > 1 ? "es" : "",
               in->micro_batch, in->state_mb_per_rank, bpp * (double)in->params / 1e6);
    if (in->resumed_ranks && in->resumed_ranks * in->resumed_accum != in->ranks * in->accum)
        printf("collage train: resuming a run of %d x %d micro-batches with %d x %d: the state is re-sharded exactly, "
               "but gradient sums now round as %d micro-batches do\n", in->resumed_ranks, in->resumed_accum, in->ranks,
               in->accum, in->ranks * in->accum);
}

void log_step(FILE *f, const collage_run_step_info *s, const collage_scores *val, double tps, double ms, double comm_ms) {
    fprintf(f, "{\"step\":%d", s->step); /* a non-finite figure is null: JSON has no NaN */
    json_num(f, "loss", s->loss, "%.6f");
    json_num(f, "lr", s->lr, "%.6g");
    json_num(f, "grad_norm", s->stats.grad_norm, "%.6g");
    json_num(f, "edq", s->edq.edq, "%.6g");
    json_num(f, "edq_ratio", s->edq.edq_ratio, "%.6f");
    json_num(f, "lost", s->edq.lost, "%.6f");
    json_num(f, "edq_state_ratio", s->edq.edq_state_ratio, "%.6f");
    json_num(f, "tokens_per_s", tps, "%.1f");
    json_num(f, "ms", ms, "%.2f");
    fprintf(f, ",\"skipped\":%d", s->stats.skipped);
    if (s->loss_scale != 1.0) fprintf(f, ",\"loss_scale\":%.17g,\"overflow\":%d", s->loss_scale, s->overflow); /* fp16 */
    if (dist_mpi()) json_num(f, "comm_ms", comm_ms, "%.3f");
    if (!isnan(val->loss)) json_num(f, "val_loss", val->loss, "%.6f");
    if (!isnan(val->accuracy)) json_num(f, "val_accuracy", val->accuracy, "%.6f");
    fprintf(f, "}\n");
    fflush(f);
}

int log_trim(const char *path, int step) {
    FILE *f = fopen(path, "r");
    if (!f) return 0; /* nothing logged yet */
    char err[1024], line[8192];
    collage_atomic_file af;
    if (collage_atomic_open(&af, path, err, sizeof err) != COLLAGE_OK) {
        fclose(f);
        fprintf(stderr, "collage train: --log: %s\n", err);
        return -1;
    }
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "{\"step\":");
        if (!p || atoi(p + 8) <= step) fputs(line, af.f);
    }
    fclose(f);
    if (collage_atomic_commit(&af, err, sizeof err) != COLLAGE_OK) {
        fprintf(stderr, "collage train: --log: %s\n", err);
        return -1;
    }
    return 0;
}

void print_step(const train_opts *o, const collage_run_step_info *s, const collage_scores *val, double tps, double ms,
                       const run_totals *t, int tty, int is_eval) {
    if (o->quiet) return;
    double elapsed = cli_now() - t->t_start, eta = elapsed / (s->step - t->start) * (o->stop_after - s->step);
    if (tty) {
        int w = 30, fill = (int)((double)w * s->step / o->stop_after);
        fprintf(stderr, "\r[%.*s%*s] %d/%d loss %.4f %.0f tok/s ETA %dm%02ds ", fill, "##############################",
                w - fill, "", s->step, o->stop_after, s->loss, t->tokens / elapsed, (int)eta / 60, (int)eta % 60);
        if (s->step == o->stop_after) fputc('\n', stderr);
    }
    int every = o->cfg.steps / 50 > 0 ? o->cfg.steps / 50 : 1;
    if (s->overflow) { /* the fp16 loss scaler's decisions are always shown */
        if (tty) fputc('\n', stderr);
        printf("step %5d/%d  fp16 gradient overflowed at loss scale %g: step skipped, scale halved\n", s->step, o->cfg.steps,
               s->loss_scale);
    }
    if (!(is_eval || (!tty && s->step % every == 0))) return;
    if (tty) fputc('\n', stderr);
    char vs[64] = "";
    if (!isnan(val->loss)) snprintf(vs, sizeof vs, "  val %.4f", val->loss);
    if (!isnan(val->accuracy)) snprintf(vs + strlen(vs), sizeof vs - strlen(vs), " (acc %.1f%%)", 100 * val->accuracy);
    char sc[32] = "";
    if (s->loss_scale != 1.0) snprintf(sc, sizeof sc, "  scale %g", s->loss_scale);
    printf("step %5d/%d  loss %.4f%s  lr %.2e  norm %.3f  edq %.3f  lost %5.1f%%%s  %.0f ms  %.0f tok/s\n", s->step,
           o->cfg.steps, s->loss, vs, s->lr, s->stats.grad_norm, s->edq.edq_ratio, 100 * s->edq.lost, sc, ms, tps);
    fflush(stdout);
}

