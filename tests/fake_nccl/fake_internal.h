/* fake_internal.h: what fake_nccl.c (NCCL) and fake_cuda.c (the CUDA
 * runtime: devices, streams, events, memory) share.  One lock guards
 * both. */
#ifndef DDPH_FAKE_INTERNAL_H
#define DDPH_FAKE_INTERNAL_H

#include <pthread.h>

#include "fake_nccl.h"

extern pthread_mutex_t fake_mu;
extern pthread_cond_t fake_cv;
extern _Thread_local int fake_my_rank;
extern _Thread_local cudaError_t fake_last_error;
/* cudaStreamQuery answers "not ready" this many more times (the script). */
extern _Thread_local int fake_stream_left;

_Noreturn void fake_die(const char *why);

/* A stream's work, run in order, on the host, only when the stream is
 * synchronised, queried, or waited for through an event (the GPU's
 * asynchrony: nothing moves at the enqueue).  `run` returns 0 while the
 * item cannot run yet (a collective whose peers have not all come):
 * the stream stops there. */
typedef struct fake_item {
    int (*run)(struct fake_item *it);
    void *a, *b;
    size_t n, m;
    int rank;
} fake_item;

struct fake_stream;
/* The stream behind s (fake_die for anything else). */
struct fake_stream *fake_as_stream(cudaStream_t s);
/* Appends an item (under fake_mu); its position, for fake_drain_to. */
long fake_push(struct fake_stream *s, const fake_item *it);
/* Runs s's items before position `upto` (under fake_mu); whether they all
 * ran. */
int fake_drain_to(struct fake_stream *s, long upto);
/* Whether s has work left (under fake_mu). */
int fake_stream_busy(struct fake_stream *s);
void fake_cuda_reset(void);   /* under fake_mu */
void fake_cuda_set_rank(void); /* the calling thread's CUDA state */

#endif
