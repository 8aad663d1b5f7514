/* check_gpt.c: the GPT example's backward pass against finite differences
 * (Check), in double precision (examples/train_gpt/gpt.c built with
 * -DGPT_DOUBLE): every element of every parameter tensor of a small
 * model, every layer included, and the gradient-done callbacks: each
 * tensor once, in backward's order, with its final gradient. */
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

/* What the callback saw: each (tensor, layer) in the order reported, and
 * its gradient at that moment, copied to where it sits in m->grads. */
typedef struct seen {
    const gpt *m;
    int n, tensor[64], layer[64];
    real *copy; /* gpt_param_count */
} seen;

static real *slice_of(const gpt *m, int t, int l)
{
    return m->grad[t] + gpt_slice_size(&m->cfg, t) * (size_t)l;
}

static void record(void *user, int t, int l)
{
    seen *s = user;
    ck_assert_int_lt(s->n, 64);
    size_t n = gpt_slice_size(&s->m->cfg, t);
    const real *g = slice_of(s->m, t, l);
    s->tensor[s->n] = t;
    s->layer[s->n] = l;
    memcpy(s->copy + (g - s->m->grads), g, n * sizeof(real));
    s->n++;
}

START_TEST(each_gradient_is_done_once_and_complete)
{
    gpt m;
    ck_assert_int_eq(gpt_create(&m, &small, B), 0);
    gpt_init(&m, 3);
    randomize(&m);
    int in[B * 5], tg[B * 5];
    make_batch(in, tg);
    seen s = {.m = &m, .copy = malloc(gpt_param_count(&small) * sizeof(real))};
    ck_assert_ptr_nonnull(s.copy);
    gpt_forward(&m, in, tg, B);
    memset(m.grads, 0, gpt_param_count(&small) * sizeof *m.grads);
    gpt_backward(&m, in, tg, B, record, &s);
    /* Every slice once: the final LayerNorm, the blocks from the last,
     * each block's tensors in pairs from its last (weight, then bias),
     * the embeddings. */
    int per_layer = GPT_FCPROJB - GPT_LN1W + 1;
    ck_assert_int_eq(s.n, 2 + small.layers * per_layer + 2);
    int k = 0;
    int want_t[64], want_l[64];
    want_t[k] = GPT_LNFW, want_l[k++] = 0;
    want_t[k] = GPT_LNFB, want_l[k++] = 0;
    for (int l = small.layers - 1; l >= 0; l--)
        for (int t = GPT_FCPROJW; t >= GPT_LN1W; t -= 2) {
            want_t[k] = t, want_l[k++] = l;     /* weight or gain */
            want_t[k] = t + 1, want_l[k++] = l; /* its bias or shift */
        }
    want_t[k] = GPT_WPE, want_l[k++] = 0;
    want_t[k] = GPT_WTE, want_l[k++] = 0;
    for (int i = 0; i < s.n; i++) {
        ck_assert_msg(s.tensor[i] == want_t[i] && s.layer[i] == want_l[i],
                      "callback %d: %s of layer %d, want %s of layer %d", i,
                      gpt_tensor_name(s.tensor[i]), s.layer[i],
                      gpt_tensor_name(want_t[i]), want_l[i]);
        /* Done means final: backward adds nothing to it afterwards. */
        size_t n = gpt_slice_size(&small, s.tensor[i]);
        const real *g = slice_of(&m, s.tensor[i], s.layer[i]);
        ck_assert_msg(memcmp(s.copy + (g - m.grads), g, n * sizeof(real)) == 0,
                      "%s of layer %d changed after it was reported done",
                      gpt_tensor_name(s.tensor[i]), s.layer[i]);
    }
    free(s.copy);
    /* Untrained, the loss is about log(V). */
    gpt_init(&m, 3);
    gpt_forward(&m, in, tg, B);
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
    tcase_add_test(tc, each_gradient_is_done_once_and_complete);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
