/* unit_psgd_cpu.c: PowerSGD's fused CPU sweep (plugins/powersgd/psgd_cpu.h)
 * gives, on whatever vector path this CPU takes, exactly the products and
 * sums of the plain loop: the same values to the bit, tails included, at
 * small ranks and at ranks whose panels of Q^T are narrower than m. */
#include "build-config.h"

#include <stdlib.h>
#include <string.h>

#include "../plugins/powersgd/psgd_cpu.h"
#include "unit.h"

static float value(size_t k, unsigned salt)
{
    uint32_t x = (uint32_t)(k * 2654435761u) ^ (salt * 40503u + 1u);
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    return (float)(x >> 8) / 8388608.0f - 1.0f;
}

START_TEST(reconstruct_matches_plain_loop)
{
    static const size_t ms[] = {1, 7, 8, 9, 31, 321};
    static const size_t rs[] = {1, 2, 3, 4, 16, 65, 1500};
    enum { H = 9 }; /* two blocks of four rows and one row */
    for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
        for (size_t b = 0; b < sizeof rs / sizeof *rs; b++) {
            size_t m = ms[a], r = rs[b], bytes = H * m * sizeof(float);
            float *p = malloc(H * r * sizeof *p);
            float *q = malloc(m * r * sizeof *q);
            float *packed = malloc(m * r * sizeof *packed);
            float *out = malloc(bytes), *err = malloc(bytes);
            float *want = malloc(bytes), *want_err = malloc(bytes);
            ck_assert(p && q && packed && out && err && want && want_err);
            for (size_t k = 0; k < H * r; k++)
                p[k] = value(k, 1);
            for (size_t k = 0; k < m * r; k++)
                q[k] = value(k, 2);
            for (size_t k = 0; k < H * m; k++)
                err[k] = want_err[k] = value(k, 3);
            for (size_t i = 0; i < H; i++)
                for (size_t j = 0; j < m; j++) {
                    float x = p[i * r] * q[j * r];
                    for (size_t k = 1; k < r; k++)
                        x += p[i * r + k] * q[j * r + k];
                    want[i * m + j] = x;
                    want_err[i * m + j] -= x;
                }
            psgd_cpu_pack(m, r, q, packed);
            psgd_cpu_reconstruct(H, m, r, p, packed, out, err);
            ck_assert_msg(memcmp(out, want, bytes) == 0,
                          "result differs at m = %zu, r = %zu", m, r);
            ck_assert_msg(memcmp(err, want_err, bytes) == 0,
                          "error differs at m = %zu, r = %zu", m, r);
            memset(out, 0, bytes);
            psgd_cpu_reconstruct(H, m, r, p, packed, out, NULL);
            ck_assert_msg(memcmp(out, want, bytes) == 0,
                          "result without error differs at m = %zu, r = %zu",
                          m, r);
            free(p);
            free(q);
            free(packed);
            free(out);
            free(err);
            free(want);
            free(want_err);
        }
}
END_TEST

Suite *psgd_cpu_suite(void)
{
    Suite *s = suite_create("powersgd_cpu");
    TCase *tc = tcase_create("Core");
    tcase_add_test(tc, reconstruct_matches_plain_loop);
    suite_add_tcase(s, tc);
    return s;
}
