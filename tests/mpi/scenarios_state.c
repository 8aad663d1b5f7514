/* scenarios_state.c: the scenarios of test_runtime's registry on hook
 * state in memory (ddph_state_save_to_memory / load_from_memory). */
#include "build-config.h"

#include "scenario.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Steps first..last-1 of the fixture; every step's reduced gradients
 * appended to out (NULL: not kept). */
static void steps(ddph_ctx *ctx, model_fixture *fx, int first, int last,
                  float *out)
{
    size_t at = 0;
    for (int s = first; s < last; s++) {
        CHECK_OK(ddph_step_begin(ctx, &fx->m, 1), ctx);
        for (int p = 0; p < NP; p++)
            for (size_t i = 0; i < fx->numel[p]; i++)
                fx->grads[p][i] = value(check_rank, s, p, i) * 0.37f;
        mark_all_ready(ctx, fx->m);
        CHECK_OK(ddph_step_wait(ctx), ctx);
        CHECK_OK(ddph_step_end(ctx), ctx);
        for (int p = 0; out && p < NP; p++) {
            memcpy(out + at, fx->grads[p], fx->numel[p] * sizeof(float));
            at += fx->numel[p];
        }
    }
}

/* A refused load: every rank fails with `want` in its message, which
 * speaks of bytes in memory: there is no file. */
static void refused(ddph_ctx *ctx, const void *data, size_t len,
                    const char *want)
{
    CHECK(ddph_state_load_from_memory(ctx, data, len) != DDPH_OK,
          "bytes that should be refused (%s) were loaded", want);
    CHECK(strstr(ddph_last_error(ctx), want), "refusal '%s', want '%s'",
          ddph_last_error(ctx), want);
    CHECK(!strstr(ddph_last_error(ctx), "file"),
          "refusal of bytes in memory speaks of a file: '%s'",
          ddph_last_error(ctx));
}

/* A file save and load given a NULL path on rank `bad` (the others a
 * path): refused on every rank within seconds, naming it. */
static void null_path_refused(ddph_ctx *ctx, int bad)
{
    char path[4096], want[64];
    snprintf(path, sizeof path, "%s/null-peer-%d", scratch_dir(),
             (int)getppid());
    const char *mine = check_rank == bad ? NULL : path;
    for (int load = 0; load < 2; load++) {
        snprintf(want, sizeof want, "%s on rank %d: path is NULL",
                 load ? "state_load" : "state_save", bad);
        double asked = MPI_Wtime();
        ddph_status st = load ? ddph_state_load(ctx, mine)
                              : ddph_state_save(ctx, mine);
        CHECK(st == DDPH_ERR_INVALID && strstr(ddph_last_error(ctx), want),
              "%s: %s, '%s', want '%s'", load ? "load" : "save",
              ddph_status_name(st), ddph_last_error(ctx), want);
        CHECK(MPI_Wtime() - asked < 5, "a NULL path on rank %d refused "
              "after %.1f s (timeout_s is 20)", bad, MPI_Wtime() - asked);
    }
}

/* ddph_state_save_id: one call's id on every rank, another call's
 * differs; bytes that are not an intact state are refused. */
static void save_ids(ddph_ctx *ctx, const unsigned char *data, size_t len)
{
    uint64_t first = 0, later_id = 0, id = 1;
    CHECK(ddph_state_save_id(data, len, &first) == DDPH_OK && first,
          "save_id of a save: id %llu", (unsigned long long)first);
    int64_t v[2] = {(int64_t)first, -(int64_t)first};
    MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    CHECK(v[0] == -v[1], "one save's ids differ between ranks");
    void *later = NULL;
    size_t later_len = 0;
    CHECK_OK(ddph_state_save_to_memory(ctx, &later, &later_len), ctx);
    CHECK(ddph_state_save_id(later, later_len, &later_id) == DDPH_OK &&
              later_id != first,
          "two saves' ids: %llu and %llu", (unsigned long long)first,
          (unsigned long long)later_id);
    ddph_state_free(later);
    unsigned char *bad = malloc(len);
    CHECK(bad, "out of memory");
    /* The magic's first byte; then a byte of the id; then cut short. */
    size_t flips[] = {0, 30};
    for (size_t i = 0; i < sizeof flips / sizeof *flips; i++) {
        memcpy(bad, data, len);
        bad[flips[i]] ^= 0x01;
        CHECK(ddph_state_save_id(bad, len, &id) == DDPH_ERR_IO && id == 0,
              "save_id of a state with byte %zu changed: id %llu",
              flips[i], (unsigned long long)id);
    }
    CHECK(ddph_state_save_id(data, 30, &id) == DDPH_ERR_IO,
          "save_id of 30 bytes of a state");
    CHECK(ddph_state_save_id(NULL, len, &id) == DDPH_ERR_INVALID,
          "save_id of NULL");
    free(bad);
}

void run_state_memory(void)
{
    ddph_ctx *ctx = open_job(env("DDPH_TEST_PLUGIN_DIR"), "powersgd",
                             "[hook.powersgd]\nmatrix_approximation_rank = 1\n"
                             "start_powerSGD_iter = 2\n[runtime]");
    model_fixture fx;
    setup(ctx, &fx, 0);
    CHECK_OK(ddph_model_finalize(fx.m), ctx);
    size_t total = 0;
    for (int p = 0; p < NP; p++)
        total += fx.numel[p];
    float *straight = calloc(3 * total, sizeof(float));
    float *resumed = calloc(3 * total, sizeof(float));
    CHECK(straight && resumed, "out of memory");
    /* 3 steps (compressing from the 3rd), the state in memory, 3 more; then
     * the state put back and the same 3 steps again: the same bits. */
    steps(ctx, &fx, 0, 3, NULL);
    void *data = NULL;
    size_t len = 0;
    CHECK_OK(ddph_state_save_to_memory(ctx, &data, &len), ctx);
    CHECK(data && len > 36, "%zu bytes of state", len);
    steps(ctx, &fx, 3, 6, straight);
    CHECK_OK(ddph_state_load_from_memory(ctx, data, len), ctx);
    steps(ctx, &fx, 3, 6, resumed);
    CHECK(memcmp(straight, resumed, 3 * total * sizeof(float)) == 0,
          "steps 4-6 after the state was loaded from memory differ from "
          "the uninterrupted ones");
    /* Inside a step: refused (no collective ran). */
    CHECK_OK(ddph_step_begin(ctx, &fx.m, 1), ctx);
    void *inside = NULL;
    size_t inside_len = 0;
    CHECK(ddph_state_save_to_memory(ctx, &inside, &inside_len) ==
              DDPH_ERR_STATE && !inside,
          "save_to_memory inside a step: %s", ddph_last_error(ctx));
    mark_all_ready(ctx, fx.m);
    CHECK_OK(ddph_step_wait(ctx), ctx);
    CHECK_OK(ddph_step_end(ctx), ctx);
    /* The next rank's bytes (same length: the fixture is the same). */
    unsigned char *peer = malloc(len);
    CHECK(peer, "out of memory");
    int world = ddph_world_size(ctx);
    MPI_Sendrecv(data, (int)len, MPI_BYTE, (check_rank + world - 1) % world,
                 7, peer, (int)len, MPI_BYTE, (check_rank + 1) % world, 7,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    refused(ctx, peer, len, "was saved by rank");
    /* One byte changed, on the last rank only: every rank refuses. */
    memcpy(peer, data, len);
    if (check_rank == world - 1)
        peer[len / 2] ^= 0x20;
    refused(ctx, peer, len, "checksum mismatch (corrupt or altered bytes)");
    refused(ctx, peer, 10, "in memory given to rank");
    /* Refused by its length alone, before a byte is read. */
    refused(ctx, peer, (size_t)1 << 40, "the most the hook state");
    free(peer);
    /* NULL bytes with a length on the last rank: refused inside the
     * agreement, so every rank hears of it at once, not at timeout_s
     * (20 s in these jobs). */
    char null_why[64];
    snprintf(null_why, sizeof null_why, "on rank %d: data is NULL",
             world - 1);
    double asked = MPI_Wtime();
    refused(ctx, check_rank == world - 1 ? NULL : data, len, null_why);
    CHECK(MPI_Wtime() - asked < 5,
          "NULL bytes on rank %d refused after %.1f s (timeout_s is 20)",
          world - 1, MPI_Wtime() - asked);
    null_path_refused(ctx, world - 1);
    /* A second save on the last rank alone: its newer part with the
     * others' older ones is two saves mixed, each part valid. */
    void *again = NULL;
    size_t again_len = 0;
    if (check_rank == world - 1)
        CHECK_OK(ddph_state_save_to_memory(ctx, &again, &again_len), ctx);
    refused(ctx, again ? again : data, again ? again_len : len,
            "the ranks' parts come from different saves");
    ddph_state_free(again);
    save_ids(ctx, data, len);
    ddph_state_free(data);
    free(straight);
    free(resumed);
    fixture_free(&fx);
    ddph_close(ctx); /* the refused loads are the job's outcome */
}
