/* minimal_trainer: the smallest real ddphook trainer.
 *
 * A three-layer "model" whose gradients are computed from the rank and the
 * step, so the right answer is known: after ddph_step_wait every rank must
 * hold the average over ranks.  It registers the parameters, marks each
 * gradient ready in backward order (last layer first), waits, checks the
 * average and prints what the runtime did: buckets, hook, bytes sent.
 *
 *     mpiexec -n 2 ./minimal_trainer examples/configs/allreduce.ini
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <ddphook/ddphook.h>

#define NLAYERS 3
#define STEPS 5

static const int64_t shapes[NLAYERS][2] = {{256, 128}, {128, 64}, {64, 10}};

/* The gradient rank r computes at step s for element i of layer l. */
static float local_grad(int r, int s, int l, size_t i)
{
    return (float)((r + 1) * (l + 1)) * 0.25f + (float)(i % 7) - (float)s;
}

int main(int argc, char **argv)
{
    const char *ini = argc > 1 ? argv[1] : NULL;
    ddph_ctx *ctx;
    if (ddph_open(ini, &argc, &argv, &ctx) != DDPH_OK)
        return 1; /* ddph_open has printed why */
    int rank = ddph_rank(ctx), world = ddph_world_size(ctx);
    ddph_model *model;
    float *grads[NLAYERS] = {0}; /* ours */
    float *where[NLAYERS];        /* where backward writes them */
    size_t numel[NLAYERS];
    int rc = 1;
    if (ddph_model_create(ctx, "mlp", &model) != DDPH_OK)
        goto fail;
    for (int l = 0; l < NLAYERS; l++) {
        char name[32];
        snprintf(name, sizeof name, "layer%d.weight", l);
        numel[l] = (size_t)(shapes[l][0] * shapes[l][1]);
        grads[l] = calloc(numel[l], sizeof(float));
        if (!grads[l] ||
            ddph_model_add_param(model, name, grads[l], shapes[l], 2, DDPH_F32,
                                 DDPH_CPU, NULL) != DDPH_OK)
            goto fail;
    }
    if (ddph_model_finalize(model) != DDPH_OK)
        goto fail;
    /* Our own arrays, or with [runtime] gradient_as_bucket_view = true
     * the gradients' place inside the runtime's buckets (no copies). */
    for (int l = 0; l < NLAYERS; l++) {
        void *p;
        if (ddph_model_grad_ptr(model, l, &p) != DDPH_OK)
            goto fail;
        where[l] = p;
    }

    double worst = 0;
    for (int s = 0; s < STEPS; s++) {
        if (ddph_step_begin(ctx, &model, 1) != DDPH_OK)
            goto fail;
        for (int l = NLAYERS - 1; l >= 0; l--) { /* backward: last first */
            for (size_t i = 0; i < numel[l]; i++)
                where[l][i] = local_grad(rank, s, l, i);
            if (ddph_grad_ready(model, l) != DDPH_OK)
                goto fail;
        }
        if (ddph_step_wait(ctx) != DDPH_OK)
            goto fail;
        for (int l = 0; l < NLAYERS; l++)
            for (size_t i = 0; i < numel[l]; i++) {
                double want = 0;
                for (int r = 0; r < world; r++)
                    want += local_grad(r, s, l, i);
                want /= world;
                double d = fabs(where[l][i] - want);
                worst = d > worst ? d : worst;
            }
        /* ... the optimizer would step here ... */
        if (ddph_step_end(ctx) != DDPH_OK)
            goto fail;
    }
    uint64_t wire = 0;
    int nb = ddph_model_bucket_count(model);
    for (int b = 0; b < nb; b++) {
        ddph_bucket_info info;
        ddph_model_bucket_info(model, b, &info);
        wire += info.bytes_on_wire;
    }
    /* The worst error of every rank, so that rank 0's line speaks for
     * the job. */
    if (ddph_allreduce_f64(ctx, &worst, 1, DDPH_MAX) != DDPH_OK)
        goto fail;
    if (rank == 0)
        printf("minimal_trainer: %d ranks, %d steps, %d buckets, %llu bytes "
               "sent per rank, max |error| vs the true average %.3g\n",
               world, STEPS, nb, (unsigned long long)wire, worst);
    rc = worst < 1e-4 ? 0 : 1;
    if (rc && rank == 0)
        fprintf(stderr, "minimal_trainer: gradients are not the average\n");
    goto done;
fail:
    fprintf(stderr, "minimal_trainer: %s\n", ddph_last_error(ctx));
done:
    for (int l = 0; l < NLAYERS; l++)
        free(grads[l]);
    if (ddph_close(ctx) != DDPH_OK)
        rc = 1; /* the job failed (ddph_close has said why) */
    return rc;
}
