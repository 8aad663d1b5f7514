/* copy_bound: how fast the allreduce hook with copies could be on this
 * host, measured without ddphook.  Three plain MPI programs over the same
 * buckets, one after the other, each repeat:
 *
 *   raw     MPI_Allreduce of each bucket in place (ddphook bench's
 *           baseline: the gradients already in one buffer)
 *   serial  per bucket, one thread: copy the tensors in, MPI_Allreduce,
 *           copy back (the allreduce hook's work without its divide,
 *           and with no overlap)
 *   fused   per bucket: the tensors sent straight from their own memory
 *           through an MPI derived datatype (no copy in), each rank's
 *           half summed and halved, the halves exchanged straight into
 *           the tensors (no copy back); 2 ranks only, its averages
 *           checked once after the timing
 *
 *   ddphook bench shapes --model gpt2-124m > shapes.txt
 *   mpiexec -n 2 tests/tools/copy_bound shapes.txt [REPEATS]
 *
 * Buckets as ddphook makes them by default: tensors in reverse order, the
 * first bucket closed at 1 MiB, the others at 25 MiB; collectives in
 * pieces of at most 16 MiB.  Prints the median of each and its ratio to
 * raw (docs/performance.md). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TENSORS 4096
#define PIECE ((size_t)4 << 20) /* floats: 16 MiB */

typedef struct {
    float *p;
    size_t n;
} tensor;

typedef struct {
    tensor *t; /* ntensors tensors, in bucket order */
    int ntensors;
    size_t n;   /* floats */
    float *buf; /* the bucket's own buffer */
    MPI_Datatype lo, hi; /* the tensors' elements [0, n/2) and [n/2, n) */
} bucket;

static void die(const char *msg)
{
    fprintf(stderr, "copy_bound: %s\n", msg);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

/* Elements [from, to) of the bucket where they live in its tensors: up
 * to b->ntensors pieces (address, length); returns how many. */
static int span_pieces(const bucket *b, size_t from, size_t to, float **ptr,
                       size_t *len)
{
    int k = 0;
    size_t at = 0;
    for (int i = 0; i < b->ntensors; i++) {
        size_t a = at, e = at + b->t[i].n;
        at = e;
        size_t lo = a > from ? a : from, hi = e < to ? e : to;
        if (lo >= hi)
            continue;
        ptr[k] = b->t[i].p + (lo - a);
        len[k++] = hi - lo;
    }
    return k;
}

/* The same pieces as one datatype over absolute addresses (used with
 * MPI_BOTTOM). */
static MPI_Datatype span_type(const bucket *b, size_t from, size_t to)
{
    float **ptr = malloc((size_t)b->ntensors * sizeof *ptr);
    size_t *len = malloc((size_t)b->ntensors * sizeof *len);
    int *ilen = malloc((size_t)b->ntensors * sizeof *ilen);
    MPI_Aint *disp = malloc((size_t)b->ntensors * sizeof *disp);
    if (!ptr || !len || !ilen || !disp)
        die("out of memory");
    int k = span_pieces(b, from, to, ptr, len);
    for (int i = 0; i < k; i++) {
        MPI_Get_address(ptr[i], &disp[i]);
        ilen[i] = (int)len[i];
    }
    MPI_Datatype type;
    MPI_Type_create_hindexed(k, ilen, disp, MPI_FLOAT, &type);
    MPI_Type_commit(&type);
    free(ptr);
    free(len);
    free(ilen);
    free(disp);
    return type;
}

static void allreduce(float *p, size_t n)
{
    for (size_t i = 0; i < n; i += PIECE)
        MPI_Allreduce(MPI_IN_PLACE, p + i, (int)(n - i < PIECE ? n - i : PIECE),
                      MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

/* Copies between the tensors and the bucket's elements [from, to):
 * in = 1 into out, else back from it; out holds exactly those elements.
 * ptr and len: room for b->ntensors pieces. */
static void copy_span(const bucket *b, size_t from, size_t to, float *out,
                      int in, float **ptr, size_t *len)
{
    int k = span_pieces(b, from, to, ptr, len);
    for (int i = 0, pos = 0; i < k; pos += (int)len[i], i++)
        if (in)
            memcpy(out + pos, ptr[i], len[i] * sizeof(float));
        else
            memcpy(ptr[i], out + pos, len[i] * sizeof(float));
}

static void fused(const bucket *b, int rank, float *scratch, float **ptr,
                  size_t *len)
{
    int peer = 1 - rank;
    size_t half = b->n / 2, from = rank ? half : 0, to = rank ? b->n : half;
    MPI_Datatype theirs = rank ? b->lo : b->hi;
    /* The peer's half straight from the tensors; this rank's half of the
     * peer's gradients into scratch. */
    MPI_Sendrecv(MPI_BOTTOM, 1, theirs, peer, 0, scratch, (int)(to - from),
                 MPI_FLOAT, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    /* Own half: (own / 2) + (peer's / 2), read from the tensors. */
    int k = span_pieces(b, from, to, ptr, len);
    for (int i = 0, pos = 0; i < k; pos += (int)len[i], i++)
        for (size_t j = 0; j < len[i]; j++)
            b->buf[pos + j] = ptr[i][j] * 0.5f + scratch[pos + j] * 0.5f;
    /* The averaged halves: the peer's straight into the tensors. */
    MPI_Sendrecv(b->buf, (int)(to - from), MPI_FLOAT, peer, 1, MPI_BOTTOM, 1,
                 theirs, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    copy_span(b, from, to, b->buf, 0, ptr, len);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (argc < 2)
        die("usage: mpiexec -n 2 copy_bound SHAPES_FILE [REPEATS] (the "
            "output of ddphook bench shapes)");
    int repeats = argc > 2 ? atoi(argv[2]) : 7;
    if (repeats < 1 || repeats > 1000)
        die("REPEATS: 1 to 1000");
    FILE *f = fopen(argv[1], "r");
    if (!f)
        die("cannot open the shapes file");
    static size_t sizes[MAX_TENSORS];
    int nt = 0;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        /* NAME D0 [D1 ...] */
        size_t n = 1;
        int dims = 0;
        strtok(line, " \n");
        for (char *d; (d = strtok(NULL, " \n")); dims++)
            n *= strtoull(d, NULL, 10);
        if (dims == 0)
            continue;
        if (nt == MAX_TENSORS)
            die("too many tensors");
        sizes[nt++] = n;
    }
    fclose(f);
    if (nt == 0)
        die("no shapes read");
    /* Buckets in reverse registration order. */
    static tensor tensors[MAX_TENSORS];
    static bucket buckets[MAX_TENSORS];
    int nb = 0;
    size_t cap = ((size_t)1 << 20) / sizeof(float), biggest = 0;
    for (int i = nt - 1, k = 0; i >= 0; i--, k++) {
        tensor *t = &tensors[k];
        t->n = sizes[i];
        t->p = malloc(t->n * sizeof(float));
        if (!t->p)
            die("out of memory");
        for (size_t j = 0; j < t->n; j++)
            t->p[j] = (float)((j + (size_t)rank) % 7);
        bucket *b = &buckets[nb];
        if (!b->t)
            b->t = t;
        b->ntensors++;
        b->n += t->n;
        if (b->n >= cap || i == 0) {
            cap = ((size_t)25 << 20) / sizeof(float);
            biggest = b->n > biggest ? b->n : biggest;
            nb++;
        }
    }
    float *scratch = malloc(biggest * sizeof(float));
    static float *ptr[MAX_TENSORS];
    static size_t len[MAX_TENSORS];
    for (int b = 0; b < nb; b++) {
        buckets[b].buf = calloc(buckets[b].n, sizeof(float));
        if (!buckets[b].buf || !scratch)
            die("out of memory");
        buckets[b].lo = span_type(&buckets[b], 0, buckets[b].n / 2);
        buckets[b].hi = span_type(&buckets[b], buckets[b].n / 2, buckets[b].n);
    }
    double *t_raw = malloc(repeats * sizeof(double)),
           *t_serial = malloc(repeats * sizeof(double)),
           *t_fused = malloc(repeats * sizeof(double));
    for (int r = -1; r < repeats; r++) { /* r = -1: warm-up */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int b = 0; b < nb; b++)
            allreduce(buckets[b].buf, buckets[b].n);
        double raw = MPI_Wtime() - t0;
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        for (int b = 0; b < nb; b++) {
            copy_span(&buckets[b], 0, buckets[b].n, buckets[b].buf, 1, ptr,
                      len);
            allreduce(buckets[b].buf, buckets[b].n);
            copy_span(&buckets[b], 0, buckets[b].n, buckets[b].buf, 0, ptr,
                      len);
        }
        double serial = MPI_Wtime() - t0, fu = 0;
        if (world == 2) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
            for (int b = 0; b < nb; b++)
                fused(&buckets[b], rank, scratch, ptr, len);
            fu = MPI_Wtime() - t0;
        }
        if (r >= 0) {
            t_raw[r] = raw;
            t_serial[r] = serial;
            t_fused[r] = fu;
        }
    }
    /* The fused exchange must average: rank r's element j of a tensor
     * is (j + r) % 7, so every average is exact in f32. */
    if (world == 2) {
        for (int i = 0; i < nt; i++)
            for (size_t j = 0; j < tensors[i].n; j++)
                tensors[i].p[j] = (float)((j + (size_t)rank) % 7);
        for (int b = 0; b < nb; b++)
            fused(&buckets[b], rank, scratch, ptr, len);
        for (int i = 0; i < nt; i++)
            for (size_t j = 0; j < tensors[i].n; j++)
                if (tensors[i].p[j] !=
                    (float)((j % 7) + ((j + 1) % 7)) * 0.5f)
                    die("the fused exchange did not average");
    }
    qsort(t_raw, repeats, sizeof(double), cmp);
    qsort(t_serial, repeats, sizeof(double), cmp);
    qsort(t_fused, repeats, sizeof(double), cmp);
    double raw = t_raw[repeats / 2], serial = t_serial[repeats / 2],
           fu = t_fused[repeats / 2];
    if (rank == 0) {
        size_t total = 0;
        for (int b = 0; b < nb; b++)
            total += buckets[b].n;
        printf("copy_bound: %d tensors, %d buckets, %.1f MiB, %d ranks, "
               "median of %d\n",
               nt, nb, (double)total * 4 / (1 << 20), world, repeats);
        printf("raw     %8.1f ms  1\n", raw * 1e3);
        printf("serial  %8.1f ms  %.2fx raw (copy in, allreduce, copy back)\n",
               serial * 1e3, raw / serial);
        if (world == 2)
            printf("fused   %8.1f ms  %.2fx raw (derived datatypes, no "
                   "copies)\n",
                   fu * 1e3, raw / fu);
    }
    for (int b = 0; b < nb; b++) {
        MPI_Type_free(&buckets[b].lo);
        MPI_Type_free(&buckets[b].hi);
    }
    MPI_Finalize();
    return 0;
}
