/* lock.c — one run per folder. A run that saves into a run folder holds DIR/.lock: an exclusive
 * flock(2) on it, and its pid, host and start time written in it, for as long as it runs. The kernel
 * releases the lock when the process ends however it ends, so a run killed with -9 leaves no lock
 * behind, only the file: the next run takes the lock, finds the text, and learns that the run before
 * it ended without releasing (a stale lock, taken over). A run that ends normally removes the file;
 * a taker checks that the file it locked is still the one at the path (else it was removed under it,
 * and it tries again), so that two runs can never hold two files of one name. The cleaning of what killed saves left (ckpt_clean) passes over a folder another process holds,
 * so that a second run, or a resume from a folder still being written, never removes a save in
 * progress. Advisory: a program that saves without the lock is not stopped. */
#include "run_internal.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LOCK_NAME ".lock"
#define LOCK_TRIES 40 /* 5 ms apart: a cleaner's brief look (ckpt_busy) is not another run */
#define HELD_MAX 16

struct collage_folder_lock {
    int fd;
    dev_t dev;
    ino_t ino;
    char path[4096];
};

/* The lock files this process holds: its own folders are not another run's. Runs are created and
 * freed on one thread; a process holds a handful at most. */
static struct { dev_t dev; ino_t ino; } g_held[HELD_MAX];
static int g_nheld;

static int held_here(dev_t dev, ino_t ino) {
    for (int i = 0; i < g_nheld; i++)
        if (g_held[i].dev == dev && g_held[i].ino == ino) return 1;
    return 0;
}

/* "pid P on HOST since T" of a lock file's text into who (cap); its pid, 0 when none is written. */
static long lock_text(int fd, char *who, size_t cap) {
    char buf[512] = "";
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = 0;
    long pid = 0, since = 0;
    char host[256] = "";
    if (sscanf(buf, "pid %ld host %255s since %ld", &pid, host, &since) < 2 || pid <= 0) {
        snprintf(who, cap, "another run");
        return 0;
    }
    char mine[256] = "";
    gethostname(mine, sizeof mine - 1);
    char when[64] = "";
    time_t t = (time_t)since;
    struct tm tm;
    if (since > 0 && localtime_r(&t, &tm)) strftime(when, sizeof when, ", started %Y-%m-%d %H:%M:%S", &tm);
    if (strcmp(host, mine) == 0) snprintf(who, cap, "pid %ld%s", pid, when);
    else snprintf(who, cap, "pid %ld on %s%s", pid, host, when);
    return pid;
}

collage_status collage_folder_lock_take(const char *dir, collage_folder_lock **out, long *stale_pid, char *err,
                                        size_t cap) {
    if (!dir || !out) return collage__fail(err, cap, COLLAGE_ERR_NULL, "no folder given");
    *out = NULL;
    if (stale_pid) *stale_pid = 0;
    collage_status st = ckpt_make_folder(dir, err, cap);
    if (st) return st;
    struct stat sb;
    char path[4096], who[512];
    snprintf(path, sizeof path, "%.4000s/" LOCK_NAME, dir);
    int fd = -1;
    for (int again = 0; again < LOCK_TRIES && fd < 0; again++) {
        if ((fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0)
            return collage__fail(err, cap, COLLAGE_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
        int got = -1;
        for (int i = 0; i < LOCK_TRIES && (got = flock(fd, LOCK_EX | LOCK_NB)) != 0 && errno == EWOULDBLOCK; i++)
            usleep(5000);
        if (got != 0) {
            int e = errno;
            long pid = lock_text(fd, who, sizeof who);
            close(fd);
            if (e != EWOULDBLOCK) return collage__fail(err, cap, COLLAGE_ERR_IO, "cannot lock '%s': %s", path, strerror(e));
            return collage__fail(err, cap, COLLAGE_ERR_BUSY, "'%s' is in use by another run (%s%s)", dir, who,
                                 pid == (long)getpid() ? ", this process" : "");
        }
        struct stat at;
        if (fstat(fd, &sb) != 0 || stat(path, &at) != 0 || at.st_dev != sb.st_dev || at.st_ino != sb.st_ino) {
            close(fd); /* released and removed by its holder while this one waited: the path's file is another */
            fd = -1;
        }
    }
    if (fd < 0 || g_nheld == HELD_MAX) {
        if (fd >= 0) close(fd);
        return collage__fail(err, cap, COLLAGE_ERR_IO, "cannot lock '%s'", path);
    }
    long before = lock_text(fd, who, sizeof who);
    if (stale_pid) *stale_pid = before;
    char text[512], host[256] = "?";
    gethostname(host, sizeof host - 1);
    int n = snprintf(text, sizeof text, "pid %ld host %s since %lld\n", (long)getpid(), host, (long long)time(NULL));
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)n, 0) != n) {
        int e = errno;
        close(fd);
        return collage__fail(err, cap, COLLAGE_ERR_IO, "cannot write '%s': %s", path, strerror(e));
    }
    collage_folder_lock *l = malloc(sizeof *l);
    if (!l) { close(fd); return collage__fail(err, cap, COLLAGE_ERR_NOMEM, "out of memory"); }
    *l = (collage_folder_lock){.fd = fd, .dev = sb.st_dev, .ino = sb.st_ino};
    snprintf(l->path, sizeof l->path, "%s", path);
    g_held[g_nheld].dev = sb.st_dev;
    g_held[g_nheld++].ino = sb.st_ino;
    *out = l;
    return COLLAGE_OK;
}

void collage_folder_lock_release(collage_folder_lock *l) {
    if (!l) return;
    for (int i = 0; i < g_nheld; i++)
        if (g_held[i].dev == l->dev && g_held[i].ino == l->ino) { g_held[i] = g_held[--g_nheld]; break; }
    if (unlink(l->path) != 0 && ftruncate(l->fd, 0) != 0) {} /* else the next run would call this one stale */
    close(l->fd);                                            /* releases the flock */
    free(l);
}

int ckpt_busy(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%.4000s/" LOCK_NAME, dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    struct stat sb;
    int busy = 0;
    if (fstat(fd, &sb) == 0 && !held_here(sb.st_dev, sb.st_ino)) {
        busy = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
        if (!busy) flock(fd, LOCK_UN);
    }
    close(fd);
    return busy;
}
