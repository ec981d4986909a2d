/* test_readers.c — every reader of a checkpoint checks its model file against the manifest beside it.
 * A model.bin with a flipped byte, truncated, or swapped for another run's (of the same size, or of
 * another) is refused by export, eval, sample and fill given the run folder or the model.bin itself, by
 * train --init with that file, by a resume (which names model.bin, not optimizer.state), and by the
 * library's readers (collage_model_read_header, collage_model_load_file, collage_checkpoint_model): exit
 * 1 or COLLAGE_ERR_FORMAT, a message naming the file and the problem, the run folder byte for byte as it
 * was and no output written. The same file outside a checkpoint folder is read, as is a checkpoint of the
 * older layout (no checksums); a damaged train.state makes its model file unreadable, by name. (The
 * Python readers, collage.export and collage.torch.load: python/tests/test_bad_input.py.) */
#include "harness.h"
#include "collage_model.h"
#include "collage_run.h"
#include <sys/stat.h>

#define SHAPE "--layers 1 --dim 32 --heads 2"
#define RUNF "--batch 4 --seq 16 --threads 1 --quiet"
#define GPT "--model tiny " SHAPE " " RUNF
#define BERT "--model bert-tiny " SHAPE " " RUNF

static char g_bin[1024], g_dir[256], g_text[512];

/* Every file under the paths given (sizes and checksums), to tell that a refusal changed nothing. */
static void fingerprint(const char *paths, char *out, size_t cap) {
    h_sh(out, cap, "find %s -type f 2>/dev/null -exec md5sum {} + | sort", paths);
}

static void rm_rf(const char *path) { h_sh(NULL, 0, "rm -rf %s", path); }

static int exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* A damage of model.bin: how (a command, {M} the file, {O} the tests' folder), the words of the refusal. */
typedef struct { const char *name, *cmd, *want, *also; } damage;

/* The commands that read the checkpoint {W} (a run folder), {M} its newest model.bin, with {O} an
 * output path and {D} the corpus. */
typedef struct { const char *what, *args; } reader;
static const reader GPT_READERS[] = {
    {"export of the folder", "export --checkpoint {W} --out {O}"},
    {"export of model.bin", "export --checkpoint {M} --out {O}"},
    {"eval of the folder", "eval --checkpoint {W} --data {D}"},
    {"eval of model.bin", "eval --checkpoint {M} --data {D}"},
    {"sample of the folder", "sample --checkpoint {W} --tokens 3"},
    {"sample of model.bin", "sample --checkpoint {M} --tokens 3"},
    {"train --init model.bin", "train --init {M} --data {D} " RUNF " --steps 1"},
    {"resume", "train --resume {W} --save {W} --data {D} " RUNF " --steps 9"},
};
static const reader BERT_READERS[] = {
    {"fill of the folder", "fill --checkpoint {W} --text 'a[MASK]b'"},
    {"fill of model.bin", "fill --checkpoint {M} --text 'a[MASK]b'"},
    {"export of the folder", "export --checkpoint {W} --out {O}"},
    {"eval of model.bin", "eval --checkpoint {M} --data {D}"},
    {"resume", "train --resume {W} --save {W} --data {D} " RUNF " --steps 9"},
};

/* tmpl with {W}, {M}, {O}, {D} replaced by w, m, o and the corpus. */
static void expand(char *out, size_t cap, const char *tmpl, const char *w, const char *m, const char *o) {
    size_t n = 0;
    out[0] = 0;
    for (const char *p = tmpl; *p && n + 1 < cap; p++) {
        const char *v = NULL;
        if (p[0] == '{' && p[1] && p[2] == '}') v = p[1] == 'W' ? w : p[1] == 'M' ? m : p[1] == 'O' ? o : p[1] == 'D' ? g_text : NULL;
        if (v) { n += (size_t)snprintf(out + n, cap - n, "%s", v); p += 2; }
        else out[n++] = *p, out[n] = 0;
    }
}

static int train(const char *flags, const char *save) {
    char o[4096];
    int rc = h_sh(o, sizeof o, "%s train --data %s %s --save %s", g_bin, g_text, flags, save);
    if (rc) printf("    train %s: rc %d: %s\n", flags, rc, o);
    return rc;
}

/* One reader on one damaged copy: exit 1, the file and the problem named, nothing changed or written. */
static void check_refusal(const reader *r, const damage *d, const char *work, const char *model, const char *out) {
    char cmd[4096], o[8192], before[8192], after[8192];
    expand(cmd, sizeof cmd, r->args, work, model, out);
    rm_rf(out);
    fingerprint(work, before, sizeof before);
    int rc = h_sh(o, sizeof o, "%s %s", g_bin, cmd);
    fingerprint(work, after, sizeof after);
    char named[1300];
    snprintf(named, sizeof named, "'%s' %s", model, d->want);
    CHECK(rc == 1 && strstr(o, named) && strstr(o, d->also) && !strstr(o, "optimizer.state"), "%s, %s: rc %d (want 1 and "
          "\"%s\", \"%s\"): %s", d->name, r->what, rc, named, d->also, o);
    CHECK(!strcmp(before, after), "%s, %s: the run folder changed", d->name, r->what);
    CHECK(!exists(out), "%s, %s: '%s' was written", d->name, r->what, out);
}

/* The library's readers on the damaged model file. */
static void check_library(const damage *d, const char *work, const char *model, const collage_model_config *intact) {
    char err[1024] = "", path[4096];
    collage_model_config c;
    int bf16;
    collage_status st = collage_model_read_header(model, &c, &bf16, err, sizeof err);
    CHECK(st == COLLAGE_ERR_FORMAT && strstr(err, model) && strstr(err, d->also), "%s: read_header: %d %s", d->name, st, err);
    float *w = malloc(collage_model_num_params(intact) * sizeof *w);
    st = w ? collage_model_load_file(model, intact, w, 0, err, sizeof err) : COLLAGE_ERR_NOMEM;
    CHECK(st == COLLAGE_ERR_FORMAT && strstr(err, model) && strstr(err, d->also), "%s: load_file: %d %s", d->name, st, err);
    free(w);
    st = collage_checkpoint_model(work, path, sizeof path, err, sizeof err);
    CHECK(st == COLLAGE_ERR_FORMAT && strstr(err, model) && strstr(err, d->also), "%s: checkpoint_model: %d %s", d->name,
          st, err);
}

/* Each damage of src's newest model.bin on a fresh copy, each reader on it. */
static void walk(const char *src, const damage *dmg, size_t nd, const reader *rd, size_t nr, int library) {
    char work[600], out[600], ck[1024], model[1200], intact_model[1200];
    snprintf(work, sizeof work, "%s/work", g_dir);
    snprintf(out, sizeof out, "%s/out", g_dir);
    h_checkpoint(src, ck, sizeof ck);
    snprintf(intact_model, sizeof intact_model, "%s/model.bin", ck);
    collage_model_config intact;
    char err[1024];
    int bf16;
    CHECK(collage_model_read_header(intact_model, &intact, &bf16, err, sizeof err) == COLLAGE_OK, "intact: %s", err);
    for (size_t i = 0; i < nd; i++) {
        h_sh(NULL, 0, "rm -rf %s %s && cp -r %s %s", work, out, src, work);
        h_checkpoint(work, ck, sizeof ck);
        snprintf(model, sizeof model, "%s/model.bin", ck);
        char cmd[4096];
        expand(cmd, sizeof cmd, dmg[i].cmd, work, model, g_dir);
        CHECK(h_sh(NULL, 0, "%s", cmd) == 0, "%s: cannot damage %s", dmg[i].name, model);
        for (size_t k = 0; k < nr; k++) check_refusal(&rd[k], &dmg[i], work, model, out);
        if (library) check_library(&dmg[i], work, model, &intact);
    }
}

static void test_gpt2_readers_refuse_a_damaged_model(void) {
    char a[600], b[600], c[600], o[8192], out[600];
    snprintf(a, sizeof a, "%s/a", g_dir);
    snprintf(b, sizeof b, "%s/b", g_dir);
    snprintf(c, sizeof c, "%s/c", g_dir);
    if (train(GPT " --steps 3", a) || train(GPT " --steps 3 --seed 7", b) ||
        train("--model tiny --layers 1 --dim 64 --heads 2 " RUNF " --steps 2", c)) {
        CHECK(0, "the runs to damage could not be trained");
        return;
    }
    /* the intact run folder: every reader takes it */
    snprintf(out, sizeof out, "%s/out", g_dir);
    char ck[1024], model[1200];
    h_checkpoint(a, ck, sizeof ck);
    snprintf(model, sizeof model, "%s/model.bin", ck);
    for (size_t k = 0; k + 1 < sizeof GPT_READERS / sizeof *GPT_READERS; k++) {
        char cmd[4096];
        expand(cmd, sizeof cmd, GPT_READERS[k].args, a, model, out);
        int rc = h_sh(o, sizeof o, "%s %s", g_bin, cmd);
        CHECK(rc == 0, "intact, %s: rc %d: %s", GPT_READERS[k].what, rc, o);
        rm_rf(out);
    }
    const damage dmg[] = {
        {"a flipped byte", "printf 'x' | dd of={M} bs=1 seek=5000 conv=notrunc 2>/dev/null", "is damaged", "its checksum does not match"},
        {"truncated", "truncate -s 1000 {M}", "has 1000 bytes but", "(truncated or replaced)"},
        {"swapped for another run's of the same size", "cp {O}/b/step-00000003/model.bin {M}", "is damaged or was replaced",
         "its checksum does not match"},
        {"swapped for another shape's", "cp {O}/c/step-00000002/model.bin {M}", "has 283392 bytes but", "(truncated or replaced)"},
    };
    walk(a, dmg, sizeof dmg / sizeof *dmg, GPT_READERS, sizeof GPT_READERS / sizeof *GPT_READERS, 1);
}

static void test_bert_readers_refuse_a_damaged_model(void) {
    char d[600];
    snprintf(d, sizeof d, "%s/bert", g_dir);
    if (train(BERT " --steps 2", d)) {
        CHECK(0, "the BERT run could not be trained");
        return;
    }
    const damage dmg[] = {
        {"a flipped byte", "printf 'x' | dd of={M} bs=1 seek=3000 conv=notrunc 2>/dev/null", "is damaged", "its checksum does not match"},
        {"truncated", "truncate -s 100 {M}", "has 100 bytes but", "(truncated or replaced)"},
    };
    walk(d, dmg, sizeof dmg / sizeof *dmg, BERT_READERS, sizeof BERT_READERS / sizeof *BERT_READERS, 0);
}

/* The checks are about checkpoints: a model file elsewhere, or in a checkpoint of the older layout, is
 * read as it is; a train.state that cannot be read stops its folder's model file from being read. */
static void test_what_is_not_checked_and_a_damaged_manifest(void) {
    char a[600], loose[600], legacy[600], o[8192], ck[1024];
    snprintf(a, sizeof a, "%s/a", g_dir); /* test_gpt2_readers_refuse_a_damaged_model's */
    snprintf(loose, sizeof loose, "%s/loose", g_dir);
    snprintf(legacy, sizeof legacy, "%s/legacy", g_dir);
    h_checkpoint(a, ck, sizeof ck);
    h_sh(NULL, 0, "rm -rf %s && mkdir -p %s && cp %s/model.bin %s/ && printf 'x' | dd of=%s/model.bin bs=1 seek=5000 "
         "conv=notrunc 2>/dev/null", loose, loose, ck, loose, loose);
    int rc = h_sh(o, sizeof o, "%s eval --checkpoint %s/model.bin --data %s", g_bin, loose, g_text);
    CHECK(rc == 0, "a model file outside a checkpoint folder: rc %d: %s", rc, o);
    h_sh(NULL, 0, "rm -rf %s && mkdir %s && cp %s/model.bin %s/optimizer.state %s/ && sed -e '1s/.*/collage-train 1/' "
         "-e '/^skipped /d' -e '/^run_id /d' -e '/^file /d' -e '/^checksum /d' %s/train.state > %s/train.state", legacy, legacy,
         ck, ck, legacy, ck, legacy);
    rc = h_sh(o, sizeof o, "%s eval --checkpoint %s/model.bin --data %s", g_bin, legacy, g_text);
    CHECK(rc == 0, "the older layout's model file: rc %d: %s", rc, o);
    char work[600], out[600], want[2600], before[8192], after[8192];
    snprintf(work, sizeof work, "%s/work", g_dir);
    snprintf(out, sizeof out, "%s/out", g_dir);
    h_sh(NULL, 0, "rm -rf %s %s && cp -r %s %s", work, out, a, work);
    h_checkpoint(work, ck, sizeof ck);
    h_sh(NULL, 0, "sed -i 's/^lr 0.001$/lr 0.002/' %s/train.state", ck);
    snprintf(want, sizeof want, "cannot check '%s/model.bin' against its checkpoint's manifest: '%s/train.state' is damaged",
             ck, ck);
    fingerprint(work, before, sizeof before);
    rc = h_sh(o, sizeof o, "%s export --checkpoint %s/model.bin --out %s", g_bin, ck, out);
    fingerprint(work, after, sizeof after);
    CHECK(rc == 1 && strstr(o, want) && !exists(out) && !strcmp(before, after), "an edited train.state: rc %d: %s", rc, o);
}

int main(void) {
    if (h_cli_setup("readers", g_bin, g_dir, g_text, 3)) return 1;
    printf("test_readers: %s, data in %s\n", g_bin, g_dir);
    RUN(test_gpt2_readers_refuse_a_damaged_model);
    RUN(test_bert_readers_refuse_a_damaged_model);
    RUN(test_what_is_not_checked_and_a_damaged_manifest);
    h_rm_rf(g_dir);
    return h_end();
}
