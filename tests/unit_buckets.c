/* unit_buckets.c: bucket assignment, including the four upstream vectors
 * of test_c10d_common.py (docs/pytorch-semantics.md §4). */
#include "build-config.h"

#include "core/buckets.h"
#include "unit.h"

/* Checks plan == want, given as -1-separated rows. */
static void expect_plan(const ddph_bucket_plan *p, const int *want, int nwant,
                        const size_t *limits)
{
    int b = 0, pos = 0;
    for (int i = 0; i < nwant; i++) {
        if (want[i] == -1) {
            ck_assert_int_eq(p->start[b + 1], pos);
            if (limits)
                ck_assert_uint_eq(p->limits[b], limits[b]);
            b++;
            continue;
        }
        ck_assert_int_eq(p->indices[pos], want[i]);
        pos++;
    }
    ck_assert_int_eq(p->nbuckets, b);
}

static ddph_bucket_plan assign(const ddph_bucket_tensor *t, size_t n,
                               const size_t *limits, size_t nl, int sort)
{
    ddph_bucket_plan p;
    ddph_err e;
    ck_assert_int_eq(ddph__assign_buckets(t, n, limits, nl, sort, &p, &e),
                     DDPH_OK);
    return p;
}

#define F32(i, numel) {(i), (size_t)(numel) * 4, DDPH_F32, DDPH_CPU}
#define F64(i, numel) {(i), (size_t)(numel) * 8, DDPH_F64, DDPH_CPU}

START_TEST(upstream_single_limit)
{
    /* f32 [100,200,100,50], limit [400] -> [[0],[1],[2],[3]] */
    ddph_bucket_tensor t[] = {F32(0, 100), F32(1, 200), F32(2, 100), F32(3, 50)};
    size_t lim[] = {400};
    ddph_bucket_plan p = assign(t, 4, lim, 1, 1);
    int want[] = {0, -1, 1, -1, 2, -1, 3, -1};
    expect_plan(&p, want, 8, NULL);
    ddph__bucket_plan_free(&p);
}
END_TEST

START_TEST(upstream_mixed_dtypes)
{
    /* alternating f32x50 / f64x25, [400] -> [[0,2],[1,3],[4],[5]] */
    ddph_bucket_tensor t[] = {F32(0, 50), F64(1, 25), F32(2, 50),
                              F64(3, 25), F32(4, 50), F64(5, 25)};
    size_t lim[] = {400};
    ddph_bucket_plan p = assign(t, 6, lim, 1, 1);
    int want[] = {0, 2, -1, 1, 3, -1, 4, -1, 5, -1};
    expect_plan(&p, want, 10, NULL);
    ddph__bucket_plan_free(&p);
}
END_TEST

START_TEST(upstream_two_limits)
{
    /* 4 x f32[10], [40,80] -> [[0],[1,2],[3]], limits [40,80,80] */
    ddph_bucket_tensor t[] = {F32(0, 10), F32(1, 10), F32(2, 10), F32(3, 10)};
    size_t lim[] = {40, 80};
    ddph_bucket_plan p = assign(t, 4, lim, 2, 1);
    int want[] = {0, -1, 1, 2, -1, 3, -1};
    size_t wl[] = {40, 80, 80};
    expect_plan(&p, want, 7, wl);
    ddph__bucket_plan_free(&p);
}
END_TEST

START_TEST(upstream_mixed_two_limits)
{
    /* alternating with [200,400] -> [[0],[1],[2,4],[3,5]],
     * limits [200,200,400,400] */
    ddph_bucket_tensor t[] = {F32(0, 50), F64(1, 25), F32(2, 50),
                              F64(3, 25), F32(4, 50), F64(5, 25)};
    size_t lim[] = {200, 400};
    ddph_bucket_plan p = assign(t, 6, lim, 2, 1);
    int want[] = {0, -1, 1, -1, 2, 4, -1, 3, 5, -1};
    size_t wl[] = {200, 200, 400, 400};
    expect_plan(&p, want, 10, wl);
    ddph__bucket_plan_free(&p);
}
END_TEST

START_TEST(reference_vector_layout)
{
    /* The vectors' model walked in reverse registration order with 8 KiB
     * limits gives the layout of their buckets.ini from step 1 on. */
    static const size_t numel[] = {1152, 16, 2048, 64, 2048, 32,
                                   2048, 64, 640, 10, 15};
    ddph_bucket_tensor t[11];
    for (int i = 0; i < 11; i++)
        t[i] = (ddph_bucket_tensor)F32(10 - i, numel[10 - i]);
    size_t lim[] = {8192, 8192};
    ddph_bucket_plan p = assign(t, 11, lim, 2, 0);
    int want[] = {10, 9, 8, 7, 6, -1, 5, 4, -1, 3, 2, -1, 1, 0, -1};
    expect_plan(&p, want, 15, NULL);
    ddph__bucket_plan_free(&p);
}
END_TEST

START_TEST(overshoot_and_leftover)
{
    /* A single tensor bigger than the limit gets a bucket of its own; the
     * tail that never reaches the limit is still a bucket. */
    ddph_bucket_tensor t[] = {F32(0, 1000), F32(1, 1), F32(2, 1)};
    size_t lim[] = {100};
    ddph_bucket_plan p = assign(t, 3, lim, 1, 0);
    int want[] = {0, -1, 1, 2, -1};
    expect_plan(&p, want, 5, NULL);
    ddph__bucket_plan_free(&p);
}
END_TEST

START_TEST(empty_and_no_limits)
{
    ddph_bucket_plan p = assign(NULL, 0, (size_t[]){100}, 1, 0);
    ck_assert_int_eq(p.nbuckets, 0);
    ddph__bucket_plan_free(&p);
    ddph_err e;
    ck_assert_int_eq(ddph__assign_buckets(NULL, 0, NULL, 0, 0, &p, &e),
                     DDPH_ERR_INVALID);
    ck_assert_uint_eq(ddph__mib_to_bytes(0.0078125), 8192);
    ck_assert_uint_eq(ddph__mib_to_bytes(25), 25u << 20);
}
END_TEST

/* bucket_cap_mb = auto: an eighth of the model, within [256 KiB,
 * 25 MiB]; bucket 0 at most 1 MiB; a number given for either wins. */
START_TEST(auto_limits)
{
    const size_t KiB = 1024, MiB = KiB * KiB;
    size_t l[2];
    ddph__bucket_limits(DDPH_CAP_AUTO, DDPH_CAP_AUTO, 3337216, l);
    ck_assert_uint_eq(l[1], 3337216 / 8);
    ck_assert_uint_eq(l[0], 3337216 / 8);
    ddph__bucket_limits(DDPH_CAP_AUTO, DDPH_CAP_AUTO, 100 * MiB, l);
    ck_assert_uint_eq(l[1], 100 * MiB / 8);
    ck_assert_uint_eq(l[0], MiB);
    ddph__bucket_limits(DDPH_CAP_AUTO, DDPH_CAP_AUTO, 500 * MiB, l);
    ck_assert_uint_eq(l[1], 25 * MiB);
    ck_assert_uint_eq(l[0], MiB);
    ddph__bucket_limits(DDPH_CAP_AUTO, DDPH_CAP_AUTO, 10 * KiB, l);
    ck_assert_uint_eq(l[1], 256 * KiB);
    ck_assert_uint_eq(l[0], 256 * KiB);
    ddph__bucket_limits(DDPH_CAP_AUTO, 25, 10 * KiB, l); /* PyTorch's */
    ck_assert_uint_eq(l[1], 25 * MiB);
    ck_assert_uint_eq(l[0], MiB);
    ddph__bucket_limits(0.5, DDPH_CAP_AUTO, 100 * MiB, l);
    ck_assert_uint_eq(l[0], MiB / 2);
    ck_assert_uint_eq(l[1], 100 * MiB / 8);
}
END_TEST

Suite *buckets_suite(void)
{
    Suite *s = suite_create("buckets");
    TCase *tc = tcase_create("Core");
    tcase_add_test(tc, upstream_single_limit);
    tcase_add_test(tc, upstream_mixed_dtypes);
    tcase_add_test(tc, upstream_two_limits);
    tcase_add_test(tc, upstream_mixed_two_limits);
    tcase_add_test(tc, reference_vector_layout);
    tcase_add_test(tc, overshoot_and_leftover);
    tcase_add_test(tc, empty_and_no_limits);
    tcase_add_test(tc, auto_limits);
    suite_add_tcase(s, tc);
    return s;
}
