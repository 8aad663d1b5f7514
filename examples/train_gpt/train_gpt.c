/* train_gpt: a GPT trained byte by byte on the text of Debian's fortunes,
 * data-parallel through ddphook.
 *
 * The model (gpt.h) is registered tensor by tensor, layer by layer, in
 * forward order, with its values (ddph_model_set_param_data: rank 0's
 * initial weights go to every rank).  During backward each tensor's
 * gradient is handed to ddph_grad_ready as soon as it is complete, last
 * layer first, so buckets are reduced while backward goes on.  Each
 * rank computes its shard of every global batch; [accumulate] steps in
 * the job file sets the micro-batches per optimizer step.  AdamW with
 * gradient clipping by global norm (on the averaged gradients), a linear
 * warm-up and a cosine decay of the learning rate.
 *
 *     mpiexec -n 2 examples/train_gpt/train_gpt --config examples/configs/gpt_allreduce.ini
 *
 * See --help. */
#define _GNU_SOURCE
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include <ddphook/ddphook.h>

#include "gpt.h"
#include "text.h"

static const char usage[] =
    "usage: mpiexec -n W train_gpt [--config JOB.ini] [--steps N] [--seed S]\n"
    "           [--csv FILE] [--save PATH] [--resume PATH] [--stop-at N]\n"
    "           [--save-init PATH] [--tiny]\n"
    "           [--layers L] [--width C] [--heads H] [--context T]\n"
    "           [--batch B] [--lr X] [--warmup N] [--eval-every N]\n"
    "           [--eval-batches N] [--sample N] [--data DIR]\n"
    "\n"
    "Trains a GPT-style transformer byte by byte on the fortunes text,\n"
    "data-parallel over the MPI ranks, reducing gradients through the hook\n"
    "the job INI names.  Prints the validation loss of a bigram model on the\n"
    "same split once (the baseline to beat), the losses as it trains, and a\n"
    "sample of generated text at the end.\n"
    "\n"
    "  --config FILE     the job (hook, buckets, accumulation); default: all\n"
    "                    defaults (allreduce)\n"
    "  --steps N         optimizer steps (default 5000)\n"
    "  --seed S          initialisation and batch seed, the same on every\n"
    "                    rank (1)\n"
    "  --csv FILE        rank 0 writes step,seconds,train_loss,val_loss,\n"
    "                    bytes_sent,lr (validation rows only; bytes_sent is\n"
    "                    what this rank sent in the step, summed)\n"
    "  --save PATH       at the end, PATH.model (weights, AdamW state, step)\n"
    "                    and PATH.hook.rank<R> (the hook's state)\n"
    "  --resume PATH     start from a --save; the run continues bit for bit\n"
    "  --save-init PATH  write the initial weights (after rank 0's went to\n"
    "                    every rank) to PATH.model, as --save does\n"
    "  --stop-at N       end after step N (then --save), keeping the\n"
    "                    learning-rate schedule of --steps\n"
    "  --tiny            a model and batch small enough for a test: 1 layer,\n"
    "                    width 16, 2 heads, context 16, batch 8, 4 steps\n"
    "  --layers L --width C --heads H --context T\n"
    "                    the model (default 4, 128, 4, 64)\n"
    "  --batch B         sequences per micro-batch, all ranks together; a\n"
    "                    multiple of the world size (default 24)\n"
    "  --lr X            peak learning rate (3e-3)\n"
    "  --warmup N        warm-up steps (N/10 of --steps by default)\n"
    "  --eval-every N    validation every N steps, and at the last (100)\n"
    "  --eval-batches N  validation sequences, all ranks together (64)\n"
    "  --sample N        bytes of text to generate at the end (300)\n"
    "  --data DIR        the text (/usr/share/games/fortunes)\n";

typedef struct options {
    const char *config, *csv, *save, *resume, *data, *save_init;
    long steps, stop_at;
    uint64_t seed;
    gpt_config model;
    int batch, eval_every, eval_batches, sample;
    long warmup;
    double lr;
} options;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int parse(int argc, char **argv, options *o)
{
    *o = (options){.steps = 5000, .seed = 1, .batch = 24, .eval_every = 100,
                   .eval_batches = 64, .sample = 300, .warmup = -1,
                   .lr = 3e-3, .data = "/usr/share/games/fortunes",
                   .model = {.vocab = 256, .context = 64, .width = 128,
                             .heads = 4, .layers = 4}};
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"steps", required_argument, NULL, 'n'},
        {"seed", required_argument, NULL, 's'},
        {"csv", required_argument, NULL, 'v'},
        {"save", required_argument, NULL, 'S'},
        {"resume", required_argument, NULL, 'R'},
        {"stop-at", required_argument, NULL, 'x'},
        {"save-init", required_argument, NULL, 'I'},
        {"tiny", no_argument, NULL, 't'},
        {"layers", required_argument, NULL, 'L'},
        {"width", required_argument, NULL, 'C'},
        {"heads", required_argument, NULL, 'H'},
        {"context", required_argument, NULL, 'T'},
        {"batch", required_argument, NULL, 'B'},
        {"lr", required_argument, NULL, 'l'},
        {"warmup", required_argument, NULL, 'w'},
        {"eval-every", required_argument, NULL, 'e'},
        {"eval-batches", required_argument, NULL, 'E'},
        {"sample", required_argument, NULL, 'g'},
        {"data", required_argument, NULL, 'd'},
        {0, 0, 0, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'c': o->config = optarg; break;
        case 'n': o->steps = atol(optarg); break;
        case 's': o->seed = strtoull(optarg, NULL, 10); break;
        case 'v': o->csv = optarg; break;
        case 'S': o->save = optarg; break;
        case 'R': o->resume = optarg; break;
        case 'x': o->stop_at = atol(optarg); break;
        case 'I': o->save_init = optarg; break;
        case 't':
            o->model = (gpt_config){.vocab = 256, .context = 16, .width = 16,
                                    .heads = 2, .layers = 1};
            o->batch = 8;
            o->steps = 4;
            o->eval_every = 2;
            o->eval_batches = 8;
            o->sample = 40;
            break;
        case 'L': o->model.layers = atoi(optarg); break;
        case 'C': o->model.width = atoi(optarg); break;
        case 'H': o->model.heads = atoi(optarg); break;
        case 'T': o->model.context = atoi(optarg); break;
        case 'B': o->batch = atoi(optarg); break;
        case 'l': o->lr = atof(optarg); break;
        case 'w': o->warmup = atol(optarg); break;
        case 'e': o->eval_every = atoi(optarg); break;
        case 'E': o->eval_batches = atoi(optarg); break;
        case 'g': o->sample = atoi(optarg); break;
        case 'd': o->data = optarg; break;
        default: fputs(usage, stderr); return -1;
        }
    }
    if (optind < argc || o->steps < 1 || o->batch < 1 || o->model.layers < 1 ||
        o->model.width < 1 || o->model.heads < 1 || o->model.context < 2 ||
        o->model.width % o->model.heads || o->eval_every < 1 ||
        o->eval_batches < 1 || o->sample < 0 || !(o->lr > 0)) {
        fprintf(stderr, "train_gpt: bad arguments (the width must be a "
                        "multiple of the heads; counts positive)\n%s",
                usage);
        return -1;
    }
    if (o->warmup < 0)
        o->warmup = o->steps / 10;
    if (o->stop_at <= 0 || o->stop_at > o->steps)
        o->stop_at = o->steps;
    return 0;
}

/* ---- the model as ddphook sees it ------------------------------------------ */

/* Every tensor, per layer for the blocks, in forward order: the index of
 * (tensor t, layer l) in the ddphook model. */
typedef struct registry {
    ddph_model *model;
    int *index; /* [t * L + l] (l = 0 for whole tensors) */
    int layers;
    ddph_status failed; /* the first grad_ready failure, seen after backward */
} registry;

/* A tensor's shape as ddphook sees it: the matrices as rows x columns
 * (PowerSGD compresses matrices only), the rest as vectors. */
static int tensor_shape(const gpt_config *c, int t, int64_t shape[2])
{
    int64_t C = c->width;
    int64_t rows = t == GPT_WTE       ? c->vocab
                   : t == GPT_WPE     ? c->context
                   : t == GPT_QKVW    ? 3 * C
                   : t == GPT_ATTPROJW ? C
                   : t == GPT_FCW     ? 4 * C
                   : t == GPT_FCPROJW ? C
                                      : 0;
    if (!rows) {
        shape[0] = (int64_t)gpt_slice_size(c, t);
        return 1;
    }
    shape[0] = rows;
    shape[1] = (int64_t)gpt_slice_size(c, t) / rows;
    return 2;
}

/* Registers whole tensor t (an embedding, the final LayerNorm). */
static ddph_status register_whole(registry *r, gpt *m, int t)
{
    int64_t shape[2];
    int ndim = tensor_shape(&m->cfg, t, shape);
    int *at = &r->index[t * r->layers];
    ddph_status st = ddph_model_add_param(r->model, gpt_tensor_name(t),
                                          m->grad[t], shape, ndim, DDPH_F32,
                                          DDPH_CPU, at);
    return st == DDPH_OK ? ddph_model_set_param_data(r->model, *at,
                                                     m->tensor[t])
                         : st;
}

/* Every tensor in forward order (embeddings, block 0 .. L-1 each as
 * "h<l>.<tensor>", the final LayerNorm), with its values.  ddphook fills
 * buckets from the last registered, so the final LayerNorm's and the last
 * block's gradients, complete first, go out first. */
static ddph_status register_model(ddph_ctx *ctx, gpt *m, registry *r)
{
    const gpt_config *c = &m->cfg;
    r->layers = c->layers;
    r->failed = DDPH_OK;
    r->index = calloc((size_t)GPT_NTENSORS * c->layers, sizeof *r->index);
    if (!r->index)
        return DDPH_ERR_NOMEM;
    ddph_status st = ddph_model_create(ctx, "gpt", &r->model);
    if (st == DDPH_OK)
        st = register_whole(r, m, GPT_WTE);
    if (st == DDPH_OK)
        st = register_whole(r, m, GPT_WPE);
    for (int l = 0; l < c->layers && st == DDPH_OK; l++)
        for (int t = GPT_LN1W; t <= GPT_FCPROJB && st == DDPH_OK; t++) {
            char name[64];
            snprintf(name, sizeof name, "h%d.%s", l, gpt_tensor_name(t));
            size_t off = gpt_slice_size(c, t) * (size_t)l;
            int64_t shape[2];
            int ndim = tensor_shape(c, t, shape);
            int *at = &r->index[t * c->layers + l];
            st = ddph_model_add_param(r->model, name, m->grad[t] + off, shape,
                                      ndim, DDPH_F32, DDPH_CPU, at);
            if (st == DDPH_OK)
                st = ddph_model_set_param_data(r->model, *at,
                                               m->tensor[t] + off);
        }
    if (st == DDPH_OK)
        st = register_whole(r, m, GPT_LNFW);
    if (st == DDPH_OK)
        st = register_whole(r, m, GPT_LNFB);
    return st;
}

/* Backward writes each registered tensor's gradient where ddphook says:
 * its own place in m->grads, or with [runtime] gradient_as_bucket_view
 * its place in a bucket (no copies in or out). */
static ddph_status place_grads(registry *r, gpt *m)
{
    for (int t = 0; t < GPT_NTENSORS; t++)
        for (int l = 0; l < (gpt_per_layer(t) ? r->layers : 1); l++) {
            void *at;
            ddph_status st = ddph_model_grad_ptr(
                r->model, r->index[t * r->layers + l], &at);
            if (st != DDPH_OK)
                return st;
            gpt_place_grad(m, t, l, at);
        }
    return DDPH_OK;
}

/* gpt_backward's callback: tensor t of layer l has its gradient (l = 0
 * for whole tensors), which goes to ddphook at once, so that a bucket
 * starts as soon as its last tensor is done, not its last layer. */
static void grad_done(void *user, int t, int l)
{
    registry *r = user;
    if (r->failed == DDPH_OK) /* the first failure is the one to report */
        r->failed = ddph_grad_ready(r->model, r->index[t * r->layers + l]);
}

/* ---- checkpoints ------------------------------------------------------------ */

/* PATH.model: a header (magic, the model's sizes, the step), then the
 * weights and AdamW's two moments, then a crc32 of everything before it.
 * Written by rank 0 (every rank holds the same values) to a temporary
 * file renamed over the target. */
#define MAGIC "DDPHGPT1"

typedef struct header {
    char magic[8];
    int32_t vocab, context, width, heads, layers, pad;
    int64_t step, nparams;
} header;

static int save_model(const char *path, const gpt *m, const gpt_adamw *o,
                      long step)
{
    char tmp[4200], final[4200];
    snprintf(final, sizeof final, "%s.model", path);
    snprintf(tmp, sizeof tmp, "%s.model.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0)
        return -1;
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        close(fd);
        unlink(tmp);
        return -1;
    }
    size_t n = gpt_param_count(&m->cfg);
    header h = {.vocab = m->cfg.vocab, .context = m->cfg.context,
                .width = m->cfg.width, .heads = m->cfg.heads,
                .layers = m->cfg.layers, .step = step, .nparams = (int64_t)n};
    memcpy(h.magic, MAGIC, 8);
    uLong crc = crc32(0L, Z_NULL, 0);
    const void *parts[4] = {&h, m->params, o->m, o->v};
    size_t sizes[4] = {sizeof h, n * sizeof(real), n * sizeof(real),
                       n * sizeof(real)};
    int ok = 1;
    for (int i = 0; i < 4; i++) {
        ok &= fwrite(parts[i], 1, sizes[i], f) == sizes[i];
        crc = crc32_z(crc, parts[i], sizes[i]);
    }
    uint32_t c32 = (uint32_t)crc;
    ok &= fwrite(&c32, sizeof c32, 1, f) == 1;
    ok &= fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, final) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* Reads PATH.model into m and o (same sizes); the step into *step.  A
 * message in why on failure. */
static int load_model(const char *path, gpt *m, gpt_adamw *o, long *step,
                      char *why, size_t cap)
{
    char name[4200];
    snprintf(name, sizeof name, "%s.model", path);
    FILE *f = fopen(name, "rb");
    if (!f) {
        snprintf(why, cap, "%s: cannot open", name);
        return -1;
    }
    size_t n = gpt_param_count(&m->cfg);
    header h;
    int rc = -1;
    uLong crc = crc32(0L, Z_NULL, 0);
    uint32_t stored = 0;
    if (fread(&h, sizeof h, 1, f) != 1 || memcmp(h.magic, MAGIC, 8) != 0) {
        snprintf(why, cap, "%s: not a train_gpt checkpoint", name);
    } else if (h.vocab != m->cfg.vocab || h.context != m->cfg.context ||
               h.width != m->cfg.width || h.heads != m->cfg.heads ||
               h.layers != m->cfg.layers || h.nparams != (int64_t)n) {
        snprintf(why, cap, "%s: a model of %d layers, width %d, %d heads, "
                           "context %d; this run has %d, %d, %d, %d",
                 name, h.layers, h.width, h.heads, h.context, m->cfg.layers,
                 m->cfg.width, m->cfg.heads, m->cfg.context);
    } else if (fread(m->params, sizeof(real), n, f) != n ||
               fread(o->m, sizeof(real), n, f) != n ||
               fread(o->v, sizeof(real), n, f) != n ||
               fread(&stored, sizeof stored, 1, f) != 1 || fgetc(f) != EOF) {
        snprintf(why, cap, "%s: truncated or too long", name);
    } else {
        crc = crc32_z(crc, (const Bytef *)&h, sizeof h);
        crc = crc32_z(crc, (const Bytef *)m->params, n * sizeof(real));
        crc = crc32_z(crc, (const Bytef *)o->m, n * sizeof(real));
        crc = crc32_z(crc, (const Bytef *)o->v, n * sizeof(real));
        if ((uint32_t)crc != stored)
            snprintf(why, cap, "%s: checksum mismatch", name);
        else
            rc = 0;
    }
    fclose(f);
    *step = rc == 0 ? (long)h.step : 0;
    return rc;
}

/* ---- validation -------------------------------------------------------------- */

/* The mean loss over the validation sequences, each rank taking its share
 * (sequence i goes to rank i % W), averaged with ddph_allreduce_f64. */
static int validate(ddph_ctx *ctx, gpt *m, const text *tx, int nseq,
                    double *loss)
{
    int rank = ddph_rank(ctx), world = ddph_world_size(ctx);
    int T = m->cfg.context, B = m->batch;
    int *in = malloc(sizeof *in * (size_t)B * T);
    int *tg = malloc(sizeof *tg * (size_t)B * T);
    if (!in || !tg) {
        free(in);
        free(tg);
        return -1;
    }
    double sum[2] = {0, 0}; /* loss x sequences, sequences */
    int mine = 0;
    for (int i = rank; i < nseq; i += world) {
        text_val_sequence(tx, i, nseq, T, in + (size_t)mine * T,
                          tg + (size_t)mine * T);
        if (++mine == B || i + world >= nseq) {
            gpt_forward(m, in, tg, mine);
            sum[0] += m->loss * mine;
            sum[1] += mine;
            mine = 0;
        }
    }
    free(in);
    free(tg);
    if (ddph_allreduce_f64(ctx, sum, 2, DDPH_SUM) != DDPH_OK)
        return -1;
    *loss = sum[0] / sum[1];
    return 0;
}

static double learning_rate(const options *o, long step)
{
    if (step < o->warmup)
        return o->lr * (double)(step + 1) / (double)o->warmup;
    double p = (double)(step - o->warmup) /
               (double)(o->steps - o->warmup > 0 ? o->steps - o->warmup : 1);
    return o->lr * (0.1 + 0.9 * 0.5 * (1 + cos(M_PI * (p > 1 ? 1 : p))));
}

static uint64_t bytes_sent(ddph_model *model)
{
    uint64_t total = 0;
    for (int b = 0; b < ddph_model_bucket_count(model); b++) {
        uint64_t sent = 0, received = 0;
        if (ddph_model_bucket_traffic(model, b, &sent, &received) == DDPH_OK)
            total += sent;
    }
    return total;
}

/* crc32 of the weights, printed at the end: two runs (or a run and its
 * resumption) that agree bit for bit print the same. */
static uint32_t weights_crc(const gpt *m)
{
    return (uint32_t)crc32_z(crc32(0L, Z_NULL, 0), (const Bytef *)m->params,
                             gpt_param_count(&m->cfg) * sizeof(real));
}

#define FAIL(ctx, what)                                                      \
    do {                                                                     \
        fprintf(stderr, "train_gpt: %s: %s\n", what, ddph_last_error(ctx));  \
        ddph_close(ctx);                                                     \
        return 1;                                                            \
    } while (0)

int main(int argc, char **argv)
{
    options o;
    ddph_ctx *ctx;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        }
    /* ddph_open first: MPI may take its own arguments out of argv. */
    const char *config = NULL;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--config") == 0)
            config = argv[i + 1];
    ddph_status st = ddph_open(config, &argc, &argv, &ctx);
    if (st != DDPH_OK) {
        fprintf(stderr, "train_gpt: ddph_open: %s\n", ddph_status_name(st));
        return 1;
    }
    if (parse(argc, argv, &o) != 0) {
        ddph_close(ctx);
        return 2;
    }
    int rank = ddph_rank(ctx), world = ddph_world_size(ctx);
    if (o.batch % world != 0) {
        if (rank == 0)
            fprintf(stderr, "train_gpt: --batch %d is not a multiple of the "
                            "%d ranks\n",
                    o.batch, world);
        ddph_close(ctx);
        return 2;
    }
    int local = o.batch / world, T = o.model.context;
    char why[4400];
    text tx;
    if (text_load(&tx, o.data, why, sizeof why) != 0) {
        fprintf(stderr, "train_gpt: %s\n", why);
        ddph_close(ctx);
        return 1;
    }
    gpt m;
    gpt_adamw opt;
    registry reg = {0};
    if (gpt_create(&m, &o.model, local) != 0 ||
        gpt_adamw_create(&opt, &m) != 0) {
        fprintf(stderr, "train_gpt: out of memory\n");
        ddph_close(ctx);
        return 1;
    }
    gpt_init(&m, o.seed);
    if ((st = register_model(ctx, &m, &reg)) != DDPH_OK)
        FAIL(ctx, "registering the model");
    /* Rank 0's initial weights go to every rank here. */
    if ((st = ddph_model_finalize(reg.model)) != DDPH_OK)
        FAIL(ctx, "ddph_model_finalize");
    if ((st = place_grads(&reg, &m)) != DDPH_OK)
        FAIL(ctx, "ddph_model_grad_ptr");
    if (o.save_init && rank == 0 && save_model(o.save_init, &m, &opt, 0) != 0)
        fprintf(stderr, "train_gpt: cannot write %s.model\n", o.save_init);
    int accum = ddph_model_accumulate_steps(reg.model);
    long start = 0;
    if (o.resume) {
        if (load_model(o.resume, &m, &opt, &start, why, sizeof why) != 0) {
            fprintf(stderr, "train_gpt: --resume: %s\n", why);
            ddph_close(ctx);
            return 1;
        }
        char hook[4200];
        snprintf(hook, sizeof hook, "%s.hook", o.resume);
        if (ddph_state_load(ctx, hook) != DDPH_OK)
            FAIL(ctx, "--resume: the hook's state");
    }
    if (rank == 0) {
        printf("train_gpt: %d ranks, hook %s, %zu parameters (%d layers, "
               "width %d, %d heads, context %d), batch %d x %d micro-batch%s, "
               "%d files, %zu bytes (%zu train)\n",
               world, ddph_model_hook_name(reg.model),
               gpt_param_count(&o.model), o.model.layers, o.model.width,
               o.model.heads, T, o.batch, accum, accum == 1 ? "" : "es",
               tx.files, tx.size, tx.train_end);
        printf("bigram baseline: validation loss %.4f\n",
               text_bigram_val_loss(&tx));
    }
    FILE *csv = NULL;
    if (o.csv && rank == 0) {
        csv = fopen(o.csv, o.resume ? "a" : "w");
        if (csv && !o.resume)
            fprintf(csv, "step,seconds,train_loss,val_loss,bytes_sent,lr\n");
    }
    int *in = malloc(sizeof *in * (size_t)local * T);
    int *tg = malloc(sizeof *tg * (size_t)local * T);
    if (!in || !tg)
        FAIL(ctx, "out of memory");
    double t0 = now(), train_loss = 0;
    uint64_t sent0 = bytes_sent(reg.model);
    for (long step = start; step < o.stop_at; step++) {
        gpt_zero_grads(&m);
        double loss = 0;
        for (int micro = 0; micro < accum; micro++) {
            for (int i = 0; i < local; i++)
                text_train_sequence(&tx, o.seed, step, micro,
                                    rank * local + i, T, in + (size_t)i * T,
                                    tg + (size_t)i * T);
            unsigned flags = micro == accum - 1 ? DDPH_STEP_FORCE_SYNC
                                                : DDPH_STEP_NO_SYNC;
            if (ddph_step_begin_flags(ctx, &reg.model, 1, flags) != DDPH_OK)
                FAIL(ctx, "ddph_step_begin");
            gpt_forward(&m, in, tg, local);
            loss += m.loss / accum;
            gpt_backward(&m, in, tg, local, grad_done, &reg);
            if (reg.failed != DDPH_OK)
                FAIL(ctx, "ddph_grad_ready");
            if (ddph_step_wait(ctx) != DDPH_OK)
                FAIL(ctx, "ddph_step_wait");
            if (micro == accum - 1) {
                /* The averaged sum of accum micro-batches: their mean,
                 * clipped to norm 1. */
                double norm = gpt_grad_norm(&m) / accum;
                double scale = (norm > 1 ? 1 / norm : 1) / accum;
                gpt_adamw_step(&opt, &m, learning_rate(&o, step), scale,
                               step + 1);
            }
            if (ddph_step_end(ctx) != DDPH_OK)
                FAIL(ctx, "ddph_step_end");
        }
        train_loss = loss;
        int last = step == o.stop_at - 1;
        if ((step + 1) % o.eval_every == 0 || last) {
            double mean[1] = {train_loss}, val;
            if (ddph_average_f64(ctx, mean, 1) != DDPH_OK ||
                validate(ctx, &m, &tx, o.eval_batches, &val) != 0)
                FAIL(ctx, "validation");
            uint64_t sent = bytes_sent(reg.model);
            double secs = now() - t0;
            if (rank == 0) {
                printf("step %5ld  %7.1f s  train %.4f  val %.4f  lr %.2e\n",
                       step + 1, secs, mean[0], val, learning_rate(&o, step));
                fflush(stdout);
            }
            if (csv)
                fprintf(csv, "%ld,%.3f,%.7f,%.7f,%llu,%.3e\n", step + 1, secs,
                        mean[0], val, (unsigned long long)(sent - sent0),
                        learning_rate(&o, step));
        }
    }
    if (csv)
        fclose(csv);
    if (o.save) {
        if (rank == 0 && save_model(o.save, &m, &opt, o.stop_at) != 0)
            fprintf(stderr, "train_gpt: cannot write %s.model\n", o.save);
        char hook[4200];
        snprintf(hook, sizeof hook, "%s.hook", o.save);
        if (ddph_state_save(ctx, hook) != DDPH_OK || ddph_barrier(ctx) != DDPH_OK)
            FAIL(ctx, "--save");
    }
    if (rank == 0) {
        printf("weights crc32 %08x\n", weights_crc(&m));
        if (o.sample > 0) {
            int prompt[1] = {'\n'};
            int *out = malloc(sizeof *out * (size_t)o.sample);
            uint64_t rng = o.seed ^ 0x5DEECE66DULL;
            if (out) {
                gpt_sample(&m, prompt, 1, out, o.sample, &rng);
                printf("sample:\n");
                for (int i = 0; i < o.sample; i++)
                    putchar(out[i] == '\t' || out[i] == '\n' ||
                                    (out[i] >= 32 && out[i] < 127)
                                ? out[i]
                                : '?');
                putchar('\n');
                free(out);
            }
        }
    }
    free(in);
    free(tg);
    free(reg.index);
    gpt_adamw_free(&opt);
    gpt_free(&m);
    text_free(&tx);
    st = ddph_close(ctx);
    return st == DDPH_OK ? 0 : 1;
}
