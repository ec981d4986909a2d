/* test_cli_input.c — what a new user hits (issue 34), one test per class, each walking every command and
 * flag of its class: (1) every flag that takes a path refuses an empty one by name, and odd paths (a
 * file where a folder goes, a folder where a file goes, a missing file or folder) are refused by name,
 * with nothing changed in the working folder, its parent or /; each command's output names the data it
 * read; (5) every command's unknown flag and malformed number exit 2 with the command's one prefix, the
 * flag and a hint; a bad file exits 1; a non-finite model, --seq over the data and a read-only --save are
 * named as what they are, with hints that fit; (6) --stop-after, --steps and --warmup against a resumed
 * or new run's schedule, a complete run resumed, ms/step without the evaluations; (7) under mpirun an
 * error is printed once and the resume hint starts with mpirun -np N; (8) every flag a --help lists is
 * one the command takes, every flag of a usage line has its entry, the shape flags' ranges in train's
 * help are the ranges it enforces, --kv-heads and --hidden refused where a family has none; fill takes
 * --help and --threads; (9) a flag the optimizer or strategy does not read is refused by name (train, a
 * resumed run, compare, bench), and the hints of a shard of another tokenizer, a damaged shard, --seq past a
 * context and --init beside a shape flag point at the flag to change. */
#include "harness.h"
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>

#define TRAIN "--model tiny --layers 1 --dim 32 --heads 2 --batch 4 --seq 16 --threads 1"
#define TRAIN_BERT "--model bert-tiny --layers 1 --dim 32 --heads 2 --batch 4 --seq 16 --threads 1"
#define MPIRUN "timeout -k 10 120 mpirun --oversubscribe -x LSAN_OPTIONS -x ASAN_OPTIONS -x PMIX_MCA_mca_base_component_disable_dlclose -np 2"

static char g_bin[1024], g_dir[256], g_text[512], g_work[300], g_ck[300], g_bert[300], g_file[300], g_folder[300],
    g_missing[300];

/* Everything under the test's folder (the working folder's parent) with sizes and times, and the names
 * in /: what a command may not change when it refuses a path. */
static void snapshot(char *buf, size_t cap) {
    h_sh(buf, cap, "cd %s && find . -printf '%%p %%y %%s %%T@\\n' | sort; ls -A /", g_dir);
}

/* Replaces the words CK, BERT, FILE, DIR, MISSING and TEXT in args by the test's paths: whole words only
 * (no letter or digit on either side), so that a path already in args is left alone even where its
 * random mkdtemp part holds one of them ("...-sreVCK/sched"). */
static int word_at(const char *args, const char *p, const char *key) {
    const size_t k = strlen(key);
    return !strncmp(p, key, k) && (p == args || !isalnum((unsigned char)p[-1])) && !isalnum((unsigned char)p[k]);
}
static void expand(const char *args, char *out, size_t cap) {
    static const char *const keys[] = {"CK", "BERT", "FILE", "DIR", "MISSING", "TEXT"};
    const char *vals[] = {g_ck, g_bert, g_file, g_folder, g_missing, g_text};
    size_t n = 0;
    out[0] = 0;
    for (const char *p = args; *p && n + 1 < cap;) {
        size_t k = 0;
        while (k < 6 && !word_at(args, p, keys[k])) k++;
        if (k < 6) {
            n += (size_t)snprintf(out + n, cap - n, "%s", vals[k]);
            p += strlen(keys[k]);
        } else out[n++] = *p++, out[n] = 0;
        if (n >= cap) n = cap - 1;
    }
}

/* Every line of out is the command's message ("collage CMD: ") or a hint; 1 when so and a hint is there. */
static int one_prefix(const char *cmd, const char *out) {
    char pre[64];
    int hint = 0;
    snprintf(pre, sizeof pre, "collage %s: ", cmd);
    for (const char *l = out; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
        if (*l == '\n') continue;
        if (!strncmp(l, "hint: ", 6)) hint = 1;
        else if (strncmp(l, pre, strlen(pre))) return 0;
    }
    return hint;
}

typedef struct {
    const char *cmd, *args; /* args: CK, FILE, DIR, MISSING, TEXT replaced */
    int rc;
    const char *says[3]; /* each in the output (expanded too) */
} bad_case;

/* Runs a case from the working folder: its exit status, its message (one prefix, a hint, what it must
 * say), and nothing changed around it when `same` is set. */
static void run_case(const bad_case *c, int same) {
    static char before[1 << 16], after[1 << 16], out[8192];
    char args[4096], want[1024];
    expand(c->args, args, sizeof args);
    if (same) snapshot(before, sizeof before);
    int rc = h_sh(out, sizeof out, "cd %s && %s %s %s", g_work, g_bin, c->cmd, args);
    CHECK(rc == c->rc, "%s %s: rc %d, not %d: %s", c->cmd, c->args, rc, c->rc, out);
    CHECK(one_prefix(c->cmd, out), "%s %s: not one prefix 'collage %s:' with a hint: %s", c->cmd, c->args, c->cmd, out);
    for (int k = 0; k < 3 && c->says[k]; k++) {
        expand(c->says[k], want, sizeof want);
        CHECK(strstr(out, want) != NULL, "%s %s: the message does not say \"%s\": %s", c->cmd, c->args, want, out);
    }
    if (same) {
        snapshot(after, sizeof after);
        CHECK(strcmp(before, after) == 0, "%s %s changed files around it:\n%s\n---\n%s", c->cmd, c->args, before, after);
    }
}

/* ---------------------------------------------------------------- class 1 */
static void test_empty_and_odd_paths(void) {
    static const bad_case empty[] = {
        {"train", TRAIN " --steps 2 --data ''", 2, {"--data ''", "empty path"}},
        {"train", TRAIN " --steps 2 --save ''", 2, {"--save ''", "empty path"}},
        {"train", TRAIN " --steps 2 --resume ''", 2, {"--resume ''", "empty path"}},
        {"train", TRAIN " --steps 2 --log ''", 2, {"--log ''", "empty path"}},
        {"train", TRAIN " --steps 2 --summary ''", 2, {"--summary ''", "empty path"}},
        {"train", TRAIN " --steps 2 --init ''", 2, {"--init ''", "empty path"}},
        {"train", TRAIN " --steps 2 --tokenizer ''", 2, {"--tokenizer ''", "empty value"}},
        {"compare", "--steps 1 --data TEXT --out ''", 2, {"--out ''", "empty path"}},
        {"compare", "--steps 1 --out DIR/c --data ''", 2, {"--data ''", "empty path"}},
        {"compare", "--steps 1 --out DIR/c --init ''", 2, {"--init ''", "empty path"}},
        {"compare", "--steps 1 --out DIR/c --model ''", 2, {"--model ''", "empty value"}},
        {"eval", "--data TEXT --checkpoint ''", 2, {"--checkpoint ''", "empty path"}},
        {"eval", "--checkpoint CK --data ''", 2, {"--data ''", "empty path"}},
        {"sample", "--checkpoint ''", 2, {"--checkpoint ''", "empty path"}},
        {"fill", "--text 'a[MASK]' --checkpoint ''", 2, {"--checkpoint ''", "empty path"}},
        {"export", "--out DIR/x --checkpoint ''", 2, {"--checkpoint ''", "empty path"}},
        {"export", "--checkpoint CK --out ''", 2, {"--out ''", "empty path"}},
        {"tokenize", "--out DIR/x.bin --in ''", 2, {"--in ''", "empty path"}},
        {"tokenize", "--in TEXT --out ''", 2, {"--out ''", "empty path"}},
        {"tokenize", "--in TEXT --out DIR/x.bin --vocab-dir ''", 2, {"--vocab-dir ''", "empty path"}},
    };
    for (size_t i = 0; i < sizeof empty / sizeof *empty; i++) run_case(&empty[i], 1);
    /* an unset variable is the same empty argument */
    bad_case unset = {"compare", "--steps 1 --out \"$COLLAGE_TEST_UNSET\"", 2, {"--out ''", "empty path"}};
    unsetenv("COLLAGE_TEST_UNSET");
    run_case(&unset, 1);
    static const bad_case odd[] = {
        {"compare", "--steps 1 --data TEXT --out FILE", 1, {"--out 'FILE'", "Not a directory"}},
        {"export", "--checkpoint CK --out FILE", 1, {"--out", "FILE", "Not a directory"}},
        {"train", TRAIN " --data TEXT --steps 2 --save FILE", 1, {"--save", "FILE", "is a file"}},
        {"train", TRAIN " --data TEXT --steps 2 --summary DIR", 1, {"--summary 'DIR' is a folder"}},
        {"train", TRAIN " --data TEXT --steps 2 --log DIR", 1, {"--log 'DIR'", "Is a directory"}},
        {"train", TRAIN " --steps 2 --data MISSING", 1, {"--data", "MISSING"}},
        {"train", "--data TEXT --threads 1 --steps 2 --init MISSING", 1, {"--init", "MISSING"}},
        {"train", "--data TEXT --resume MISSING", 1, {"--resume", "MISSING"}},
        {"eval", "--checkpoint MISSING", 1, {"--checkpoint", "MISSING"}},
        {"eval", "--checkpoint CK --data MISSING", 1, {"--data", "MISSING"}},
        {"sample", "--checkpoint MISSING", 1, {"--checkpoint", "MISSING"}},
        {"fill", "--checkpoint MISSING --text 'a[MASK]'", 1, {"--checkpoint", "MISSING"}},
        {"export", "--checkpoint MISSING --out DIR/x", 1, {"--checkpoint", "MISSING"}},
        {"tokenize", "--in MISSING --out DIR/x.bin", 1, {"--in", "MISSING"}},
        {"tokenize", "--in TEXT --out DIR", 1, {"--out 'DIR' is a folder"}},
        {"tokenize", "--in TEXT --out MISSING/x.bin", 1, {"--out", "MISSING/x.bin"}},
    };
    for (size_t i = 0; i < sizeof odd / sizeof *odd; i++) run_case(&odd[i], 1);
}

/* Every command's output names the data it read: train's header, eval's line, tokenize's line. */
static void test_output_names_the_data(void) {
    char out[8192];
    int rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN " --steps 1", g_bin, g_text);
    CHECK(rc == 0 && strstr(out, "train tokens of ") && strstr(out, g_text), "train header: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s eval --checkpoint %s --data %s --batch 2 --seq 16 --batches 1", g_bin, g_ck, g_text);
    CHECK(rc == 0 && strstr(out, g_text), "eval: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s eval --checkpoint %s --data %s --batch 2 --seq 16 --batches 1 --json", g_bin, g_ck, g_text);
    CHECK(rc == 0 && strstr(out, "\"data\":\"") && strstr(out, g_text), "eval --json: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s compare --precision fp32 --beta2 0.95 --steps 1 --jobs 1 --threads 1 --data %s --out %s/cmp "
              "--model tiny --layers 1 --dim 32 --heads 2 --batch 4 --seq 16", g_bin, g_text, g_dir);
    CHECK(rc == 0 && strstr(out, "(1 strategies x 1 beta2 x 1 seeds) on ") && strstr(out, g_text), "compare: rc %d: %s", rc,
          out);
    rc = h_sh(out, sizeof out, "%s tokenize --in %s --out %s/t.bin", g_bin, g_text, g_dir);
    CHECK(rc == 0 && strstr(out, g_text), "tokenize: rc %d: %s", rc, out);
    if (access("/usr/share/games/fortunes", R_OK) == 0) { /* the default corpus is named, with its folder */
        rc = h_sh(out, sizeof out, "%s train " TRAIN " --steps 1 --eval-every 1", g_bin);
        CHECK(rc == 0 && strstr(out, "train tokens of the fortunes corpus ("), "train, default data: rc %d: %s", rc, out);
    } else printf("    the fortunes corpus is not installed: its header line is not checked\n");
}

/* ---------------------------------------------------------------- class 5 */
static const struct { const char *cmd, *needs, *numbers; } CMDS[] = {
    /* each command, the flags it needs to get past them, and its numeric flags */
    {"train", "--data TEXT", "--steps --stop-after --batch --seq --lr --warmup --beta1 --beta2 --eps --wd --clip --seed "
                             "--threads --eval-every --save-every --keep --max-skips --loss-scale --accum --layers "
                             "--heads --dim --kv-heads --hidden"},
    {"eval", "--checkpoint CK", "--batch --seq --batches --threads"},
    {"sample", "--checkpoint CK", "--tokens --temperature --seed --threads"},
    {"fill", "--checkpoint BERT --text 'a[MASK]'", "--top --threads"},
    {"export", "--checkpoint CK --out DIR/e", ""},
    {"tokenize", "--out DIR/t.bin", ""},
    {"compare", "--out DIR/c", "--seeds --steps --jobs --threads --seed --eval-every"},
    {"bench convert", "", "--n --threads --reps"},
    {"bench optimizer", "", "--params --threads --reps --beta2"},
    {"bench model", "", "--batch --seq --steps --warmup --threads"},
};
#define NCMDS (sizeof CMDS / sizeof *CMDS)

static void test_messages_tell_the_truth(void) {
    char out[8192], flag[64];
    for (size_t c = 0; c < NCMDS; c++) { /* an unknown flag, and every numeric flag given a word */
        char args[512];
        bad_case u = {CMDS[c].cmd, args, 2, {"unknown option '--bogus'"}};
        snprintf(args, sizeof args, "%s --bogus 1", CMDS[c].needs);
        run_case(&u, 0);
        for (const char *p = CMDS[c].numbers; sscanf(p, "%63s", flag) == 1; p = strstr(p, flag) + strlen(flag)) {
            char say[96];
            bad_case b = {CMDS[c].cmd, args, 2, {say, "'abc'"}};
            snprintf(args, sizeof args, "%s %s abc", CMDS[c].needs, flag);
            snprintf(say, sizeof say, "%s", flag);
            run_case(&b, 0);
        }
    }
    static const bad_case truths[] = {
        {"train", TRAIN " --data TEXT --steps 2 --seq 100000", 2, {"--seq 100000", "fewer than", "a smaller --seq"}},
        {"train", TRAIN " --steps 2 --data MISSING", 1, {"hint: --data takes"}},
        {"train", "--data TEXT --threads 1 --steps 2 --init MISSING", 1, {"hint: --init takes"}},
        {"train", TRAIN " --data TEXT --steps 2 --tokenizer bogus", 2, {"--tokenizer", "hint: --tokenizer byte or gpt2"}},
        {"train", TRAIN " --data TEXT --steps 2 --model bogus", 2, {"--model", "presets"}},
        {"train", TRAIN " --data TEXT --steps 2 --dim 30 --heads 4", 2, {"divisible", "hint: the shape flags"}},
        {"eval", "--checkpoint CK --data TEXT --seq 100", 2, {"--seq 100 exceeds the model's context"}},
        {"eval", "--checkpoint CK --data TEXT --tokenizer gpt2", 2, {"--tokenizer gpt2 has 50257 symbols"}},
        {"sample", "--checkpoint BERT", 2, {"does not generate text", "collage fill"}},
        {"fill", "--checkpoint CK --text 'a[MASK]'", 2, {"not masked ones", "collage sample"}},
        {"fill", "--checkpoint BERT --text 'no mask'", 2, {"--text has no [MASK]"}},
        {"fill", "--checkpoint BERT --text 'a[MASK]' --top 65", 2, {"--top 65: it takes 1 to 64"}},
        {"export", "--checkpoint CK --out DIR/e --dtype fp8", 2, {"--dtype 'fp8'"}},
        {"bench", "bogus", 2, {"unknown benchmark 'bogus'"}},
    };
    for (size_t i = 0; i < sizeof truths / sizeof *truths; i++) run_case(&truths[i], 0);
    /* the hint of a missing data file is about --data, not the GPT-2 vocabulary or --resume */
    h_sh(out, sizeof out, "%s train " TRAIN " --steps 2 --data %s", g_bin, g_missing);
    CHECK(!strstr(out, "vocabulary") && !strstr(out, "--resume"), "missing --data: a hint that does not fit: %s", out);
    /* a model whose weights overflow: eval says its loss is not finite (not that the data is short), sample
     * fails by name; a short split is still named as one */
    char nan_model[600], model[1200], ckdir[1024];
    snprintf(nan_model, sizeof nan_model, "%s/overflow.bin", g_dir);
    h_checkpoint(g_ck, ckdir, sizeof ckdir);
    snprintf(model, sizeof model, "%s/model.bin", ckdir);
    size_t len = 0;
    unsigned char *bytes = h_read_file(model, &len);
    FILE *f = fopen(nan_model, "wb");
    if (bytes && f && len > 1024) {
        const float big = 1e30f;
        for (size_t i = 1024; i + 4 <= len; i += 4) memcpy(bytes + i, &big, 4);
        fwrite(bytes, 1, len, f);
    }
    if (f) fclose(f);
    free(bytes);
    bad_case nonfinite[] = {
        {"eval", "--checkpoint DIR/../overflow.bin --data TEXT --batch 2 --seq 16 --batches 2", 1, {"not a finite number"}},
        {"sample", "--checkpoint DIR/../overflow.bin --tokens 3", 1, {"not finite at token 1"}},
        {"eval", "--checkpoint CK --data TEXT --batch 128 --seq 64", 1, {"fewer than 128 x 65 tokens"}},
    };
    for (size_t i = 0; i < sizeof nonfinite / sizeof *nonfinite; i++) run_case(&nonfinite[i], 0);
    h_sh(out, sizeof out, "%s eval --checkpoint %s --data %s --batch 2 --seq 16", g_bin, nan_model, g_text);
    CHECK(!strstr(out, "fewer than"), "a non-finite loss reported as a short split: %s", out);
    /* a --save folder that cannot be written: the reason, not "No such file or directory" */
    if (geteuid() != 0) {
        char ro[600];
        snprintf(ro, sizeof ro, "%s/ro", g_dir);
        mkdir(ro, 0555);
        int rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN " --steps 1 --save %s", g_bin, g_text, ro);
        CHECK(rc == 1 && strstr(out, "--save") && strstr(out, "Permission denied") && !strstr(out, "No such file"),
              "read-only --save: rc %d: %s", rc, out);
        chmod(ro, 0755);
    } else printf("    as root every folder is writable: the read-only --save case is not checked here\n");
}

/* ---------------------------------------------------------------- class 6 */
static void test_resume_and_schedules(void) {
    char run[600], log[600], sum[600];
    static char out[8192];
    snprintf(run, sizeof run, "%s/sched", g_dir);
    snprintf(log, sizeof log, "%s/sched.jsonl", g_dir);
    snprintf(sum, sizeof sum, "%s/sched.json", g_dir);
    int rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN " --steps 6 --stop-after 3 --save %s --log %s", g_bin,
                  g_text, run, log);
    CHECK(rc == 0 && strstr(out, "schedule: 6 steps, stopping after step 3 (--stop-after), lr 0.001 after 0 warm-up steps"),
          "a run stopped early: its header states its schedule: rc %d: %s", rc, out);
    char resume[700];
    snprintf(resume, sizeof resume, "--data TEXT --threads 1 --resume %s", run);
    bad_case refused[] = {
        {"train", resume, 2, {"--stop-after 3: the run in", "is at step 3 already", "--stop-after 4 to 6"}},
        {"train", resume, 2, {"--stop-after 2: the run in", "is at step 3 already"}},
        {"train", resume, 2, {"--steps 2: the run in", "is at step 3 already", "--steps 4 or more"}},
        {"train", resume, 2, {"--warmup 7 is longer than --steps 6"}},
    };
    const char *extra[] = {" --stop-after 3", " --stop-after 2", " --steps 2", " --warmup 7"};
    for (int i = 0; i < 4; i++) {
        char args[800];
        snprintf(args, sizeof args, "%s%s", resume, extra[i]);
        refused[i].args = args;
        run_case(&refused[i], 1);
    }
    rc = h_sh(out, sizeof out, "%s train --data %s --threads 1 --resume %s --save %s --log %s", g_bin, g_text, run, run, log);
    CHECK(rc == 0 && strstr(out, "from step 3 (resumed)"), "resumed to the end: rc %d: %s", rc, out);
    /* a complete run resumed: it says so, exits 0 and changes nothing */
    bad_case done = {"train", "", 0, {"is complete (step 6 of --steps 6): nothing to do", "--steps 7 or more"}};
    char args[1400];
    snprintf(args, sizeof args, "%s --log %s", resume, log);
    done.args = args;
    run_case(&done, 1);
    bad_case warm[] = {{"train", TRAIN " --data TEXT --steps 5 --warmup 6", 2, {"--warmup 6 is longer than --steps 5"}},
                       {"compare", "--out DIR/c --data TEXT --steps 5 --warmup 6", 2, {"--warmup 6 is longer than --steps 5"}}};
    run_case(&warm[0], 1);
    run_case(&warm[1], 1);
    /* --stop-after beyond --steps: a note, and the run stops at --steps */
    rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN " --steps 4 --stop-after 9 --log %s", g_bin, g_text, log);
    double loss[16];
    CHECK(rc == 0 && strstr(out, "--stop-after 9 is beyond --steps 4: the run stops at step 4") &&
              h_read_losses(log, loss, 16) == 4, "--stop-after past --steps: rc %d: %s", rc, out);
    /* ms/step and tokens/s are the steps' own: with an evaluation after every step, they leave its time out */
    rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN " --steps 8 --eval-every 1 --summary %s", g_bin, g_text, sum);
    size_t n = 0;
    char *js = (char *)h_read_file(sum, &n);
    double ms = 0, secs = 0, evs = 0;
    const char *p;
    if (js && (p = strstr(js, "\"ms_per_step\":"))) ms = atof(p + 14);
    if (js && (p = strstr(js, "\"seconds\":"))) secs = atof(p + 10);
    if (js && (p = strstr(js, "\"eval_seconds\":"))) evs = atof(p + 15);
    CHECK(rc == 0 && strstr(out, "s of it evaluating)") && ms > 0 && evs > 0 && 8 * ms / 1e3 <= secs - evs + 1e-3,
          "ms/step %g over 8 steps against %g s in all, %g evaluating: %s", ms, secs, evs, js ? js : out);
    free(js);
}

/* ---------------------------------------------------------------- class 7 */
static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
    return n;
}

static void mpi_cases(void);
static void mpi_signal(int again);

static void test_mpi(void) {
    static char out[16384];
    h_sh(out, sizeof out, "%s --version", g_bin);
    if (strstr(out, "without MPI") || h_sh(NULL, 0, "mpirun --version") != 0) {
        printf("    SKIP: %s without MPI or no mpirun: the MPI messages are not checked\n", g_bin);
        return;
    }
    /* h_mpi_env sets the sanitizers' options for mpirun; the tests after this one get theirs back */
    const char *lsan = getenv("LSAN_OPTIONS"), *asan = getenv("ASAN_OPTIONS");
    char *lsan0 = lsan ? strdup(lsan) : NULL, *asan0 = asan ? strdup(asan) : NULL;
    h_mpi_env();
    mpi_cases();
    if (lsan0) setenv("LSAN_OPTIONS", lsan0, 1);
    else unsetenv("LSAN_OPTIONS");
    if (asan0) setenv("ASAN_OPTIONS", asan0, 1);
    else unsetenv("ASAN_OPTIONS");
    free(lsan0);
    free(asan0);
}

/* Under mpirun -np 2: each error once, with one hint; a signal's resume command starts with mpirun. */
static void mpi_cases(void) {
    static char out[16384];
    static const struct { const char *args, *once; } cases[] = {
        {"--bogus 1", "unknown option '--bogus'"},
        {TRAIN " --steps 2 --data MISSING", "cannot open"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char args[2048];
        expand(cases[i].args, args, sizeof args);
        int rc = h_sh(out, sizeof out, MPIRUN " %s train %s", g_bin, args);
        CHECK(rc != 0 && count(out, cases[i].once) == 1 && count(out, "hint: ") == 1,
              "mpirun -np 2 train %s: rc %d, \"%s\" %d times, %d hints: %s", cases[i].args, rc, cases[i].once,
              count(out, cases[i].once), count(out, "hint: "), out);
    }
    for (int again = 0; again < 2; again++) mpi_signal(again);
}

/* A signal under mpirun -np 2: the checkpoint of the step, and a resume command that starts the same
 * way; the ranks found whether or not collage runs itself again (again: COLLAGE_TEST_RUN_AGAIN). */
static void mpi_signal(int again) {
    char run[600], log[600], outf[600];
    snprintf(run, sizeof run, "%s/mpi-sig%d", g_dir, again);
    snprintf(log, sizeof log, "%s/mpi-sig%d.jsonl", g_dir, again);
    snprintf(outf, sizeof outf, "%s/mpi-sig%d.out", g_dir, again);
    pid_t p = fork();
    if (p == 0) {
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "COLLAGE_TEST_RUN_AGAIN=%d exec " MPIRUN " %s train --data %s " TRAIN " --steps 100000 "
                 "--save %s --log %s --quiet > %s 2>&1", again, g_bin, g_text, run, log, outf);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    struct stat sb;
    for (int i = 0; i < 3000 && !(stat(log, &sb) == 0 && sb.st_size > 0); i++) usleep(10000);
    pid_t ranks[4]; /* SIGTERM to every rank, as a batch scheduler sends it */
    int nr = h_procs_below(p, g_bin, ranks, 4);
    for (int i = 0; i < nr; i++) kill(ranks[i], SIGTERM);
    if (nr < 2) kill(p, SIGTERM);
    waitpid(p, NULL, 0);
    size_t n = 0;
    char *text = (char *)h_read_file(outf, &n);
    CHECK(nr == 2, "%d ranks found under mpirun (run again: %d)", nr, again);
    CHECK(text && strstr(text, "interrupted by SIGTERM") && strstr(text, "to continue: mpirun -np 2 collage train --resume"),
          "SIGTERM under mpirun: %s", text ? text : "(no output)");
    free(text);
}

/* A file's first line (or its NUL-separated first field) into out; "" when it cannot be read. */
static void first_field(const char *path, char *out, size_t cap) {
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(out, 1, cap - 1, f) : 0;
    if (f) fclose(f);
    out[n] = 0;
    out[strcspn(out, "\n")] = 0;
}

/* A `collage train` started by the path `path` (the binary, or a link to it), with and without
 * COLLAGE_TEST_RUN_AGAIN: while it runs, its name (comm) is the path's last part, argv[0] the path, its
 * executable the binary, `pgrep -x` finds it by that name, and SIGTERM stops it as documented. */
static void process_named(const char *path, int again) {
    char log[600], outf[600], cmd[4096], real[4096] = "", want[4096] = "";
    snprintf(log, sizeof log, "%s/named%d.jsonl", g_dir, again);
    snprintf(outf, sizeof outf, "%s/named%d.out", g_dir, again);
    remove(log);
    pid_t p = fork();
    if (p == 0) {
        snprintf(cmd, sizeof cmd, "COLLAGE_TEST_RUN_AGAIN=%d exec %s train --data %s " TRAIN " --steps 100000 --log %s "
                 "--quiet > %s 2>&1", again, path, g_text, log, outf);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    struct stat sb;
    for (int i = 0; i < 3000 && !(stat(log, &sb) == 0 && sb.st_size > 0); i++) usleep(10000);
    char file[128], comm[64], argv0[4096], found[256];
    snprintf(file, sizeof file, "/proc/%d/comm", (int)p);
    first_field(file, comm, sizeof comm);
    snprintf(file, sizeof file, "/proc/%d/cmdline", (int)p);
    first_field(file, argv0, sizeof argv0);
    snprintf(file, sizeof file, "/proc/%d/exe", (int)p);
    const ssize_t len = readlink(file, real, sizeof real - 1);
    real[len > 0 ? len : 0] = 0;
    const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    found[0] = '\n';
    h_sh(found + 1, sizeof found - 1, "pgrep -x %.15s", name); /* one pid a line */
    char mine[32];
    snprintf(mine, sizeof mine, "\n%d\n", (int)p);
    kill(p, SIGTERM);
    int status = 0;
    waitpid(p, &status, 0);
    size_t n = 0;
    char *text = (char *)h_read_file(outf, &n);
    CHECK(realpath(g_bin, want) && !strncmp(comm, name, 15) && !strcmp(argv0, path) && !strcmp(real, want) &&
              strstr(found, mine),
          "%s (run again: %d): comm '%s', argv[0] '%s', exe '%s', pgrep -x %s: '%s'", path, again, comm, argv0, real, name,
          found + 1);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM && text && strstr(text, "interrupted by SIGTERM"),
          "%s (run again: %d): SIGTERM: status %d: %s", path, again, status, text ? text : "(no output)");
    free(text);
}

/* The process keeps the name it was started by, whether or not it runs itself again to set OpenBLAS's
 * core type (which CPUs decide; COLLAGE_TEST_RUN_AGAIN takes that path anywhere): ps, top, pgrep, pkill
 * and a batch scheduler's accounting see what the user started. */
static void test_process_name(void) {
    char link[600];
    snprintf(link, sizeof link, "%s/my-collage", g_dir);
    CHECK(symlink(g_bin, link) == 0 || errno == EEXIST, "symlink %s: %s", link, strerror(errno));
    for (int again = 0; again < 2; again++) {
        process_named(g_bin, again);
        process_named(link, again);
    }
}

/* ---------------------------------------------------------------- class 8 */
/* The flags of a text: every --word in it (the first occurrence of each), into out[n...]; the new n. */
static int text_flags(const char *help, const char *stop, char out[][32], int n, int cap) {
    for (const char *p = help; (p = strstr(p, "--")) && n < cap && (!stop || p < stop); p += 2) {
        if (p > help && (isalnum((unsigned char)p[-1]) || p[-1] == '-')) continue;
        size_t len = 2;
        while (isalnum((unsigned char)p[len]) || p[len] == '-') len++;
        if (len <= 2 || len >= 32) continue;
        char f[32];
        snprintf(f, sizeof f, "%.*s", (int)len, p);
        int seen = 0;
        for (int k = 0; k < n; k++) seen |= !strcmp(out[k], f);
        if (!seen) snprintf(out[n++], 32, "%s", f);
    }
    return n;
}

/* The left column of an entry line of a help text (an indented line that starts with a flag): from its
 * first flag to the first run of three spaces; NULL when l is not an entry line. */
static const char *entry_column(const char *l, const char **end) {
    const char *s = l, *eol = strchr(l, '\n');
    while (*s == ' ') s++;
    if (s == l || strncmp(s, "--", 2)) return NULL;
    *end = strstr(s, "   ");
    if (!*end || (eol && *end > eol)) *end = eol ? eol : s + strlen(s);
    return s;
}

/* The flags with an entry in a help text: those in the left column of its entry lines. */
static int help_flags(const char *help, char out[][32], int cap) {
    int n = 0;
    for (const char *l = help; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
        const char *end, *s = entry_column(l, &end);
        if (s) n = text_flags(s, end, out, n, cap);
    }
    return n;
}

/* Whether flag has an entry in a help text. */
static int has_entry(const char *help, const char *flag) {
    char flags[128][32];
    int n = help_flags(help, flags, 128);
    for (int k = 0; k < n; k++)
        if (!strcmp(flags[k], flag)) return 1;
    return 0;
}

static void test_help_matches_the_commands(void) {
    static char help[65536], out[8192];
    char flags[128][32];
    for (size_t c = 0; c < NCMDS; c++) {
        int rc = h_sh(help, sizeof help, "%s %s --help", g_bin, CMDS[c].cmd);
        CHECK(rc == 0 && strstr(help, "usage"), "%s --help: rc %d: %.200s", CMDS[c].cmd, rc, help);
        int n = help_flags(help, flags, 128);
        for (int k = 0; k < n; k++) {
            if (!strcmp(flags[k], "--help") || !strcmp(flags[k], "--json") || !strcmp(flags[k], "--quiet") ||
                !strcmp(flags[k], "--overwrite") || !strcmp(flags[k], "--strategy") || !strcmp(flags[k], "--nesterov") ||
                !strcmp(flags[k], "--fp8-e4m3-all") || !strcmp(flags[k], "--report-only"))
                continue;
            char args[1024];
            expand(CMDS[c].needs, args, sizeof args);
            rc = h_sh(out, sizeof out, "%s %s %s %s", g_bin, CMDS[c].cmd, args, flags[k]);
            CHECK(rc == 2 && strstr(out, "needs a value") && strstr(out, flags[k]) && one_prefix(CMDS[c].cmd, out),
                  "%s --help lists %s, which the command does not take as a flag with a value: rc %d: %s", CMDS[c].cmd,
                  flags[k], rc, out);
        }
        /* every flag of a usage line has its own entry */
        const char *u = strstr(help, "usage:"), *body = u ? strstr(u, "\n  -") : NULL;
        char usage[2048] = "";
        if (u) snprintf(usage, sizeof usage, "%.*s", (int)((body ? body : u + strlen(u)) - u), u);
        n = text_flags(usage, NULL, flags, 0, 128);
        for (int k = 0; k < n; k++)
            CHECK(has_entry(help, flags[k]), "%s --help: %s is in the usage line but has no entry", CMDS[c].cmd, flags[k]);
    }
    /* train's help states the shape flags' ranges, the ones it enforces */
    h_sh(help, sizeof help, "%s train --help", g_bin);
    const char *shape[] = {"--layers", "--heads", "--dim", "--kv-heads", "--hidden"};
    for (int i = 0; i < 5; i++) {
        h_sh(out, sizeof out, "%s train --data %s %s 0", g_bin, g_text, shape[i]);
        const char *r = strstr(out, "it takes ");
        char range[64] = "";
        if (r) snprintf(range, sizeof range, "%.*s", (int)strcspn(r + 9, "\n"), r + 9);
        CHECK(range[0] && strstr(help, range), "train --help lacks %s's range '%s': %s", shape[i], range, out);
    }
    /* the top-level help: sample and export are not GPT-2 only */
    h_sh(help, sizeof help, "%s --help", g_bin);
    CHECK(strstr(help, "GPT-2 or LLaMA checkpoint") && strstr(help, "LlamaForCausalLM") && strstr(help, "BertForMaskedLM"),
          "collage --help: %s", help);
    /* --kv-heads and --hidden: LLaMA's; the other families refuse them by name */
    static const bad_case family[] = {
        {"train", TRAIN_BERT " --data TEXT --steps 1 --kv-heads 1", 2, {"--kv-heads with --model bert-tiny"}},
        {"train", TRAIN_BERT " --data TEXT --steps 1 --hidden 64", 2, {"--hidden with --model bert-tiny"}},
        {"train", TRAIN " --data TEXT --steps 1 --kv-heads 1", 2, {"--kv-heads with --model tiny"}},
        {"train", TRAIN " --data TEXT --steps 1 --hidden 64", 2, {"--hidden with --model tiny"}},
    };
    for (size_t i = 0; i < sizeof family / sizeof *family; i++) run_case(&family[i], 0);
    int rc = h_sh(out, sizeof out, "%s train --model llama-tiny --layers 1 --dim 32 --heads 2 --kv-heads 1 --hidden 64 "
                  "--batch 4 --seq 16 --threads 1 --data %s --steps 1", g_bin, g_text);
    CHECK(rc == 0 && strstr(out, " 1 thread\n") && strstr(out, "schedule: 1 step,") && !strstr(out, "1 threads") &&
              !strstr(out, " 1 steps"), "llama --kv-heads --hidden: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s eval --checkpoint %s --data %s --batch 2 --seq 16 --batches 1", g_bin, g_ck, g_text);
    CHECK(rc == 0 && strstr(out, ": 1 batch, 32 tokens of "), "eval of one batch: rc %d: %s", rc, out);
}

/* fill takes --help and --threads like every command that computes */
static void test_fill_help_and_threads(void) {
    char out[8192];
    int rc = h_sh(out, sizeof out, "%s fill --help", g_bin);
    CHECK(rc == 0 && strstr(out, "usage: collage fill") && strstr(out, "--threads"), "fill --help: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s fill --checkpoint %s --text 'a[MASK]' --threads 1 --top 2", g_bin, g_bert);
    CHECK(rc == 0 && strstr(out, "[MASK] at token 1:"), "fill --threads 1: rc %d: %s", rc, out);
    bad_case t = {"fill", "--checkpoint BERT --text 'a[MASK]' --threads 0", 2, {"--threads 0: it takes 1 to"}};
    run_case(&t, 0);
}

/* ---------------------------------------------------------------- class 9 */
/* Which optimizer reads which flag (train_flags.c's table); the other optimizers refuse it. */
static const struct { const char *flag, *readers; } UPDATE_FLAGS[] = {
    {"--beta1 0.8", "adamw lion"}, {"--beta2 0.9", "adamw lion"}, {"--eps 1e-6", "adamw"},
    {"--momentum 0.8", "sgd"}, {"--nesterov", "sgd"},
};
static const char *const OPTIMIZERS[] = {"adamw", "lion", "sgd"};

/* Nothing silently ignored (issue 47): every flag × optimizer that does not read it exits 2 before anything is
 * written, naming the flag and the optimizer, with a hint; every reader takes it and trains; --loss-scale
 * with a strategy that does not scale its loss; a resumed run checks against its checkpoint's optimizer and
 * strategy; compare and bench refuse the same. */
static void test_unread_flags_refused(void) {
    char args[1024], say_flag[64], say_opt[64], out[8192];
    for (size_t f = 0; f < sizeof UPDATE_FLAGS / sizeof *UPDATE_FLAGS; f++)
        for (int k = 0; k < 3; k++) {
            char flag[32];
            sscanf(UPDATE_FLAGS[f].flag, "%31s", flag);
            snprintf(args, sizeof args, TRAIN " --data TEXT --steps 1 --save DIR/unread --optimizer %s %s", OPTIMIZERS[k],
                     UPDATE_FLAGS[f].flag);
            if (strstr(UPDATE_FLAGS[f].readers, OPTIMIZERS[k])) { /* a reader: the run trains */
                char a[2048];
                expand(args, a, sizeof a);
                int rc = h_sh(out, sizeof out, "cd %s && %s train %s --quiet", g_work, g_bin, a);
                CHECK(rc == 0, "train --optimizer %s %s: rc %d: %s", OPTIMIZERS[k], UPDATE_FLAGS[f].flag, rc, out);
                h_sh(NULL, 0, "rm -rf %s/unread", g_folder);
                continue;
            }
            snprintf(say_flag, sizeof say_flag, "%s with --optimizer %s", flag, OPTIMIZERS[k]);
            snprintf(say_opt, sizeof say_opt, "hint: drop %s", flag);
            bad_case c = {"train", args, 2, {say_flag, say_opt, "does not read"}};
            run_case(&c, 1);
        }
    static const bad_case refused[] = {
        {"train", TRAIN " --data TEXT --steps 1 --loss-scale 1024", 2, {"--loss-scale with --precision collage-light",
                                                                       "hint: drop --loss-scale"}},
        {"train", TRAIN " --data TEXT --steps 1 --precision bf16 --loss-scale 1024", 2, {"--loss-scale with --precision bf16"}},
        {"train", TRAIN " --data TEXT --steps 1 --precision fp32 --loss-scale 1024", 2, {"--loss-scale with --precision fp32"}},
        /* a resumed run: its checkpoint's optimizer (adamw) and strategy (collage-light) */
        {"train", "--data TEXT --threads 1 --resume CK --steps 4 --momentum 0.9", 2,
         {"--momentum with --resume CK", "--optimizer adamw", "hint: drop --momentum"}},
        {"train", "--data TEXT --threads 1 --resume CK --steps 4 --nesterov", 2, {"--nesterov with --resume", "adamw"}},
        {"train", "--data TEXT --threads 1 --resume CK --steps 4 --loss-scale 1024", 2,
         {"--loss-scale with --resume", "--precision collage-light"}},
        {"compare", "--out DIR/c --data TEXT --steps 1 --optimizer sgd --beta2 0.9", 2, {"--beta2 with --optimizer sgd"}},
        {"compare", "--out DIR/c --data TEXT --steps 1 --optimizer lion --eps 1e-6", 2, {"--eps with --optimizer lion"}},
        {"compare", "--out DIR/c --data TEXT --steps 1 --momentum 0.5", 2, {"--momentum with --optimizer adamw"}},
        {"compare", "--out DIR/c --data TEXT --steps 1 --nesterov", 2, {"--nesterov with --optimizer adamw"}},
        {"compare", "--out DIR/c --data TEXT --steps 1 --precision bf16,fp32 --loss-scale 512", 2, {"--loss-scale", "fp16"}},
        {"bench optimizer", "--optimizer sgd --beta2 0.9", 2, {"--beta2 with --optimizer sgd"}},
        {"bench model", "--fp8-recipe current --steps 1", 2, {"--fp8-recipe", "without --compute fp8"}},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) run_case(&refused[i], 1);
    /* an fp16 run resumed: the scale is its checkpoint's */
    char run[600];
    snprintf(run, sizeof run, "%s/fp16", g_dir);
    int rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN " --precision fp16 --eps 1e-4 --loss-scale 1024 --steps 1 "
                  "--save %s --quiet", g_bin, g_text, run);
    CHECK(rc == 0, "train --precision fp16 --loss-scale 1024: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s train --data %s --threads 1 --resume %s --steps 2 --loss-scale 1024", g_bin, g_text, run);
    CHECK(rc == 2 && strstr(out, "--loss-scale with --resume") && strstr(out, "loss scale its checkpoint carries (1024)"),
          "fp16 resumed with --loss-scale: rc %d: %s", rc, out);
    /* compare under SGD passes neither --beta2 nor --eps, which it does not read; --loss-scale reaches the fp16 runs */
    snprintf(run, sizeof run, "%s/cmp-sgd", g_dir);
    rc = h_sh(out, sizeof out, "%s compare --optimizer sgd --precision bf16,fp16 --loss-scale 512 --steps 1 --jobs 1 "
              "--threads 1 --data %s --out %s --model tiny --layers 1 --dim 32 --heads 2 --batch 4 --seq 16", g_bin, g_text, run);
    char bf16[8192] = "", fp16[8192] = "";
    h_sh(bf16, sizeof bf16, "cat %s/*/bf16*/args.txt 2>/dev/null || cat %s/bf16*/args.txt", run, run);
    h_sh(fp16, sizeof fp16, "cat %s/*/fp16*/args.txt 2>/dev/null || cat %s/fp16*/args.txt", run, run);
    CHECK(rc == 0 && strstr(bf16, "--optimizer sgd") && !strstr(bf16, "--beta2") && !strstr(bf16, "--eps") &&
              !strstr(bf16, "--loss-scale") && strstr(fp16, "--loss-scale 512"),
          "compare --optimizer sgd: rc %d: %s\nbf16: %s\nfp16: %s", rc, out, bf16, fp16);
}

/* Messages that point the right way: a GPT-2 shard read with the byte tokenizer names --tokenizer gpt2 (not
 * the vocabulary's installation), a damaged shard is named as one, --seq beyond a model file's context names
 * the context, --init beside a shape flag names that flag. */
static void test_messages_point_the_right_way(void) {
    char path[600], out[8192], ckdir[1024], model[1200];
    h_checkpoint(g_ck, ckdir, sizeof ckdir); /* its model file, as --init takes one */
    snprintf(model, sizeof model, "%s/model.bin", ckdir);
    snprintf(path, sizeof path, "%s/model.bin", g_dir);
    CHECK(h_sh(out, sizeof out, "cp %s %s", model, path) == 0, "cp %s: %s", model, out);
    struct { const char *name; unsigned vocab, ntok, file_tokens, id; } shards[] = {
        {"gpt2.bin", 50257, 4096, 4096, 30000}, /* collage tokenize --tokenizer gpt2's header */
        {"llmc.bin", 0, 4096, 4096, 30000},     /* llm.c's: no vocabulary in the header */
        {"short.bin", 256, 4096, 100, 65},      /* damaged: fewer tokens than its header says */
        {"wild.bin", 50257, 4096, 4096, 60000}, /* damaged: an id beyond GPT-2's */
    };
    for (size_t i = 0; i < sizeof shards / sizeof *shards; i++) {
        snprintf(path, sizeof path, "%s/%s", g_dir, shards[i].name);
        FILE *f = fopen(path, "wb");
        int32_t h[256] = {20240520, 1, (int32_t)shards[i].ntok, (int32_t)shards[i].vocab};
        if (f) {
            fwrite(h, sizeof h, 1, f);
            for (unsigned k = 0; k < shards[i].file_tokens; k++) {
                uint16_t t = (uint16_t)(k % 2 ? shards[i].id : 65);
                fwrite(&t, 2, 1, f);
            }
            fclose(f);
        }
    }
    static const bad_case cases[] = {
        {"train", TRAIN " --steps 1 --data DIR/../gpt2.bin", 2, {"--data: ", "gpt2.bin", "hint: the shard holds gpt2 ids: --tokenizer gpt2"}},
        {"train", TRAIN " --steps 1 --data DIR/../llmc.bin", 2, {"llmc.bin", "outside the vocabulary", "--tokenizer gpt2"}},
        {"train", TRAIN " --steps 1 --data DIR/../short.bin", 1, {"short.bin", "truncated", "hint: the shard is damaged"}},
        {"eval", "--checkpoint CK --data DIR/../gpt2.bin", 1, {"gpt2.bin", "the model reads byte ones"}},
        {"train", "--data TEXT --threads 1 --steps 1 --init DIR/../model.bin --model tiny", 2,
         {"--model with --init", "hint: drop --model"}},
        {"train", "--data TEXT --threads 1 --steps 1 --init DIR/../model.bin --layers 2", 2, {"--layers with --init"}},
        {"train", "--data TEXT --threads 1 --steps 1 --optimizer sgd --momentum 0 --nesterov", 2,
         {"nesterov", "hint: --nesterov takes a --momentum above 0"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        run_case(&cases[i], 0);
        char args[2048];
        expand(cases[i].args, args, sizeof args);
        h_sh(out, sizeof out, "%s %s %s", g_bin, cases[i].cmd, args);
        CHECK(!strstr(out, "gpt2-vocab") && !strstr(out, "setup.sh") && !strstr(out, "the shape flags"),
              "%s %s: a hint that does not fit: %s", cases[i].cmd, cases[i].args, out);
    }
    /* a shard of GPT-2 ids with a damaged id, read as GPT-2's: named as damaged (when the vocabulary is here) */
    int rc = h_sh(out, sizeof out, "%s train " TRAIN " --steps 1 --tokenizer gpt2 --data %s/wild.bin", g_bin, g_dir);
    if (!strstr(out, "encoder.json"))
        CHECK(rc == 1 && strstr(out, "wild.bin") && strstr(out, "beyond GPT-2's 50257: the shard is damaged"),
              "a damaged GPT-2 shard: rc %d: %s", rc, out);
    else printf("    the GPT-2 vocabulary is not installed: the damaged GPT-2 shard is not checked\n");
    /* --seq beyond the context of a model file: the context is named, not the shape flags */
    rc = h_sh(out, sizeof out, "%s train --data %s --threads 1 --steps 1 --batch 4 --seq 5000 --init %s", g_bin, g_text, model);
    CHECK(rc == 2 && strstr(out, "--seq 5000") && strstr(out, "beyond the context of the model in") &&
              !strstr(out, "the shape flags"), "--seq beyond --init's context: rc %d: %s", rc, out);
}

int main(void) {
    if (h_cli_setup("cli-input", g_bin, g_dir, g_text, 3)) return 1;
    char abs[1024];
    if (g_bin[0] != '/' && realpath(g_bin, abs)) snprintf(g_bin, sizeof g_bin, "%s", abs);
    snprintf(g_work, sizeof g_work, "%s/work", g_dir);
    snprintf(g_ck, sizeof g_ck, "%s/ck", g_dir);
    snprintf(g_bert, sizeof g_bert, "%s/bert", g_dir);
    snprintf(g_file, sizeof g_file, "%s/a-file", g_dir);
    snprintf(g_folder, sizeof g_folder, "%s/a-folder", g_dir);
    snprintf(g_missing, sizeof g_missing, "%s/missing", g_dir);
    mkdir(g_work, 0755);
    mkdir(g_folder, 0755);
    FILE *f = fopen(g_file, "w");
    if (f) { fputs("a file\n", f); fclose(f); }
    char out[8192];
    int rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN " --steps 3 --save %s --quiet", g_bin, g_text, g_ck);
    rc |= h_sh(out, sizeof out, "%s train --data %s " TRAIN_BERT " --steps 2 --save %s --quiet", g_bin, g_text, g_bert);
    if (rc) { printf("test_cli_input: the checkpoints could not be made: %s\n0 passed, 1 failed\n", out); return 1; }
    printf("test_cli_input: %s, data in %s\n", g_bin, g_dir);
    RUN(test_empty_and_odd_paths);
    RUN(test_output_names_the_data);
    RUN(test_messages_tell_the_truth);
    RUN(test_resume_and_schedules);
    RUN(test_process_name);
    RUN(test_mpi);
    RUN(test_help_matches_the_commands);
    RUN(test_fill_help_and_threads);
    RUN(test_unread_flags_refused);
    RUN(test_messages_point_the_right_way);
    h_rm_rf(g_dir);
    return h_end();
}
