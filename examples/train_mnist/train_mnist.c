/* train_mnist: a data-parallel Fashion-MNIST trainer in C, the main job of
 * ddphook's README.
 *
 * A multi-layer perceptron 784-512-256-10 (ReLU, softmax cross-entropy,
 * SGD with momentum, GEMMs through OpenBLAS) trained across MPI ranks:
 * every rank takes its shard of each global batch, marks each layer's
 * gradients ready as backward produces them (last layer first, so
 * communication overlaps the rest of backward), and steps the optimizer
 * on the averaged gradients.  The hook, the buckets and gradient
 * accumulation all come from the job INI.
 *
 *     mpiexec -n 2 examples/train_mnist/train_mnist --config examples/configs/fp16.ini
 *
 * See --help. */
#include <cblas.h>
#include <getopt.h>
#include <math.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ddphook/ddphook.h>

#include "idx.h"

#define NLAYERS 3
static const int widths[NLAYERS + 1] = {784, 512, 256, 10};

static const char usage[] =
    "usage: mpiexec -n W train_mnist [--config JOB.ini] [--epochs N]\n"
    "           [--batch B] [--lr X] [--momentum X] [--seed S] [--csv FILE]\n"
    "           [--data DIR] [--train-limit N] [--test-limit N]\n"
    "\n"
    "Trains a 784-512-256-10 MLP on Fashion-MNIST, data-parallel over the\n"
    "MPI ranks, reducing gradients through the hook the job INI names.\n"
    "\n"
    "  --config FILE    the job (hook, buckets, accumulation); default: all\n"
    "                   defaults (allreduce)\n"
    "  --epochs N       passes over the training set (5)\n"
    "  --batch B        global batch size, split across ranks (128)\n"
    "  --lr X           learning rate (0.05)\n"
    "  --momentum X     SGD momentum (0.9)\n"
    "  --seed S         initialisation and shuffling seed, the same on every\n"
    "                   rank (1)\n"
    "  --csv FILE       write epoch,loss,test_accuracy,seconds,bytes_per_step\n"
    "  --data DIR       IDX files (/usr/share/datasets/fashion-mnist)\n"
    "  --train-limit N  use the first N training examples (all)\n"
    "  --test-limit N   use the first N test examples (all)\n";

typedef struct layer {
    float *w, *b;   /* parameters: out x in, out */
    float *gw, *gb; /* gradients: where backward writes them */
    float *own_gw, *own_gb; /* this program's allocation of them */
    float *vw, *vb; /* momentum */
    int in, out;
} layer;

/* splitmix64: initialisation and shuffling, identical on every rank. */
/* Wall-clock seconds, for the per-epoch times. */
static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform(uint64_t *s)
{
    return (double)(next_u64(s) >> 11) / 9007199254740992.0;
}

static void init_layer(layer *l, int in, int out, uint64_t *rng)
{
    l->in = in;
    l->out = out;
    size_t nw = (size_t)in * out;
    l->w = malloc(nw * sizeof(float));
    l->gw = calloc(nw, sizeof(float));
    l->vw = calloc(nw, sizeof(float));
    l->b = calloc((size_t)out, sizeof(float));
    l->gb = calloc((size_t)out, sizeof(float));
    l->own_gw = l->gw;
    l->own_gb = l->gb;
    l->vb = calloc((size_t)out, sizeof(float));
    /* He initialisation, uniform with the same variance. */
    double a = sqrt(6.0 / in);
    for (size_t i = 0; i < nw; i++)
        l->w[i] = (float)((2 * uniform(rng) - 1) * a);
}

/* Forward for rows x[0..b): activations act[l] (b x widths[l]). */
static void forward(layer *L, float **act, int b)
{
    for (int l = 0; l < NLAYERS; l++) {
        float *out = act[l + 1];
        for (int r = 0; r < b; r++)
            memcpy(out + (size_t)r * L[l].out, L[l].b, L[l].out * sizeof(float));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b, L[l].out,
                    L[l].in, 1.0f, act[l], L[l].in, L[l].w, L[l].in, 1.0f, out,
                    L[l].out);
        if (l < NLAYERS - 1)
            for (size_t i = 0; i < (size_t)b * L[l].out; i++)
                out[i] = out[i] > 0 ? out[i] : 0;
    }
}

/* Softmax cross-entropy: returns the summed loss, leaves dlogits (scaled by
 * 1/scale) in d. */
static double softmax_xent(const float *logits, const uint8_t *y, int b,
                           float *d, float scale)
{
    double loss = 0;
    for (int r = 0; r < b; r++) {
        const float *z = logits + r * 10;
        float m = z[0];
        for (int k = 1; k < 10; k++)
            m = z[k] > m ? z[k] : m;
        double sum = 0;
        for (int k = 0; k < 10; k++)
            sum += exp((double)(z[k] - m));
        loss += log(sum) - (z[y[r]] - m);
        for (int k = 0; k < 10; k++)
            d[r * 10 + k] = (float)(exp((double)(z[k] - m)) / sum -
                                    (k == y[r])) / scale;
    }
    return loss;
}

static double evaluate(layer *L, float **act, const dataset *test, int chunk)
{
    size_t correct = 0;
    for (size_t i = 0; i < test->n; i += (size_t)chunk) {
        int b = (int)(test->n - i < (size_t)chunk ? test->n - i : (size_t)chunk);
        memcpy(act[0], test->x + i * test->dim, (size_t)b * test->dim * sizeof(float));
        forward(L, act, b);
        for (int r = 0; r < b; r++) {
            const float *z = act[NLAYERS] + r * 10;
            int best = 0;
            for (int k = 1; k < 10; k++)
                best = z[k] > z[best] ? k : best;
            correct += best == test->y[i + (size_t)r];
        }
    }
    return test->n ? 100.0 * (double)correct / (double)test->n : 0;
}

int main(int argc, char **argv)
{
    const char *config = NULL, *csv = NULL;
    const char *data = "/usr/share/datasets/fashion-mnist";
    int epochs = 5, batch = 128;
    double lr = 0.05, momentum = 0.9;
    uint64_t seed = 1;
    size_t train_limit = 0, test_limit = 0;
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"epochs", required_argument, NULL, 'e'},
        {"batch", required_argument, NULL, 'b'},
        {"lr", required_argument, NULL, 'l'},
        {"momentum", required_argument, NULL, 'm'},
        {"seed", required_argument, NULL, 's'},
        {"csv", required_argument, NULL, 'o'},
        {"data", required_argument, NULL, 'd'},
        {"train-limit", required_argument, NULL, 'n'},
        {"test-limit", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {0, 0, 0, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'c': config = optarg; break;
        case 'e': epochs = atoi(optarg); break;
        case 'b': batch = atoi(optarg); break;
        case 'l': lr = atof(optarg); break;
        case 'm': momentum = atof(optarg); break;
        case 's': seed = strtoull(optarg, NULL, 10); break;
        case 'o': csv = optarg; break;
        case 'd': data = optarg; break;
        case 'n': train_limit = strtoull(optarg, NULL, 10); break;
        case 't': test_limit = strtoull(optarg, NULL, 10); break;
        case 'h': fputs(usage, stdout); return 0;
        default: fputs(usage, stderr); return 2;
        }
    }
    if (epochs < 1 || batch < 1) {
        fputs(usage, stderr);
        return 2;
    }
    ddph_ctx *ctx;
    if (ddph_open(config, &argc, &argv, &ctx) != DDPH_OK)
        return 1;
    int rank = ddph_rank(ctx), world = ddph_world_size(ctx);
    if (batch % world) {
        if (rank == 0)
            fprintf(stderr, "train_mnist: --batch %d does not split over %d "
                            "ranks\n",
                    batch, world);
        ddph_close(ctx);
        return 2;
    }
    /* One BLAS thread per rank: the ranks already fill the cores. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    openblas_set_num_threads(world >= cores ? 1 : (int)(cores / world));

    char msg[4200];
    dataset train, test;
    if (!idx_load(data, "train", train_limit, &train, msg, sizeof msg) ||
        !idx_load(data, "t10k", test_limit, &test, msg, sizeof msg)) {
        if (rank == 0)
            fprintf(stderr, "train_mnist: %s\n", msg);
        ddph_close(ctx);
        return 1;
    }

    uint64_t rng = seed;
    layer L[NLAYERS];
    ddph_model *model;
    int idx_w[NLAYERS], idx_b[NLAYERS];
    if (ddph_model_create(ctx, "mlp", &model) != DDPH_OK)
        goto fail;
    for (int l = 0; l < NLAYERS; l++) {
        init_layer(&L[l], widths[l], widths[l + 1], &rng);
        char name[32];
        int64_t wshape[2] = {L[l].out, L[l].in}, bshape[1] = {L[l].out};
        snprintf(name, sizeof name, "fc%d.weight", l + 1);
        if (ddph_model_add_param(model, name, L[l].gw, wshape, 2, DDPH_F32,
                                 DDPH_CPU, &idx_w[l]) != DDPH_OK)
            goto fail;
        snprintf(name, sizeof name, "fc%d.bias", l + 1);
        if (ddph_model_add_param(model, name, L[l].gb, bshape, 1, DDPH_F32,
                                 DDPH_CPU, &idx_b[l]) != DDPH_OK)
            goto fail;
        /* For hooks that average parameters (post-local-SGD). */
        ddph_model_set_param_data(model, idx_w[l], L[l].w);
        ddph_model_set_param_data(model, idx_b[l], L[l].b);
    }
    if (ddph_model_finalize(model) != DDPH_OK)
        goto fail;
    /* With [runtime] gradient_as_bucket_view the gradients live in the
     * runtime's buckets from here on (no copy in or out); otherwise this
     * hands back our own arrays. */
    for (int l = 0; l < NLAYERS; l++) {
        void *gw, *gb;
        if (ddph_model_grad_ptr(model, idx_w[l], &gw) != DDPH_OK ||
            ddph_model_grad_ptr(model, idx_b[l], &gb) != DDPH_OK)
            goto fail;
        L[l].gw = gw;
        L[l].gb = gb;
    }

    int local = batch / world, chunk = local > 1000 ? local : 1000;
    float *act[NLAYERS + 1], *delta[NLAYERS + 1];
    for (int l = 0; l <= NLAYERS; l++) {
        act[l] = malloc((size_t)chunk * widths[l] * sizeof(float));
        delta[l] = malloc((size_t)chunk * widths[l] * sizeof(float));
    }
    uint8_t *ylocal = malloc((size_t)local);
    size_t *order = malloc(train.n * sizeof *order);
    for (size_t i = 0; i < train.n; i++)
        order[i] = i;
    size_t grad_bytes = 0;
    for (int l = 0; l < NLAYERS; l++)
        grad_bytes += ((size_t)L[l].in + 1) * L[l].out * sizeof(float);
    FILE *csvf = NULL;
    if (csv && rank == 0 && !(csvf = fopen(csv, "w")))
        fprintf(stderr, "train_mnist: cannot write %s\n", csv);
    if (csvf)
        fprintf(csvf, "epoch,loss,test_accuracy,seconds,bytes_per_step\n");
    if (rank == 0)
        printf("train_mnist: %d ranks, %zu training and %zu test examples, "
               "global batch %d, %d buckets, %.2f MiB of gradients per step\n",
               world, train.n, test.n, batch, ddph_model_bucket_count(model),
               grad_bytes / 1048576.0);

    size_t steps_per_epoch = train.n / (size_t)batch;
    uint64_t wire_total = 0, synced_total = 0;
    double acc = 0, total_seconds = 0, last_loss = 0;
    for (int e = 0; e < epochs; e++) {
        double t0 = seconds_now(), loss_sum = 0;
        /* The same permutation on every rank (Fisher-Yates). */
        for (size_t i = train.n - 1; i > 0; i--) {
            size_t j = (size_t)(next_u64(&rng) % (i + 1)), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        uint64_t wire_before = 0, synced = 0;
        for (int b = 0; b < ddph_model_bucket_count(model); b++) {
            ddph_bucket_info info;
            ddph_model_bucket_info(model, b, &info);
            wire_before += info.bytes_on_wire;
        }
        for (size_t s = 0; s < steps_per_epoch; s++) {
            const size_t *ids = order + s * (size_t)batch + (size_t)rank * local;
            for (int r = 0; r < local; r++) {
                memcpy(act[0] + (size_t)r * 784, train.x + ids[r] * 784,
                       784 * sizeof(float));
                ylocal[r] = train.y[ids[r]];
            }
            forward(L, act, local);
            unsigned flags = s == steps_per_epoch - 1 ? DDPH_STEP_END_OF_DATA : 0;
            if (ddph_step_begin_flags(ctx, &model, 1, flags) != DDPH_OK)
                goto fail;
            /* The loss is the local mean; the hooks average over ranks. */
            loss_sum += softmax_xent(act[NLAYERS], ylocal, local,
                                     delta[NLAYERS], (float)local);
            /* Backward, last layer first; gradients accumulate (+=) until
             * a synchronised step, like .grad. */
            for (int l = NLAYERS - 1; l >= 0; l--) {
                float *dout = delta[l + 1];
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L[l].out,
                            L[l].in, local, 1.0f, dout, L[l].out, act[l],
                            L[l].in, 1.0f, L[l].gw, L[l].in);
                for (int r = 0; r < local; r++)
                    for (int k = 0; k < L[l].out; k++)
                        L[l].gb[k] += dout[(size_t)r * L[l].out + k];
                if (ddph_grad_ready(model, idx_b[l]) != DDPH_OK ||
                    ddph_grad_ready(model, idx_w[l]) != DDPH_OK)
                    goto fail;
                if (l > 0) {
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
                                local, L[l].in, L[l].out, 1.0f, dout, L[l].out,
                                L[l].w, L[l].in, 0.0f, delta[l], L[l].in);
                    for (size_t i = 0; i < (size_t)local * L[l].in; i++)
                        if (act[l][i] <= 0)
                            delta[l][i] = 0;
                }
            }
            int sync = ddph_step_syncs(ctx);
            if (ddph_step_wait(ctx) != DDPH_OK)
                goto fail;
            if (sync) { /* SGD with momentum, then zero_grad */
                synced++;
                for (int l = 0; l < NLAYERS; l++) {
                    size_t nw = (size_t)L[l].in * L[l].out;
                    for (size_t i = 0; i < nw; i++) {
                        L[l].vw[i] = (float)momentum * L[l].vw[i] + L[l].gw[i];
                        L[l].w[i] -= (float)lr * L[l].vw[i];
                    }
                    for (int k = 0; k < L[l].out; k++) {
                        L[l].vb[k] = (float)momentum * L[l].vb[k] + L[l].gb[k];
                        L[l].b[k] -= (float)lr * L[l].vb[k];
                    }
                    memset(L[l].gw, 0, nw * sizeof(float));
                    memset(L[l].gb, 0, (size_t)L[l].out * sizeof(float));
                }
            }
            if (ddph_step_end(ctx) != DDPH_OK)
                goto fail;
        }
        double seconds = seconds_now() - t0;
        total_seconds += seconds;
        uint64_t wire = 0;
        for (int b = 0; b < ddph_model_bucket_count(model); b++) {
            ddph_bucket_info info;
            ddph_model_bucket_info(model, b, &info);
            wire += info.bytes_on_wire;
        }
        wire -= wire_before;
        wire_total += wire;
        synced_total += synced;
        /* Evaluate the model of rank 0 (the others may differ under local
         * SGD); the loss is averaged over all ranks. */
        double loss = loss_sum / ((double)steps_per_epoch * local);
        if (ddph_average_f64(ctx, &loss, 1) != DDPH_OK)
            goto fail;
        last_loss = loss;
        acc = rank == 0 ? evaluate(L, act, &test, chunk) : 0;
        double per_step = synced ? (double)wire / (double)synced : 0;
        if (rank == 0) {
            printf("epoch %d: loss %.4f, test accuracy %.2f%%, %.1f s, %.0f "
                   "bytes sent per synchronised step (%.2fx compression)\n",
                   e + 1, loss, acc, seconds, per_step,
                   per_step > 0 ? (double)grad_bytes / per_step : 0.0);
            fflush(stdout);
            if (csvf)
                fprintf(csvf, "%d,%.6f,%.4f,%.3f,%.0f\n", e + 1, loss, acc,
                        seconds, per_step);
        }
    }
    if (rank == 0) {
        double per_step = synced_total ? (double)wire_total / synced_total : 0;
        printf("summary: %d ranks, %d epochs, loss %.4f, test accuracy "
               "%.2f%%, %.1f s per epoch, %.0f of %zu gradient bytes sent per "
               "step (%.1f%% saved)\n",
               world, epochs, last_loss, acc, total_seconds / epochs, per_step,
               grad_bytes, 100.0 * (1.0 - per_step / (double)grad_bytes));
    }
    if (csvf)
        fclose(csvf);
    for (int l = 0; l <= NLAYERS; l++) {
        free(act[l]);
        free(delta[l]);
    }
    free(ylocal);
    free(order);
    for (int l = 0; l < NLAYERS; l++) {
        free(L[l].w); free(L[l].b); free(L[l].own_gw);
        free(L[l].own_gb); free(L[l].vw); free(L[l].vb);
    }
    idx_free(&train);
    idx_free(&test);
    /* A peer may have failed after our last step: close says so. */
    return ddph_close(ctx) == DDPH_OK ? 0 : 1;
fail:
    fprintf(stderr, "train_mnist: %s\n", ddph_last_error(ctx));
    ddph_close(ctx);
    return 1;
}
