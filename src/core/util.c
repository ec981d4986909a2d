/* util.c — small helpers every file-reading part of the library shares: a status with a one-line
 * message (the library never prints), and reading a whole file. */
#include "internal.h"
#include <errno.h>
#include <stdarg.h>
#include <sys/stat.h>

collage_status collage__fail(char *err, size_t cap, collage_status st, const char *fmt, ...) {
    if (err && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return st;
}

collage_status collage__read_file(const char *path, char **buf, size_t *len, char *err, size_t cap_err) {
    FILE *f = fopen(path, "rb");
    if (!f) return collage__fail(err, cap_err, COLLAGE_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        char *nb = realloc(b, cap * 2);
        if (!nb) { free(b); b = NULL; break; }
        b = nb;
        cap *= 2;
    }
    int bad = !b || ferror(f);
    fclose(f);
    if (!b) return collage__fail(err, cap_err, COLLAGE_ERR_NOMEM, "out of memory reading '%s'", path);
    if (bad) { free(b); return collage__fail(err, cap_err, COLLAGE_ERR_IO, "cannot read '%s'", path); }
    b[n] = 0;
    *buf = b;
    *len = n;
    return COLLAGE_OK;
}

int collage__mkdir_p(const char *path) {
    char buf[4096];
    if (!path || !*path || strlen(path) >= sizeof buf) { errno = EINVAL; return -1; }
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
    struct stat sb;
    if (stat(buf, &sb) != 0) return -1;
    if (!S_ISDIR(sb.st_mode)) { errno = ENOTDIR; return -1; }
    return 0;
}
