/* unit_device.c: the device table (device/device_ops.h): the CPU's, called
 * directly, and device.c's routing of the runtime's own buffers to a
 * device's table (a recording table stands in for the GPU module's). */
#include "build-config.h"

#include <stdint.h>
#include <string.h>

#include "device/device.h"
#include "device/device_ops.h"
#include "unit.h"

START_TEST(cpu_table_computes_on_host_memory)
{
    const ddph_dev_ops *d = &ddph__dev_cpu_ops;
    ddph_err e;
    ck_assert_int_eq(d->device, DDPH_CPU);
    /* C = A B, row-major 2x2; then y += 0.5 x. */
    float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4] = {0};
    ck_assert_int_eq(
        d->gemm(NULL, 0, 0, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2, &e),
        DDPH_OK);
    ck_assert(c[0] == 19 && c[1] == 22 && c[2] == 43 && c[3] == 50);
    ck_assert_int_eq(d->axpy(NULL, 4, 0.5f, a, c, &e), DDPH_OK);
    ck_assert(c[0] == 19.5f && c[3] == 52);
    /* bf16 of 3 * [1 2] and back; f32 divided in place. */
    float in[2] = {1, 2}, out[2];
    uint16_t half[2];
    ck_assert_int_eq(d->cast(NULL, in, DDPH_F32, half, DDPH_BF16, 2, 3.0, &e),
                     DDPH_OK);
    ck_assert_int_eq(d->cast(NULL, half, DDPH_BF16, out, DDPH_F32, 2, 1.0, &e),
                     DDPH_OK);
    ck_assert(out[0] == 3 && out[1] == 6);
    ck_assert_int_eq(d->divide(NULL, out, DDPH_F32, 2, 3.0, &e), DDPH_OK);
    ck_assert(out[0] == 1 && out[1] == 2);
    /* Two columns of a 3x2 matrix made orthonormal. */
    float x[6] = {3, 1, 0, 1, 4, 0};
    ck_assert_int_eq(d->orthogonalize(NULL, x, 3, 2, 0.0, &e), DDPH_OK);
    float dot = x[0] * x[1] + x[2] * x[3] + x[4] * x[5];
    float n0 = x[0] * x[0] + x[2] * x[2] + x[4] * x[4];
    ck_assert_float_eq_tol(dot, 0.0f, 1e-6f);
    ck_assert_float_eq_tol(n0, 1.0f, 1e-6f);
    /* Sparse: the 2 largest |v|, gathered, added back twice. */
    float v[5] = {0.5f, -6, 1, 2, 0}, top[2], got[2];
    int32_t idx[2];
    ck_assert_int_eq(d->topk(NULL, v, 5, 2, top, idx, &e), DDPH_OK);
    ck_assert(idx[0] == 1 && idx[1] == 3 && top[0] == -6 && top[1] == 2);
    ck_assert_int_eq(d->gather(NULL, v, idx, 2, got, &e), DDPH_OK);
    ck_assert(got[0] == -6 && got[1] == 2);
    ck_assert_int_eq(d->scatter_add(NULL, v, idx, got, 2, 2.0f, &e), DDPH_OK);
    ck_assert(v[1] == -18 && v[3] == 6 && v[0] == 0.5f);
    float m = 0;
    ck_assert_int_eq(d->absmax(NULL, v, 5, &m, &e), DDPH_OK);
    ck_assert(m == 18);
    /* int8 at scale 2: x / 2 rounded half to even (1 -> 0). */
    int8_t q[5];
    float y[5] = {0};
    ck_assert_int_eq(d->quantize_int8(NULL, v, 5, 2.0f, q, &e), DDPH_OK);
    ck_assert(q[1] == -9 && q[3] == 3 && q[2] == 0);
    ck_assert_int_eq(d->dequantize_int8(NULL, q, 5, 2.0f, 0.0f, y, &e),
                     DDPH_OK);
    ck_assert(y[1] == -18 && y[3] == 6);
    /* Signs and chunk sums of |v|, 3 a chunk. */
    uint8_t bits[1];
    float sums[2], maxes[2];
    ck_assert_int_eq(d->pack_signs(NULL, v, 5, bits, &e), DDPH_OK);
    ck_assert_int_eq(d->chunk_abs(NULL, v, 5, 3, 0, sums, &e), DDPH_OK);
    ck_assert_int_eq(d->chunk_abs(NULL, v, 5, 3, 1, maxes, &e), DDPH_OK);
    ck_assert(sums[0] == 19.5f && sums[1] == 6);
    ck_assert(maxes[0] == 18 && maxes[1] == 6);
    float scales[2] = {1, 2}, z[5];
    ck_assert_int_eq(d->unpack_signs(NULL, bits, 5, 3, scales, 0.0f, z, &e),
                     DDPH_OK);
    ck_assert(z[1] == -1 && z[3] == 2 && z[0] == 1);
}
END_TEST

START_TEST(cpu_table_memory_and_copies)
{
    const ddph_dev_ops *d = &ddph__dev_cpu_ops;
    ddph_err e;
    ck_assert_uint_eq(ddph__dev_alloc_size(0), 64);
    ck_assert_uint_eq(ddph__dev_alloc_size(65), 128);
    unsigned char *p = NULL, *r = NULL;
    ck_assert_int_eq(d->alloc(65, (void **)&p, &e), DDPH_OK);
    ck_assert_uint_eq((uintptr_t)p % 64, 0);
    for (int i = 0; i < 128; i++) /* the whole rounded size is zeroed */
        ck_assert_int_eq(p[i], 0);
    ck_assert_int_eq(d->alloc_on(0, NULL, (void **)&r, &e), DDPH_OK);
    ck_assert_uint_eq((uintptr_t)r % 64, 0);
    memset(p, 7, 8);
    ck_assert_int_eq(d->copy_on(r, p, 8, NULL, &e), DDPH_OK);
    ck_assert_int_eq(r[7], 7);
    void *dst[2] = {r + 16, r + 32};
    const void *src[2] = {p, p + 4};
    size_t bytes[2] = {2, 4};
    memset(p + 4, 9, 4);
    ck_assert_int_eq(d->copy_batch(dst, src, bytes, 2, NULL, &e), DDPH_OK);
    ck_assert(r[16] == 7 && r[17] == 7 && r[18] == 0);
    ck_assert(r[32] == 9 && r[35] == 9 && r[36] == 0);
    ck_assert_int_eq(d->zero(NULL, r, 8, &e), DDPH_OK);
    ck_assert(r[0] == 0 && r[7] == 0 && r[16] == 7);
    ck_assert_int_eq(d->copy(NULL, r, p, 3, DDPH_COPY_TO_HOST, &e), DDPH_OK);
    ck_assert(r[2] == 7 && r[3] == 0);
    d->free_on(r, NULL);
    d->free(p);
    /* Streams and events are CUDA's alone. */
    ck_assert_ptr_null(d->event_create);
    ck_assert_ptr_null(d->sync);
    ck_assert_ptr_null(d->nonfinite_find);
}
END_TEST

/* A stand-in for the GPU module's table: host memory, every call
 * counted, with the size asked for. */
static int recorded_allocs, recorded_frees;
static size_t recorded_bytes;

static ddph_status recording_alloc(size_t bytes, void **out, ddph_err *err)
{
    recorded_allocs++;
    recorded_bytes = bytes;
    return ddph__dev_cpu_ops.alloc(bytes, out, err);
}

static void recording_free(void *p)
{
    recorded_frees++;
    ddph__dev_cpu_ops.free(p);
}

START_TEST(device_c_routes_by_device)
{
    ddph_err e;
    void *p = NULL;
    /* CUDA before a module is loaded: refused, saying why; frees of it
     * are ignored. */
    ck_assert_int_eq(ddph__dev_alloc(DDPH_CUDA, 16, &p, &e),
                     DDPH_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(e.msg, "backend = nccl"));
    ck_assert_int_eq(ddph__dev_event_create(&p, &e), DDPH_ERR_UNSUPPORTED);
    ddph__dev_free(DDPH_CUDA, &e);
    /* CPU buffers go to the CPU's table. */
    ck_assert_int_eq(ddph__dev_alloc(DDPH_CPU, 16, &p, &e), DDPH_OK);
    ck_assert_int_eq(ddph__dev_copy(DDPH_CPU, p, "abc", 4, NULL, &e), DDPH_OK);
    ck_assert_str_eq(p, "abc");
    ddph__dev_free(DDPH_CPU, p);
    /* Once a CUDA table is handed over, CUDA buffers go to it, and CPU
     * buffers still do not. */
    ddph_dev_ops cuda = ddph__dev_cpu_ops;
    cuda.device = DDPH_CUDA;
    cuda.alloc = recording_alloc;
    cuda.free = recording_free;
    ddph__dev_use_cuda(&cuda);
    ck_assert_int_eq(ddph__dev_alloc(DDPH_CUDA, 100, &p, &e), DDPH_OK);
    ck_assert_int_eq(recorded_allocs, 1);
    ck_assert_uint_eq(recorded_bytes, 100);
    ddph__dev_free(DDPH_CUDA, p);
    ck_assert_int_eq(recorded_frees, 1);
    ck_assert_int_eq(ddph__dev_alloc(DDPH_CPU, 100, &p, &e), DDPH_OK);
    ddph__dev_free(DDPH_CPU, p);
    ck_assert_int_eq(recorded_allocs, 1);
    ck_assert_int_eq(recorded_frees, 1);
    ddph__dev_use_cuda(NULL);
}
END_TEST

Suite *device_suite(void)
{
    Suite *s = suite_create("device");
    TCase *tc = tcase_create("tables");
    tcase_add_test(tc, cpu_table_computes_on_host_memory);
    tcase_add_test(tc, cpu_table_memory_and_copies);
    tcase_add_test(tc, device_c_routes_by_device);
    suite_add_tcase(s, tc);
    return s;
}
