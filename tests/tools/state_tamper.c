/* state_tamper.c: the checkpoint tamper matrix, in one process (MPI
 * singleton, one rank).  A PowerSGD job runs 3 steps and saves its state;
 * then every tampered copy of the file must be refused by ddph_state_load
 * with a message, never loaded and never crash:
 *   - each of the first 256 bytes XORed with 0xff, and 48 more spread over
 *     the rest;
 *   - an 8-byte 0xfffffffffffffffc written at every offset of the header
 *     and the first model (the length fields among them);
 *   - every truncation; trailing garbage;
 *   - a file from another world size or rank (checksum made valid again);
 *   - a link, a FIFO and a folder in place of the file.
 * And saving never follows a link planted at the target.
 *
 *   state_tamper JOB.ini DIR
 * Prints one line per class and "N tampered files, 0 loaded" at the end;
 * exits 1 if any was loaded. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <ddphook/ddphook.h>

enum { NPARAMS = 4, NUMEL = 600 };

static ddph_ctx *ctx;
static char base[512], path[600], file[640];
static unsigned char *orig;
static size_t orig_len;
static int tried, loaded;

static void die(const char *what)
{
    fprintf(stderr, "state_tamper: %s: %s\n", what, ddph_last_error(ctx));
    exit(2);
}

static void put(const unsigned char *data, size_t n)
{
    unlink(file);
    FILE *f = fopen(file, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        perror(file);
        exit(2);
    }
}

/* One tampered file: the load must fail. */
static void attempt(const char *what, size_t at)
{
    tried++;
    if (ddph_state_load(ctx, path) == DDPH_OK) {
        loaded++;
        fprintf(stderr, "LOADED: %s at %zu\n", what, at);
    } else if (!ddph_last_error(ctx)[0]) {
        loaded++;
        fprintf(stderr, "refused without a message: %s at %zu\n", what, at);
    }
}

static void fix_crc(unsigned char *d, size_t n)
{
    uint32_t c = (uint32_t)crc32_z(0L, d, n - 4);
    for (int k = 0; k < 4; k++)
        d[n - 4 + k] = (unsigned char)(c >> (8 * k));
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: state_tamper JOB.ini DIR\n");
        return 2;
    }
    if (ddph_open(argv[1], &argc, &argv, &ctx) != DDPH_OK)
        return 2;
    snprintf(base, sizeof base, "%s", argv[2]);
    snprintf(path, sizeof path, "%s/state", base);
    snprintf(file, sizeof file, "%s.rank0", path);
    static float g[NPARAMS][NUMEL];
    ddph_model *m;
    if (ddph_model_create(ctx, "net", &m) != DDPH_OK)
        die("model_create");
    for (int i = 0; i < NPARAMS; i++) {
        char name[8];
        int64_t shape[2] = {NUMEL / 20, 20};
        snprintf(name, sizeof name, "p%d", i);
        if (ddph_model_add_param(m, name, g[i], shape, 2, DDPH_F32, DDPH_CPU,
                                 NULL) != DDPH_OK)
            die("add_param");
    }
    if (ddph_model_finalize(m) != DDPH_OK)
        die("finalize");
    for (int s = 0; s < 3; s++) {
        for (int i = 0; i < NPARAMS; i++)
            for (int j = 0; j < NUMEL; j++)
                g[i][j] = (float)((i * 7 + j * 3 + s) % 11) - 5.0f;
        if (ddph_step_begin(ctx, &m, 1) != DDPH_OK)
            die("step_begin");
        for (int i = NPARAMS - 1; i >= 0; i--)
            if (ddph_grad_ready(m, i) != DDPH_OK)
                die("grad_ready");
        if (ddph_step_wait(ctx) != DDPH_OK || ddph_step_end(ctx) != DDPH_OK)
            die("step");
    }

    /* Saving through a link planted at the target replaces the link. */
    char victim[700];
    snprintf(victim, sizeof victim, "%s/victim", base);
    FILE *v = fopen(victim, "w");
    fputs("precious\n", v);
    fclose(v);
    unlink(file);
    if (symlink(victim, file) != 0) {
        perror("symlink");
        return 2;
    }
    if (ddph_state_save(ctx, path) != DDPH_OK)
        die("state_save");
    struct stat sb;
    char text[32] = "";
    v = fopen(victim, "r");
    fgets(text, sizeof text, v);
    fclose(v);
    if (lstat(file, &sb) != 0 || !S_ISREG(sb.st_mode) ||
        strcmp(text, "precious\n") != 0) {
        fprintf(stderr, "FAIL: the save followed a planted link\n");
        return 1;
    }
    printf("save through a planted link: the link was replaced, its target "
           "untouched\n");
    if (ddph_state_load(ctx, path) != DDPH_OK)
        die("state_load of the intact file");

    /* Refused inside a step and inside an accumulation window. */
    if (ddph_step_begin(ctx, &m, 1) != DDPH_OK)
        die("step_begin");
    if (ddph_state_save(ctx, path) != DDPH_ERR_STATE ||
        !strstr(ddph_last_error(ctx), "between ddph_step_begin and ddph_step_end")) {
        fprintf(stderr, "FAIL: save inside a step: %s\n", ddph_last_error(ctx));
        return 1;
    }
    for (int i = NPARAMS - 1; i >= 0; i--)
        ddph_grad_ready(m, i);
    ddph_step_wait(ctx);
    ddph_step_end(ctx);
    ddph_step_begin_flags(ctx, &m, 1, DDPH_STEP_NO_SYNC);
    for (int i = NPARAMS - 1; i >= 0; i--)
        ddph_grad_ready(m, i);
    ddph_step_wait(ctx);
    ddph_step_end(ctx);
    if (ddph_state_save(ctx, path) != DDPH_ERR_STATE ||
        !strstr(ddph_last_error(ctx), "inside an accumulation window")) {
        fprintf(stderr, "FAIL: save inside a window: %s\n",
                ddph_last_error(ctx));
        return 1;
    }
    ddph_step_begin_flags(ctx, &m, 1, DDPH_STEP_FORCE_SYNC);
    for (int i = NPARAMS - 1; i >= 0; i--)
        ddph_grad_ready(m, i);
    ddph_step_wait(ctx);
    ddph_step_end(ctx);
    printf("save inside a step or an accumulation window: DDPH_ERR_STATE\n");

    if (ddph_state_save(ctx, path) != DDPH_OK)
        die("state_save");
    FILE *f = fopen(file, "rb");
    fseek(f, 0, SEEK_END);
    orig_len = (size_t)ftell(f);
    rewind(f);
    orig = malloc(orig_len + 64);
    if (fread(orig, 1, orig_len, f) != orig_len)
        return 2;
    fclose(f);
    unsigned char *d = malloc(orig_len + 64);

    int before = tried;
    for (size_t i = 0; i < orig_len && i < 256; i++) {
        memcpy(d, orig, orig_len);
        d[i] ^= 0xff;
        put(d, orig_len);
        attempt("byte flipped", i);
    }
    for (size_t k = 1; k <= 48 && orig_len > 256; k++) {
        size_t i = 256 + (orig_len - 256) * k / 49;
        memcpy(d, orig, orig_len);
        d[i] ^= 0x5a;
        put(d, orig_len);
        attempt("byte flipped", i);
    }
    printf("bytes flipped: %d files\n", tried - before);

    before = tried;
    const unsigned char huge[8] = {0xfc, 0xff, 0xff, 0xff,
                                   0xff, 0xff, 0xff, 0xff};
    for (size_t i = 8; i + 8 <= orig_len && i < 200; i++) {
        memcpy(d, orig, orig_len);
        memcpy(d + i, huge, 8);
        put(d, orig_len);
        attempt("huge length", i);
    }
    printf("0xfffffffffffffffc written at each offset: %d files\n",
           tried - before);
    /* A forger who recomputes the checksum: the parser must still hold
     * (no crash, no read past the end).  Values a checksum cannot vouch
     * for (the generation, the iteration, the hook's own numbers) then
     * load; every length and count field of the runtime's must not. */
    int forged = 0, forged_loaded = 0;
    for (size_t i = 8; i + 8 <= orig_len && i < 200; i++) {
        memcpy(d, orig, orig_len);
        memcpy(d + i, huge, 8);
        fix_crc(d, orig_len);
        put(d, orig_len);
        forged++;
        if (ddph_state_load(ctx, path) == DDPH_OK)
            forged_loaded++;
    }
    /* The runtime's length fields, found by walking the layout
     * (state_file.h): model count at 36, then three strings, iteration,
     * bucket count, bucket sizes, payload length. */
    size_t at = 40, fields[16], nf = 0;
    fields[nf++] = 36;
    for (int k = 0; k < 3; k++) {
        fields[nf++] = at;
        at += 4 + (size_t)(orig[at] | orig[at + 1] << 8);
    }
    at += 8;
    fields[nf++] = at;
    unsigned nb = orig[at];
    at += 4 + 8 * (size_t)nb;
    fields[nf++] = at;
    for (size_t k = 0; k < nf; k++) {
        memcpy(d, orig, orig_len);
        memcpy(d + fields[k], huge, 4);
        if (k + 1 == nf)
            memcpy(d + fields[k], huge, 8);
        fix_crc(d, orig_len);
        put(d, orig_len);
        attempt("length field forged, checksum fixed", fields[k]);
    }
    printf("forged with a valid checksum: %d files, no crash, %d loaded "
           "(values only); all %zu length and count fields refused\n",
           forged, forged_loaded, nf);

    before = tried;
    for (size_t n = 0; n < orig_len; n++) {
        put(orig, n);
        attempt("truncated", n);
    }
    memcpy(d, orig, orig_len);
    memcpy(d + orig_len, "garbage!", 8);
    put(d, orig_len + 8);
    attempt("trailing garbage", orig_len);
    memcpy(d + orig_len - 4, "garbage!", 8); /* crc moved to the end */
    fix_crc(d, orig_len + 8);
    put(d, orig_len + 8);
    attempt("trailing garbage, checksum fixed", orig_len);
    printf("truncations and trailing bytes: %d files\n", tried - before);

    /* World size (offset 12) and rank (16), checksum made valid. */
    before = tried;
    for (int field = 12; field <= 16; field += 4) {
        memcpy(d, orig, orig_len);
        d[field] ^= 3;
        fix_crc(d, orig_len);
        put(d, orig_len);
        attempt(field == 12 ? "world size" : "rank", (size_t)field);
        if (!strstr(ddph_last_error(ctx), "was saved by rank")) {
            fprintf(stderr, "FAIL: %s\n", ddph_last_error(ctx));
            loaded++;
        }
    }
    printf("another world size or rank: refused (\"%s\")\n",
           ddph_last_error(ctx));

    unlink(file);
    if (symlink(victim, file) == 0)
        attempt("symbolic link", 0);
    unlink(file);
    if (mkfifo(file, 0600) == 0)
        attempt("FIFO", 0);
    unlink(file);
    if (mkdir(file, 0700) == 0)
        attempt("folder", 0);
    rmdir(file);
    printf("a link, a FIFO, a folder: refused\n");

    put(orig, orig_len);
    if (ddph_state_load(ctx, path) != DDPH_OK)
        die("state_load of the intact file");
    printf("%d tampered files, %d loaded\n", tried, loaded);
    free(d);
    free(orig);
    /* The job's outcome: the first refusal above (a save inside a step). */
    ddph_status closed = ddph_close(ctx);
    if (closed != DDPH_ERR_STATE) {
        fprintf(stderr, "ddph_close returned %s, not DDPH_ERR_STATE\n",
                ddph_status_name(closed));
        return 1;
    }
    return loaded ? 1 : 0;
}
