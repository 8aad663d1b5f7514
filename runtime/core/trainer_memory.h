/* trainer_memory.h: the gradient and weight memory a trainer registers,
 * checked to be apart where sharing would make the runtime reduce,
 * broadcast or compare other bytes than the trainer's.  Each returns
 * DDPH_ERR_INVALID naming both parameters (and models) and the bytes in
 * common. */
#ifndef DDPH_CORE_TRAINER_MEMORY_H
#define DDPH_CORE_TRAINER_MEMORY_H

#include "core/context.h"

/* At finalize: no two of the model's gradients overlap, and no weights
 * (set_param_data) overlap a gradient; weights may overlap weights (tied
 * parameters). */
ddph_status ddph__check_memory_apart(const ddph_model *m, ddph_err *err);
/* At finalize, before gradient_as_bucket_view moves the gradients: the
 * model's gradient memory as the trainer gave it, sorted (m->grad_spans),
 * for the checks across models below. */
ddph_status ddph__keep_grad_spans(ddph_model *m, ddph_err *err);
/* With gradient_as_bucket_view: no gradient memory of the model is in a
 * model finalized before it (the tensor would get a gradient in each). */
ddph_status ddph__check_view_unshared(const ddph_model *m, ddph_err *err);
/* At step_begin: no two of the models given to one step share gradient
 * memory (the step would reduce it twice). */
ddph_status ddph__models_grads_apart(ddph_model *const *models, int n,
                                     ddph_err *err);

#endif
