/* check_gpt.c: the GPT example's backward pass against finite differences
 * (Check), in double precision (examples/train_gpt/gpt.c built with
 * -DGPT_DOUBLE): every element of every parameter tensor of a small
 * model, every layer included, and the layer-done callbacks' order. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../examples/train_gpt/gpt.h"

static const gpt_config small = {
    .vocab = 11, .context = 5, .width = 8, .heads = 2, .layers = 2};
enum { B = 2 };

static void make_batch(int *in, int *tg)
{
    uint64_t s = 7;
    for (int i = 0; i < B * small.context; i++) {
        in[i] = (int)(gpt_rng_next(&s) % (uint64_t)small.vocab);
        tg[i] = (int)(gpt_rng_next(&s) % (uint64_t)small.vocab);
    }
}

/* Parameters far from GPT-2's tiny initial ones, so that every path
 * (attention included) carries a gradient worth checking. */
static void randomize(gpt *m)
{
    uint64_t s = 12345;
    size_t n = gpt_param_count(&m->cfg);
    for (size_t i = 0; i < n; i++)
        m->params[i] = 0.6 * (gpt_rng_uniform(&s) - 0.5) +
                       (m->params[i] == 1 ? 1 : 0);
}

START_TEST(every_gradient_matches_finite_differences)
{
    gpt m;
    ck_assert_int_eq(gpt_create(&m, &small, B), 0);
    gpt_init(&m, 1);
    randomize(&m);
    int in[B * 5], tg[B * 5];
    make_batch(in, tg);
    gpt_forward(&m, in, tg, B);
    memset(m.grads, 0, gpt_param_count(&small) * sizeof *m.grads);
    gpt_backward(&m, in, tg, B, NULL, NULL);
    double h = 1e-6, worst = 0;
    for (int t = 0; t < GPT_NTENSORS; t++) {
        size_t n = gpt_tensor_size(&small, t);
        double tensor_worst = 0, largest = 0;
        for (size_t i = 0; i < n; i++) {
            double keep = m.tensor[t][i];
            m.tensor[t][i] = keep + h;
            gpt_forward(&m, in, tg, B);
            double up = m.loss;
            m.tensor[t][i] = keep - h;
            gpt_forward(&m, in, tg, B);
            double down = m.loss;
            m.tensor[t][i] = keep;
            double numeric = (up - down) / (2 * h);
            double analytic = m.grad[t][i];
            double err = fabs(numeric - analytic) / (fabs(numeric) + 1e-4);
            tensor_worst = err > tensor_worst ? err : tensor_worst;
            largest = fabs(analytic) > largest ? fabs(analytic) : largest;
        }
        ck_assert_msg(tensor_worst < 1e-4,
                      "%s: worst relative error %.3g", gpt_tensor_name(t),
                      tensor_worst);
        /* A gradient that is zero everywhere would pass the comparison. */
        ck_assert_msg(largest > 1e-4, "%s: every gradient is ~0 (%.3g)",
                      gpt_tensor_name(t), largest);
        worst = tensor_worst > worst ? tensor_worst : worst;
    }
    printf("gpt gradient check: %zu parameters, worst relative error %.3g\n",
           gpt_param_count(&small), worst);
    gpt_free(&m);
}
END_TEST

static void record(void *user, int layer)
{
    int *seen = user;
    seen[++seen[0]] = layer;
}

START_TEST(layers_are_done_last_first)
{
    gpt m;
    ck_assert_int_eq(gpt_create(&m, &small, B), 0);
    gpt_init(&m, 3);
    int in[B * 5], tg[B * 5], seen[8] = {0};
    make_batch(in, tg);
    gpt_forward(&m, in, tg, B);
    gpt_backward(&m, in, tg, B, record, seen);
    /* The final LayerNorm (L), the blocks from the last, the embeddings. */
    ck_assert_int_eq(seen[0], small.layers + 2);
    ck_assert_int_eq(seen[1], small.layers);
    ck_assert_int_eq(seen[2], 1);
    ck_assert_int_eq(seen[3], 0);
    ck_assert_int_eq(seen[4], -1);
    /* Untrained, the loss is about log(V). */
    ck_assert(fabs(m.loss - log((double)small.vocab)) < 0.1);
    gpt_free(&m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gpt");
    TCase *tc = tcase_create("Core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, every_gradient_matches_finite_differences);
    tcase_add_test(tc, layers_are_done_last_first);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
