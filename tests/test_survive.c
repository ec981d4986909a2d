/* test_survive.c — runs that survive. kill -9 at random moments of runs that save a checkpoint every
 * step (100 kills; 10 with COLLAGE_TEST_QUICK=1): every kill leaves a folder that --resume continues,
 * to the uninterrupted run's losses and final checkpoint bytes, and the next run leaves no temporary
 * file; the same under 2 MPI ranks (20 kills; 3 quick; skipped without MPI). A full disk (a small
 * tmpfs, mounted when the test may): the save fails with "No space left on device" and the checkpoint
 * before it resumes; a first save that does not fit leaves nothing. SIGINT at a random step saves
 * that step, and the run resumes bit for bit; a second signal exits at once. A run with an absurd
 * learning rate exits 3 at the first NaN, saves nothing after it, and logs valid JSON only. And the
 * bad-input rows of checkpoints and output paths: each refused with a message naming the path or
 * flag, an exit status, before any step, and nothing overwritten. */
#include "harness.h"
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#define TINY "--model tiny --layers 1 --dim 32 --heads 2 --batch 4 --seq 16 --threads 1 --quiet"
#define KILL_STEPS 16            /* steps of a killed run (a save after each) */
#define KILLS 100
#define KILLS_QUICK 10
#define MPI_KILLS 20
#define MPI_KILLS_QUICK 3
#define MPIRUN "timeout -k 10 120 mpirun --oversubscribe -x LSAN_OPTIONS -x ASAN_OPTIONS -x PMIX_MCA_mca_base_component_disable_dlclose -np 2"

static char g_bin[1024], g_dir[256], g_text[512], g_fast[512]; /* g_fast: a tmpfs folder when there is one */
static int g_quick, g_mpi;

/* ---------------------------------------------------------------- helpers */
/* Start `cmd` through the shell, its output into `out`; the pid of the command itself (sh execs it). */
static pid_t spawn(const char *cmd, const char *out) {
    pid_t p = fork();
    if (p == 0) {
        char full[8192];
        snprintf(full, sizeof full, "exec %s > %s 2>&1", cmd, out);
        execl("/bin/sh", "sh", "-c", full, (char *)NULL);
        _exit(127);
    }
    return p;
}
/* Its exit status, or 128 + the signal that ended it. */
static int reap(pid_t p) {
    int st = 0;
    while (waitpid(p, &st, 0) < 0 && errno == EINTR) {}
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}
static int count(const char *fmt, const char *dir) { /* the number a shell pipeline prints */
    char cmd[2048], out[64] = "";
    snprintf(cmd, sizeof cmd, fmt, dir);
    h_sh(out, sizeof out, "%s", cmd);
    return atoi(out);
}
/* What killed saves leave behind: *.tmp folders and files, .trash-* folders. */
static int temporaries(const char *dir) {
    return count("find %s -name '*.tmp' -o -name '*.tmp.*' -o -name '.trash-*' | wc -l", dir);
}
static int same_file(const char *a, const char *b) {
    return h_sh(NULL, 0, "cmp -s %s %s", a, b) == 0;
}
static int lines_of(const char *path) {
    FILE *f = fopen(path, "r");
    int n = 0, c;
    while (f && (c = fgetc(f)) != EOF) n += c == '\n';
    if (f) fclose(f);
    return n;
}
static void slurp(const char *path, char *out, size_t cap) {
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(out, 1, cap - 1, f) : 0;
    out[n] = 0;
    if (f) fclose(f);
}

/* Per step of a --log: "loss L grad_norm G" as printed (index: the step; "" when not logged). */
#define MAX_STEP 512
typedef struct { char line[MAX_STEP + 1][128]; int last; } steps_log;
static void read_log(const char *path, steps_log *L) {
    memset(L, 0, sizeof *L);
    FILE *f = fopen(path, "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f)) {
        char *st = strstr(line, "{\"step\":"), *lo = strstr(line, "\"loss\":"), *gn = strstr(line, "\"grad_norm\":");
        int s = st ? atoi(st + 8) : -1;
        if (s < 1 || s > MAX_STEP || !lo || !gn) continue;
        snprintf(L->line[s], sizeof L->line[s], "loss %.*s grad_norm %.*s", (int)strcspn(lo + 7, ","), lo + 7,
                 (int)strcspn(gn + 12, ","), gn + 12);
        if (s > L->last) L->last = s;
    }
    if (f) fclose(f);
}
/* Every step the resumed log has equals the reference's; the number of steps compared. -1 on a difference. */
static int same_steps(const steps_log *ref, const steps_log *got, int *first_diff) {
    int n = 0;
    for (int s = 1; s <= got->last; s++) {
        if (!got->line[s][0]) continue;
        if (strcmp(ref->line[s], got->line[s])) { *first_diff = s; return -1; }
        n++;
    }
    return n;
}

/* The files of a run's newest checkpoint equal those of ref's (model.bin and the optimizer states). */
static int same_checkpoint(const char *ref, const char *got, int ranks) {
    char a[1024], b[1024], fa[1200], fb[1200];
    h_checkpoint(ref, a, sizeof a);
    h_checkpoint(got, b, sizeof b);
    const char *one[] = {"model.bin", "optimizer.state", NULL}, *two[] = {"model.bin", "optimizer.rank0-of-2.state",
                                                                        "optimizer.rank1-of-2.state", NULL};
    const char **files = ranks == 1 ? one : two;
    if (strcmp(strrchr(a, '/'), strrchr(b, '/'))) return 0; /* not the same step */
    for (int i = 0; files[i]; i++) {
        snprintf(fa, sizeof fa, "%s/%s", a, files[i]);
        snprintf(fb, sizeof fb, "%s/%s", b, files[i]);
        if (!same_file(fa, fb)) return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------- JSON */
/* A flat JSON object of strings, numbers, true, false and null (what --log writes), per RFC 8259. */
static const char *json_ws(const char *p) { while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') p++; return p; }
static const char *json_string(const char *p) {
    if (*p++ != '"') return NULL;
    for (; *p && *p != '"'; p++)
        if (*p == '\\' && !*++p) return NULL;
    return *p == '"' ? p + 1 : NULL;
}
static const char *json_number(const char *p) {
    if (*p == '-') p++;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (*p >= '0' && *p <= '9') p++;
    else return NULL;
    if (*p == '.') { if (!(*++p >= '0' && *p <= '9')) return NULL; while (*p >= '0' && *p <= '9') p++; }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!(*p >= '0' && *p <= '9')) return NULL;
        while (*p >= '0' && *p <= '9') p++;
    }
    return p;
}
static int json_object_line(const char *p) {
    p = json_ws(p);
    if (*p++ != '{') return 0;
    p = json_ws(p);
    if (*p == '}') return *json_ws(p + 1) == 0;
    for (;;) {
        if (!(p = json_string(json_ws(p)))) return 0;
        p = json_ws(p);
        if (*p++ != ':') return 0;
        p = json_ws(p);
        if (!strncmp(p, "null", 4)) p += 4;
        else if (!strncmp(p, "true", 4)) p += 4;
        else if (!strncmp(p, "false", 5)) p += 5;
        else if (*p == '"') p = json_string(p);
        else p = json_number(p);
        if (!p) return 0;
        p = json_ws(p);
        if (*p == ',') { p++; continue; }
        return *p == '}' && *json_ws(p + 1) == 0;
    }
}

/* ---------------------------------------------------------------- kill -9 */
static int wait_lines(const char *log, int n, pid_t p);
/* Waits until path exists or the process ended; 1 when it exists. */
static int wait_file(const char *path, pid_t p) {
    for (int i = 0; i < 20000; i++) {
        if (access(path, F_OK) == 0) return 1;
        if (waitpid(p, NULL, WNOHANG) == p) return 0;
        sleep_s(0.001);
    }
    return 0;
}

/* kills trials: a run resumed from the checkpoint of step 1 that saves every step is killed (-9) at a
 * random moment of its course, then resumed to its end; the resumed steps must log what the
 * uninterrupted run logged, the last checkpoint must hold its bytes, and no temporary file may be left.
 * Under mpirun the moment is drawn over the steps, from the log's creation (MPI has started) to its
 * last line: a rank killed inside MPI_Init can leave Open MPI's mpirun waiting forever, which is
 * mpirun's matter, not the run's, and the seconds mpirun takes to start and end would hold most kills. */
static void kill_trials(int ranks, int kills) {
    char ref[600], reflog[600], base[600], dir[600], log[600], log2[600], out[600], cmd[4096], o[8192];
    const char *mpi = ranks > 1 ? MPIRUN : "", *tag = ranks > 1 ? "mpi" : "one";
    snprintf(ref, sizeof ref, "%s/%s-ref", g_fast, tag);
    snprintf(reflog, sizeof reflog, "%s/%s-ref.jsonl", g_fast, tag);
    snprintf(base, sizeof base, "%s/%s-base", g_fast, tag);
    snprintf(dir, sizeof dir, "%s/%s-run", g_fast, tag);
    snprintf(log, sizeof log, "%s/%s-run.jsonl", g_fast, tag);
    snprintf(log2, sizeof log2, "%s/%s-resumed.jsonl", g_fast, tag);
    snprintf(out, sizeof out, "%s/%s-run.out", g_fast, tag);
    int rc = h_sh(o, sizeof o, "%s %s train --data %s " TINY " --steps %d --save %s --save-every 1 --log %s", mpi, g_bin,
                  g_text, KILL_STEPS, ref, reflog);
    CHECK(rc == 0, "%s: the uninterrupted run: rc %d: %s", tag, rc, o);
    rc = h_sh(o, sizeof o, "%s %s train --data %s " TINY " --steps %d --stop-after 1 --save %s", mpi, g_bin, g_text,
              KILL_STEPS, base);
    CHECK(rc == 0, "%s: the run of step 1: rc %d: %s", tag, rc, o);
    steps_log R, G;
    read_log(reflog, &R);
    CHECK(R.last == KILL_STEPS, "%s: the reference logged %d steps", tag, R.last);
    /* how long a resumed run takes: the kills fall anywhere in it, start-up included */
    /* a rank killed, mpirun stops the other at once rather than after its default second of grace */
    snprintf(cmd, sizeof cmd, "%s%s %s train --data %s --threads 1 --quiet --resume %s --save %s --save-every 1 --log %s", mpi,
             ranks > 1 ? " --mca odls_base_sigkill_timeout 0" : "", g_bin, g_text, dir, dir, log);
    h_sh(NULL, 0, "rm -rf %s %s && cp -r %s %s", dir, log, base, dir);
    double t0 = h_now(), t1;
    pid_t p0 = spawn(cmd, out);
    if (ranks > 1 && wait_file(log, p0)) {
        t0 = h_now();
        wait_lines(log, KILL_STEPS - 1, p0);
    }
    t1 = h_now();
    rc = reap(p0);
    double span = (ranks > 1 ? t1 : h_now()) - t0;
    CHECK(rc == 0 && same_checkpoint(ref, dir, ranks), "%s: the resumed run without a kill: rc %d", tag, rc);
    int ok = 0, partial = 0, first = 0, resumed_steps = 0;
    for (int k = 0; k < kills; k++) {
        h_sh(NULL, 0, "rm -rf %s %s %s && cp -r %s %s", dir, log, log2, base, dir);
        double at = h_uniform() * span * 1.1;
        pid_t p = spawn(cmd, out), ranks_pid[8];
        if (ranks > 1) wait_file(log, p);
        sleep_s(at);
        if (ranks == 1) kill(p, SIGKILL);
        else { /* one rank, or every rank at once (a node that dies) */
            int n = h_procs_below(p, g_bin, ranks_pid, 8), all = h_rand32() % 2, one = n ? (int)(h_rand32() % (unsigned)n) : 0;
            for (int i = 0; i < n; i++)
                if (all || i == one) kill(ranks_pid[i], SIGKILL);
        }
        reap(p);
        partial += temporaries(dir) > 0;
        char ck[1024];
        int nck = h_checkpoint(dir, ck, sizeof ck);
        first += nck == 1 && strstr(ck, "step-00000001") != NULL;
        rc = h_sh(o, sizeof o, "%s %s train --data %s --threads 1 --quiet --resume %s --save %s --log %s", mpi, g_bin, g_text,
                  dir, dir, log2);
        read_log(log2, &G);
        int diff = 0, n = same_steps(&R, &G, &diff);
        /* at most --keep checkpoints once the resumed run has saved; one more when the kill came between
         * the last save's rename and the removal of the oldest, and the resumed run had nothing to save */
        int good = nck >= 1 && rc == 0 && n >= 0 && same_checkpoint(ref, dir, ranks) && temporaries(dir) == 0 &&
                   h_checkpoint(dir, ck, sizeof ck) <= (n > 0 ? 2 : 3);
        CHECK(good, "%s kill %d at %.3f s: %d checkpoints, resume rc %d, step %d differs, %d temporaries: %.300s", tag, k, at,
              nck, rc, diff, temporaries(dir), o);
        ok += good;
        resumed_steps += n > 0 ? n : 0;
    }
    printf("    %s: %d/%d kills (-9%s at random moments of %.2f s%s of runs saving every step) resumed to the uninterrupted "
           "run's losses and final bytes; %d left a partial save behind (removed by the next run), %d came before any "
           "new checkpoint; %d resumed steps compared\n", ranks > 1 ? "2 MPI ranks" : "one process", ok, kills,
           ranks > 1 ? " of one rank or both" : "", span, ranks > 1 ? " of steps" : "", partial, first,
           resumed_steps);
}

/* A kill between the last save's rename and the removal of its oldest checkpoint leaves that one in the
 * trash, and the run is complete: resuming it with --save has nothing to do, yet removes what killed
 * saves left (trash, a half-written checkpoint folder, a temporary file), and keeps the checkpoints. */
static void test_complete_run_tidied(void) {
    char dir[600], o[4096], ck[1024];
    snprintf(dir, sizeof dir, "%s/complete", g_fast);
    int rc = h_sh(o, sizeof o, "%s train --data %s " TINY " --steps 3 --save %s --save-every 1", g_bin, g_text, dir);
    CHECK(rc == 0, "the run: rc %d: %s", rc, o);
    h_sh(NULL, 0, "cp -r %s/step-00000002 %s/.trash-step-00000001 && mkdir %s/step-00000004.tmp && "
         "echo x > %s/train.state.tmp.4242", dir, dir, dir, dir);
    CHECK(temporaries(dir) == 3, "%d temporaries planted", temporaries(dir));
    rc = h_sh(o, sizeof o, "%s train --data %s --threads 1 --resume %s --save %s", g_bin, g_text, dir, dir);
    CHECK(rc == 0 && strstr(o, "nothing to do"), "the complete run resumed: rc %d: %s", rc, o);
    CHECK(temporaries(dir) == 0 && h_checkpoint(dir, ck, sizeof ck) == 2 && strstr(ck, "step-00000003"),
          "after it: %d temporaries, newest %s", temporaries(dir), ck);
}

static void test_kill_one_process(void) {
    int kills = g_quick ? KILLS_QUICK : KILLS;
    if (g_quick) printf("    COLLAGE_TEST_QUICK: %d kills instead of %d\n", kills, KILLS);
    kill_trials(1, kills);
}

static void test_kill_mpi(void) {
    int kills = g_quick ? MPI_KILLS_QUICK : MPI_KILLS;
    if (g_quick) printf("    COLLAGE_TEST_QUICK: %d kills instead of %d\n", kills, MPI_KILLS);
    kill_trials(2, kills);
}

/* ---------------------------------------------------------------- a full disk */
static void test_full_disk(void) {
    char mnt[600], run[700], other[600], out[8192], ck[1024];
    snprintf(mnt, sizeof mnt, "%s/small", g_dir);
    snprintf(run, sizeof run, "%s/run", mnt);
    snprintf(other, sizeof other, "%s/elsewhere", g_dir);
    mkdir(mnt, 0755);
    /* one checkpoint of the tiny model takes 280 KiB on a tmpfs: room for two, not for the third */
    if (geteuid() != 0 || mount("collage-test", mnt, "tmpfs", 0, "size=720k") != 0) {
        printf("SKIP test_full_disk: cannot mount a tmpfs on %s (%s): the full-disk test did not run\n", mnt,
               geteuid() != 0 ? "not root" : strerror(errno));
        return;
    }
    int rc = h_sh(out, sizeof out, "%s train --data %s " TINY " --steps 10 --save %s --save-every 1", g_bin, g_text, run);
    CHECK(rc == 1 && strstr(out, "No space left on device") && strstr(out, "is intact"), "rc %d: %s", rc, out);
    int n = h_checkpoint(run, ck, sizeof ck);
    CHECK(n >= 1 && temporaries(run) == 0, "%d checkpoints, %d temporaries after the failed save", n, temporaries(run));
    rc = h_sh(out, sizeof out, "%s train --data %s --threads 1 --quiet --resume %s --save %s", g_bin, g_text, run, other);
    CHECK(rc == 0 && h_checkpoint(other, ck, sizeof ck) >= 1 && strstr(ck, "step-00000010"), "resume: rc %d: %s", rc, out);
    printf("    a tmpfs of 720 KiB: the save after %s failed with \"No space left on device\"; that checkpoint resumed\n",
           strrchr(ck, '/') ? "the last that fitted" : "?");
    /* a first save that does not fit: nothing is left, not a file of it */
    h_sh(NULL, 0, "rm -rf %s", run);
    if (umount(mnt) != 0 || mount("collage-test", mnt, "tmpfs", 0, "size=160k") != 0) {
        CHECK(0, "cannot remount %s: %s", mnt, strerror(errno));
        return;
    }
    rc = h_sh(out, sizeof out, "%s train --data %s " TINY " --steps 3 --save %s", g_bin, g_text, run);
    CHECK(rc == 1 && strstr(out, "No space left on device") && h_checkpoint(run, ck, sizeof ck) == 0 &&
          count("ls -A %s | wc -l", run) == 0, "a first save that does not fit: rc %d, %d files left: %s", rc,
          count("ls -A %s | wc -l", run), out);
    /* a read-only folder: --save and --summary refused before the first step */
    if (umount(mnt) != 0 || mount("collage-test", mnt, "tmpfs", MS_RDONLY, "size=64k") != 0) {
        CHECK(0, "cannot remount %s read-only: %s", mnt, strerror(errno));
        return;
    }
    rc = h_sh(out, sizeof out, "%s train --data %s " TINY " --steps 3 --save %s", g_bin, g_text, run);
    CHECK(rc == 1 && strstr(out, "--save") && strstr(out, "Read-only file system"), "read-only --save: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s train --data %s " TINY " --steps 3 --summary %s/s.json", g_bin, g_text, mnt);
    CHECK(rc == 1 && strstr(out, "--summary") && strstr(out, "Read-only file system"), "read-only --summary: rc %d: %s",
          rc, out);
    rc = h_sh(out, sizeof out, "%s compare --out %s/cmp --precision fp32 --steps 2", g_bin, mnt);
    CHECK(rc == 1 && strstr(out, "--out") && strstr(out, "Read-only file system"), "read-only compare --out: rc %d: %s",
          rc, out);
}

static void test_full_disk_and_read_only(void) {
    char mnt[600];
    snprintf(mnt, sizeof mnt, "%s/small", g_dir);
    test_full_disk();
    umount2(mnt, MNT_DETACH); /* whatever happened above, nothing stays mounted */
}

/* ---------------------------------------------------------------- signals */
/* Whether signal sig is pending for process p (not yet delivered). */
static int pending(pid_t p, int sig) {
    char path[64], buf[4096], *at;
    unsigned long long mask = 0;
    snprintf(path, sizeof path, "/proc/%d/status", (int)p);
    slurp(path, buf, sizeof buf);
    if ((at = strstr(buf, "\nSigPnd:"))) mask |= strtoull(at + 8, NULL, 16);
    if ((at = strstr(buf, "\nShdPnd:"))) mask |= strtoull(at + 8, NULL, 16);
    return (int)((mask >> (sig - 1)) & 1);
}

/* Waits until the log has at least n lines (or the process ended); 1 when it has. */
static int wait_lines(const char *log, int n, pid_t p) {
    for (int i = 0; i < 20000; i++) {
        if (lines_of(log) >= n) return 1;
        if (waitpid(p, NULL, WNOHANG) == p) return 0;
        sleep_s(0.002);
    }
    return 0;
}

static void test_sigint_saves_that_step(void) {
    char ref[600], reflog[600], run[600], log[600], out[600], o[8192], text[8192], ck[1024], cmd[4096];
    const int steps = 120;
    snprintf(ref, sizeof ref, "%s/sig-ref", g_fast);
    snprintf(reflog, sizeof reflog, "%s/sig-ref.jsonl", g_fast);
    snprintf(run, sizeof run, "%s/sig-run", g_fast);
    snprintf(log, sizeof log, "%s/sig-run.jsonl", g_fast);
    snprintf(out, sizeof out, "%s/sig-run.out", g_fast);
    int rc = h_sh(o, sizeof o, "%s train --data %s " TINY " --steps %d --save %s --save-every 0 --log %s", g_bin, g_text,
                  steps, ref, reflog);
    CHECK(rc == 0, "reference: rc %d: %s", rc, o);
    int at = 3 + (int)(h_rand32() % (steps / 2));
    snprintf(cmd, sizeof cmd, "%s train --data %s --model tiny --layers 1 --dim 32 --heads 2 --batch 4 --seq 16 --threads 1 "
             "--steps %d --save %s --save-every 0 --log %s", g_bin, g_text, steps, run, log);
    pid_t p = spawn(cmd, out);
    int seen = wait_lines(log, at, p);
    kill(p, SIGINT);
    rc = reap(p);
    slurp(out, text, sizeof text);
    steps_log L, R;
    read_log(log, &L);
    read_log(reflog, &R);
    char want[64];
    snprintf(want, sizeof want, "interrupted by SIGINT after step %d", L.last);
    snprintf(o, sizeof o, "step-%08d", L.last);
    CHECK(seen && rc == 130 && strstr(text, want) && strstr(text, "to continue: collage train --resume"),
          "SIGINT after %d logged steps: rc %d: %s", at, rc, text);
    CHECK(h_checkpoint(run, ck, sizeof ck) == 1 && strstr(ck, o), "the checkpoint is not the last step's (%d): %s", L.last, ck);
    rc = h_sh(o, sizeof o, "%s train --data %s --threads 1 --quiet --resume %s --save %s --log %s", g_bin, g_text, run, run, log);
    read_log(log, &L);
    int diff = 0, n = same_steps(&R, &L, &diff);
    CHECK(rc == 0 && n == steps && same_checkpoint(ref, run, 1), "resumed: rc %d, %d steps as the reference (step %d "
          "differs): %s", rc, n, diff, o);
    printf("    SIGINT once %d steps were logged: checkpoint of step %d, exit 130; resumed to step %d bit for bit\n", at,
           (int)strtol(strrchr(ck, '-') + 1, NULL, 10), steps);
    /* a second signal, while the step of the first finishes (the tiny preset: a step of 16 x 64 tokens
     * takes over 10 ms), exits at once with 130 and saves nothing */
    h_sh(NULL, 0, "rm -rf %s %s", run, log);
    snprintf(cmd, sizeof cmd, "%s train --data %s --model tiny --batch 16 --seq 64 --threads 1 --quiet --steps 100000 "
             "--save %s --save-every 0 --log %s", g_bin, g_text, run, log);
    p = spawn(cmd, out);
    seen = wait_lines(log, 2, p);
    kill(p, SIGINT);
    for (int i = 0; i < 5000 && pending(p, SIGINT); i++) sleep_s(0.001); /* two pending SIGINTs would be one */
    kill(p, SIGINT);
    rc = reap(p);
    slurp(out, text, sizeof text);
    CHECK(seen && rc == 130 && strstr(text, "second signal: exiting now") && !strstr(text, "interrupted by SIGINT after"),
          "two signals: rc %d: %s", rc, text);
}

/* ---------------------------------------------------------------- signal storms */
/* 1 once the process has a handler for sig (its SigCgt), 0 when it ended or never installs one. */
static int catches(pid_t p, int sig) {
    char path[64], buf[4096], *at;
    snprintf(path, sizeof path, "/proc/%d/status", (int)p);
    for (int i = 0; i < 20000; i++) {
        slurp(path, buf, sizeof buf);
        if ((at = strstr(buf, "\nSigCgt:")) && (strtoull(at + 8, NULL, 16) >> (sig - 1) & 1)) return 1;
        if (waitpid(p, NULL, WNOHANG | WNOWAIT) == p) return 0;
        sleep_s(0.001);
    }
    return 0;
}
/* How the process ended: its exit status, or -(the signal) that killed it. */
static int reap_exit(pid_t p) {
    int st = 0;
    while (waitpid(p, &st, 0) < 0 && errno == EINTR) {}
    return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

#define STORM 40        /* runs of the signal storm (one process); COLLAGE_TEST_STORM=N runs N */
#define STORM_QUICK 10
#define STORM_MPI 10    /* under 2 MPI ranks */
#define STORM_MPI_QUICK 2
#define STORM_STEPS 12
/* The default model at batch 4 runs its products through oneDNN's JIT sgemm when oneDNN is there: a
 * kernel that uses the stack pointer as a data register, which is what a signal taken on a computing
 * thread wrote its frame over (the AVX-512 one, without AMX; heap corruption in 1 run of 4 before). */
#define STORM_RUN "--data %s --batch 4 --seq 64 --steps %d --quiet"

/* storm trials: a run is sent SIGINT or SIGTERM (drawn) at a random moment of its course, from the
 * moment it catches the signal to a little past its end (as long as the uninterrupted run's), with 1 or 2 threads (drawn) and saving every 5
 * steps or only at its end (drawn). It exits 130 or 143 with a checkpoint of the step it had finished
 * (none before the first step, and then it says so) and no temporary left, or 0 when the signal came
 * after its last step; resumed with a thread count drawn again, it ends on the uninterrupted run's
 * checkpoint bytes. Under MPI the signal goes to one rank, and every rank saves and stops (mpirun's own
 * exit status is not the run's). */
static void storm_trials(int ranks, int runs, const char *env) {
    char ref[600], dir[600], out[600], cmd[4096], o[8192], text[8192], ck[1024], want[96];
    const char *mpi = ranks > 1 ? MPIRUN : "", *tag = ranks > 1 ? "mpi" : "one";
    snprintf(ref, sizeof ref, "%s/storm-%s-ref", g_fast, tag);
    snprintf(dir, sizeof dir, "%s/storm-%s-run", g_fast, tag);
    snprintf(out, sizeof out, "%s/storm-%s.out", g_fast, tag);
    /* the uninterrupted run; the signals fall from the moment a run catches them to its end, + 5% */
    snprintf(cmd, sizeof cmd, "%s %s %s train " STORM_RUN " --threads 2 --save %s", env, mpi, g_bin, g_text, STORM_STEPS, ref);
    pid_t p0 = spawn(cmd, out), r0[8];
    for (int i = 0; ranks > 1 && i < 20000 && h_procs_below(p0, g_bin, r0, 8) < ranks; i++) sleep_s(0.001);
    catches(ranks > 1 ? r0[0] : p0, SIGINT);
    double t0 = h_now();
    int rc = reap_exit(p0);
    double span = h_now() - t0;
    slurp(out, o, sizeof o);
    CHECK(rc == 0, "%s: the uninterrupted run: rc %d: %s", tag, rc, o);
    int mid = 0, before = 0, after = 0, by_sig[2] = {0, 0};
    for (int k = 0; k < runs; k++) {
        const int sig = h_rand32() % 2 ? SIGINT : SIGTERM, threads = 1 + (int)(h_rand32() % 2);
        const int every = h_rand32() % 2 ? 5 : 0;
        const double at = h_uniform() * span * 1.05;
        by_sig[sig == SIGTERM]++;
        h_sh(NULL, 0, "rm -rf %s", dir);
        snprintf(cmd, sizeof cmd, "%s %s %s train " STORM_RUN " --threads %d --save %s --save-every %d", env, mpi, g_bin,
                 g_text, STORM_STEPS, threads, dir, every);
        pid_t p = spawn(cmd, out), who = p, r[8];
        if (ranks > 1) { /* the ranks, once both are up; one of them takes the signal */
            int n = 0;
            for (int i = 0; i < 20000 && (n = h_procs_below(p, g_bin, r, 8)) < ranks && waitpid(p, NULL, WNOHANG | WNOWAIT) != p; i++)
                sleep_s(0.001);
            who = n ? r[h_rand32() % (unsigned)n] : p;
        }
        int caught = catches(who, sig);
        sleep_s(at);
        kill(who, sig);
        rc = reap_exit(p);
        slurp(out, text, sizeof text);
        int nck = h_checkpoint(dir, ck, sizeof ck), step = nck ? (int)strtol(strrchr(ck, '-') + 1, NULL, 10) : 0;
        /* under mpirun the ranks told by another name SIGTERM, and mpirun's own status is its matter */
        snprintf(want, sizeof want, "interrupted by %s after step %d", ranks > 1 ? "" : sig == SIGINT ? "SIGINT" : "SIGTERM",
                 step);
        if (ranks > 1) snprintf(want, sizeof want, " after step %d\n", step);
        const int stopped = strstr(text, "interrupted by ") != NULL, status_ok = ranks > 1 || rc == 128 + sig;
        int good = caught && temporaries(dir) == 0;
        if (!stopped) { /* the signal came after the last step: the run is complete */
            good = good && rc == 0 && same_checkpoint(ref, dir, ranks);
            after++;
        } else if (nck == 0) { /* before the first step */
            good = good && status_ok && strstr(text, "nothing was saved (no step had finished)");
            before++;
        } else {
            good = good && status_ok && strstr(text, want) && strstr(text, "to continue: ");
            rc = h_sh(o, sizeof o, "%s %s train --data %s --threads %d --quiet --resume %s --save %s", mpi, g_bin, g_text,
                      1 + (int)(h_rand32() % 2), dir, dir);
            good = good && rc == 0 && same_checkpoint(ref, dir, ranks);
            mid++;
        }
        CHECK(good, "%s: %s %d at %.3f s (%d threads, --save-every %d): exit %d, %d checkpoints (%s): %.400s", tag,
              sig == SIGINT ? "SIGINT" : "SIGTERM", k, at, threads, every, rc, nck, nck ? ck : "", text);
        if (!good) break;
    }
    printf("    %s: %d runs, %d SIGINT and %d SIGTERM at random moments of %.2f s, 1 or 2 threads: %d saved the step they "
           "had finished and resumed to the uninterrupted run's bytes, %d stopped before their first step, %d had "
           "finished%s\n", ranks > 1 ? "2 MPI ranks, one signalled" : "one process", runs, by_sig[0], by_sig[1], span, mid,
           before, after, *env ? " (oneDNN's AVX-512 sgemm pinned)" : "");
}

/* The env that runs the products through oneDNN's AVX-512 JIT sgemm, where this build has oneDNN's
 * sgemm (else none: the storm runs on what the machine has). */
static const char *storm_env(void) {
    char v[4096];
    int one = h_sh(v, sizeof v, "%s --version", g_bin) == 0 && strstr(v, "oneDNN sgemm") &&
              !strstr(v, "oneDNN sgemm (not in this build)");
    return one ? "env DNNL_MAX_CPU_ISA=AVX512_CORE COLLAGE_GEMM=fp32=onednn,bf16=widen" : "";
}
static void test_signal_storm(void) {
    const char *n = getenv("COLLAGE_TEST_STORM");
    storm_trials(1, n && atoi(n) > 0 ? atoi(n) : g_quick ? STORM_QUICK : STORM, storm_env());
}
static void test_signal_storm_mpi(void) { storm_trials(2, g_quick ? STORM_MPI_QUICK : STORM_MPI, storm_env()); }

/* ---------------------------------------------------------------- one run per folder */
#define LOCK_RUN "--data %s --batch 4 --seq 64 --threads 1 --quiet --save-every 1"
#define LOCK_STEPS 40
#define READS 6

/* Waits until the folder's lock names a pid (its run holds it); that pid, 0 when the process ended. */
static long lock_holder(const char *dir, pid_t p) {
    char path[700], text[256];
    snprintf(path, sizeof path, "%s/.lock", dir);
    for (int i = 0; i < 20000; i++) {
        slurp(path, text, sizeof text);
        if (!strncmp(text, "pid ", 4)) return atol(text + 4);
        if (waitpid(p, NULL, WNOHANG | WNOWAIT) == p) return 0;
        sleep_s(0.001);
    }
    return 0;
}

/* A second run on a folder in use is refused at once, naming the holder's pid, and writes nothing; two
 * started at the same moment: one runs, one is refused, and the checkpoints are the one's, whole, equal
 * to those of a run alone. Meanwhile eval, export and a resume into another folder read the folder
 * being written (its newest complete checkpoint) and remove nothing of it. A run killed with -9 leaves
 * its pid in the lock: the next run takes the folder over with a note naming it. */
static void test_one_run_per_folder(void) {
    char ref[600], dir[600], other[600], out[600], out2[600], cmd[4096], o[8192], text[8192], want[128];
    snprintf(ref, sizeof ref, "%s/lock-ref", g_dir);
    snprintf(dir, sizeof dir, "%s/lock-run", g_dir);
    snprintf(other, sizeof other, "%s/lock-other", g_dir);
    snprintf(out, sizeof out, "%s/lock-a.out", g_dir);
    snprintf(out2, sizeof out2, "%s/lock-b.out", g_dir);
    int rc = h_sh(o, sizeof o, "%s train " LOCK_RUN " --steps %d --save %s", g_bin, g_text, LOCK_STEPS, ref);
    CHECK(rc == 0, "the run alone: rc %d: %s", rc, o);
    /* one holds the folder; a second, started then, is refused before it writes */
    snprintf(cmd, sizeof cmd, "%s train " LOCK_RUN " --steps %d --save %s", g_bin, g_text, LOCK_STEPS, dir);
    pid_t a = spawn(cmd, out);
    long holder = lock_holder(dir, a);
    rc = h_sh(o, sizeof o, "%s train " LOCK_RUN " --steps %d --save %s", g_bin, g_text, LOCK_STEPS, dir);
    snprintf(want, sizeof want, "is in use by another run (pid %d", (int)a);
    CHECK(holder == a && rc == 1 && strstr(o, want) && strstr(o, "hint: "), "a second run: holder %ld, rc %d: %s", holder,
          rc, o);
    /* readers of the folder being written, once it holds a checkpoint */
    char ck[1024];
    for (int i = 0; i < 20000 && !h_checkpoint(dir, ck, sizeof ck) && waitpid(a, NULL, WNOHANG | WNOWAIT) != a; i++)
        sleep_s(0.001);
    int reads = 0;
    for (int i = 0; i < READS && waitpid(a, NULL, WNOHANG | WNOWAIT) != a; i++) {
        int e = h_sh(o, sizeof o, "%s eval --checkpoint %s --data %s --batches 1 --threads 1", g_bin, dir, g_text);
        CHECK(e == 0, "eval of the folder being written: rc %d: %s", e, o);
        e = h_sh(o, sizeof o, "rm -rf %s-hf && %s export --checkpoint %s --out %s-hf", dir, g_bin, dir, dir);
        CHECK(e == 0, "export of the folder being written: rc %d: %s", e, o);
        reads += 1;
    }
    rc = h_sh(o, sizeof o, "%s train --data %s --threads 1 --quiet --resume %s --save %s --stop-after %d", g_bin, g_text, dir,
              other, LOCK_STEPS);
    CHECK(rc == 0 || strstr(o, "nothing to do"), "a resume from the folder being written into another: rc %d: %s", rc, o);
    rc = reap_exit(a);
    slurp(out, text, sizeof text);
    CHECK(rc == 0 && same_checkpoint(ref, dir, 1) && temporaries(dir) == 0, "the run that held the folder: rc %d: %s", rc,
          text);
    /* two at the same moment */
    h_sh(NULL, 0, "rm -rf %s", dir);
    pid_t b = spawn(cmd, out2);
    a = spawn(cmd, out);
    int ra = reap_exit(a), rb = reap_exit(b);
    slurp(out, text, sizeof text);
    slurp(out2, o, sizeof o);
    const char *lost = ra ? text : o;
    snprintf(want, sizeof want, "is in use by another run (pid %d", (int)(ra ? b : a));
    CHECK((ra == 0) + (rb == 0) == 1 && (ra ? ra : rb) == 1 && strstr(lost, want) && same_checkpoint(ref, dir, 1) &&
          temporaries(dir) == 0, "two runs at once: rc %d and %d: %s | %s", ra, rb, text, o);
    /* kill -9: the lock's text stays, the next run takes it over */
    h_sh(NULL, 0, "rm -rf %s", dir);
    a = spawn(cmd, out);
    holder = lock_holder(dir, a);
    for (int i = 0; i < 20000 && !h_checkpoint(dir, ck, sizeof ck) && waitpid(a, NULL, WNOHANG | WNOWAIT) != a; i++) sleep_s(0.001);
    kill(a, SIGKILL);
    reap_exit(a);
    rc = h_sh(o, sizeof o, "%s train --data %s --threads 1 --quiet --resume %s --save %s", g_bin, g_text, dir, dir);
    snprintf(want, sizeof want, "was locked by pid %d, which ended without releasing it", (int)a);
    CHECK(holder == a && rc == 0 && strstr(o, want) && same_checkpoint(ref, dir, 1), "after kill -9: rc %d: %s", rc, o);
    printf("    a second run refused naming pid %ld; %d evals and exports of the folder being written; two started at "
           "once: one refused, the other's checkpoints whole; a lock left by kill -9 taken over with a note\n", holder,
           reads);
}

/* ---------------------------------------------------------------- divergence */
static void test_divergence_stops(void) {
    char run[600], log[600], o[8192], ck[1024], copy[600], before[1200], after[1200], line[4096];
    snprintf(run, sizeof run, "%s/div", g_dir);
    snprintf(copy, sizeof copy, "%s/div-copy", g_dir);
    snprintf(log, sizeof log, "%s/div.jsonl", g_dir);
    /* a good run of 4 steps, its one checkpoint copied aside */
    int rc = h_sh(o, sizeof o, "%s train --data %s " TINY " --steps 40 --stop-after 4 --save %s --save-every 0 --log %s",
                  g_bin, g_text, run, log);
    h_checkpoint(run, ck, sizeof ck);
    h_sh(NULL, 0, "cp -r %s %s", ck, copy);
    CHECK(rc == 0 && strstr(ck, "step-00000004"), "the good run: rc %d: %s", rc, o);
    /* resumed with an absurd learning rate, saving every 2 steps */
    rc = h_sh(o, sizeof o, "%s train --data %s --threads 1 --resume %s --save %s --save-every 2 --lr 1e3 --log %s", g_bin,
              g_text, run, run, log);
    char *d = strstr(o, "diverged at step ");
    int bad = d ? atoi(d + 17) : -1;
    steps_log L;
    read_log(log, &L);
    CHECK(rc == 3 && bad > 4 && L.last == bad && strstr(o, "is intact") && strstr(o, "--lr 1000 (the saved run's 0.001)"),
          "rc %d, diverged at %d, last logged step %d: %s", rc, bad, L.last, o);
    /* nothing saved from the diverged step on; what was saved before verifies and resumes */
    int newest = h_checkpoint(run, ck, sizeof ck) ? (int)strtol(strrchr(ck, '-') + 1, NULL, 10) : -1;
    CHECK(newest >= 4 && newest < bad, "newest checkpoint %d, diverged at %d", newest, bad);
    rc = h_sh(o, sizeof o, "%s eval --checkpoint %s --data %s --batches 2", g_bin, run, g_text);
    CHECK(rc == 0, "the checkpoint before the divergence: eval rc %d: %s", rc, o);
    snprintf(before, sizeof before, "%s/model.bin", copy);
    snprintf(after, sizeof after, "%s/step-00000004/model.bin", run);
    CHECK(newest > 4 || same_file(before, after), "step 4's checkpoint changed");
    /* every line of the log is a JSON object; the diverged step has null for its loss */
    FILE *f = fopen(log, "r");
    int lines = 0, invalid = 0, nulls = 0;
    while (f && fgets(line, sizeof line, f)) {
        lines++;
        line[strcspn(line, "\n")] = 0;
        if (!json_object_line(line)) { if (invalid++ < 3) printf("    not JSON: %s\n", line); }
        nulls += strstr(line, "\"loss\":null") != NULL;
    }
    if (f) fclose(f);
    CHECK(lines == bad && invalid == 0 && nulls >= 1, "%d lines, %d not JSON, %d with a null loss", lines, invalid, nulls);
    /* the same run again with nothing to save in between: the only checkpoint stays byte for byte */
    h_sh(NULL, 0, "rm -rf %s && mkdir -p %s && cp -r %s %s/step-00000004", run, run, copy, run);
    rc = h_sh(o, sizeof o, "%s train --data %s --threads 1 --quiet --resume %s --save %s --save-every 0 --lr 1e3", g_bin,
              g_text, run, run);
    CHECK(rc == 3 && h_checkpoint(run, ck, sizeof ck) == 1 && same_file(before, after), "rc %d: %s", rc, o);
    printf("    --lr 1e3 from step 4: exit 3 at step %d (the first NaN loss), checkpoints only before it, %d log lines "
           "all JSON\n", bad, lines);
}

/* ---------------------------------------------------------------- bad input */
static void test_bad_paths_refused_before_training(void) {
    char o[8192], file[600], log[600], run[600], ck[1024], model[1200], copy[600];
    snprintf(file, sizeof file, "%s/a-file", g_dir);
    snprintf(log, sizeof log, "%s/never.jsonl", g_dir);
    h_sh(NULL, 0, "echo keep > %s", file);
    struct { const char *flags, *want; int rc; } rows[] = {
        {"--save %s", "is a file, not a folder", 1},
        {"--save /proc/collage-x", "cannot create the folder '/proc/collage-x'", 1},
        {"--summary /proc/collage-x/s.json", "--summary '/proc/collage-x/s.json' cannot be written", 1},
        {"--overwrite", "--overwrite without --save", 2},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        char flags[700];
        snprintf(flags, sizeof flags, rows[i].flags, file);
        int rc = h_sh(o, sizeof o, "%s train --data %s " TINY " --steps 3 %s --log %s", g_bin, g_text, flags, log);
        CHECK(rc == rows[i].rc && strstr(o, rows[i].want) && strstr(o, "hint") && access(log, F_OK) != 0,
              "%s: rc %d (want %d), log written: %d: %s", flags, rc, rows[i].rc, access(log, F_OK) == 0, o);
    }
    int rc = h_sh(o, sizeof o, "%s train --data %s " TINY " --steps 3 --log /proc/collage-x/l.jsonl", g_bin, g_text);
    CHECK(rc == 1 && strstr(o, "--log '/proc/collage-x/l.jsonl' cannot be written"), "--log: rc %d: %s", rc, o);
    CHECK(same_file(file, file) && count("cat %s | wc -c", file) == 5, "the file given as --save changed");
    /* a checkpoint of another run: refused without --resume or --overwrite, its bytes untouched */
    snprintf(run, sizeof run, "%s/taken", g_dir);
    snprintf(copy, sizeof copy, "%s/taken-model.bin", g_dir);
    rc = h_sh(o, sizeof o, "%s train --data %s " TINY " --steps 3 --save %s", g_bin, g_text, run);
    h_checkpoint(run, ck, sizeof ck);
    snprintf(model, sizeof model, "%s/model.bin", ck);
    h_sh(NULL, 0, "cp %s %s", model, copy);
    rc = h_sh(o, sizeof o, "%s train --data %s " TINY " --steps 5 --save %s", g_bin, g_text, run);
    CHECK(rc == 2 && strstr(o, "holds a checkpoint of another run (step 3)") && strstr(o, "--overwrite") &&
          same_file(model, copy), "a taken folder: rc %d: %s", rc, o);
    /* --overwrite: the new run's checkpoints replace the other run's */
    rc = h_sh(o, sizeof o, "%s train --data %s " TINY " --steps 2 --save %s --overwrite --seed 5", g_bin, g_text, run);
    CHECK(rc == 0 && h_checkpoint(run, ck, sizeof ck) == 2 && strstr(ck, "step-00000002"), "--overwrite: rc %d: %s", rc, ck);
    /* without --save the run says that the model will not be kept */
    rc = h_sh(o, sizeof o, "%s train --data %s --model tiny --layers 1 --dim 32 --heads 2 --batch 4 --seq 16 --threads 1 "
              "--steps 2", g_bin, g_text);
    CHECK(rc == 0 && strstr(o, "no --save: the trained model will not be kept"), "no --save: rc %d: %s", rc, o);
}

/* A flipped byte in model.bin, an edited lr in train.state: refused by eval, sample and --resume. */
static void test_damaged_checkpoint_refused(void) {
    char o[8192], run[600], bad[600], ck[1024], path[1200];
    snprintf(run, sizeof run, "%s/taken", g_dir); /* from the test above: 2 checkpoints */
    snprintf(bad, sizeof bad, "%s/damaged", g_dir);
    h_sh(NULL, 0, "rm -rf %s && cp -r %s %s", bad, run, bad);
    h_checkpoint(bad, ck, sizeof ck);
    snprintf(path, sizeof path, "%s/model.bin", ck);
    h_sh(NULL, 0, "printf 'x' | dd of=%s bs=1 seek=5000 conv=notrunc 2>/dev/null", path);
    int rc = h_sh(o, sizeof o, "%s eval --checkpoint %s --data %s", g_bin, bad, g_text);
    CHECK(rc == 1 && strstr(o, "model.bin' is damaged") && strstr(o, "hint"), "eval of a flipped byte: rc %d: %s", rc, o);
    rc = h_sh(o, sizeof o, "%s sample --checkpoint %s --tokens 3", g_bin, bad);
    CHECK(rc == 1 && strstr(o, "model.bin' is damaged"), "sample of a flipped byte: rc %d: %s", rc, o);
    snprintf(path, sizeof path, "%s/train.state", ck);
    h_sh(NULL, 0, "sed -i 's/^lr 0.001$/lr 0.01/' %s", path);
    rc = h_sh(o, sizeof o, "%s train --data %s --threads 1 --quiet --resume %s", g_bin, g_text, bad);
    CHECK(rc == 1 && strstr(o, "train.state' is damaged or was edited") && strstr(o, "step-00000001"),
          "an edited train.state: rc %d: %s", rc, o);
}

int main(void) {
    if (h_cli_setup("survive", g_bin, g_dir, g_text, 5)) return 1;
    g_quick = getenv("COLLAGE_TEST_QUICK") && atoi(getenv("COLLAGE_TEST_QUICK"));
    unsigned long long seed = (unsigned long long)time(NULL);
    h_seed(seed);
    /* the kill trials save every step: on a tmpfs (no disk flush to wait for) they take seconds */
    snprintf(g_fast, sizeof g_fast, "/dev/shm/collage-survive-XXXXXX");
    if (!mkdtemp(g_fast)) snprintf(g_fast, sizeof g_fast, "%s/fast", g_dir), mkdir(g_fast, 0755);
    char out[4096];
    g_mpi = h_sh(out, sizeof out, "%s --version", g_bin) == 0 && !strstr(out, "without MPI") &&
            h_sh(NULL, 0, "mpirun --version") == 0;
    h_mpi_env();
    printf("test_survive: %s, seed %llu, data in %s, kill trials in %s\n", g_bin, seed, g_dir, g_fast);
    RUN(test_complete_run_tidied);
    RUN(test_kill_one_process);
    if (g_mpi) RUN(test_kill_mpi);
    else printf("SKIP test_kill_mpi: %s was built without MPI or mpirun does not run\n", g_bin);
    RUN(test_full_disk_and_read_only);
    RUN(test_sigint_saves_that_step);
    RUN(test_signal_storm);
    if (g_mpi) RUN(test_signal_storm_mpi);
    RUN(test_one_run_per_folder);
    RUN(test_divergence_stops);
    RUN(test_bad_paths_refused_before_training);
    RUN(test_damaged_checkpoint_refused);
    h_rm_rf(g_fast);
    h_rm_rf(g_dir);
    return h_end();
}
