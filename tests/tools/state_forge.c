/* state_forge.c: forged hook states with a valid checksum.  A forger who
 * recomputes the crc32 gets past the file checks; what is left between
 * them and the heap is each hook's own load() and the runtime's checks
 * around it.  In one process (MPI singleton, one rank), for the job's
 * hook: a model of three tensors (one or several buckets, as the job's
 * bucket_cap_mb makes them) runs 4 steps and saves its state; then
 * every forged copy of the hook's payload is loaded and, when the load
 * succeeds, two more steps run on it.  Forgeries, each with the payload
 * length and the crc32 made valid again:
 *   - each 4-byte word of the payload (the first 64, each one whose
 *     value could be a count, i.e. 1 to the payload's length / 4, and
 *     every 127th) set to 0, 1, its value +-1, 0x4b800000, 0x80000000 and 0xcb800000
 *     (huge or negative counts that are modest floats); for small counts
 *     the same with the payload's tail cut or grown by the change times 4
 *     bytes, so that a count and the data after it agree (bucket 0's Q
 *     dropped, for one);
 *   - each 8-byte word in the first 256 bytes set to 2^40 and ~2^64;
 *   - the payload cut at every multiple of 4 bytes (then of 508) and
 *     grown by 4 to 64.
 * A step that fails on a loaded forgery (a NaN that int8 cannot quantize,
 * say) ends the job, as any hook failure does: the tool then prints
 * "RESUME N" and exits 3, and the script runs it again from forgery N.
 * A forgery may load (a changed float is still a state) or be refused;
 * a refused one must leave the state as it was (saved again, it is the
 * intact file after the header: loading is all or nothing); the process
 * must not crash, and under ASan (make check-sanitizers) must
 * not touch memory it does not own.  After each, the intact state must
 * load again.
 *
 *   state_forge JOB.ini DIR [FIRST]
 * Prints the counts of forged, refused and loaded files; exits 1 when the
 * intact file stops loading or a forgery is refused without a message, 2
 * on a set-up failure, 3 to be run again from FIRST. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include <ddphook/ddphook.h>

static ddph_ctx *ctx;
static ddph_model *model;
static char path[600], file[640], after[600], after_file[640];
static unsigned char *orig, *work;
static size_t orig_len, payload_at, payload_len, len_at;
static int forged, refused, loaded, start_at, index_now;

/* Three tensors: a matrix, a bias, a matrix PowerSGD compresses. */
enum { NT = 3 };
static const int64_t shapes[NT][2] = {{48, 40}, {40, 1}, {24, 96}};
static float *grads[NT];

static void die(const char *what)
{
    fprintf(stderr, "state_forge: %s: %s\n", what, ddph_last_error(ctx));
    exit(2);
}

static ddph_status step(int s)
{
    for (int i = 0; i < NT; i++) {
        size_t n = (size_t)(shapes[i][0] * shapes[i][1]);
        for (size_t j = 0; j < n; j++)
            grads[i][j] = (float)((i * 7 + (int)j * 3 + s) % 13) - 6.0f;
    }
    ddph_status st = ddph_step_begin(ctx, &model, 1);
    for (int i = NT - 1; i >= 0 && st == DDPH_OK; i--)
        st = ddph_grad_ready(model, i);
    if (st == DDPH_OK)
        st = ddph_step_wait(ctx);
    ddph_status end = ddph_step_end(ctx);
    return st != DDPH_OK ? st : end;
}

static uint64_t get_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; k--)
        v = v << 8 | p[k];
    return v;
}

static void put_le(unsigned char *p, uint64_t v, int n)
{
    for (int k = 0; k < n; k++)
        p[k] = (unsigned char)(v >> (8 * k));
}

static size_t skip_str(size_t at)
{
    return at + 4 + (size_t)get_le(orig + at, 4);
}

/* A refused load leaves the job as it was (all or nothing): saved again,
 * everything after the header (which holds a new random generation) is
 * the intact file's, byte for byte. */
static void expect_untouched(void)
{
    if (ddph_state_save(ctx, after) != DDPH_OK) {
        fprintf(stderr, "FAIL: save after a refused load: %s\n",
                ddph_last_error(ctx));
        exit(1);
    }
    FILE *f = fopen(after_file, "rb");
    unsigned char *d = malloc(orig_len + 1);
    size_t n = f ? fread(d, 1, orig_len + 1, f) : 0;
    if (f)
        fclose(f);
    size_t header = 8 + 4 + 4 + 4 + 8 + 8 + 4;
    if (n != orig_len || memcmp(d + header, orig + header,
                                orig_len - header - 4) != 0) {
        fprintf(stderr, "FAIL: a refused load changed the hook's state or "
                        "iteration (forgery %d)\n",
                index_now - 1);
        exit(1);
    }
    free(d);
}

/* The file with the payload replaced by work[0..n), length and crc32
 * made valid again; then a load, and two steps if it loads. */
static void attempt(size_t n)
{
    if (index_now++ < start_at)
        return;
    size_t total = payload_at + n + (orig_len - payload_at - payload_len);
    unsigned char *d = malloc(total);
    memcpy(d, orig, payload_at);
    memcpy(d + payload_at, work, n);
    memcpy(d + payload_at + n, orig + payload_at + payload_len,
           orig_len - payload_at - payload_len);
    put_le(d + len_at, n, 8);
    put_le(d + total - 4, (uint32_t)crc32_z(0L, d, total - 4), 4);
    unlink(file);
    FILE *f = fopen(file, "wb");
    if (!f || fwrite(d, 1, total, f) != total || fclose(f) != 0) {
        perror(file);
        exit(2);
    }
    free(d);
    forged++;
    if (ddph_state_load(ctx, path) != DDPH_OK) {
        refused++;
        if (!ddph_last_error(ctx)[0]) {
            fprintf(stderr, "FAIL: refused without a message\n");
            exit(1);
        }
        expect_untouched();
    } else {
        loaded++;
        for (int s = 0; s < 2; s++)
            if (step(100 + s) != DDPH_OK) {
                /* The job is over, as after any failed hook; said with a
                 * message, which is what is asked of a forgery. */
                printf("%d forged, %d refused, %d loaded; RESUME %d\n", forged,
                       refused, loaded, index_now);
                ddph_close(ctx);
                exit(3);
            }
    }
    /* Back to the intact state for the next forgery. */
    f = fopen(file, "wb");
    if (!f || fwrite(orig, 1, orig_len, f) != orig_len || fclose(f) != 0) {
        perror(file);
        exit(2);
    }
    if (ddph_state_load(ctx, path) != DDPH_OK) {
        fprintf(stderr, "FAIL: the intact state no longer loads: %s\n",
                ddph_last_error(ctx));
        exit(1);
    }
}

static void forge_word(size_t at, uint32_t value, long grow)
{
    size_t n = payload_len;
    if (grow < 0 && (size_t)-grow > n - at - 4)
        return;
    if (grow > 1 << 16)
        return;
    n = (size_t)((long)n + grow);
    memcpy(work, orig + payload_at, payload_len < n ? payload_len : n);
    if (n > payload_len)
        memset(work + payload_len, 0x41, n - payload_len);
    put_le(work + at, value, 4);
    attempt(n);
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: state_forge JOB.ini DIR [FIRST]\n");
        return 2;
    }
    start_at = argc == 4 ? atoi(argv[3]) : 0;
    if (ddph_open(argv[1], &argc, &argv, &ctx) != DDPH_OK)
        return 2;
    snprintf(path, sizeof path, "%s/forged", argv[2]);
    snprintf(file, sizeof file, "%s.rank0", path);
    snprintf(after, sizeof after, "%s/after", argv[2]);
    snprintf(after_file, sizeof after_file, "%s.rank0", after);
    if (ddph_model_create(ctx, "net", &model) != DDPH_OK)
        die("model_create");
    for (int i = 0; i < NT; i++) {
        char name[8];
        snprintf(name, sizeof name, "t%d", i);
        grads[i] = calloc((size_t)(shapes[i][0] * shapes[i][1]), sizeof(float));
        int64_t shape[2] = {shapes[i][0], shapes[i][1]};
        if (ddph_model_add_param(model, name, grads[i], shape,
                                 shapes[i][1] == 1 ? 1 : 2, DDPH_F32, DDPH_CPU,
                                 NULL) != DDPH_OK)
            die("add_param");
    }
    if (ddph_model_finalize(model) != DDPH_OK)
        die("finalize");
    for (int s = 0; s < 4; s++)
        if (step(s) != DDPH_OK)
            die("step");
    if (ddph_state_save(ctx, path) != DDPH_OK)
        die("state_save");
    FILE *f = fopen(file, "rb");
    if (!f || fseek(f, 0, SEEK_END) != 0)
        die("open the saved state");
    orig_len = (size_t)ftell(f);
    rewind(f);
    orig = malloc(orig_len);
    if (fread(orig, 1, orig_len, f) != orig_len)
        die("read the saved state");
    fclose(f);
    /* The header (state_file.h), then model 0: three strings, the
     * iteration, the buckets' sizes, the payload's length. */
    size_t at = 8 + 4 + 4 + 4 + 8 + 8 + 4;
    at = skip_str(skip_str(skip_str(at)));
    at += 8;
    uint32_t nbuckets = (uint32_t)get_le(orig + at, 4);
    at += 4 + 8 * (size_t)nbuckets;
    len_at = at;
    payload_len = (size_t)get_le(orig + at, 8);
    payload_at = at + 8;
    work = malloc(payload_len + (1u << 16) + 64);
    printf("hook state: %zu bytes of payload, %u buckets\n", payload_len,
           nbuckets);

    /* A payload where the hook has none: refused (no load function), or a
     * forgery of the hook's own format below. */
    if (payload_len == 0) {
        memset(work, 0, 16);
        attempt(16);
    }
    for (size_t w = 0; w + 4 <= payload_len; w += 4) {
        uint32_t v = (uint32_t)get_le(orig + payload_at + w, 4);
        /* The first 64 words, every word that could be a count (floats
         * and generator state almost never are), and every 127th. */
        int count_like = v >= 1 && v <= payload_len / 4;
        if (w >= 256 && !count_like && w % 508 != 0)
            continue;
        /* Huge or negative counts that are modest floats too (2^24, -0,
         * -2^24): a NaN or FLT_MAX would only stop int8's step (it cannot
         * quantize them), which ends the process. */
        const uint32_t values[] = {0, 1, v + 1, v - 1, 0x4b800000u,
                                   0x80000000u, 0xcb800000u};
        for (size_t k = 0; k < sizeof values / sizeof *values; k++) {
            if (values[k] == v)
                continue;
            forge_word(w, values[k], 0);
            /* A small count with its data cut or grown to match. */
            long delta = (long)values[k] - (long)v;
            if (v < (1u << 24) && values[k] < (1u << 24) && delta &&
                delta >= -(1 << 14) && delta <= (1 << 14))
                forge_word(w, values[k], 4 * delta);
        }
    }
    for (size_t w = 0; w + 8 <= payload_len && w < 256; w += 4) {
        const uint64_t values[] = {(uint64_t)1 << 40, 0xcb800000cb800000u};
        for (size_t k = 0; k < 2; k++) {
            memcpy(work, orig + payload_at, payload_len);
            put_le(work + w, values[k], 8);
            attempt(payload_len);
        }
    }
    for (size_t n = 0; n < payload_len; n += n < 256 ? 4 : 508) {
        memcpy(work, orig + payload_at, n);
        attempt(n);
    }
    for (size_t extra = 4; extra <= 64; extra += 4) {
        memcpy(work, orig + payload_at, payload_len);
        memset(work + payload_len, 0, extra);
        attempt(payload_len + extra);
    }
    printf("%d forged, %d refused, %d loaded; done\n", forged, refused,
           loaded);
    free(orig);
    free(work);
    for (int i = 0; i < NT; i++)
        free(grads[i]);
    ddph_close(ctx);
    return 0;
}
