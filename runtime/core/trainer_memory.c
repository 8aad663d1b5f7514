/* trainer_memory.c: the gradient and weight memory a trainer registers,
 * checked to be apart wherever sharing would make the runtime reduce,
 * broadcast or compare other bytes than the trainer's (trainer_memory.h).
 * Each check sorts the memory by device and address and walks it once. */
#include "build-config.h"

#include <stdint.h>
#include <stdlib.h>

#include "core/context.h"
#include "core/trainer_memory.h"

/* Appends parameter i's memory at `at` (its gradient, or its weights:
 * is_data) to r[0..n), unless there is none; returns the new n. */
static int add_span(ddph_mem_range *r, int n, const ddph_model *m, int i,
                    const void *at, int is_data)
{
    const ddph_param *p = &m->params[i];
    size_t bytes = p->numel * ddph__dtype_size(p->dtype);
    if (!at || !bytes)
        return n;
    r[n] = (ddph_mem_range){p->device, (uintptr_t)at, (uintptr_t)at + bytes,
                            i, is_data};
    return n + 1;
}

static int by_device_then_address(const void *a, const void *b)
{
    const ddph_mem_range *x = a, *y = b;
    if (x->device != y->device)
        return x->device < y->device ? -1 : 1;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static size_t common_bytes(const ddph_mem_range *a, const ddph_mem_range *b)
{
    return (size_t)((a->hi < b->hi ? a->hi : b->hi) -
                    (a->lo > b->lo ? a->lo : b->lo));
}

static ddph_status overlap_error(const ddph_model *m, const ddph_mem_range *a,
                                 const ddph_mem_range *b, ddph_err *err)
{
    const char *an = m->params[a->index].name, *bn = m->params[b->index].name;
    if (!a->is_data && !b->is_data)
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "parameters '%s' and '%s' were registered with "
                          "overlapping gradient memory (%zu bytes in "
                          "common): each step would reduce those bytes twice "
                          "and leave the rest unsynchronised; give each "
                          "parameter its own memory",
                          an, bn, common_bytes(a, b));
    const ddph_mem_range *d = a->is_data ? a : b, *g = a->is_data ? b : a;
    return ddph__fail(err, DDPH_ERR_INVALID,
                      "the weights of parameter '%s' "
                      "(ddph_model_set_param_data) overlap the gradient "
                      "memory of parameter '%s' (%zu bytes in common): rank "
                      "0's weights would be broadcast and compared there, "
                      "and the trainer's own never; give set_param_data the "
                      "parameter's values, not a gradient",
                      m->params[d->index].name, m->params[g->index].name,
                      common_bytes(a, b));
}

/* Two parameters whose gradient memory overlaps (a slice of a flat array
 * registered twice, an offset one layer off) would be reduced from the
 * same bytes, written back over each other, and whatever part of the
 * trainer's gradient neither covers would never be synchronised.  Weights
 * over gradient memory (a gradient given to set_param_data) would be
 * broadcast and compared in the trainer's stead.  Weights over weights
 * are allowed: tied parameters share theirs. */
ddph_status ddph__check_memory_apart(const ddph_model *m, ddph_err *err)
{
    ddph_mem_range *r = malloc((size_t)(m->nparams ? 2 * m->nparams : 1) *
                          sizeof *r);
    if (!r)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    int n = 0;
    for (int i = 0; i < m->nparams; i++) {
        n = add_span(r, n, m, i, m->params[i].grad, 0);
        n = add_span(r, n, m, i, m->params[i].data, 1);
    }
    qsort(r, (size_t)n, sizeof *r, by_device_then_address);
    /* Sorted by start: a range overlaps an earlier one of its device iff
     * it starts before the furthest end seen so far (of gradients, of
     * weights). */
    ddph_status st = DDPH_OK;
    const ddph_mem_range *far_grad = NULL, *far_data = NULL;
    for (int k = 0; k < n && st == DDPH_OK; k++) {
        const ddph_mem_range *c = &r[k];
        if (k > 0 && c->device != r[k - 1].device)
            far_grad = far_data = NULL;
        if (far_grad && c->lo < far_grad->hi)
            st = overlap_error(m, far_grad, c, err);
        else if (!c->is_data && far_data && c->lo < far_data->hi)
            st = overlap_error(m, far_data, c, err);
        const ddph_mem_range **far = c->is_data ? &far_data : &far_grad;
        if (!*far || c->hi > (*far)->hi)
            *far = c;
    }
    free(r);
    return st;
}

ddph_status ddph__keep_grad_spans(ddph_model *m, ddph_err *err)
{
    m->grad_spans = malloc((size_t)(m->nparams ? m->nparams : 1) *
                           sizeof *m->grad_spans);
    if (!m->grad_spans)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    m->ngrad_spans = 0;
    for (int i = 0; i < m->nparams; i++)
        m->ngrad_spans = add_span(m->grad_spans, m->ngrad_spans, m, i,
                                  m->params[i].grad, 0);
    qsort(m->grad_spans, (size_t)m->ngrad_spans, sizeof *m->grad_spans,
          by_device_then_address);
    return DDPH_OK;
}

/* The first span of x that overlaps one of y's (*in_y), or NULL: a merge
 * of the two sorted lists (each one's spans are apart). */
static const ddph_mem_range *shared_span(const ddph_model *x,
                                         const ddph_model *y,
                                         const ddph_mem_range **in_y)
{
    int a = 0, b = 0;
    while (a < x->ngrad_spans && b < y->ngrad_spans) {
        const ddph_mem_range *u = &x->grad_spans[a], *v = &y->grad_spans[b];
        if (u->device != v->device) {
            if (u->device < v->device)
                a++;
            else
                b++;
            continue;
        }
        if (u->lo < v->hi && v->lo < u->hi) {
            *in_y = v;
            return u;
        }
        if (u->hi <= v->hi)
            a++;
        else
            b++;
    }
    return NULL;
}

/* Two models stepped together over one gradient tensor (a shared layer
 * registered in both) reduce it twice in one step, and whichever result
 * is copied back last wins, read by the second model while the first
 * one's result is being written (a bucket callback copies back early).
 * In separate steps each model reduces it in its own turn: allowed. */
ddph_status ddph__models_grads_apart(ddph_model *const *models, int n,
                                     ddph_err *err)
{
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            const ddph_model *x = models[i], *y = models[j];
            const ddph_mem_range *v, *u = shared_span(x, y, &v);
            if (u)
                return ddph__fail(
                    err, DDPH_ERR_INVALID,
                    "models '%s' and '%s' are given to one step, and their "
                    "parameters '%s' and '%s' share gradient memory (%zu "
                    "bytes): the step would reduce those bytes twice, one "
                    "model's result over the other's; step them in "
                    "separate ddph_step_begin calls, or register the "
                    "shared tensor in one model only",
                    x->name, y->name, x->params[u->index].name,
                    y->params[v->index].name, common_bytes(u, v));
        }
    return DDPH_OK;
}

/* With gradient_as_bucket_view each model's gradients move into its own
 * buckets: memory registered in two models (a shared layer) would become
 * two gradients, and whichever the trainer writes, the other model's
 * steps would reduce a stale one and the trainer step on its own. */
ddph_status ddph__check_view_unshared(const ddph_model *m, ddph_err *err)
{
    ddph_ctx *ctx = m->ctx;
    for (int k = 0; k < ctx->nmodels; k++) {
        const ddph_model *o = ctx->models[k];
        const ddph_mem_range *v, *u;
        if (o == m || !o->finalized || !(u = shared_span(m, o, &v)))
            continue;
        return ddph__fail(
            err, DDPH_ERR_INVALID,
            "parameter '%s' was registered with gradient memory that "
            "parameter '%s' of model '%s' has too (%zu bytes in common): "
            "with [runtime] gradient_as_bucket_view = true (%s) each model's "
            "gradients move into its own buckets, so one tensor would get "
            "two gradients and each model's steps would reduce a stale one. "
            "Register the shared tensor in one model, or set "
            "gradient_as_bucket_view = false",
            m->params[u->index].name, o->params[v->index].name, o->name,
            common_bytes(u, v), ctx->cfg.path);
    }
    return DDPH_OK;
}
