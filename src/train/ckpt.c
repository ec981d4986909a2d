/* ckpt.c — the run folder a training run saves into: one folder per checkpoint, RUN/step-00000100,
 * made complete as RUN/step-00000100.tmp and renamed into place, so that a reader sees a checkpoint
 * whole or not at all; finding the newest, listing, removing the ones beyond `keep`, cleaning what a
 * killed save left, and checking a folder before a run saves into it. The files inside a checkpoint
 * and train.state are run_ckpt.c's. The older layout (the files directly in RUN) is read as one
 * checkpoint in the folder itself. */
#include "run_internal.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#define STEP_PREFIX "step-"
#define TMP_SUFFIX ".tmp"
#define TRASH_PREFIX ".trash-"

void ckpt_path(char *out, size_t cap, const char *dir, int step, const char *suffix) {
    snprintf(out, cap, "%s/" STEP_PREFIX "%08d%s", dir, step, suffix ? suffix : "");
}

/* "step-" and digits only: a complete checkpoint's name. */
static int step_of_name(const char *name, int *step) {
    if (strncmp(name, STEP_PREFIX, strlen(STEP_PREFIX)) != 0) return 0;
    const char *d = name + strlen(STEP_PREFIX);
    if (!*d || strlen(d) > 9) return 0;
    for (const char *p = d; *p; p++)
        if (*p < '0' || *p > '9') return 0;
    *step = atoi(d);
    return 1;
}

/* What a killed or failed save leaves: step-N.tmp folders, .trash-* folders, and NAME.tmp.PID files
 * (collage_atomic_open's temporaries, of the older layout or a summary). */
static int is_temporary(const char *name) {
    int step;
    size_t n = strlen(name);
    if (!strncmp(name, TRASH_PREFIX, strlen(TRASH_PREFIX))) return 1;
    if (n > strlen(TMP_SUFFIX) && !strcmp(name + n - strlen(TMP_SUFFIX), TMP_SUFFIX)) {
        char base[256];
        snprintf(base, sizeof base, "%.*s", (int)(n - strlen(TMP_SUFFIX)), name);
        if (step_of_name(base, &step)) return 1;
    }
    const char *t = strstr(name, ".tmp.");
    if (!t || !t[5]) return 0;
    for (const char *p = t + 5; *p; p++)
        if (*p < '0' || *p > '9') return 0;
    return 1;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}
int ckpt_rm_tree(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(sb.st_mode)) return unlink(path);
    return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void ckpt_sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) { fsync(fd); close(fd); }
}

void ckpt_clean(const char *dir) {
    if (ckpt_busy(dir)) return; /* its temporaries are a save in progress */
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d)))
        if (is_temporary(e->d_name)) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            ckpt_rm_tree(path);
        }
    closedir(d);
}

static int by_step(const void *a, const void *b) {
    const ckpt_entry *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return x->here - y->here; /* a step folder after the folder itself: it wins a tie */
}

/* One entry's manifest: its step (when it is the folder itself) and run id. */
static void entry_read(const char *dir, ckpt_entry *e, int want_id) {
    char path[4096], err[256];
    collage_run_saved s;
    if (e->here) snprintf(path, sizeof path, "%s", dir);
    else snprintf(path, sizeof path, "%s/%s", dir, e->name);
    if (!e->here && !want_id) return;
    if (run_manifest_read(path, &s, err, sizeof err) == COLLAGE_OK) {
        e->ok = 1;
        e->run_id = s.run_id;
        if (e->here) e->step = s.step;
    }
}

static int push(ckpt_entry **v, int *n, int *cap, const ckpt_entry *x) {
    if (*n == *cap) {
        ckpt_entry *nv = realloc(*v, (size_t)(*cap = *cap ? 2 * *cap : 8) * sizeof **v);
        if (!nv) return -1;
        *v = nv;
    }
    (*v)[(*n)++] = *x;
    return 0;
}

int ckpt_list(const char *dir, ckpt_entry **out, int want_ids) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0, cap = 0;
    ckpt_entry *v = NULL, x = {.step = -1, .here = 1, .name = "."};
    char path[4096];
    snprintf(path, sizeof path, "%s/train.state", dir);
    int ok = access(path, F_OK) != 0 || push(&v, &n, &cap, &x) == 0;
    struct dirent *e;
    while (ok && (e = readdir(d))) {
        x = (ckpt_entry){.step = -1};
        if (!step_of_name(e->d_name, &x.step)) continue;
        snprintf(x.name, sizeof x.name, "%.31s", e->d_name);
        ok = push(&v, &n, &cap, &x) == 0;
    }
    closedir(d);
    for (int i = 0; i < n; i++) entry_read(dir, &v[i], want_ids);
    if (n > 1) qsort(v, (size_t)n, sizeof *v, by_step);
    *out = v;
    return n;
}

int ckpt_remove(const char *dir, const ckpt_entry *e) {
    char path[4096], trash[4096];
    if (e->here) { /* the older layout: train.state first, so that what remains is no checkpoint */
        static const char *const first[] = {"train.state", "model.bin", "optimizer.state"};
        for (size_t i = 0; i < sizeof first / sizeof *first; i++) {
            snprintf(path, sizeof path, "%s/%s", dir, first[i]);
            if (unlink(path) != 0 && errno != ENOENT) return -1;
        }
        DIR *d = opendir(dir);
        struct dirent *x;
        while (d && (x = readdir(d)))
            if (!strncmp(x->d_name, "optimizer.rank", 14)) {
                snprintf(path, sizeof path, "%s/%s", dir, x->d_name);
                unlink(path);
            }
        if (d) closedir(d);
        return 0;
    }
    snprintf(path, sizeof path, "%s/%s", dir, e->name);
    snprintf(trash, sizeof trash, "%s/" TRASH_PREFIX "%s", dir, e->name);
    ckpt_rm_tree(trash);
    if (rename(path, trash) != 0) return -1; /* from here on it is no checkpoint */
    return ckpt_rm_tree(trash);
}

int ckpt_commit(const char *dir, const char *tmp, const char *fin) {
    if (rename(tmp, fin) != 0) {
        if (errno != ENOTEMPTY && errno != EEXIST) return -1;
        /* a checkpoint of this step is there already (another run's, or an earlier save): swap */
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, fin, RENAME_EXCHANGE) != 0) { /* a file system without the swap */
            char trash[4096];
            snprintf(trash, sizeof trash, "%s/" TRASH_PREFIX "%s", dir, strrchr(fin, '/') + 1);
            ckpt_rm_tree(trash);
            if (rename(fin, trash) != 0 || rename(tmp, fin) != 0) return -1;
            ckpt_rm_tree(trash);
        } else ckpt_rm_tree(tmp); /* tmp now holds the replaced checkpoint */
    }
    ckpt_sync_dir(dir);
    return 0;
}

int ckpt_prune(const char *dir, int step, uint64_t run_id, int keep) {
    ckpt_entry *v;
    int n = ckpt_list(dir, &v, 1), kept = 1, bad = 0; /* the checkpoint of `step` itself */
    for (int i = n - 1; i >= 0; i--) {
        const ckpt_entry *e = &v[i];
        if (e->step == step && !e->here) continue;
        /* a checkpoint whose train.state cannot be read is counted as this run's: removed only past keep */
        int ours = (!e->ok || e->run_id == run_id) && e->step < step;
        if (ours && kept < keep) { kept++; continue; }
        if (ckpt_remove(dir, e) != 0) bad = -1;
    }
    free(v);
    return n < 0 ? -1 : bad;
}

/* ---------------------------------------------------------------- public */
static collage_status newest(const char *path, collage_checkpoint *out, ckpt_entry *v, int n, char *err, size_t cap) {
    if (n <= 0) {
        free(v);
        return collage__fail(err, cap, COLLAGE_ERR_IO, "'%s' holds no checkpoint (no train.state, no step-N folder)", path);
    }
    const ckpt_entry *e = &v[n - 1];
    if (e->here) snprintf(out->dir, sizeof out->dir, "%s", path);
    else snprintf(out->dir, sizeof out->dir, "%s/%s", path, e->name);
    out->step = e->step;
    out->older = n - 1;
    out->previous[0] = 0;
    if (n > 1) {
        if (v[n - 2].here) snprintf(out->previous, sizeof out->previous, "%s", path);
        else snprintf(out->previous, sizeof out->previous, "%s/%s", path, v[n - 2].name);
    }
    free(v);
    return COLLAGE_OK;
}

collage_status collage_checkpoint_find(const char *path, collage_checkpoint *out, char *err, size_t cap) {
    if (!path || !out) return collage__fail(err, cap, COLLAGE_ERR_NULL, "no checkpoint given");
    struct stat sb;
    if (stat(path, &sb) != 0) return collage__fail(err, cap, COLLAGE_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return collage__fail(err, cap, COLLAGE_ERR_IO, "'%s' is a file, not a checkpoint folder", path);
    ckpt_entry *v;
    int n = ckpt_list(path, &v, 0);
    if (n < 0) return collage__fail(err, cap, COLLAGE_ERR_IO, "cannot read the folder '%s': %s", path, strerror(errno));
    return newest(path, out, v, n, err, cap);
}

collage_status collage_checkpoint_model(const char *arg, char *out, size_t cap, char *err, size_t ecap) {
    struct stat sb;
    if (!arg || !out) return collage__fail(err, ecap, COLLAGE_ERR_NULL, "no checkpoint given");
    if ((stat(arg, &sb) == 0 && !S_ISDIR(sb.st_mode)) || collage_model_is_hf_folder(arg)) {
        snprintf(out, cap, "%s", arg);
        return COLLAGE_OK;
    }
    collage_checkpoint ck;
    collage_status st = collage_checkpoint_find(arg, &ck, err, ecap);
    if (st) return st;
    snprintf(out, cap, "%s/model.bin", ck.dir);
    return collage_checkpoint_verify(ck.dir, "model.bin", err, ecap);
}

void collage_checkpoint_model_path(const char *arg, char *out, size_t cap) {
    collage_checkpoint ck;
    struct stat sb;
    if (collage_model_is_hf_folder(arg)) snprintf(out, cap, "%s", arg);
    else if (stat(arg, &sb) == 0 && S_ISDIR(sb.st_mode) && collage_checkpoint_find(arg, &ck, NULL, 0) == COLLAGE_OK)
        snprintf(out, cap, "%s/model.bin", ck.dir);
    else if (stat(arg, &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(out, cap, "%s/model.bin", arg);
    else snprintf(out, cap, "%s", arg);
}

collage_status ckpt_make_folder(const char *dir, char *err, size_t cap) {
    struct stat sb;
    if (stat(dir, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return collage__fail(err, cap, COLLAGE_ERR_IO, "'%s' is a file, not a folder", dir);
    if (collage__mkdir_p(dir) != 0)
        return collage__fail(err, cap, COLLAGE_ERR_IO, "cannot create the folder '%s': %s", dir, strerror(errno));
    return COLLAGE_OK;
}

/* Create dir when missing and write a temporary file there (removed again). */
static collage_status writable(const char *dir, char *err, size_t cap) {
    collage_status st = ckpt_make_folder(dir, err, cap);
    if (st) return st;
    char probe[4096], e2[1024];
    snprintf(probe, sizeof probe, "%s/.write-test", dir);
    collage_atomic_file af;
    if (collage_atomic_open(&af, probe, e2, sizeof e2) != COLLAGE_OK)
        return collage__fail(err, cap, COLLAGE_ERR_IO, "cannot write in the folder '%s': %s", dir, e2); /* errno is the clean-up's */
    collage_atomic_abort(&af);
    return COLLAGE_OK;
}

collage_status collage_checkpoint_check_folder(const char *dir, const char *resume, int overwrite, char *err, size_t cap) {
    if (!dir) return collage__fail(err, cap, COLLAGE_ERR_NULL, "no folder given");
    collage_status st = writable(dir, err, cap);
    if (st) return st;
    ckpt_clean(dir); /* the leftovers of killed saves, as a save removes them */
    ckpt_entry *v;
    int n = ckpt_list(dir, &v, 1);
    if (n <= 0 || overwrite) { free(v); return COLLAGE_OK; }
    collage_run_saved s;
    collage_checkpoint ck;
    if (!resume) {
        st = collage__fail(err, cap, COLLAGE_ERR_ARG, "'%s' holds a checkpoint of another run (step %d)", dir, v[n - 1].step);
    } else if ((st = collage_checkpoint_find(resume, &ck, err, cap)) == COLLAGE_OK &&
               (st = run_manifest_read(ck.dir, &s, err, cap)) == COLLAGE_OK) {
        for (int i = n - 1; i >= 0 && !st; i--) {
            if (!v[i].ok) continue; /* damaged: whose it is cannot be told */
            if (v[i].run_id != s.run_id)
                st = collage__fail(err, cap, COLLAGE_ERR_ARG, "'%s' holds a checkpoint of another run than '%s' (step %d)", dir,
                                   ck.dir, v[i].step);
            else if (v[i].step > s.step)
                st = collage__fail(err, cap, COLLAGE_ERR_ARG, "'%s' holds step %d of this run, newer than step %d resumed "
                                   "from: saving there would remove it", dir, v[i].step, s.step);
        }
    }
    free(v);
    return st;
}
