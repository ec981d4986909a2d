/* test_cli.c — the `collage` command end to end: train writes its JSON log and an llm.c checkpoint,
 * N steps + a resumed N steps print exactly the losses of one 2N-step run, eval and sample read the
 * checkpoint, tokenize writes a shard that train reads, and bad input (missing file, bad flag, bad
 * shape, wrong magic) fails with a message naming the problem and leaves no partial checkpoint. The
 * LLaMA family through every command: train, resume, eval, sample, train --init from its llama2.c
 * file, bench model. A BERT (--model bert-tiny) trains with masked-LM validation, resumes exactly, is
 * evaluated on a fixed mask, fills masks and refuses to sample, learns (masked-token accuracy far above
 * the most common byte's frequency in 400 steps), and its bad input (a text longer than the context, a
 * corpus too short for a batch, a checkpoint of the other family) is named in one line. */
#include "harness.h"
#include "collage.h"
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TRAIN "--model tiny --layers 1 --dim 32 --heads 2 --batch 4 --seq 16 --threads 1 --quiet"
#define TRAIN_BERT "--model bert-tiny --layers 1 --dim 32 --heads 2 --batch 4 --seq 16 --threads 1 --quiet"

static char g_bin[1024], g_dir[256], g_text[512];


static void test_train_log_and_checkpoint(void) {
    char out[8192], log[600], save[600];
    snprintf(log, sizeof log, "%s/a.jsonl", g_dir);
    snprintf(save, sizeof save, "%s/ckpt", g_dir);
    int rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN " --steps 12 --eval-every 4 --log %s --save %s", g_bin,
                 g_text, log, save);
    CHECK(rc == 0, "train exited %d: %s", rc, out);
    FILE *f = fopen(log, "r");
    CHECK(f != NULL, "no log %s", log);
    if (f) {
        char line[2048];
        int lines = 0, vals = 0;
        const char *keys[] = {"\"step\":", "\"loss\":", "\"lr\":", "\"grad_norm\":", "\"edq\":", "\"edq_ratio\":",
                              "\"lost\":", "\"tokens_per_s\":", "\"ms\":"};
        while (fgets(line, sizeof line, f)) {
            lines++;
            for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
                CHECK(strstr(line, keys[k]) != NULL, "log line %d lacks %s: %s", lines, keys[k], line);
            vals += strstr(line, "\"val_loss\":") != NULL;
        }
        fclose(f);
        CHECK(lines == 12, "%d log lines", lines);
        CHECK(vals == 3, "%d eval lines (every 4 of 12 steps)", vals);
    }
    double loss[64];
    int n = h_read_losses(log, loss, 64);
    CHECK(n == 12 && loss[11] < loss[0], "loss did not fall: %g -> %g", n ? loss[0] : 0.0, n ? loss[n - 1] : 0.0);
    /* llm.c header: magic 20240326, version 3 (fp32), and the file size matches the header */
    char model[1200], ck[1024];
    CHECK(h_checkpoint(save, ck, sizeof ck) == 2, "%s: not the 2 newest of its checkpoints (--keep 2)", save);
    snprintf(model, sizeof model, "%s/model.bin", ck);
    f = fopen(model, "rb");
    CHECK(f != NULL, "no %s", model);
    if (f) {
        int32_t h[256];
        CHECK(fread(h, sizeof h, 1, f) == 1, "short header");
        CHECK(h[0] == 20240326 && h[1] == 3, "header %d %d", h[0], h[1]);
        CHECK(h[3] == 256 && h[4] == 1 && h[5] == 2 && h[6] == 32 && h[7] == 256, "shape V%d L%d NH%d C%d Vp%d", h[3], h[4],
              h[5], h[6], h[7]);
        fclose(f);
    }
    rc = h_sh(out, sizeof out, "%s eval --checkpoint %s --data %s --batch 2 --seq 16 --batches 3 --json", g_bin, save, g_text);
    CHECK(rc == 0 && strstr(out, "\"loss\":") && strstr(out, "\"tokens\":96"), "eval: rc %d: %s", rc, out);
    /* llm.c's bf16 checkpoints (version 5) load too: the same weights, rounded to bf16 by hand */
    char v5[700];
    snprintf(v5, sizeof v5, "%s/model_v5.bin", g_dir);
    FILE *in = fopen(model, "rb"), *o5 = fopen(v5, "wb");
    if (in && o5) {
        int32_t h[256];
        if (fread(h, sizeof h, 1, in) == 1) {
            h[1] = 5;
            fwrite(h, sizeof h, 1, o5);
            float x;
            while (fread(&x, 4, 1, in) == 1) {
                uint32_t u;
                memcpy(&u, &x, 4);
                uint16_t b = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); /* weights are bf16 values: exact */
                fwrite(&b, 2, 1, o5);
            }
        }
    }
    if (in) fclose(in);
    if (o5) fclose(o5);
    char out5[8192];
    rc = h_sh(out5, sizeof out5, "%s eval --checkpoint %s --data %s --batch 2 --seq 16 --batches 3 --json", g_bin, v5, g_text);
    CHECK(rc == 0 && strcmp(out5, out) == 0, "version-5 checkpoint: rc %d: %s vs %s", rc, out5, out);
    char s1[4096], s2[4096];
    rc = h_sh(s1, sizeof s1, "%s sample --checkpoint %s --prompt 'The ' --tokens 20 --seed 3", g_bin, save);
    CHECK(rc == 0 && strncmp(s1, "The ", 4) == 0 && strlen(s1) >= 24, "sample: rc %d: %s", rc, s1);
    h_sh(s2, sizeof s2, "%s sample --checkpoint %s --prompt 'The ' --tokens 20 --seed 3", g_bin, save);
    CHECK(strcmp(s1, s2) == 0, "sample not reproducible for a seed");
}

/* A run of 2N steps and a run of N steps resumed for N more print identical losses. */
static void test_exact_resume(void) {
    char out[8192], la[600], lb[600], save[600];
    snprintf(la, sizeof la, "%s/full.jsonl", g_dir);
    snprintf(lb, sizeof lb, "%s/half.jsonl", g_dir);
    snprintf(save, sizeof save, "%s/half", g_dir);
    const char *strategies[] = {"collage-plus", "bf16-sr", "fp32"};
    for (int s = 0; s < 3; s++) {
        unlink(la); unlink(lb);
        int rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN " --precision %s --steps 10 --log %s", g_bin, g_text,
                     strategies[s], la);
        CHECK(rc == 0, "%s full run: %s", strategies[s], out);
        rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN " --precision %s --steps 10 --stop-after 5 --save %s "
                 "--overwrite --log %s", g_bin, g_text, strategies[s], save, lb);
        CHECK(rc == 0, "%s first half: %s", strategies[s], out);
        if (s == 0) { /* a flag that shapes the run, given with another value than the saved run's: refused */
            rc = h_sh(out, sizeof out, "%s train --data %s --threads 1 --quiet --precision %s --batch 3 --resume %s",
                      g_bin, g_text, strategies[s], save);
            CHECK(rc != 0 && strstr(out, "--batch 3") && strstr(out, save) && strstr(out, "hint"),
                  "resume with another --batch: rc %d: %s", rc, out);
            /* a setting that may change: taken, with a note naming both values */
            rc = h_sh(out, sizeof out, "%s train --data %s --threads 1 --precision %s --lr 0.5 --stop-after 6 --resume %s",
                      g_bin, g_text, strategies[s], save);
            CHECK(rc == 0 && strstr(out, "--lr 0.5 (the saved run's 0.001)") && strstr(out, "from step 6"),
                  "resume with another --lr: rc %d: %s", rc, out);
            rc = h_sh(out, sizeof out, "%s train --data %s --threads 1 --quiet --precision %s --model gpt2 --resume %s",
                      g_bin, g_text, strategies[s], save);
            CHECK(rc != 0 && strstr(out, "--model gpt2"), "resume with another --model: rc %d: %s", rc, out);
        }
        /* the same values given again are accepted (here: the flags of TRAIN) */
        rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN " --precision %s --resume %s --log %s", g_bin, g_text,
                 strategies[s], save, lb);
        CHECK(rc == 0, "%s resumed half: %s", strategies[s], out);
        double a[32], b[32];
        int na = h_read_losses(la, a, 32), nb = h_read_losses(lb, b, 32);
        CHECK(na == 10 && nb == 10, "%s: %d and %d log lines", strategies[s], na, nb);
        for (int i = 0; i < na && i < nb; i++)
            CHECK(a[i] == b[i], "%s step %d: %.6f vs resumed %.6f", strategies[s], i + 1, a[i], b[i]);
    }
}

#define TRAIN_LLAMA "--model llama-tiny --layers 1 --dim 32 --heads 4 --kv-heads 2 --batch 4 --seq 16 --threads 1 --quiet"

/* --model llama-tiny through the commands: 6 steps equal 3 + 3 resumed (the flags given again are
 * accepted); eval and sample read its llama2.c file; --init starts a run from it and refuses a preset
 * beside it. */
static void test_llama_commands(void) {
    char out[8192], la[600], lb[600], save[600], ck[1024], model[1100];
    snprintf(la, sizeof la, "%s/llama-full.jsonl", g_dir);
    snprintf(lb, sizeof lb, "%s/llama-half.jsonl", g_dir);
    snprintf(save, sizeof save, "%s/llama", g_dir);
    int rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN_LLAMA " --precision collage-light --steps 6 --log %s", g_bin,
                  g_text, la);
    CHECK(rc == 0, "llama run: %s", out);
    rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN_LLAMA " --precision collage-light --steps 6 --stop-after 3 "
              "--save %s --log %s", g_bin, g_text, save, lb);
    CHECK(rc == 0, "llama first half: %s", out);
    rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN_LLAMA " --precision collage-light --resume %s --log %s", g_bin,
              g_text, save, lb);
    CHECK(rc == 0, "llama resumed: %s", out);
    double a[8], b[8];
    int na = h_read_losses(la, a, 8), nb = h_read_losses(lb, b, 8);
    CHECK(na == 6 && nb == 6, "%d and %d log lines", na, nb);
    for (int i = 0; i < na && i < nb; i++) CHECK(a[i] == b[i], "llama step %d: %.6f vs resumed %.6f", i + 1, a[i], b[i]);
    rc = h_sh(out, sizeof out, "%s train --data %s --threads 1 --quiet --kv-heads 4 --resume %s", g_bin, g_text, save);
    CHECK(rc != 0 && strstr(out, "--kv-heads 4"), "resume with another --kv-heads: rc %d: %s", rc, out);
    h_checkpoint(save, ck, sizeof ck);
    snprintf(model, sizeof model, "%s/model.bin", ck);
    FILE *f = fopen(model, "rb");
    int32_t h[7] = {0};
    CHECK(f && fread(h, sizeof h, 1, f) == 1, "no %s", model);
    if (f) fclose(f);
    CHECK(h[0] == 32 && h[2] == 1 && h[3] == 4 && h[4] == 2 && h[5] == 256 && h[6] == 64,
          "llama2.c header: dim %d hidden %d layers %d heads %d kv %d vocab %d seq %d", h[0], h[1], h[2], h[3], h[4], h[5], h[6]);
    rc = h_sh(out, sizeof out, "%s eval --checkpoint %s --data %s --batch 2 --seq 16 --batches 3 --json", g_bin, model, g_text);
    CHECK(rc == 0 && strstr(out, "\"loss\":") && strstr(out, "\"tokens\":96"), "eval: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s sample --checkpoint %s --prompt 'The ' --tokens 20 --seed 3", g_bin, save);
    CHECK(rc == 0 && strncmp(out, "The ", 4) == 0 && strlen(out) >= 24, "sample: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s train --data %s --init %s --batch 4 --seq 16 --steps 2 --threads 1", g_bin, g_text, model);
    CHECK(rc == 0 && strstr(out, "llama") && strstr(out, "done:"), "train --init: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s train --data %s --init %s --model llama-small --steps 2 --quiet", g_bin, g_text, model);
    CHECK(rc == 2 && strstr(out, "model.bin") && strstr(out, "hint"), "--init with --model: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s train --data %s --init %s --resume %s --quiet", g_bin, g_text, model, save);
    CHECK(rc != 0 && strstr(out, "--init") && strstr(out, "hint"), "--init with --resume: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s bench model --model llama-tiny --steps 1 --warmup 0 --strategy collage-light --json", g_bin);
    CHECK(rc == 0 && strstr(out, "\"model\":\"llama-tiny\"") && strstr(out, "\"strategy\":\"collage-light\""),
          "bench model --model llama-tiny: rc %d: %s", rc, out);
}

static void test_tokenize_then_train_on_shard(void) {
    char out[8192], shard[600];
    snprintf(shard, sizeof shard, "%s/text.bin", g_dir);
    int rc = h_sh(out, sizeof out, "%s tokenize --tokenizer byte --in %s --out %s", g_bin, g_text, shard);
    CHECK(rc == 0, "tokenize: %s", out);
    struct stat sb, st;
    CHECK(stat(shard, &sb) == 0 && stat(g_text, &st) == 0 && sb.st_size == 1024 + 2 * st.st_size,
          "shard size %lld for %lld text bytes", (long long)sb.st_size, (long long)st.st_size);
    rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN " --steps 3", g_bin, shard);
    CHECK(rc == 0, "train on shard: %s", out);
}

/* Integer flags out of their range are refused before anything runs, naming the flag: --eval-every 0
 * would divide by zero, --threads 100000 exhaust OpenMP, a shape of 0 silently mean the preset's. */
static void test_flag_ranges(void) {
    static const char *const bad[] = {"--eval-every 0", "--threads 100000", "--threads 0", "--seq 0", "--layers 0",
                                      "--heads 0", "--dim 0", "--batch 0", "--accum 0", "--stop-after 0", "--keep 0",
                                      "--max-skips 0", "--lr -1", "--beta1 0", "--beta2 1", "--eps 0", "--wd -0.1",
                                      "--clip -1", "--lr nan"};
    char out[4096];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN " --steps 2 %s", g_bin, g_text, bad[i]);
        char flag[32];
        snprintf(flag, sizeof flag, "%.*s", (int)strcspn(bad[i], " "), bad[i]);
        CHECK(rc == 2 && strstr(out, flag) && strstr(out, "hint"), "%s: rc %d: %s", bad[i], rc, out);
    }
    /* the range is stated: the threads' bound from the cores, an interval for the betas */
    int rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN " --steps 2 --threads 100000", g_bin, g_text);
    CHECK(rc == 2 && strstr(out, "--threads 100000: it takes 1 to ") && strstr(out, "cores"), "threads: %s", out);
    rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN " --steps 2 --beta2 1", g_bin, g_text);
    CHECK(rc == 2 && strstr(out, "--beta2 1: it takes a number in (0, 1)"), "beta2: %s", out);
    rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN " --steps 2 --save-every 5", g_bin, g_text);
    CHECK(rc == 2 && strstr(out, "--save-every without --save"), "--save-every alone: %s", out);
    /* the other commands: each flag by itself */
    const char *others[] = {"eval --checkpoint x --batches 0", "sample --checkpoint x --tokens 0", "eval --checkpoint x --threads 0",
                            "compare --jobs 0", "compare --seeds 99", "bench model --batch 0", "bench optimizer --reps 0",
                            "bench convert --threads 100000", "sample --checkpoint x --temperature -1"};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
        const char *flag = others[i]; /* the last flag */
        for (const char *q = strstr(flag, " --"); q; q = strstr(q + 1, " --")) flag = q + 1;
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)strcspn(flag, " "), flag);
        rc = h_sh(out, sizeof out, "%s %s", g_bin, others[i]);
        CHECK(rc == 2 && strstr(out, name), "%s: rc %d: %s", others[i], rc, out);
    }
}

/* One grammar: --help on every command and subcommand, --precision everywhere (--strategy taken with a
 * note), --threads on every command that computes, eval on the held-out split by default. */
static void test_one_grammar(void) {
    static char out[65536];
    const char *helps[] = {"train --help", "eval --help", "sample --help", "compare --help", "tokenize --help",
                           "bench --help", "bench convert --help", "bench optimizer --help", "bench model --help", "--help"};
    for (size_t i = 0; i < sizeof helps / sizeof *helps; i++) {
        int rc = h_sh(out, sizeof out, "%s %s", g_bin, helps[i]);
        CHECK(rc == 0 && strstr(out, "usage"), "%s: rc %d: %.200s", helps[i], rc, out);
    }
    h_sh(out, sizeof out, "%s bench --help", g_bin);
    CHECK(strstr(out, "convert") && strstr(out, "optimizer") && strstr(out, "model"), "bench --help: %s", out);
    int rc = h_sh(out, sizeof out, "%s bench optimizer --params 8K --threads 1 --reps 1 --precision bf16 --json", g_bin);
    CHECK(rc == 0 && strstr(out, "\"strategy\":\"bf16\""), "bench optimizer --precision: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s bench optimizer --params 8K --threads 1 --reps 1 --strategy bf16 --json", g_bin);
    CHECK(rc == 0 && strstr(out, "--strategy is spelled --precision"), "bench optimizer --strategy: rc %d: %s", rc, out);
    { /* every preset, fp16 ones included, and the frontier's 8-bit compositions (bench.c BENCH_COMPOSED, 9): a row each */
        static char all[65536];
        rc = h_sh(all, sizeof all, "%s bench optimizer --params 8K --threads 1 --reps 1 --json", g_bin);
        int rows = 0;
        for (const char *p = all; (p = strstr(p, "\"strategy\":")); p++) rows++;
        CHECK(rc == 0 && rows == COLLAGE_STRATEGY_COUNT + 9 && strstr(all, "\"strategy\":\"fp16\"") &&
                  strstr(all, "\"strategy\":\"collage-light+m=int8,v=int8\"") && strstr(all, "\"strategy\":\"eco+m=int8,v=int8\""),
              "bench optimizer: rc %d, %d rows: %.300s", rc, rows, all);
        rc = h_sh(out, sizeof out, "%s bench optimizer --params 8K --threads 1 --reps 1 --precision bf16-sr+m=e4m3,v=int8 --json",
                  g_bin);
        CHECK(rc == 0 && strstr(out, "\"strategy\":\"bf16-sr+m=e4m3,v=int8\""), "a composition: rc %d: %s", rc, out);
    }
    rc = h_sh(out, sizeof out, "%s bench model --model tiny --steps 1 --warmup 0 --threads 1 --precision bf16 --json", g_bin);
    CHECK(rc == 0 && strstr(out, "\"strategy\":\"bf16\""), "bench model --threads --precision: rc %d: %s", rc, out);
    char save[600];
    snprintf(save, sizeof save, "%s/grammar", g_dir);
    rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN " --steps 2 --strategy fp32 --save %s", g_bin, g_text, save);
    CHECK(rc == 0 && strstr(out, "--strategy is spelled --precision"), "train --strategy: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s eval --checkpoint %s --data %s --batch 2 --seq 16 --batches 3 --threads 1", g_bin, save, g_text);
    CHECK(rc == 0 && strstr(out, "on the held-out split (the last 10% of the data): 3 batches, 96 tokens"), "eval: rc %d: %s",
          rc, out);
    rc = h_sh(out, sizeof out, "%s eval --checkpoint %s --data %s --batch 2 --seq 16 --batches 3 --split train --json", g_bin,
              save, g_text);
    CHECK(rc == 0 && strstr(out, "\"split\":\"train\"") && strstr(out, "\"tokens\":96"), "eval --split train: %s", out);
    rc = h_sh(out, sizeof out, "%s sample --checkpoint %s --tokens 5 --threads 1", g_bin, save);
    CHECK(rc == 0, "sample --threads: rc %d: %s", rc, out);
}

/* A diverging run's log stays JSON: a non-finite loss or norm is null, never nan (test_survive checks
 * every line with a JSON parser). */
static void test_log_is_json_when_diverging(void) {
    char out[4096], log[600], line[4096];
    snprintf(log, sizeof log, "%s/diverge.jsonl", g_dir);
    int rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN " --steps 8 --lr 1e6 --log %s", g_bin, g_text, log);
    CHECK(rc == 3 && strstr(out, "diverged at step"), "rc %d: %s", rc, out);
    FILE *f = fopen(log, "r");
    int lines = 0, bad = 0, nulls = 0;
    while (f && fgets(line, sizeof line, f)) {
        lines++;
        if (strstr(line, "nan") || strstr(line, "inf")) bad++;
        if (strstr(line, "null")) nulls++;
    }
    if (f) fclose(f);
    CHECK(lines >= 1 && lines < 8 && bad == 0, "%d lines, %d with nan or inf", lines, bad);
    CHECK(nulls > 0, "lr 1e6 should have made some figure non-finite (%d lines with null)", nulls);
}

static void test_bad_input(void) {
    char out[8192], save[600], bad[600];
    int rc = h_sh(out, sizeof out, "%s train --data %s/missing.txt " TRAIN " --steps 2", g_bin, g_dir);
    CHECK(rc != 0 && strstr(out, "missing.txt"), "missing data file: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s train --bogus 3", g_bin);
    CHECK(rc == 2 && strstr(out, "--bogus") && strstr(out, "hint"), "unknown flag: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s train --data %s --dim 30 --heads 4 --steps 2 --quiet", g_bin, g_text);
    CHECK(rc != 0 && strstr(out, "divisible"), "bad shape: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN " --lr abc", g_bin, g_text);
    CHECK(rc == 2 && strstr(out, "--lr"), "bad number: rc %d: %s", rc, out);
    snprintf(bad, sizeof bad, "%s/bad.bin", g_dir);
    FILE *f = fopen(bad, "wb");
    if (f) { fputs("not a checkpoint, not a checkpoint, not a checkpoint", f); fclose(f); }
    rc = h_sh(out, sizeof out, "%s eval --checkpoint %s --data %s", g_bin, bad, g_text);
    CHECK(rc != 0 && strstr(out, "bad.bin"), "bad checkpoint: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s train --data %s --resume %s/nowhere --quiet", g_bin, g_text, g_dir);
    CHECK(rc != 0 && strstr(out, "nowhere"), "resume from nowhere: rc %d: %s", rc, out);
    /* a failing run (its data is missing), even one allowed to replace the checkpoint, leaves it as it was */
    snprintf(save, sizeof save, "%s/keep", g_dir);
    rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN " --steps 2 --save %s", g_bin, g_text, save);
    CHECK(rc == 0, "save: %s", out);
    char model[1200], ck[1024];
    h_checkpoint(save, ck, sizeof ck);
    snprintf(model, sizeof model, "%s/model.bin", ck);
    struct stat before, after;
    stat(model, &before);
    rc = h_sh(out, sizeof out, "%s train --data %s/missing.txt " TRAIN " --steps 2 --save %s --overwrite", g_bin, g_dir, save);
    CHECK(rc != 0 && stat(model, &after) == 0 && after.st_size == before.st_size && after.st_mtime == before.st_mtime,
          "a failed run touched %s", model);
    rc = h_sh(out, sizeof out, "find %s -name '*tmp*' | wc -l", save);
    CHECK(atoi(out) == 0, "temporary files left in %s: %s", save, out);
}

/* A BERT run through the command: its log and summary carry the validation's masked-token accuracy; 4 + 4
 * resumed steps print the losses of 8; eval reports the masked loss and accuracy; fill names its top
 * predictions; sample refuses an encoder; the bad inputs of a masked-LM run are named. */
static void test_bert(void) {
    char out[8192], log[600], save[600], sum[600], log2[600];
    snprintf(log, sizeof log, "%s/bert.jsonl", g_dir);
    snprintf(log2, sizeof log2, "%s/bert2.jsonl", g_dir);
    snprintf(save, sizeof save, "%s/bert-ck", g_dir);
    snprintf(sum, sizeof sum, "%s/bert-summary.json", g_dir);
    int rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN_BERT " --steps 8 --eval-every 4 --log %s --summary %s",
                  g_bin, g_text, log, sum);
    CHECK(rc == 0, "train: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN_BERT " --steps 8 --stop-after 4 --log %s --save %s", g_bin,
              g_text, log2, save);
    rc |= h_sh(out, sizeof out, "%s train --data %s --resume %s --log %s --threads 1 --quiet", g_bin, g_text, save, log2);
    CHECK(rc == 0, "train 4 + 4: %s", out);
    double a[16], b[16];
    int na = h_read_losses(log, a, 16), nb = h_read_losses(log2, b, 16);
    CHECK(na == 8 && nb == 8 && !memcmp(a, b, sizeof(double) * 8), "8 steps vs 4 + 4 resumed: %d and %d lines", na, nb);
    char line[4096] = "";
    FILE *f = fopen(sum, "r");
    if (f) { if (!fgets(line, sizeof line, f)) line[0] = 0; fclose(f); }
    CHECK(strstr(line, "\"val_accuracy\":"), "summary: %s", line);
    rc = h_sh(out, sizeof out, "grep -c val_accuracy %s", log);
    CHECK(atoi(out) == 2, "log lines with val_accuracy: %s", out);
    rc = h_sh(out, sizeof out, "%s eval --checkpoint %s --data %s --batch 2 --seq 16 --batches 3 --json", g_bin, save, g_text);
    CHECK(rc == 0 && strstr(out, "\"accuracy\":") && strstr(out, "\"masked\":"), "eval: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s fill --checkpoint %s --text 'The quick b[MASK]own fox' --top 3", g_bin, save);
    CHECK(rc == 0 && strstr(out, "[MASK] at token 11:") && strstr(out, "filled: The quick b"), "fill: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s fill --checkpoint %s --text 'a[MASK]b[MASK]' --json", g_bin, save);
    CHECK(rc == 0 && strstr(out, "{\"masks\":[{\"position\":1,") && strstr(out, "{\"position\":3,"), "fill --json: %s", out);
    rc = h_sh(out, sizeof out, "%s sample --checkpoint %s", g_bin, save);
    CHECK(rc == 2 && strstr(out, "encoder") && strstr(out, "does not generate") && strstr(out, "collage fill"), "sample: %s", out);
    /* bad input: a text longer than the context, evaluation on sequences longer than it, no mask, a corpus
     * too short for one batch, the other family's checkpoint to --resume, a GPT-2 checkpoint to fill */
    char longer[200] = ""; /* 135 bytes and the mask: 136 tokens, over bert-tiny's context of 128 */
    for (int i = 0; i < 27; i++) strcat(longer, "text ");
    rc = h_sh(out, sizeof out, "%s fill --checkpoint %s --text '%s[MASK]'", g_bin, save, longer);
    CHECK(rc == 2 && strstr(out, "136 tokens, longer than the model's context of 128"), "long text: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s eval --checkpoint %s --data %s --seq 200", g_bin, save, g_text);
    CHECK(rc != 0 && strstr(out, "--seq 200 exceeds the model's context 128") && strstr(out, "hint: --seq 128 or less"),
          "eval --seq over the context: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s fill --checkpoint %s --text 'no mask'", g_bin, save);
    CHECK(rc == 2 && strstr(out, "no [MASK]"), "no mask: rc %d: %s", rc, out);
    char tiny_text[600];
    snprintf(tiny_text, sizeof tiny_text, "%s/short.txt", g_dir);
    f = fopen(tiny_text, "w");
    if (f) { fputs("too short for a batch of four sequences of sixteen bytes\n", f); fclose(f); }
    rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN_BERT " --steps 2", g_bin, tiny_text);
    CHECK(rc != 0 && strstr(out, "short.txt") && strstr(out, "fewer than"), "short corpus: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN " --steps 9 --resume %s", g_bin, g_text, save);
    CHECK(rc != 0 && strstr(out, "--model tiny") && strstr(out, "a bert model"), "gpt2 over bert: rc %d: %s", rc, out);
    char gsave[600];
    snprintf(gsave, sizeof gsave, "%s/gpt-ck", g_dir);
    rc = h_sh(out, sizeof out, "%s train --data %s " TRAIN " --steps 1 --save %s", g_bin, g_text, gsave);
    rc |= h_sh(out, sizeof out, "%s train --data %s " TRAIN_BERT " --steps 3 --resume %s", g_bin, g_text, gsave);
    CHECK(rc != 0 && strstr(out, "--model bert-tiny") && strstr(out, "a gpt2 model"), "bert over gpt2: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s fill --checkpoint %s --text 'a[MASK]'", g_bin, gsave);
    CHECK(rc == 2 && strstr(out, "gpt2") && strstr(out, "collage sample"), "fill on gpt2: rc %d: %s", rc, out);
}

/* `collage train --model bert-tiny` learns: after LEARN_STEPS steps on the test corpus (four sentences in
 * random order; windows of 8 bytes, so that attention finds the neighbours early) the validation's masked
 * tokens are predicted right far more often than the most common byte of the validation text occurs. */
#define LEARN_STEPS 400
#define LEARN_FACTOR 2.0 /* accuracy over that byte's frequency, at least */
static void test_bert_learns(void) {
    if (getenv("COLLAGE_TEST_QUICK")) { /* 400 steps under a sanitizer: test_bert and test_bert's CLI rows run its code */
        printf("    COLLAGE_TEST_QUICK: not run (the plain suite runs it)\n");
        return;
    }
    char out[8192], sum[600];
    snprintf(sum, sizeof sum, "%s/bert-learn.json", g_dir);
    int rc = h_sh(out, sizeof out, "%s train --model bert-tiny --data %s --seq 8 --batch 32 --steps %d --eval-every %d "
                  "--precision collage-light --threads 1 --quiet --summary %s", g_bin, g_text, LEARN_STEPS, LEARN_STEPS, sum);
    CHECK(rc == 0, "train: rc %d: %s", rc, out);
    FILE *f = fopen(g_text, "rb");
    size_t n = 0, count[256] = {0}, top = 0;
    unsigned char *text = malloc(1 << 20);
    if (f && text) { n = fread(text, 1, 1 << 20, f); fclose(f); }
    for (size_t i = n - n / 10; i < n; i++) count[text[i]]++; /* the held-out tenth, as the loader cuts it */
    for (int b = 0; b < 256; b++) top = count[b] > top ? count[b] : top;
    free(text);
    const double freq = n ? (double)top / (double)(n / 10) : 1.0;
    char line[4096] = "";
    f = fopen(sum, "r");
    if (f) { if (!fgets(line, sizeof line, f)) line[0] = 0; fclose(f); }
    const char *p = strstr(line, "\"val_accuracy\":");
    const double acc = p ? strtod(p + 15, NULL) : 0;
    printf("    masked-token accuracy %.1f%% after %d steps; the most common validation byte is %.1f%% of them\n", 100 * acc,
           LEARN_STEPS, 100 * freq);
    CHECK(acc >= LEARN_FACTOR * freq, "accuracy %.3f, the most common byte's frequency %.3f: %s", acc, freq, line);
}

/* The benchmarks' JSON lines carry the documented keys (what is measured, not how fast: no timing is
 * asserted), and bad flags are refused. */
static int count_lines_with(const char *out, const char *const *keys, int nk) {
    int lines = 0;
    for (const char *p = out; p && *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len && p[0] == '{') {
            int all = 1;
            for (int k = 0; k < nk; k++) {
                char q[64];
                snprintf(q, sizeof q, "\"%s\":", keys[k]);
                const char *f = strstr(p, q);
                all &= f && f < p + len;
            }
            lines += all;
        }
        p = e ? e + 1 : NULL;
    }
    return lines;
}

static void test_bench_json(void) {
    static char out[65536];
    const char *ok[] = {"strategy", "ns_per_param", "bytes_per_param", "gbps", "bound_fraction", "bound_gbps",
                        "speed_vs_bf16_master", "edq_overhead", "from_memory_penalty", "limit", "isa", "cpu",
                        "edq_overhead_paired", "speed_vs_bf16_master_paired"};
    int rc = h_sh(out, sizeof out, "%s bench optimizer --params 64K --threads 1 --reps 2 --strategy collage-light --json",
                  g_bin);
    CHECK(rc == 0 && count_lines_with(out, ok, 14) == 2, "bench optimizer --json: rc %d: %s", rc, out);
    /* the CPU the figures belong to: a non-empty name, closed by its quote (no quote inside) */
    const char *cpu = strstr(out, "\"cpu\":\"");
    CHECK(cpu && cpu[7] != '"' && strchr(cpu + 7, '"') && strchr(cpu + 7, '"') < strchr(cpu + 7, '}'),
          "bench optimizer cpu key: %s", out);
    /* the limit is one of three words, whatever the timings */
    const char *lim[] = {"\"limit\":\"memory\"", "\"limit\":\"compute\"", "\"limit\":\"compute+memory\""};
    int nl = 0;
    for (int i = 0; i < 3; i++)
        for (const char *q = strstr(out, lim[i]); q; q = strstr(q + 1, lim[i])) nl++;
    CHECK(nl == 2, "bench optimizer limit labels (%d of 2 rows): %s", nl, out);
    CHECK(strstr(out, "\"strategy\":\"bf16-master\"") && strstr(out, "\"strategy\":\"collage-light\""),
          "bench optimizer rows: %s", out);
    /* the text table names the CPU, and says when the size is too small for memory figures */
    rc = h_sh(out, sizeof out, "%s bench optimizer --params 64K --threads 1 --reps 1 --strategy bf16", g_bin);
    CHECK(rc == 0 && strstr(out, "\ncpu: ") && strstr(out, "note: 64000 params") && strstr(out, "not memory figures"),
          "bench optimizer text at 64K params: rc %d: %s", rc, out);
    const char *mk[] = {"model", "strategy", "ms_per_step", "tokens_per_s", "fraction_of_sgemm", "slowdown_vs_fp32",
                        "forward_ms", "backward_ms", "optimizer_ms", "cpu", "products_ms", "products_share",
                        "products_gflops", "products_bound_gflops", "products_of_bound", "products_gflop_per_step",
                        "attention_ms", "attention_gflops", "attention_of_bound", "elementwise_ms", "elementwise_gbps",
                        "elementwise_bound_gbps", "elementwise_gb_per_step", "optimizer_share", "optimizer_gbps",
                        "optimizer_of_bound", "largest_phase"};
    const int nmk = (int)(sizeof mk / sizeof *mk);
    rc = h_sh(out, sizeof out, "%s bench model --model tiny --steps 2 --warmup 0 --strategy collage-plus --json", g_bin);
    CHECK(rc == 0 && count_lines_with(out, mk, nmk) == 2, "bench model --json: rc %d: %s", rc, out);
    /* the phases' work is counted, whatever the timings: the products' FLOPs of a step, the same for both rows */
    const char *pf = strstr(out, "\"products_gflop_per_step\":"), *pf2 = pf ? strstr(pf + 1, "\"products_gflop_per_step\":") : NULL;
    CHECK(pf && pf2 && atof(pf + 26) > 0 && atof(pf + 26) == atof(pf2 + 26), "bench model products' FLOPs: %s", out);
    CHECK(strstr(out, "\"strategy\":\"fp32\"") && strstr(out, "\"strategy\":\"collage-plus\""), "bench model rows: %s", out);
    rc = h_sh(out, sizeof out, "%s bench model --model bert-tiny --batch 2 --steps 2 --warmup 0 --strategy bf16 --json",
              g_bin);
    CHECK(rc == 0 && count_lines_with(out, mk, nmk) == 2 && strstr(out, "\"model\":\"bert-tiny\""),
          "bench model bert-tiny --json: rc %d: %s", rc, out);
    /* --compute fp8: the quantization's time per step, positive for the fp8 model, 0 for fp32's */
    rc = h_sh(out, sizeof out, "%s bench model --model tiny --steps 1 --warmup 0 --precision collage-light --compute fp8 "
              "--fp8-recipe block --json", g_bin);
    const char *q32 = strstr(out, "\"fp8_quant_ms\":"), *q8 = q32 ? strstr(q32 + 1, "\"fp8_quant_ms\":") : NULL;
    CHECK(rc == 0 && q32 && q8 && atof(q32 + 15) == 0 && atof(q8 + 15) > 0, "bench model --compute fp8 --json: rc %d: %s",
          rc, out);
    /* the text: a phase table per model, a row per strategy */
    rc = h_sh(out, sizeof out, "%s bench model --model tiny --steps 1 --warmup 0 --precision bf16", g_bin);
    const char *pt = strstr(out, "tiny: where the step's time goes");
    CHECK(rc == 0 && strstr(out, "memory bound (") && pt && strstr(pt, "largest") && strstr(pt, "\nfp32 ") &&
              strstr(pt, "\nbf16 "), "bench model phase table: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s bench model --strategy nonsense", g_bin);
    CHECK(rc == 2 && strstr(out, "nonsense") && strstr(out, "hint"), "bench model bad strategy: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s bench model --warmup -1", g_bin);
    CHECK(rc == 2 && strstr(out, "--warmup"), "bench model negative warmup: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s bench optimizer --bogus", g_bin);
    CHECK(rc == 2 && strstr(out, "--bogus"), "bench optimizer bad flag: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s bench optimizer --beta2 1.5", g_bin);
    CHECK(rc == 2 && strstr(out, "--beta2") && strstr(out, "1.5"), "bench optimizer beta2 out of range: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s bench optimizer --beta2 x", g_bin);
    CHECK(rc == 2 && strstr(out, "--beta2"), "bench optimizer beta2 not a number: rc %d: %s", rc, out);
    rc = h_sh(out, sizeof out, "%s bench optimizer --params 64K --threads 1 --reps 1 --strategy collage-plus --beta2 0.999 --json",
              g_bin);
    CHECK(rc == 0 && strstr(out, "\"strategy\":\"collage-plus\"") && strstr(out, "\"beta2\":0.999"),
          "bench optimizer --beta2 0.999: rc %d: %s", rc, out);
}

/* The bf16 model says which path its products take, in `--version` and in train's header, and trains on
 * the widening path when it is forced (what a build without oneDNN or a CPU without bf16 instructions
 * takes): the same loss as its own path to fp32-sum accuracy. */
static void test_bf16_path_named(void) {
    char out[8192], want[256];
    int rc = h_sh(out, sizeof out, "%s --version", g_bin);
    CHECK(rc == 0 && strstr(out, "fp32 kernels: OpenBLAS sgemm (") && strstr(out, "bf16 paths: "),
          "--version names no product kernels: %s", out);
    double loss[2] = {0, 0};
    for (int widen = 0; widen < 2; widen++) {
        rc = h_sh(out, sizeof out, "%s%s train --data %s --layers 1 --dim 32 --heads 2 --batch 4 --seq 16 --threads 1 "
                  "--steps 20 --eval-every 20 --precision collage-light", widen ? "COLLAGE_BF16_GEMM=widen " : "", g_bin,
                  g_text);
        snprintf(want, sizeof want, "products: %s", widen ? "bf16 widened to fp32" : "");
        const char *fin = strstr(out, "final loss ");
        CHECK(rc == 0 && strstr(out, want) && fin && sscanf(fin, "final loss %lf", &loss[widen]) == 1,
              "train (%s path): rc %d, header or final loss missing: %s", widen ? "widening" : "its own", rc, out);
    }
    printf("    final loss after 20 steps: %.4f on this machine's path, %.4f on the widening path\n", loss[0], loss[1]);
    CHECK(loss[1] > 0 && fabs(loss[0] - loss[1]) <= 1e-2 * loss[1], "the two paths' losses %g and %g", loss[0], loss[1]);
}

int main(void) {
    if (h_cli_setup("cli", g_bin, g_dir, g_text, 1)) return 1;
    printf("test_cli: %s, data in %s\n", g_bin, g_dir);
    RUN(test_train_log_and_checkpoint);
    RUN(test_exact_resume);
    RUN(test_llama_commands);
    RUN(test_tokenize_then_train_on_shard);
    RUN(test_bad_input);
    RUN(test_flag_ranges);
    RUN(test_log_is_json_when_diverging);
    RUN(test_one_grammar);
    RUN(test_bench_json);
    RUN(test_bf16_path_named);
    RUN(test_bert);
    RUN(test_bert_learns);
    h_rm_rf(g_dir);
    return h_end();
}
