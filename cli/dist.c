/* dist.c — ranks and the byte movers of data-parallel training (see dist.h). With COLLAGE_MPI the
 * bytes travel through MPI (Alltoallv, Allgather(v), Allreduce of an int flag with MAX), in
 * contiguous types of the element's size, so MPI never adds anything. Without MPI there is one rank. */
#include "dist.h"
#include "cli.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef COLLAGE_MPI
#include <mpi.h>
#endif

static int g_rank = 0, g_size = 1;
static double g_comm;

const char *dist_launcher(void) {
    static char buf[64];
    if (!dist_mpi() || g_size < 2) return "";
    snprintf(buf, sizeof buf, "mpirun -np %d ", g_size);
    return buf;
}

int dist_rank(void) { return g_rank; }
int dist_size(void) { return g_size; }
double dist_comm_seconds(void) { return g_comm; }

#ifdef COLLAGE_MPI
static int g_on; /* MPI_Init was called: this process was started by mpirun */
#define TIMED(call) do { double t0_ = cli_now(); call; g_comm += cli_now() - t0_; } while (0)

/* Launched by mpirun (OpenMPI sets OMPI_COMM_WORLD_SIZE; PMI/PMIx launchers set theirs)? A plain
 * `collage train` then runs as one process without starting MPI at all. */
static int launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}
int dist_init(int *argc, char ***argv) {
    if (!launched_by_mpi()) return 0;
    if (MPI_Init(argc, argv) != MPI_SUCCESS) return -1;
    g_on = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    return 0;
}
void dist_finalize(void) { if (g_on) MPI_Finalize(); }
int dist_mpi(void) { return g_on; }
int dist_built_with_mpi(void) { return 1; }
int dist_any(int failed) {
    int any = failed ? g_rank + 1 : 0; /* the highest failing rank + 1 */
    if (g_on) TIMED(MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    return any;
}

/* Counts as int, as MPI wants them; a training run keeps every shard below INT32_MAX elements. */
static int icount(size_t x) { return x > (size_t)INT_MAX ? INT_MAX : (int)x; }
/* A contiguous type of elsize bytes: MPI moves elements, never interprets them. */
static MPI_Datatype bytes_type(size_t elsize) {
    MPI_Datatype t;
    MPI_Type_contiguous((int)elsize, MPI_BYTE, &t);
    MPI_Type_commit(&t);
    return t;
}
/* counts and displacements as int arrays (2·P, or 4·P for two layouts) */
static int *ints(const size_t *a, const size_t *b, const size_t *c, const size_t *d) {
    int *v = malloc(4 * (size_t)g_size * sizeof *v);
    for (int k = 0; v && k < g_size; k++) {
        v[k] = icount(a[k]);
        v[g_size + k] = icount(b[k]);
        v[2 * g_size + k] = c ? icount(c[k]) : 0;
        v[3 * g_size + k] = d ? icount(d[k]) : 0;
    }
    return v;
}

static int g_saved_fd = -1; /* a held rank's own stderr */
static FILE *g_held;        /* what it printed meanwhile */

void dist_hold_errors(void) {
    if (!g_on || g_size < 2 || g_rank == 0 || g_saved_fd >= 0 || !(g_held = tmpfile())) return;
    fflush(stderr);
    g_saved_fd = dup(2);
    if (g_saved_fd < 0 || dup2(fileno(g_held), 2) < 0) {
        if (g_saved_fd >= 0) close(g_saved_fd);
        g_saved_fd = -1;
        fclose(g_held);
        g_held = NULL;
    }
}

int dist_release_errors(int own) {
    int first = own ? g_rank : INT_MAX; /* the lowest rank that failed by itself */
    if (g_on) TIMED(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (g_saved_fd < 0) return first != INT_MAX;
    fflush(stderr);
    dup2(g_saved_fd, 2);
    close(g_saved_fd);
    g_saved_fd = -1;
    if (first == g_rank) {
        char buf[4096];
        size_t n;
        rewind(g_held);
        while ((n = fread(buf, 1, sizeof buf, g_held)) > 0) fwrite(buf, 1, n, stderr);
    }
    fclose(g_held);
    g_held = NULL;
    return first != INT_MAX;
}

static int mpi_any(void *ctx, int flag) { (void)ctx; return dist_any(flag); }
static int mpi_allgather(void *ctx, const void *mine, size_t k, size_t elsize, void *out) {
    (void)ctx;
    MPI_Datatype t = bytes_type(elsize);
    int rc;
    TIMED(rc = MPI_Allgather(mine, icount(k), t, out, icount(k), t, MPI_COMM_WORLD));
    MPI_Type_free(&t);
    return rc != MPI_SUCCESS;
}
static int mpi_allgatherv(void *ctx, void *buf, const size_t *counts, const size_t *displs, size_t elsize) {
    (void)ctx;
    int *v = ints(counts, displs, NULL, NULL), rc = MPI_ERR_NO_MEM;
    MPI_Datatype t = bytes_type(elsize);
    if (v) TIMED(rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, v, v + g_size, t, MPI_COMM_WORLD));
    MPI_Type_free(&t);
    free(v);
    return rc != MPI_SUCCESS;
}
static int mpi_alltoallv(void *ctx, const void *send, const size_t *sc, const size_t *sd, void *recv, const size_t *rc,
                         const size_t *rd, size_t elsize) {
    (void)ctx;
    int *v = ints(sc, sd, rc, rd), st = MPI_ERR_NO_MEM, P = g_size;
    MPI_Datatype t = bytes_type(elsize);
    if (v) TIMED(st = MPI_Alltoallv(send, v, v + P, t, recv, v + 2 * P, v + 3 * P, t, MPI_COMM_WORLD));
    MPI_Type_free(&t);
    free(v);
    return st != MPI_SUCCESS;
}

const collage_comm *dist_comm(void) {
    static collage_comm c;
    if (!g_on || g_size == 1) return NULL;
    c = (collage_comm){.rank = g_rank, .size = g_size, .any = mpi_any, .allgather = mpi_allgather,
                       .allgatherv = mpi_allgatherv, .alltoallv = mpi_alltoallv};
    return &c;
}
#else
/* ---------------------------------------------------------------- built without MPI: one rank */
int dist_init(int *argc, char ***argv) { (void)argc; (void)argv; return 0; }
void dist_finalize(void) {}
int dist_mpi(void) { return 0; }
int dist_built_with_mpi(void) { return 0; }
int dist_any(int failed) { return failed != 0; }
const collage_comm *dist_comm(void) { return NULL; }
void dist_hold_errors(void) {}
int dist_release_errors(int own) { return own != 0; }
#endif
