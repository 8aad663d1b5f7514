/* replay.c: `ddphook replay`: feeds a gradient trace through a job, one
 * trace step per backward pass, and writes what each rank's gradients
 * became after every synchronised step.  It drives the runtime through
 * the public API only, as a trainer would (the CPU casts convert the
 * trace's float32 to and from the gradients' dtype). */
#include "build-config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ddphook/ddphook.h>

#include "commands.h"
#include "device/cpu_ops.h"
#include "support/safe_file.h"
#include "trace.h"
#include "support/util.h"

static const char replay_usage[] =
    "usage: mpiexec -n W ddphook replay --job JOB.ini --trace DIR --out DIR2\n"
    "                                   [--model NAME] [--save-state PATH\n"
    "                                   --save-after S] [--load-state PATH\n"
    "                                   --from-step S]\n"
    "\n"
    "Feeds step S of the gradient trace in DIR to the job as one backward\n"
    "pass (parameters marked ready in reverse registration order) and writes\n"
    "DIR2/rank{R}.step{S}.out.f32 after every step that synchronised.\n"
    "Gradients accumulate across steps that do not synchronise and are\n"
    "zeroed after each synchronised step; the last trace step ends the data\n"
    "(a partial accumulation window synchronises).  W must equal the\n"
    "trace's world_size.  Gradients have the trace's dtype (f32, f16, bf16\n"
    "or f64); inputs and outputs are float32.  See docs/replay.md.\n"
    "\n"
    "  --job FILE     the job INI (hook, buckets, accumulation)\n"
    "  --trace DIR    the trace folder (trace.ini + rank{R}.step{S}.f32)\n"
    "  --out DIR      where outputs go: created if missing; an existing\n"
    "                 one must be a folder (not a link) of yours that no\n"
    "                 one else can write\n"
    "  --model NAME   the model's name, for [model.NAME] sections (model)\n"
    "  --save-state PATH --save-after S\n"
    "                 after trace step S, save the hook state (PowerSGD's\n"
    "                 error feedback, Q, RNG) to PATH.rank{R}\n"
    "  --load-state PATH --from-step S\n"
    "                 load that state first and replay from step S on: a\n"
    "                 resumed run gives the same outputs, bit for bit\n";

/* Each output is written like a checkpoint: a link planted at its path
 * is replaced, never followed. */
static int write_out(const char *dir, int rank, int step, const float *v,
                     size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/rank%d.step%d.out.f32", dir, rank, step);
    ddph_err e;
    if (ddph__file_write_atomic(path, v, n * sizeof *v, "output", &e) !=
        DDPH_OK) {
        fprintf(stderr, "ddphook replay: %s\n", e.msg);
        return 0;
    }
    return 1;
}

/* --out: made here (other ranks of this host make it too), or an existing
 * folder that this user owns and no one else can write.  A link is never
 * followed: root writing outputs into a folder another user planted a
 * link to would write where that user chose. */
/* Bytes this rank has sent in the model's hooks so far, all buckets. */
static uint64_t bytes_sent(ddph_model *model)
{
    uint64_t total = 0;
    ddph_bucket_info info;
    for (int b = 0; b < ddph_model_bucket_count(model); b++)
        if (ddph_model_bucket_info(model, b, &info) == DDPH_OK)
            total += info.bytes_on_wire;
    return total;
}

static int make_out_dir(const char *out)
{
    if (mkdir(out, 0755) == 0)
        return 1;
    if (errno != EEXIST) {
        fprintf(stderr, "ddphook replay: --out %s: %s\n", out,
                strerror(errno));
        return 0;
    }
    struct stat sb;
    const char *why = NULL;
    if (lstat(out, &sb) != 0)
        why = strerror(errno);
    else if (S_ISLNK(sb.st_mode))
        why = "is a symbolic link";
    else if (!S_ISDIR(sb.st_mode))
        why = "exists and is not a folder";
    else if (sb.st_uid != geteuid())
        why = "is a folder another user owns";
    else if (sb.st_mode & (S_IWGRP | S_IWOTH))
        why = "is a folder others can write";
    if (why)
        fprintf(stderr, "ddphook replay: --out %s %s (refused: name a "
                        "new folder, or one of yours that only you can "
                        "write)\n",
                out, why);
    return why == NULL;
}

int cmd_replay(int argc, char **argv)
{
    const char *job = NULL, *dir = NULL, *out = NULL, *model_name = "model";
    const char *save_path = NULL, *load_path = NULL;
    int save_after = -1, from_step = 0;
    static const struct option opts[] = {
        {"job", required_argument, NULL, 'j'},
        {"trace", required_argument, NULL, 't'},
        {"out", required_argument, NULL, 'o'},
        {"model", required_argument, NULL, 'm'},
        {"save-state", required_argument, NULL, 'S'},
        {"save-after", required_argument, NULL, 'A'},
        {"load-state", required_argument, NULL, 'L'},
        {"from-step", required_argument, NULL, 'F'},
        {"help", no_argument, NULL, 'h'},
        {0, 0, 0, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'j':
            job = optarg;
            break;
        case 't':
            dir = optarg;
            break;
        case 'o':
            out = optarg;
            break;
        case 'm':
            model_name = optarg;
            break;
        case 'S':
            save_path = optarg;
            break;
        case 'A':
            save_after = atoi(optarg);
            break;
        case 'L':
            load_path = optarg;
            break;
        case 'F':
            from_step = atoi(optarg);
            break;
        case 'h':
            fputs(replay_usage, stdout);
            return 0;
        default:
            fputs(replay_usage, stderr);
            return 2;
        }
    }
    if ((save_path != NULL) != (save_after >= 0) ||
        (load_path != NULL) != (from_step > 0)) {
        fputs("ddphook replay: --save-state goes with --save-after, "
              "--load-state with --from-step\n",
              stderr);
        return 2;
    }
    if (!job || !dir || !out) {
        fputs("ddphook replay: --job, --trace and --out are required\n\n",
              stderr);
        fputs(replay_usage, stderr);
        return 2;
    }
    char msg[4096];
    trace t;
    if (!trace_open(dir, &t, msg, sizeof msg)) {
        fprintf(stderr, "ddphook replay: %s\n", msg);
        return 1;
    }
    ddph_ctx *ctx = NULL;
    ddph_model *model = NULL;
    float *input = NULL;
    void *step_grad = NULL; /* one parameter's input in the trace's dtype */
    uint64_t *sent = NULL;  /* per synchronised step, what this rank sent
                               (compared with other front ends' counts) */
    void **own = calloc((size_t)t.nparams, sizeof *own);   /* we free */
    char **grads = calloc((size_t)t.nparams, sizeof *grads); /* in use */
    size_t es = ddph__dtype_size(t.dtype), max_numel = 1;
    int rc = 1;
    if (!own || !grads || ddph_open(job, &argc, &argv, &ctx) != DDPH_OK)
        goto done;
    int rank = ddph_rank(ctx), world = ddph_world_size(ctx);
    if (world != t.world_size) {
        fprintf(stderr,
                "ddphook replay: the trace was captured on %d ranks; this "
                "run has %d (use mpiexec -n %d)\n",
                t.world_size, world, t.world_size);
        goto done;
    }
    if (ddph_model_create(ctx, model_name, &model) != DDPH_OK)
        goto fail;
    for (int i = 0; i < t.nparams; i++) {
        own[i] = calloc(t.params[i].numel ? t.params[i].numel : 1, es);
        if (!own[i]) {
            fprintf(stderr,
                    "ddphook replay: parameter '%s' (%zu elements of %zu "
                    "bytes): out of memory\n",
                    t.params[i].name, t.params[i].numel, es);
            goto done;
        }
        if (ddph_model_add_param(model, t.params[i].name, own[i],
                                 t.params[i].shape, t.params[i].ndim,
                                 t.dtype, DDPH_CPU, NULL) != DDPH_OK)
            goto fail;
        if (t.params[i].numel > max_numel)
            max_numel = t.params[i].numel;
    }
    if (ddph_model_finalize(model) != DDPH_OK)
        goto fail;
    /* With gradient_as_bucket_view the gradients live in the runtime. */
    for (int i = 0; i < t.nparams; i++) {
        void *p;
        if (ddph_model_grad_ptr(model, i, &p) != DDPH_OK)
            goto fail;
        grads[i] = p;
    }
    if (!make_out_dir(out))
        goto done;
    input = malloc((t.total ? t.total : 1) * sizeof *input);
    step_grad = malloc(max_numel * es);
    if (!input || !step_grad) {
        fprintf(stderr, "ddphook replay: %zu gradient elements: out of "
                        "memory\n",
                t.total);
        goto done;
    }
    if (load_path && ddph_state_load(ctx, load_path) != DDPH_OK)
        goto fail;
    int synced_steps = 0;
    sent = calloc((size_t)t.steps + 1, sizeof *sent);
    if (!sent) {
        fprintf(stderr, "ddphook replay: out of memory\n");
        goto done;
    }
    for (int s = from_step; s < t.steps; s++) {
        if (!trace_read_step(&t, rank, s, input, msg, sizeof msg)) {
            fprintf(stderr, "ddphook replay: %s\n", msg);
            goto done;
        }
        unsigned flags = s == t.steps - 1 ? DDPH_STEP_END_OF_DATA : 0;
        uint64_t before = bytes_sent(model); /* buckets launch from here */
        if (ddph_step_begin_flags(ctx, &model, 1, flags) != DDPH_OK)
            goto fail;
        /* The backward pass: last parameters first, each one complete
         * (accumulated onto what earlier unsynchronised steps left, in the
         * gradients' dtype, as .grad += does). */
        size_t off = t.total;
        ddph_err e;
        for (int i = t.nparams - 1; i >= 0; i--) {
            off -= t.params[i].numel;
            if (ddph__cpu_cast(input + off, DDPH_F32, step_grad, t.dtype,
                               t.params[i].numel, 1.0, &e) != DDPH_OK) {
                fprintf(stderr, "ddphook replay: %s\n", e.msg);
                goto done;
            }
            ddph__cpu_add(grads[i], step_grad, t.dtype, t.params[i].numel);
            if (ddph_grad_ready(model, i) != DDPH_OK)
                goto fail;
        }
        int synced = ddph_step_syncs(ctx);
        if (ddph_step_wait(ctx) != DDPH_OK)
            goto fail;
        if (synced) {
            sent[synced_steps] = bytes_sent(model) - before;
            off = 0;
            for (int i = 0; i < t.nparams; i++) {
                if (ddph__cpu_cast(grads[i], t.dtype, input + off, DDPH_F32,
                                   t.params[i].numel, 1.0, &e) != DDPH_OK) {
                    fprintf(stderr, "ddphook replay: %s\n", e.msg);
                    goto done;
                }
                memset(grads[i], 0, t.params[i].numel * es);
                off += t.params[i].numel;
            }
            if (!write_out(out, rank, s, input, t.total))
                goto done;
            synced_steps++;
        }
        if (ddph_step_end(ctx) != DDPH_OK)
            goto fail;
        if (s == save_after && ddph_state_save(ctx, save_path) != DDPH_OK)
            goto fail;
    }
    if (rank == 0)
        printf("ddphook replay: %d steps of %s (%s gradients), %d "
               "synchronised, %d ranks, %d buckets -> %s\n",
               t.steps, dir, ddph__dtype_name(t.dtype), synced_steps, world,
               ddph_model_bucket_count(model), out);
    if (rank == 0) {
        printf("ddphook replay: bytes sent by rank 0 per synchronised "
               "step:");
        for (int s = 0; s < synced_steps; s++)
            printf(" %llu", (unsigned long long)sent[s]);
        printf("\n");
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "ddphook replay: %s\n",
            ddph_last_error(ctx)[0] ? ddph_last_error(ctx)
                                    : "out of memory (no detail)");
done:
    for (int i = 0; own && i < t.nparams; i++)
        free(own[i]);
    free(own);
    free(input);
    free(step_grad);
    free(sent);
    if (ddph_close(ctx) != DDPH_OK && rc == 0)
        rc = 1; /* the job failed after its last step (ddph_close said why) */
    trace_close(&t);
    free(grads);
    return rc;
}
