/* train_loop.c — the loop of `collage train`: it steps the run, logs and prints each step, saves a
 * checkpoint every --save-every steps and at the end; on SIGINT or SIGTERM it finishes the step in
 * progress, saves and says how to resume (a second signal exits at once); when the run diverges it
 * stops without saving, so the last checkpoint stays. Under MPI every rank learns of a signal that
 * any rank received after the same step, so that all save and stop together. */
#include "cli.h"
#include "dist.h"
#include "train.h"
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define VAL_BATCHES 8

static volatile sig_atomic_t g_signal;
static int g_own_error; /* this rank printed a failure of its own (not one learned from another rank) */

int train_own_error(void) { return g_own_error; }

/* A failure of the library's: printed by the rank it happened on; a rank that only learned of another
 * rank's failure (COLLAGE_ERR_PEER) leaves it to that rank, but for rank 0's one line saying so. 1 when
 * printed (the caller adds the hint). */
static int run_failed(collage_run *run, collage_status st, const char *what, int tty) {
    if (st == COLLAGE_ERR_PEER && dist_rank() != 0) return 0;
    fprintf(stderr, "%scollage train: %s%s\n", tty ? "\n" : "", what, collage_run_error(run));
    g_own_error |= st != COLLAGE_ERR_PEER;
    return 1;
}

static void on_signal(int sig) {
    if (g_signal) {
        static const char msg[] = "\ncollage train: second signal: exiting now; the complete checkpoints stay\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        (void)w;
        _exit(128 + sig);
    }
    g_signal = sig;
}

/* The thread that takes the signals: idle on its own stack, so a handler's frame lands there. */
static void *signal_taker(void *arg) {
    sigset_t *stop = arg;
    pthread_sigmask(SIG_UNBLOCK, stop, NULL);
    for (;;) pause();
    return NULL;
}

/* oneDNN's JIT GEMM kernels use the stack pointer as a data register: a handler run on a thread inside
 * one writes its signal frame (about 3 KiB, more with AMX state) into whatever heap buffer rsp then
 * points at. So no computing thread takes SIGINT or SIGTERM: this thread blocks them, every thread it
 * starts from now on inherits that (OpenMP's and oneDNN's), the threads OpenMP already holds block them
 * too, and a thread of its own, idle in pause(), receives them and sets the flag. Threads a library
 * started before main (OpenBLAS's, MPI's) may also take one; they wait on their own stacks meanwhile
 * (OpenBLAS runs single-threaded under train). Should that thread not start, this thread takes them
 * again as before. */
void train_signals_install(int threads) {
    static sigset_t stop;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* a file being written when the signal comes is written whole */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
#ifdef _OPENMP
    int team = omp_get_max_threads() > threads ? omp_get_max_threads() : threads;
#pragma omp parallel num_threads(team)
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
#else
    (void)threads;
#endif
    pthread_attr_t at;
    pthread_t t;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &at, signal_taker, &stop) != 0) pthread_sigmask(SIG_UNBLOCK, &stop, NULL);
    pthread_attr_destroy(&at);
}

/* After the same step on every rank: the signal any rank received (SIGTERM on a rank told by another),
 * 0 when none. */
static int stop_signal(void) {
    int any = dist_any(g_signal != 0);
    return any ? (g_signal ? (int)g_signal : SIGTERM) : 0;
}

/* ---------------------------------------------------------------- checkpoints */
/* "; 'DIR/step-N' (step N) is intact: --resume DIR continues from it", or how to start again. */
static void intact_hint(const train_opts *o, const char *what) {
    collage_checkpoint ck;
    const char *dir = o->save ? o->save : o->resume;
    if (dir && collage_checkpoint_find(dir, &ck, NULL, 0) == COLLAGE_OK)
        fprintf(stderr, "hint: %s'%s' (step %d) is intact: %scollage train --resume %s%s%s continues from it\n", what,
                ck.dir, ck.step, dist_launcher(), dir, o->cfg.data ? " --data " : "", o->cfg.data ? o->cfg.data : "");
    else fprintf(stderr, "hint: %sno checkpoint was saved: the run starts again from step 0\n", what);
}

/* A checkpoint of the current step into --save; 0, or 1 after a message (the same on every rank). */
static int save_now(collage_run *run, const train_opts *o, run_totals *t, int tty) {
    double t0 = cli_now();
    int step = collage_run_get_info(run).step;
    collage_status st = collage_run_save(run, o->save);
    if (st != COLLAGE_OK) {
        run_failed(run, st, "--save: ", 0);
        if (st != COLLAGE_ERR_PEER || dist_rank() == 0) intact_hint(o, "free space or fix the folder; ");
        return 1;
    }
    t->saved_step = step;
    if (!o->quiet) {
        if (tty) fputc('\n', stderr);
        printf("saved step %d to %s/step-%08d (%.2f s)\n", step, o->save, step, cli_now() - t0);
        fflush(stdout);
    }
    return 0;
}

/* ---------------------------------------------------------------- the loop */
static void tally(run_totals *t, const collage_run_step_info *s, double tokens) {
    t->tokens += tokens;
    t->last_loss = s->loss;
    t->last_step = s->step;
    if (!s->stats.skipped && isfinite(s->edq.edq_ratio)) { t->sum_edq_ratio += s->edq.edq_ratio; t->sum_lost += s->edq.lost; t->n_edq++; }
    if (s->step - 1 >= t->tail_from) { t->sum_tail += s->loss; t->n_tail++; }
}

/* Steps until --stop-after, a signal (*sig) or divergence. 0, or the exit status after a message. */
static int train_loop(collage_run *run, const train_opts *o, FILE *logf, run_totals *t, int *sig) {
    int tty = isatty(2) && !o->quiet, has_val = collage_run_get_info(run).has_val;
    double tokens = (double)o->cfg.batch * o->cfg.seq;
    for (int step = t->start; step < o->stop_after; step++) {
        if ((*sig = stop_signal())) return 0;
        double t0 = cli_now(), c0 = dist_comm_seconds();
        collage_scores val = {.loss = (double)NAN, .accuracy = (double)NAN};
        collage_run_step_info s;
        collage_status st = collage_run_step(run, &s);
        if (st != COLLAGE_OK && st != COLLAGE_ERR_NONFINITE) {
            if (run_failed(run, st, "", tty)) intact_hint(o, "");
            return 1;
        }
        double ms = (cli_now() - t0) * 1e3, comm_ms = (dist_comm_seconds() - c0) * 1e3;
        if (s.diverged) {
            if (logf) log_step(logf, &s, &val, tokens / (ms * 1e-3), ms, comm_ms);
            if (dist_rank() == 0) {
                fprintf(stderr, "%scollage train: %s\n", tty ? "\n" : "", collage_run_error(run));
                intact_hint(o, "nothing was saved after the divergence; a smaller --lr, a longer --warmup or --clip may "
                               "help; ");
            }
            return TRAIN_EXIT_DIVERGED;
        }
        if (st == COLLAGE_ERR_NONFINITE && !o->quiet) fprintf(stderr, "%scollage train: %s\n", tty ? "\n" : "", collage_run_error(run));
        tally(t, &s, tokens);
        t->step_secs += ms * 1e-3;
        int is_eval = s.step % o->eval_every == 0 || s.step == o->stop_after;
        double e0 = cli_now();
        if (is_eval && has_val) collage_run_evaluate_scores(run, COLLAGE_SPLIT_VAL, VAL_BATCHES, &val);
        t->eval_secs += cli_now() - e0;
        if (!isnan(val.loss)) { t->last_val = val.loss; t->last_acc = val.accuracy; }
        if (logf) log_step(logf, &s, &val, tokens / (ms * 1e-3), ms, comm_ms);
        print_step(o, &s, &val, tokens / (ms * 1e-3), ms, t, tty, is_eval);
        /* a periodic checkpoint after a clean step: one after a skipped step would hold the same weights */
        if (o->save && o->save_every > 0 && s.step % o->save_every == 0 && s.step < o->stop_after && !s.stats.skipped &&
            save_now(run, o, t, tty))
            return 1;
    }
    return 0;
}

/* A signal stopped the loop: the checkpoint of the last step, and how to go on. */
static int interrupted(collage_run *run, const train_opts *o, run_totals *t, int sig) {
    int step = collage_run_get_info(run).step;
    const char *name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
    int fresh = step != t->start && step != t->saved_step; /* steps not in a checkpoint yet */
    if (o->save && fresh && save_now(run, o, t, 0)) return 1;
    if (dist_rank() != 0) return 128 + sig;
    collage_checkpoint ck;
    /* where the run goes on from: its newest checkpoint in --save, else the one it resumed */
    const char *from = o->save && collage_checkpoint_find(o->save, &ck, NULL, 0) == COLLAGE_OK ? o->save : o->resume;
    fprintf(stderr, "collage train: interrupted by %s after step %d%s\n", name, step,
            !o->save ? "; nothing was saved (no --save)" : !from ? "; nothing was saved (no step had finished)" : "");
    if (from && o->save)
        fprintf(stderr, "to continue: %scollage train --resume %s --save %s%s%s\n", dist_launcher(), from, o->save,
                o->cfg.data ? " --data " : "", o->cfg.data ? o->cfg.data : "");
    else if (o->save) fprintf(stderr, "to start again: the same command\n");
    return 128 + sig;
}

/* After the last step: the closing lines, --summary, the last checkpoint. 0 or 1. ms/step and tokens/s
 * are of the training steps alone; the evaluations' and saves' time is in the total. */
static int finish(collage_run *run, const train_opts *o, run_totals *t) {
    collage_run_info in = collage_run_get_info(run);
    double secs = cli_now() - t->t_start, comm_s = dist_comm_seconds() - t->comm0, st = t->step_secs;
    int ran = t->last_step - t->start, bad = 0;
    if (!o->quiet && ran > 0) {
        printf("done: %d step%s in %.1f s (%.1f s of it evaluating), %.1f ms/step, %.0f tokens/s, final loss %.4f; %.4g "
               "bytes/param of training state (%.1f MB), peak RSS %ld MiB\n", ran, ran == 1 ? "" : "s", secs, t->eval_secs,
               1e3 * st / ran,
               t->tokens / st, t->last_loss, in.memory.total, in.memory.total * (double)in.params / 1e6, peak_rss_mb());
        if (dist_mpi())
            printf("communication (rank 0): %.1f ms/step of %.1f (%.1f%%), %d rank%s\n", 1e3 * comm_s / ran,
                   1e3 * st / ran, 100 * comm_s / st, in.ranks, in.ranks > 1 ? "s" : "");
    }
    if (dist_rank() == 0 && o->summary && ran > 0 && write_summary(o, &in, t, secs, comm_s)) bad = 1;
    if (dist_any(bad)) return 1;
    if (!o->save || ran == 0 || t->saved_step == in.step) return 0;
    return save_now(run, o, t, 0);
}

/* --log: a new run starts it afresh; a resumed run keeps the lines up to its checkpoint. */
static int log_start(const train_opts *o, FILE **logf, int step) {
    if (!*logf) return 0;
    if (!o->resume) return ftruncate(fileno(*logf), 0) == 0 ? 0 : -1;
    fclose(*logf);
    *logf = NULL;
    if (log_trim(o->log, step)) return -1;
    if (!(*logf = fopen(o->log, "a"))) fprintf(stderr, "collage train: cannot write --log '%s'\n", o->log);
    return *logf ? 0 : -1;
}

int train_run(collage_run *run, const train_opts *opts, FILE **logf) {
    train_opts o = *opts;
    collage_run_info in = collage_run_get_info(run);
    o.cfg = *collage_run_get_config(run);
    run_totals t = {.t_start = cli_now(), .last_loss = (double)NAN, .last_val = (double)NAN, .last_acc = (double)NAN,
                    .comm0 = dist_comm_seconds(),
                    .start = in.step, .last_step = in.step, .saved_step = -1};
    t.tail_from = o.stop_after - (o.stop_after / 20 > 0 ? o.stop_after / 20 : 1);
    if (dist_any(log_start(&o, logf, in.step) != 0)) return 1;
    if (!o.quiet) print_header(&o, &in);
    int sig = 0, rc = train_loop(run, &o, *logf, &t, &sig);
    if (rc) return rc;
    if (sig) return interrupted(run, &o, &t, sig);
    return finish(run, &o, &t);
}
