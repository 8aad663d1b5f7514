/* replicas.h: every rank's copy of a model starts equal and stays equal.
 *
 * A trainer that seeds its weights per rank, or a rank whose optimizer
 * drifts, trains a different model on each rank while every step returns
 * DDPH_OK.  For the parameters whose memory the trainer gave
 * (ddph_model_set_param_data, host memory):
 * - at ddph_model_finalize, rank 0's values go to every rank ([runtime]
 *   broadcast_parameters, on by default), as PyTorch DDP does when it is
 *   constructed;
 * - with [runtime] check_replicas_every = N, every N-th synchronised step
 *   ends (ddph_step_end, after the optimizer) with a crc32 of each
 *   parameter gathered from every rank: the first parameter that differs
 *   is reported on every rank with the ranks that disagree with rank 0.
 * Both run on the trainer's own communicator (backend_mpi.h). */
#ifndef DDPH_REPLICAS_H
#define DDPH_REPLICAS_H

#include "core/context.h"

/* Collective: checks that every rank gave the same parameters' memory,
 * then broadcasts their values from rank `root` (0 at finalize; the last
 * rank to join after ddph_join, join.h). */
ddph_status ddph__replicas_broadcast(ddph_model *m, int root, ddph_err *err);

/* How many of m's parameters take part (their memory given, on the
 * host): with none, check_replicas_every has nothing to compare. */
int ddph__replicas_count(const ddph_model *m);

/* Collective: DDPH_ERR_MISMATCH when some parameter differs between
 * ranks, naming it and the ranks. */
ddph_status ddph__replicas_check(ddph_model *m, ddph_err *err);

#endif
