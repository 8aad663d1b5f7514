/* gpu_profile.c: see gpu_profile.h.  No CUDA here: ddphook reads what
 * ddphook-bench-gpu writes. */
#include "build-config.h"

#include "gpu_profile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ddphook/ddphook.h>

#include "text_file.h"

#define MAGIC "ddphook-gpu-profile 1"
#define MAX_FILE_BYTES ((size_t)1 << 16)

const char *const gpu_profile_casts[GPU_PROFILE_CASTS] = {
    "f32_to_f16", "f16_to_f32", "f32_to_bf16", "bf16_to_f32"};

/* The lines in their order: a line's kind may not come before the one
 * read last. */
enum { L_DEVICE, L_RANKS, L_MIB, L_COPY, L_CAST, L_ALLREDUCE, L_HOOK, L_END };

const gpu_profile_hook *gpu_profile_find(const gpu_profile *p,
                                         const char *name)
{
    for (int i = 0; i < p->nhooks; i++)
        if (strcmp(p->hooks[i].name, name) == 0)
            return &p->hooks[i];
    return NULL;
}

typedef struct reading {
    gpu_profile *p;
    int last;  /* the kind of the line read last */
    int casts; /* cast lines read */
} reading;

/* One line after the first. */
static int parse_line(void *ctx, char *line, char *why, size_t cap)
{
    reading *r = ctx;
    gpu_profile *p = r->p;
    int *last = &r->last, *casts = &r->casts;
    char *rest = strchr(line, ' ');
    if (rest)
        *rest++ = '\0';
    static const char *kinds[] = {"device", "ranks", "mib", "copy",
                                  "cast", "allreduce", "hook", "end"};
    int kind = -1;
    for (int k = 0; k <= L_END; k++)
        if (strcmp(line, kinds[k]) == 0)
            kind = k;
    if (kind < 0) {
        snprintf(why, cap, "unknown line '%.40s'", line);
        return 0;
    }
    /* In order; only cast and hook lines repeat. */
    int repeats = kind == L_CAST || kind == L_HOOK;
    if (kind < *last || (kind == *last && !repeats) || *last == L_END) {
        snprintf(why, cap, "a %s line out of place (the order: device, ranks, "
                 "mib, copy, 4 casts, allreduce, hooks, end)", kinds[kind]);
        return 0;
    }
    if (kind > L_CAST && *casts != GPU_PROFILE_CASTS) {
        snprintf(why, cap, "%d cast lines where there are %d", *casts,
                 GPU_PROFILE_CASTS);
        return 0;
    }
    *last = kind;
    if (kind == L_DEVICE) { /* the rest of the line, spaces and all */
        size_t n = rest ? strlen(rest) : 0;
        int printable = n > 0 && n < sizeof p->device;
        for (size_t i = 0; printable && i < n; i++)
            printable = rest[i] >= 0x20 && rest[i] < 0x7f;
        if (!printable) {
            snprintf(why, cap, "want: device NAME (printable, under %zu "
                     "characters)", sizeof p->device);
            return 0;
        }
        memcpy(p->device, rest, n + 1);
        return 1;
    }
    /* The other lines are words apart. */
    char *save = NULL, *a = rest ? strtok_r(rest, " ", &save) : NULL;
    char *b = a ? strtok_r(NULL, " ", &save) : NULL;
    char *extra = b ? strtok_r(NULL, " ", &save) : NULL;
    double x, y;
    switch (kind) {
    case L_RANKS:
        if (extra || !text_number(a, 1, 1e7, &x) || !text_number(b, 1, 1e7, &y) ||
            x != floor(x) || y != floor(y) || y > x || fmod(x, y) != 0) {
            snprintf(why, cap, "want: ranks W PER_HOST (whole numbers, "
                     "PER_HOST dividing W)");
            return 0;
        }
        p->ranks = (int)x;
        p->per_host = (int)y;
        return 1;
    case L_MIB:
        if (b || !text_number(a, 1, 1 << 20, &p->mib)) {
            snprintf(why, cap, "want: mib N (in [1, 1048576])");
            return 0;
        }
        return 1;
    case L_COPY:
    case L_ALLREDUCE:
        if (b || !text_number(a, 1e6, 1e15, &x)) {
            snprintf(why, cap, "want: %s BYTES_PER_S (in [1e6, 1e15])",
                     kinds[kind]);
            return 0;
        }
        *(kind == L_COPY ? &p->copy_bytes_per_s
                         : &p->allreduce_bus_bytes_per_s) = x;
        return 1;
    case L_CAST:
        if (extra || !a || *casts >= GPU_PROFILE_CASTS ||
            strcmp(a, gpu_profile_casts[*casts]) != 0 ||
            !text_number(b, 1e-15, 1, &x)) {
            snprintf(why, cap, "want: cast %s SECONDS_PER_ELEMENT (in "
                     "[1e-15, 1])",
                     *casts < GPU_PROFILE_CASTS ? gpu_profile_casts[*casts]
                                                : "(no more)");
            return 0;
        }
        p->cast_seconds[(*casts)++] = x;
        return 1;
    case L_HOOK:
        if (extra || !a || !text_hook_name_ok(a, sizeof p->hooks[0].name) || !text_number(b, 1e-15, 1, &x)) {
            snprintf(why, cap, "want: hook NAME SECONDS_PER_BYTE (a hook "
                     "name, seconds in [1e-15, 1])");
            return 0;
        }
        if (gpu_profile_find(p, a)) {
            snprintf(why, cap, "hook %s a second time", a);
            return 0;
        }
        if (p->nhooks == GPU_PROFILE_MAX_HOOKS) {
            snprintf(why, cap, "more than %d hook lines", GPU_PROFILE_MAX_HOOKS);
            return 0;
        }
        snprintf(p->hooks[p->nhooks].name, sizeof p->hooks[0].name, "%s", a);
        p->hooks[p->nhooks++].seconds_per_byte = x;
        return 1;
    default: /* L_END */
        if (b || !text_number(a, 0, GPU_PROFILE_MAX_HOOKS, &x) || x != p->nhooks) {
            snprintf(why, cap, "the end line counts %s hook lines where the "
                     "file has %d", a ? a : "no", p->nhooks);
            return 0;
        }
        return 1;
    }
}

static int complete(void *ctx, char *why, size_t cap)
{
    if (((reading *)ctx)->last == L_END)
        return 1;
    snprintf(why, cap, "no end line: truncated");
    return 0;
}

int gpu_profile_load(const char *path, gpu_profile *p, char *msg, size_t cap)
{
    memset(p, 0, sizeof *p);
    reading r = {p, -1, 0};
    return text_file_read(path, MAX_FILE_BYTES, "GPU profile", MAGIC,
                          ": write one with `ddphook bench gpu --profile "
                          "FILE`",
                          parse_line, complete, &r, msg, cap);
}

int gpu_profile_save(const char *path, const gpu_profile *p, char *msg,
                     size_t cap)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        snprintf(msg, cap, "out of memory");
        return 0;
    }
    fprintf(f, MAGIC "\ndevice %s\nranks %d %d\nmib %.17g\ncopy %.17g\n",
            p->device, p->ranks, p->per_host, p->mib, p->copy_bytes_per_s);
    for (int i = 0; i < GPU_PROFILE_CASTS; i++)
        fprintf(f, "cast %s %.17g\n", gpu_profile_casts[i], p->cast_seconds[i]);
    fprintf(f, "allreduce %.17g\n", p->allreduce_bus_bytes_per_s);
    for (int i = 0; i < p->nhooks; i++)
        fprintf(f, "hook %s %.17g\n", p->hooks[i].name,
                p->hooks[i].seconds_per_byte);
    fprintf(f, "end %d\n", p->nhooks);
    return text_file_commit(f, &text, &len, path, "GPU profile", msg, cap);
}
