/* two_models: two models trained together, with gradient accumulation over
 * both at once and a different hook for each: accelerate's
 *
 *     with accelerator.accumulate(gen, disc):
 *         ...
 *
 * in C.  A "generator" (a linear map y = G x) and a "discriminator" (a
 * logistic regression on G's outputs vs. the targets) learn from
 * synthetic data that every rank draws differently; both models are given
 * to one ddph_step_begin, so they share one decision (synchronise on every
 * accumulate_steps-th backward pass) while each keeps its own buckets and
 * hook.
 *
 *     mpiexec -n 2 examples/two_models examples/configs/two_models.ini
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ddphook/ddphook.h>

#define DIN 64
#define DOUT 32
#define BATCH 16
#define STEPS 96

static uint64_t rng_state;

static double gauss(void)
{
    uint64_t a = (rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull);
    uint64_t b = (rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull);
    double u1 = ((a >> 11) + 1.0) / 9007199254740993.0, u2 = (b >> 11) / 9007199254740992.0;
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

int main(int argc, char **argv)
{
    ddph_ctx *ctx;
    if (ddph_open(argc > 1 ? argv[1] : NULL, &argc, &argv, &ctx) != DDPH_OK)
        return 1;
    int rank = ddph_rank(ctx);
    static float G[DOUT * DIN], T[DOUT * DIN], D[DOUT], bD[1];
    static float own_gG[DOUT * DIN], own_gD[DOUT], own_gbD[1];
    /* The gradients: our arrays, or with [runtime] gradient_as_bucket_view
     * = true their place in the runtime's buckets (after finalize). */
    float *gG = own_gG, *gD = own_gD, *gbD = own_gbD;
    ddph_model *gen, *disc;
    int64_t gshape[2] = {DOUT, DIN}, dshape[1] = {DOUT}, bshape[1] = {1};
    if (ddph_model_create(ctx, "gen", &gen) != DDPH_OK ||
        ddph_model_add_param(gen, "G", gG, gshape, 2, DDPH_F32, DDPH_CPU, NULL) ||
        ddph_model_create(ctx, "disc", &disc) != DDPH_OK ||
        ddph_model_add_param(disc, "w", gD, dshape, 1, DDPH_F32, DDPH_CPU, NULL) ||
        ddph_model_add_param(disc, "b", gbD, bshape, 1, DDPH_F32, DDPH_CPU, NULL) ||
        ddph_model_finalize(gen) != DDPH_OK || ddph_model_finalize(disc) != DDPH_OK ||
        ddph_model_grad_ptr(gen, 0, (void **)&gG) ||
        ddph_model_grad_ptr(disc, 0, (void **)&gD) ||
        ddph_model_grad_ptr(disc, 1, (void **)&gbD))
        goto fail;
    /* The target map is the same everywhere (seed 1); data differ by rank. */
    rng_state = 1;
    for (int i = 0; i < DOUT * DIN; i++)
        T[i] = (float)(gauss() * 0.2);
    rng_state = 1000 + (uint64_t)rank;
    ddph_model *both[2] = {gen, disc};
    float x[DIN], y[DOUT], t[DOUT];
    double gen_loss = 0, disc_loss = 0, first_gen = -1;
    int synced = 0;
    for (int s = 0; s < STEPS; s++) {
        unsigned flags = s == STEPS - 1 ? DDPH_STEP_END_OF_DATA : 0;
        if (ddph_step_begin_flags(ctx, both, 2, flags) != DDPH_OK)
            goto fail;
        double gl = 0, dl = 0;
        for (int b = 0; b < BATCH; b++) {
            for (int i = 0; i < DIN; i++)
                x[i] = (float)gauss();
            for (int o = 0; o < DOUT; o++) {
                y[o] = t[o] = 0;
                for (int i = 0; i < DIN; i++) {
                    y[o] += G[o * DIN + i] * x[i];
                    t[o] += T[o * DIN + i] * x[i];
                }
            }
            /* Generator: squared error to the target map. */
            for (int o = 0; o < DOUT; o++) {
                float e = (y[o] - t[o]) / BATCH;
                gl += 0.5 * (y[o] - t[o]) * (y[o] - t[o]) / BATCH;
                for (int i = 0; i < DIN; i++)
                    gG[o * DIN + i] += e * x[i];
            }
            /* Discriminator: real (t) = 1, generated (y) = 0. */
            for (int k = 0; k < 2; k++) {
                const float *v = k ? y : t;
                float z = bD[0];
                for (int o = 0; o < DOUT; o++)
                    z += D[o] * v[o];
                float p = 1.0f / (1.0f + expf(-z)), label = k ? 0.0f : 1.0f;
                dl -= (label ? log(p + 1e-7) : log(1 - p + 1e-7)) / (2 * BATCH);
                float d = (p - label) / (2 * BATCH);
                for (int o = 0; o < DOUT; o++)
                    gD[o] += d * v[o];
                gbD[0] += d;
            }
        }
        /* Backward order: the discriminator's gradients, then G's. */
        if (ddph_grad_ready(disc, 1) || ddph_grad_ready(disc, 0) ||
            ddph_grad_ready(gen, 0))
            goto fail;
        int sync = ddph_step_syncs(ctx);
        if (ddph_step_wait(ctx) != DDPH_OK)
            goto fail;
        if (sync) { /* one SGD step on the accumulated, averaged gradients */
            for (int i = 0; i < DOUT * DIN; i++)
                G[i] -= 0.05f * gG[i];
            for (int o = 0; o < DOUT; o++)
                D[o] -= 0.05f * gD[o];
            bD[0] -= 0.05f * gbD[0];
            memset(gG, 0, sizeof own_gG);
            memset(gD, 0, sizeof own_gD);
            gbD[0] = 0;
            synced++;
        }
        if (ddph_step_end(ctx) != DDPH_OK)
            goto fail;
        if (first_gen < 0)
            first_gen = gl;
        gen_loss = gl;
        disc_loss = dl;
    }
    ddph_stat st[4];
    size_t n = 0; /* how many the hook has; st holds the first 4 */
    if (ddph_model_hook_stats(gen, st, 4, &n) != DDPH_OK)
        goto fail;
    if (rank == 0) {
        printf("two_models: %d backward passes, %d synchronised for both "
               "models; generator loss %.4f -> %.4f, discriminator loss "
               "%.4f; gen's hook statistics:",
               STEPS, synced, first_gen, gen_loss, disc_loss);
        for (size_t i = 0; i < n && i < 4; i++)
            printf(" %s %g", st[i].name, st[i].value);
        printf("\n");
    }
    /* ddph_close says whether the job ended cleanly on every rank. */
    if (ddph_close(ctx) != DDPH_OK)
        return 1;
    return gen_loss < first_gen ? 0 : 1;
fail:
    fprintf(stderr, "two_models: %s\n", ddph_last_error(ctx));
    ddph_close(ctx);
    return 1;
}
