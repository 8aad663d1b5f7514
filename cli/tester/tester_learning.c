/* tester_learning.c: error feedback and training (tester.h). */
#include "build-config.h"

#include "tester.h"

/* ---- error feedback --------------------------------------------------------
 * A hook that keeps back what it did not send and sends it later returns,
 * summed over K steps, the summed averages minus what the ranks still
 * hold back, which stays bounded.  With each rank's gradients the same
 * at every step, the relative distance of the sum from K times the
 * average must then fall like 1/K.  It is measured at K = 8, 16, 32, ...
 * and the exponent fitted over the last EF_FIT points: a pass needs the
 * distance at most EF_BOUND and a slope of at most EF_SLOPE, from K =
 * EF_MIN_K on; or a distance below EF_EXACT.  Top-k's slope is -1 there,
 * 1-bit hooks' -0.74 to -0.83 (their memory still grows slowly); unbiased
 * noise without memory (random rounding) averages out only like
 * 1/sqrt(K), -0.37 to -0.49.  A hook that drops
 * part of the gradient, scales it or returns zeros reaches a floor.  It
 * runs on every kind of bucket: the realistic ones, and odd ones each a
 * bucket of its own, a 1-element bucket among them. */
#define EF_BOUND 0.1
#define EF_EXACT 1e-4
#define EF_SLOPE -0.65
#define EF_FIT 4

/* Least-squares slope of log(d) over log(k) for n points. */
static double loglog_slope(const double *k, const double *d, int n)
{
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) {
        double x = log(k[i]), y = log(d[i] > 0 ? d[i] : 1e-300);
        sx += x, sy += y, sxx += x * x, sxy += x * y;
    }
    return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

/* One set's run: 1 when it passed; what it measured in trail. */
static int ef_run(tester *t, const shape_set *set, char *trail, size_t len,
                  char *why, size_t whylen, int *failed_to_run)
{
    run r;
    int ok = run_open(t, &r, set, "none", why, whylen);
    size_t total = 0;
    for (int i = 0; ok && i < r.n; i++)
        total += r.numel[i];
    double *sum = calloc(total ? total : 1, sizeof *sum);
    double *avg = calloc(total ? total : 1, sizeof *avg);
    ok = ok && sum && avg;
    /* The exact average of the gradients every step repeats (step 0's). */
    for (int i = 0, at = 0; ok && i < r.n; at += (int)r.numel[i], i++)
        for (size_t k = 0; k < r.numel[i]; k++)
            avg[at + (int)k] = grad_value(t->rank, 0, i, k);
    if (ok)
        MPI_Allreduce(MPI_IN_PLACE, avg, (int)total, MPI_DOUBLE, MPI_SUM,
                      MPI_COMM_WORLD);
    double norm_avg = 0;
    for (size_t j = 0; ok && j < total; j++) {
        avg[j] /= t->world;
        norm_avg += avg[j] * avg[j];
    }
    norm_avg = sqrt(norm_avg);
    int passed = 0, npts = 0;
    double ks[32], ds[32], slope = 0, dist = 1;
    snprintf(trail, len, "%s:", set->label);
    for (int k = 1; ok && !passed && k <= t->ef_steps; k++) {
        ok = run_step(&r, 0, why, whylen, t->rank);
        for (int i = 0, at = 0; ok && i < r.n; at += (int)r.numel[i], i++)
            for (size_t j = 0; j < r.numel[i]; j++)
                sum[at + (int)j] += r.g[i][j];
        if (!ok || k < 8 || (k & (k - 1)) != 0 || npts >= 32)
            continue;
        double d = 0;
        for (size_t j = 0; j < total; j++) {
            double e = sum[j] - k * avg[j];
            d += e * e;
        }
        dist = norm_avg > 0 ? sqrt(d) / (k * norm_avg) : sqrt(d);
        ks[npts] = k;
        ds[npts++] = dist;
        size_t used = strlen(trail);
        snprintf(trail + used, len - used, " %d: %.3g", k, dist);
        int fit = npts >= EF_FIT ? EF_FIT : npts;
        slope = loglog_slope(ks + npts - fit, ds + npts - fit, fit);
        passed = dist <= EF_EXACT ||
                 (k >= EF_MIN_K && dist <= EF_BOUND && slope <= EF_SLOPE);
    }
    if (ok && !passed && npts >= 2) {
        size_t used = strlen(trail);
        snprintf(trail + used, len - used, " (slope %.2f)", slope);
    }
    run_close(&r);
    free(sum);
    free(avg);
    *failed_to_run = !ok;
    return ok && passed;
}

void check_error_feedback(tester *t)
{
    const char *check = "error feedback: sums track the average";
    if (!t->error_feedback) {
        row(t, 1, 1, check,
            "the hook does not declare DDPH_PLUGIN_ERROR_FEEDBACK");
        return;
    }
    char why[512] = "", trail[2][240] = {"", ""};
    const shape_set *sets[2] = {&realistic, &odd};
    int passed = 1, broken = 0;
    for (int i = 0; i < 2 && !broken; i++) {
        int ran_out = 0;
        passed &= ef_run(t, sets[i], trail[i], sizeof trail[i], why,
                         sizeof why, &ran_out);
        broken = ran_out;
    }
    if (broken) {
        row(t, 0, 0, check, "%s", why);
        return;
    }
    char said[512];
    snprintf(said, sizeof said,
             "|sum of K results - K x average| / |K x average|, like 1/K "
             "(fitted slope <= %.2f): %s; %s%s",
             EF_SLOPE, trail[0], trail[1],
             passed ? ""
                    : " (slope near 0: part of the gradient lost for "
                      "good; near -0.5: noise, no memory; or more "
                      "--ef-steps)");
    row(t, passed, 0, check, "%s", said);
}

/* ---- training ----------------------------------------------------------------
 * Plain SGD through the hook on a least-squares problem with a known
 * optimum, against the same run with the exact average (MPI_Allreduce in
 * double).  Rank r's loss is
 *   L_r(w) = 1/2 sum_i h_i ((w_i - t_ri)^2 + v_ri)
 * (curvatures h_i in [1, TRAIN_KAPPA], targets t_ri and spreads v_ri >= 0
 * of rank r's data; the same on every run), the loss trained is their
 * mean, and its optimum is w_i = the ranks' mean target, with the loss
 * L* there known in closed form (positive on 1 rank too: the spreads).
 * The parameters are the tensors of `trained` (odd sizes, several buckets),
 * TRAIN_STEPS steps of rate TRAIN_RATE from w = 0.
 *
 * One element in TRAIN_FAR_EVERY has its target TRAIN_FAR further away, so
 * that, as in a network's gradient, a few elements of every chunk carry
 * most of it for many steps.  A hook that holds part of the gradient back
 * and sends it later (error feedback) must send those elements soon: what
 * it holds back of them arrives after the exact run has moved them, and
 * they overshoot.  A 1-bit hook with a scale per chunk sends every element
 * of a chunk with the same magnitude, so a large element waits until its
 * memory lifts the chunk's scale; at half the right scale it waits about
 * three times as long.  At this rate and step count the right scale ends
 * 1.4-3x the exact run's excess (chunks of 64 to 256), half of it about
 * 40x: TRAIN_FACTOR sits between them, about 3.5x from each (top-k, which
 * sends the large elements first, ends at 1.2-2.6x).  The exact run still
 * has loss to lose at the end, so a hook that drops, inflates, flips or
 * forgets part of the gradient ends with a visibly larger excess L - L*
 * too. */
#define TRAIN_STEPS 200
#define TRAIN_RATE 0.004
#define TRAIN_KAPPA 10.0
#define TRAIN_FAR_EVERY 37
#define TRAIN_FAR 50.0
#define TRAIN_FACTOR 10.0
/* A hook without error feedback holds nothing back: each step sends that
 * step's gradient, within its tolerance, so the only harm its errors can
 * do is add up.  Unbiased errors drawn afresh each step cancel over the
 * run (4-bit stochastic rounding ends 0.98-1.0x, 2-bit 1.03x; exact and
 * half precision 1.0x; deterministic rounding to the nearest of 4 bits
 * 1.1-1.2x); an error that repeats does not: a rounding that favors one
 * sign (4-8x), a clipped top level (1.3-1.7x), a rank's message dropped
 * after some steps (3-25x).  Such a hook is held to TRAIN_FACTOR_NO_EF,
 * not to TRAIN_FACTOR, which is for the delays of error feedback. */
#define TRAIN_FACTOR_NO_EF 1.25
/* The least excess accepted, of the exact run's: a hook at the right
 * scale does not beat the exact average by much, one at a wrong scale (a
 * divisor that is not W) converges "faster" by overshooting less, e.g.
 * 1.5x the average ends near 0.13x. */
#define TRAIN_LEAST 0.5
/* The loss hides a small tensor that never moves (a 1-element bucket
 * never sent: 1 of 97 parameters in `odd`).  Each tensor is checked: the
 * exact run takes every one more than half its way (curvature 1 and up,
 * 200 steps of 0.004); one never sent goes nowhere (0). */
#define TRAIN_MOVED 0.25

static const shape_set trained = {"trained", 5,
    {{37, 13}, {37}, {11, 37}, {11}, {5, 3, 3}}, {2, 1, 2, 1, 3}, 0.002};

static double curvature(int p, size_t i)
{
    return 1.0 + (TRAIN_KAPPA - 1.0) * (grad_value(0, 99991, p, i) + 1.0) / 2;
}
static double target(int rank, int p, size_t i)
{
    double far = i % TRAIN_FAR_EVERY == (size_t)p ? TRAIN_FAR : 0.0;
    return 1.0 + far + grad_value(rank, 99992, p, i);
}
static double spread(int rank, int p, size_t i)
{
    return 0.5 + 0.5 * grad_value(rank, 99993, p, i);
}

/* The mean over ranks of L_r(w), or (w = NULL) of L_r at the optimum,
 * where each w_i is the ranks' mean target; `scratch` holds the largest
 * tensor's elements. */
static double train_loss(const run *r, int rank, int world, float *const *w,
                         double *scratch)
{
    double mine = 0;
    for (int p = 0; p < r->n; p++) {
        size_t n = r->numel[p];
        for (size_t i = 0; i < n; i++)
            scratch[i] = w ? (double)w[p][i] : target(rank, p, i) / world;
        if (!w)
            MPI_Allreduce(MPI_IN_PLACE, scratch, (int)n, MPI_DOUBLE, MPI_SUM,
                          MPI_COMM_WORLD);
        for (size_t i = 0; i < n; i++) {
            double d = scratch[i] - target(rank, p, i);
            mine += 0.5 * curvature(p, i) * (d * d + spread(rank, p, i));
        }
    }
    double all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return all / world;
}

/* TRAIN_STEPS steps through the hook (exact = 0) or with the exact
 * average; the final loss in *loss, the final parameters' checksum in
 * *sum, and in *moved the least fraction of its way from 0 (where it
 * starts) to the optimum that a tensor went, measured along that way.
 * The exact run's parameters are the same on every rank, so the mean of
 * the ranks' gradients h_i (w_i - t_ri) is h_i (w_i - the mean target),
 * in double: one allreduce of the targets, none per step (on
 * more ranks than cores, each collective costs a time slice). */
static int train(tester *t, const shape_set *set, int exact, double *loss,
                 uint32_t *sum, double *optimum, double *moved, char *why,
                 size_t whylen)
{
    run r;
    int ok = run_open(t, &r, set, "none", why, whylen);
    float *w[8] = {0};
    double *avg = NULL, *mean_target[8] = {0};
    size_t most = 0;
    for (int p = 0; ok && p < r.n; p++) {
        w[p] = calloc(r.numel[p] ? r.numel[p] : 1, sizeof(float));
        mean_target[p] = calloc(r.numel[p] ? r.numel[p] : 1, sizeof(double));
        most = r.numel[p] > most ? r.numel[p] : most;
        ok = w[p] && mean_target[p];
        for (size_t i = 0; ok && i < r.numel[p]; i++)
            mean_target[p][i] = target(t->rank, p, i) / t->world;
        if (ok)
            MPI_Allreduce(MPI_IN_PLACE, mean_target[p], (int)r.numel[p],
                          MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    avg = ok ? calloc(most ? most : 1, sizeof *avg) : NULL;
    ok = ok && avg;
    for (int s = 0; ok && s < TRAIN_STEPS; s++) {
        if (!exact && ddph_step_begin(r.ctx, &r.m, 1) != DDPH_OK)
            goto fail;
        for (int p = r.n - 1; p >= 0; p--) {
            for (size_t i = 0; i < r.numel[p]; i++)
                r.g[p][i] = (float)(curvature(p, i) *
                                    ((double)w[p][i] -
                                     (exact ? mean_target[p][i]
                                            : target(t->rank, p, i))));
            if (!exact && ddph_grad_ready(r.m, p) != DDPH_OK)
                goto fail;
        }
        if (!exact &&
            (ddph_step_wait(r.ctx) != DDPH_OK || ddph_step_end(r.ctx) != DDPH_OK))
            goto fail;
        for (int p = 0; p < r.n; p++)
            for (size_t i = 0; i < r.numel[p]; i++)
                w[p][i] -= (float)TRAIN_RATE * r.g[p][i];
    }
    if (ok) {
        *loss = train_loss(&r, t->rank, t->world, w, avg);
        *optimum = train_loss(&r, t->rank, t->world, NULL, avg);
        uLong c = crc32(0L, Z_NULL, 0);
        for (int p = 0; p < r.n; p++)
            c = crc32(c, (const Bytef *)w[p], (uInt)(r.numel[p] * sizeof(float)));
        *sum = (uint32_t)c;
        *moved = INFINITY;
        for (int p = 0; p < r.n; p++) {
            double along = 0, way = 0;
            for (size_t i = 0; i < r.numel[p]; i++) {
                along += (double)w[p][i] * mean_target[p][i];
                way += mean_target[p][i] * mean_target[p][i];
            }
            if (way > 0 && !(along / way >= *moved))
                *moved = along / way; /* NaN included */
        }
    }
    if (0) {
fail:
        snprintf(why, whylen, "%s", ddph_last_error(r.ctx));
        ok = 0;
    }
    for (int p = 0; p < 8; p++) {
        free(w[p]);
        free(mean_target[p]);
    }
    free(avg);
    run_close(&r);
    return ok;
}

/* The most excess accepted, of the exact run's. */
static double train_factor(const tester *t)
{
    return t->error_feedback ? TRAIN_FACTOR : TRAIN_FACTOR_NO_EF;
}

/* One set's training, judged: 1 when it passed; what it measured in said. */
static int train_set(tester *t, const shape_set *set, char *said, size_t len,
                     int *failed_to_run)
{
    char why[512] = "";
    double hook_loss = 0, exact_loss = 0, optimum = 0, hook_moved = 0,
           exact_moved = 0;
    uint32_t hook_sum = 0, exact_sum = 0;
    int ok = train(t, set, 1, &exact_loss, &exact_sum, &optimum, &exact_moved,
                   why, sizeof why) &&
             train(t, set, 0, &hook_loss, &hook_sum, &optimum, &hook_moved, why,
                   sizeof why);
    int agree = ok && same_everywhere(hook_sum);
    MPI_Allreduce(MPI_IN_PLACE, &agree, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    *failed_to_run = !ok;
    if (!ok) {
        snprintf(said, len, "%s: %s", set->label, why);
        return 0;
    }
    size_t params = 0;
    for (int p = 0; p < set->n; p++) {
        size_t numel = 1;
        for (int d = 0; d < set->ndims[p]; d++)
            numel *= (size_t)set->shapes[p][d];
        params += numel;
    }
    double excess = hook_loss - optimum, exact_excess = exact_loss - optimum;
    int close = excess <= train_factor(t) * exact_excess && /* NaN fails */
                excess >= TRAIN_LEAST * exact_excess && hook_moved >= TRAIN_MOVED;
    snprintf(said, len,
             "%s (%zu parameters, %d tensors): loss %.6g through the hook, "
             "%.6g exact, optimum %.6g: excess %.3gx the exact run's; each "
             "tensor went %.2f of its way or more (exact run %.2f)%s",
             set->label, params, set->n, hook_loss, exact_loss, optimum,
             exact_excess > 0 ? excess / exact_excess : excess, hook_moved,
             exact_moved, agree ? "" : "; the ranks' parameters DIFFER");
    return close && agree;
}

/* On the trained set (several buckets of odd sizes), then on `odd`, each
 * tensor a bucket of its own, a 1-element one among them: a hook that
 * never sends part of a bucket leaves those parameters where they
 * started. */
void check_training(tester *t)
{
    const char *check = "trains: least squares, SGD";
    if (getenv(UNDER_VALGRIND)) {
        row(t, 1, 1, check, "not under valgrind (the run without "
                            "--valgrind trains)");
        return;
    }
    const shape_set *sets[2] = {&trained, &odd};
    char said[2][640] = {"", ""};
    int passed = 1, broken = 0;
    for (int i = 0; i < 2 && !broken; i++)
        passed &= train_set(t, sets[i], said[i], sizeof said[i], &broken);
    if (broken) {
        row(t, 0, 0, check, "%s", said[1][0] ? said[1] : said[0]);
        return;
    }
    row(t, passed, 0, check,
        "%d steps of rate %g: %s; %s (excess %g to %gx%s: below, a wrong "
        "scale; above, %s; a tensor %g of its way or more: less, part of "
        "it never sent)",
        TRAIN_STEPS, TRAIN_RATE, said[0], said[1], TRAIN_LEAST,
        train_factor(t),
        t->error_feedback ? ", error feedback" : ", no error feedback",
        t->error_feedback ? "sent too late or wrong"
                          : "errors that do not cancel over steps (a bias, "
                            "or the same draws every step)",
        TRAIN_MOVED);
}
