/* dist.h — the data-parallel transport of `collage train`: ranks and the byte movers a training
 * run needs (collage_comm, collage_run.h). Built with MPI (COLLAGE_MPI, OpenMPI) it runs on
 * MPI_COMM_WORLD; without, there is one rank. MPI only ever moves bytes: every sum is done by
 * libcollage in a fixed order, so results never depend on MPI's choice of algorithm. libcollage
 * itself knows nothing of MPI. */
#ifndef COLLAGE_DIST_H
#define COLLAGE_DIST_H
#include "collage_run.h"

/* 0 on success. MPI_Init only in a process started by mpirun (or another MPI launcher): a plain
 * `collage train` is one rank and never starts MPI. */
int    dist_init(int *argc, char ***argv);
void   dist_finalize(void);
int    dist_rank(void);
int    dist_size(void);
int    dist_mpi(void);                     /* 1 when MPI is running in this process */
int    dist_built_with_mpi(void);          /* 1 when built with MPI (COLLAGE_MPI) */
/* Every rank passes its own failure flag; every rank gets 1 + the highest failing rank, 0 if none. */
int    dist_any(int failed);
/* The transport for collage_run_create: NULL for one process. */
const collage_comm *dist_comm(void);
/* One message per failure under mpirun, as docs/training.md says: from dist_hold_errors on, what a rank
 * other than 0 writes to stderr is held (in a temporary file) while rank 0 prints as it goes; every rank
 * then calls dist_release_errors at the same point, with own = 1 when it printed a failure of its own
 * (not one it learned of from another rank), and the lowest such rank's messages are printed; the other
 * ranks' copies are dropped. Returns whether any rank failed by itself. Without MPI: nothing is held. */
void   dist_hold_errors(void);
int    dist_release_errors(int own);
/* "mpirun -np N " under mpirun with N > 1 ranks, else "": the start of a command that resumes the run. */
const char *dist_launcher(void);
/* Seconds spent inside communication calls since the start. */
double dist_comm_seconds(void);
#endif
