/* prof.c — the nn room's clock (nn_now) and the profile of a model's calls (nn.h, nn_prof_*): the calling
 * thread's profile, set by the model object for the length of each call it profiles; the products' doors
 * and the attention ops add their wall time and FLOPs to it, read on that thread only, the outermost of
 * nested timed calls alone. */
#include "nn.h"
#include <time.h>

static _Thread_local nn_prof *t_prof; /* NULL: this thread's calls are not profiled */

double nn_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

nn_prof *nn_prof_swap(nn_prof *p) {
    nn_prof *old = t_prof;
    t_prof = p;
    return old;
}

double nn_prof_begin(void) {
    nn_prof *p = t_prof;
    if (!p) return 0;
    return p->depth++ == 0 ? nn_now() : 0;
}

void nn_prof_end(nn_prof_kind k, double t0, double flops) {
    nn_prof *p = t_prof;
    if (!p) return;
    COLLAGE_ASSERT(p->depth > 0);
    if (--p->depth) return; /* inside an outer timed call, which counts this one's time */
    p->s[k] += nn_now() - t0;
    p->flops[k] += flops;
    p->calls[k]++;
}
