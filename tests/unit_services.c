/* unit_services.c: the services table a hook is handed, driven without a
 * communicator: the arithmetic and memory services on the CPU (what they
 * compute, how they refuse bad arguments, the message a hook then
 * returns), that they go through the hook's device table, and the
 * nonblocking collectives' refusal of the hook's own stack buffers,
 * which comes before any MPI call. */
#include "build-config.h"

#include <math.h>
#include <string.h>

#include "backends/mpi/backend_mpi.h"
#include "plugin/services.h"
#include "unit.h"

/* A hook instance of one rank with no communicator behind it. */
typedef struct fixture {
    ddph_mpi mpi;
    ddph_hook hook;
} fixture;

static const ddph_services *fixture_init(fixture *f)
{
    memset(f, 0, sizeof *f);
    f->mpi.world.rank = 0;
    f->mpi.world.size = 1;
    f->hook.comm = ddph__mpi_comm(&f->mpi);
    static char model[] = "unit";
    f->hook.model = model;
    ddph__services_init(&f->hook);
    return &f->hook.services;
}

START_TEST(table_describes_a_cpu_instance)
{
    fixture f;
    const ddph_services *s = fixture_init(&f);
    ck_assert_int_eq(s->device, DDPH_CPU);
    ck_assert_ptr_null(s->native_stream);
    ck_assert_ptr_eq(s->world, &f.mpi.world.head);
    ck_assert_int_eq(s->world_size, 1);
    ck_assert_uint_eq(s->struct_size, sizeof(ddph_services));
    /* Every member a hook may call is set. */
    ck_assert_ptr_nonnull(s->cast);
    ck_assert_ptr_nonnull(s->topk);
    ck_assert_ptr_nonnull(s->dequantize_int8);
    ck_assert_ptr_nonnull(s->iallreduce);
    ck_assert_ptr_nonnull(s->progress);
    ck_assert_ptr_nonnull(s->pack_signs);
    ck_assert_ptr_nonnull(s->chunk_abs_max);
    ck_assert_ptr_nonnull(s->alloc);
}
END_TEST

START_TEST(arithmetic_on_the_cpu)
{
    fixture f;
    const ddph_services *s = fixture_init(&f);
    float x[6] = {1, -8, 3, 0.5f, -2, 7}, v[2];
    int32_t idx[2];
    ck_assert_int_eq(s->topk(s, x, 6, 2, v, idx), DDPH_OK);
    ck_assert_int_eq(idx[0], 1); /* |-8| and |7|, in index order */
    ck_assert_int_eq(idx[1], 5);
    ck_assert(v[0] == -8 && v[1] == 7);
    ck_assert_int_eq(s->divide(s, x, DDPH_F32, 6, 2.0), DDPH_OK);
    ck_assert(x[1] == -4);
    float m = 0;
    ck_assert_int_eq(s->absmax(s, x, 6, &m), DDPH_OK);
    ck_assert(m == 4);
    uint16_t half[6];
    ck_assert_int_eq(s->cast(s, x, DDPH_F32, half, DDPH_F16, 6, 1.0), DDPH_OK);
    float back[6];
    ck_assert_int_eq(s->cast(s, half, DDPH_F16, back, DDPH_F32, 6, 1.0),
                     DDPH_OK);
    ck_assert(back[5] == 3.5f);
    float *mem = s->alloc(s, 100 * sizeof(float));
    ck_assert_ptr_nonnull(mem);
    ck_assert(mem[99] == 0); /* zero-filled */
    ck_assert_int_eq(s->copy(s, mem, x, sizeof x, DDPH_COPY_DEVICE), DDPH_OK);
    ck_assert(mem[5] == 3.5f);
    ck_assert_int_eq(s->zero(s, mem, sizeof x), DDPH_OK);
    ck_assert(mem[5] == 0);
    s->free(s, mem);
    /* 1-bit compression of x (0.5 -4 1.5 0.25 -1 3.5) in chunks of 4:
     * signs, the mean |x| a chunk as its scale, and back. */
    uint8_t bits[1];
    float sums[2], scales[2], y[6];
    ck_assert_int_eq(s->pack_signs(s, x, 6, bits), DDPH_OK);
    ck_assert_int_eq(bits[0], 0x12);
    ck_assert_int_eq(s->chunk_abs_sum(s, x, 6, 4, sums), DDPH_OK);
    ck_assert(sums[0] == 6.25f && sums[1] == 4.5f);
    scales[0] = sums[0] / 4;
    scales[1] = sums[1] / 2;
    ck_assert_int_eq(s->unpack_signs(s, bits, 6, 4, scales, 0.0f, y), DDPH_OK);
    ck_assert(y[0] == 1.5625f && y[1] == -1.5625f && y[4] == -2.25f &&
              y[5] == 2.25f);
    ck_assert_int_eq(s->chunk_abs_max(s, x, 6, 4, sums), DDPH_OK);
    ck_assert(sums[0] == 4 && sums[1] == 3.5f);
    /* Nothing outstanding: progress has nothing to move. */
    ck_assert_int_eq(s->progress(s), DDPH_OK);
}
END_TEST

START_TEST(bad_arguments_are_refused_with_a_message)
{
    fixture f;
    const ddph_services *s = fixture_init(&f);
    float x[8] = {0}, v[9];
    int32_t idx[9];
    ck_assert_int_eq(s->topk(s, x, 8, 9, v, idx), DDPH_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(f.hook.message, "topk: k = 9 of n = 8"));
    int32_t ints[4] = {0};
    ck_assert_int_eq(s->divide(s, ints, DDPH_I32, 4, 2.0), DDPH_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(f.hook.message, "not a floating dtype"));
    int8_t q[4];
    ck_assert_int_eq(s->quantize_int8(s, x, 4, 0.0f, q), DDPH_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(f.hook.message, "must be positive"));
    ck_assert_int_eq(s->quantize_int8(s, x, 4, INFINITY, q), DDPH_ERR_INVALID);
    float sums[1];
    ck_assert_int_eq(s->chunk_abs_sum(s, x, 4, 0, sums), DDPH_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(f.hook.message, "chunk_abs_sum: chunk must be"));
    ck_assert_int_eq(s->copy(s, x, x, 4, (ddph_copy_kind)42),
                     DDPH_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(f.hook.message, "unknown ddph_copy_kind 42"));
}
END_TEST

/* Plays the hook: its locals lie below the mark its caller (the host)
 * left. */
__attribute__((noinline)) static ddph_status
hook_starts_on_its_stack(const ddph_services *s, ddph_request **req)
{
    float local[16] = {0};
    ddph_status st =
        s->iallreduce(s, s->world, local, 16, DDPH_F32, DDPH_SUM, req);
    __asm__ volatile("" ::"r"(local) : "memory"); /* keep it on the stack */
    return st;
}

START_TEST(nonblocking_on_the_hooks_own_stack_is_refused)
{
    fixture f;
    const ddph_services *s = fixture_init(&f);
    volatile char mark = 0;
    f.hook.frame_top = (const char *)&mark;
    ddph_request *req = (ddph_request *)&f;
    ck_assert_int_eq(hook_starts_on_its_stack(s, &req), DDPH_ERR_STATE);
    ck_assert_ptr_null(req);
    ck_assert_ptr_nonnull(strstr(f.hook.message, "in the hook's own stack "
                                                 "frame"));
    ck_assert_ptr_null(f.hook.outstanding);
}
END_TEST

/* A device table that records what the services hand it and answers
 * from the CPU's (divide fails, to show the error reaching the hook). */
static struct {
    int casts, gemms, allocs, frees;
    const struct ddph_gpu *gpu;
} seen;

static ddph_status spy_cast(struct ddph_gpu *g, const void *src,
                            ddph_dtype sdt, void *dst, ddph_dtype ddt,
                            size_t count, double scale, ddph_err *err)
{
    seen.casts++;
    seen.gpu = g;
    return ddph__dev_cpu_ops.cast(NULL, src, sdt, dst, ddt, count, scale, err);
}

static ddph_status spy_gemm(struct ddph_gpu *g, int ta, int tb, size_t m,
                            size_t n, size_t k, float alpha, const float *a,
                            size_t lda, const float *b, size_t ldb, float beta,
                            float *c, size_t ldc, ddph_err *err)
{
    seen.gemms++;
    seen.gpu = g;
    return ddph__dev_cpu_ops.gemm(NULL, ta, tb, m, n, k, alpha, a, lda, b, ldb,
                                  beta, c, ldc, err);
}

static ddph_status spy_divide(struct ddph_gpu *g, void *buf, ddph_dtype dtype,
                              size_t count, double divisor, ddph_err *err)
{
    return ddph__fail(err, DDPH_ERR_BACKEND, "spy: divide of %zu refused",
                      count);
}

static ddph_status spy_alloc_on(size_t bytes, void *stream, void **out,
                                ddph_err *err)
{
    seen.allocs++;
    return ddph__dev_cpu_ops.alloc_on(bytes, stream, out, err);
}

static void spy_free_on(void *p, void *stream)
{
    seen.frees++;
    ddph__dev_cpu_ops.free_on(p, stream);
}

START_TEST(services_call_the_hooks_device_table)
{
    fixture f;
    const ddph_services *s = fixture_init(&f);
    ck_assert_ptr_eq(f.hook.dev_ops, &ddph__dev_cpu_ops); /* no GPU */
    ddph_dev_ops spy = ddph__dev_cpu_ops;
    spy.cast = spy_cast;
    spy.gemm = spy_gemm;
    spy.divide = spy_divide;
    spy.alloc_on = spy_alloc_on;
    spy.free_on = spy_free_on;
    f.hook.dev_ops = &spy;
    /* The services pass the hook's GPU state along untouched (a marker
     * here: nothing reads it). */
    static char marker;
    f.hook.gpu = (ddph_gpu *)&marker;
    memset(&seen, 0, sizeof seen);
    float a[2] = {1, 2}, b[2] = {3, 4}, c[1] = {0};
    ck_assert_int_eq(s->gemm(s, 0, 0, 1, 1, 2, 1.0f, a, 2, b, 1, 0.0f, c, 1),
                     DDPH_OK);
    ck_assert(c[0] == 11);
    uint16_t half[2];
    ck_assert_int_eq(s->cast(s, a, DDPH_F32, half, DDPH_F16, 2, 1.0), DDPH_OK);
    ck_assert_int_eq(seen.gemms, 1);
    ck_assert_int_eq(seen.casts, 1);
    ck_assert_ptr_eq(seen.gpu, &marker);
    /* The checks the services make come before the table. */
    ck_assert_int_eq(s->cast(s, a, DDPH_I32, half, DDPH_F16, 2, 1.0),
                     DDPH_ERR_INVALID);
    ck_assert_int_eq(seen.casts, 1);
    /* A failing operation: its status, and its message for the hook. */
    ck_assert_int_eq(s->divide(s, a, DDPH_F32, 2, 2.0), DDPH_ERR_BACKEND);
    ck_assert_ptr_nonnull(strstr(f.hook.message, "spy: divide of 2 refused"));
    ck_assert(a[0] == 1);
    void *p = s->alloc(s, 10);
    ck_assert_ptr_nonnull(p);
    s->free(s, p);
    s->free(s, NULL);
    ck_assert_int_eq(seen.allocs, 1);
    ck_assert_int_eq(seen.frees, 1);
}
END_TEST

Suite *services_suite(void)
{
    Suite *s = suite_create("services");
    TCase *tc = tcase_create("cpu");
    tcase_add_test(tc, table_describes_a_cpu_instance);
    tcase_add_test(tc, arithmetic_on_the_cpu);
    tcase_add_test(tc, bad_arguments_are_refused_with_a_message);
    tcase_add_test(tc, nonblocking_on_the_hooks_own_stack_is_refused);
    tcase_add_test(tc, services_call_the_hooks_device_table);
    suite_add_tcase(s, tc);
    return s;
}
