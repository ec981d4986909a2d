/* atomic.c — the one way collage writes a file: a temporary name beside the target, fsync, rename
 * over the target, fsync of the folder. A reader never sees a partial file; a failed write leaves the
 * old file as it was. */
#include "internal.h"
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <unistd.h>

/* Off while a checkpoint is written into its temporary folder: the folder is synced once, before it
 * is renamed into place, instead of after every file. */
static _Thread_local int g_defer_dir_sync;
void collage__atomic_defer_dir_sync(int on) { g_defer_dir_sync = on; }

collage_status collage_atomic_open(collage_atomic_file *af, const char *path, char *err, size_t cap) {
    if (!af || !path) return COLLAGE_ERR_NULL;
    memset(af, 0, sizeof *af);
    size_t len = strlen(path) + 32;
    af->tmp = malloc(len);
    af->path = strdup(path);
    if (!af->tmp || !af->path) { collage_atomic_abort(af); return COLLAGE_ERR_NOMEM; }
    snprintf(af->tmp, len, "%s.tmp.%ld", path, (long)getpid());
    af->f = fopen(af->tmp, "wb");
    if (!af->f) {
        collage_status st = collage__fail(err, cap, COLLAGE_ERR_IO, "cannot create '%s': %s", af->tmp, strerror(errno));
        collage_atomic_abort(af);
        return st;
    }
    return COLLAGE_OK;
}

void collage_atomic_abort(collage_atomic_file *af) {
    if (!af) return;
    if (af->f) { fclose(af->f); af->f = NULL; }
    if (af->tmp) unlink(af->tmp);
    free(af->tmp); free(af->path);
    af->tmp = af->path = NULL;
}

collage_status collage_atomic_commit(collage_atomic_file *af, char *err, size_t cap) {
    if (!af || !af->f) return COLLAGE_ERR_NULL;
    int ok = fflush(af->f) == 0 && !ferror(af->f) && fsync(fileno(af->f)) == 0;
    int e = errno;
    if (fclose(af->f) != 0 && ok) { ok = 0; e = errno; }
    af->f = NULL;
    if (ok && rename(af->tmp, af->path) != 0) { ok = 0; e = errno; }
    if (!ok) {
        collage_status st = collage__fail(err, cap, COLLAGE_ERR_IO, "cannot write '%s': %s", af->path, strerror(e));
        collage_atomic_abort(af);
        return st;
    }
    char *dir = g_defer_dir_sync ? NULL : strdup(af->path);
    if (dir) { /* make the rename itself durable */
        char *slash = strrchr(dir, '/');
        const char *d = slash ? (slash == dir ? "/" : (*slash = 0, dir)) : ".";
        int fd = open(d, O_RDONLY);
        if (fd >= 0) { fsync(fd); close(fd); }
        free(dir);
    }
    free(af->tmp); free(af->path);
    af->tmp = af->path = NULL;
    return COLLAGE_OK;
}

collage_status collage__atomic_finish(collage_atomic_file *af, int written, char *err, size_t cap) {
    if (!af || !af->f) return COLLAGE_ERR_NULL;
    if (written) return collage_atomic_commit(af, err, cap);
    const collage_status st = collage__fail(err, cap, COLLAGE_ERR_IO, "cannot write '%s': %s", af->path, strerror(errno));
    collage_atomic_abort(af);
    return st;
}
