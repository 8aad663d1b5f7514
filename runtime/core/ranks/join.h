/* join.h: uneven inputs evened out, as PyTorch's Join does for DDP.
 *
 * With [runtime] join = true, a rank whose data has ended calls ddph_join
 * instead of another step.  Until every rank has called it, the joined
 * rank shadows each synchronising step of the others: its gradients are
 * zeros, every bucket goes through the hook as on any step (so each
 * collective finds its partner), and on_step_end runs.  Each
 * synchronising step begins with a roll call, one small allreduce that
 * counts the ranks still training and checks that every rank steps the
 * same models; a joined rank answers it with 0.  When the count is 0
 * every rank has joined: the parameters the trainer gave
 * (ddph_model_set_param_data) are broadcast from the last rank to join,
 * and ddph_join returns on every rank.
 *
 * Averages are the sum over the ranks still training divided by the
 * initial world size ([runtime] divide_by_initial_world_size = true, the
 * default, as PyTorch's) or by the number of ranks still training
 * (false): the host scales each bucket the hook returned by W / active. */
#ifndef DDPH_JOIN_H
#define DDPH_JOIN_H

#include "core/context.h"

/* (ddph_join is public; the roll call of each synchronising step is in
 * roll_call.h.) */

#endif
