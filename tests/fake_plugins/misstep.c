/* misstep.c: an allreduce hook that one rank runs differently on purpose,
 * for the per-step agreement tests (tests/step_agreement.sh).  Options:
 *   mode   none | skip | extra | reorder | overlap | counts | uneven |
 *          fewer | dtype | gather
 *   at     the iteration it misbehaves at (-1: every iteration)
 *   rank   the rank that misbehaves (-1: the last)
 * skip: that rank issues no collective; extra: it sums its bucket twice;
 * reorder: it sums the bucket's second half before the first (the others
 * the first half first); overlap: every rank starts a nonblocking sum of
 * the bucket and a second one over its middle half before waiting;
 * counts: every rank averages by an allgatherv of the buckets (f32), that
 * rank with 8 elements moved from its own count to rank 0's (the same
 * total; each rank only receives less than it expects, which MPI
 * accepts);
 * uneven: every rank averages by an allgatherv in which the odd ranks
 * send 8 elements fewer, that rank with ranks 0 and 1's counts swapped
 * (the largest count, and so any padding to it, stays the same);
 * fewer: that rank sums one element fewer than its peers; dtype: it sums
 * the bucket's bytes as int32 where its peers sum float32 (the same
 * bytes: nothing in the transport can tell); gather: it allgathers its
 * bucket where its peers sum it.
 * Built twice: misstep.so, and misstep_sums.so (MISSTEP_SUMS: the same
 * name, version and options, but it sums without averaging), the "other
 * build" of one hook. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <ddphook/plugin.h>

typedef struct misstep {
    char mode;   /* first letter of the mode; 0 for none */
    int64_t at;
    int64_t rank;
} misstep;

static ddph_status misstep_create(const ddph_services *s,
                                  const ddph_options *o, void **state)
{
    misstep *m = malloc(sizeof *m);
    if (!m)
        return DDPH_ERR_NOMEM;
    const char *mode = s->opt_string(o, "mode");
    m->mode = mode && mode[0] != 'n' ? mode[0] : 0;
    m->at = s->opt_int(o, "at");
    m->rank = s->opt_int(o, "rank");
    if (m->rank < 0)
        m->rank = s->world_size - 1;
    *state = m;
    return DDPH_OK;
}

static void misstep_destroy(const ddph_services *s, void *state)
{
    (void)s;
    free(state);
}

static char *element(const ddph_bucket *b, size_t i)
{
    return (char *)b->buffer + i * (b->dtype == DDPH_F32 ? 4 : 2);
}

static ddph_status sum(const ddph_services *s, const ddph_bucket *b,
                       size_t from, size_t n)
{
    return s->allreduce(s, s->world, element(b, from), n, b->dtype,
                        DDPH_SUM);
}

/* The mean of every rank's bucket, gathered whole by an allgatherv;
 * `skew`: this rank's counts move 8 elements from its own to rank 0's. */
static ddph_status gathered_mean(const ddph_services *s, const ddph_bucket *b,
                                 int skew)
{
    int world = s->world_size;
    if (b->dtype != DDPH_F32 || b->numel < 8)
        return DDPH_ERR_INVALID;
    size_t *counts = s->alloc(s, (size_t)world * sizeof *counts);
    float *all = s->alloc(s, (size_t)world * b->numel * sizeof *all);
    ddph_status st = counts && all ? DDPH_OK : DDPH_ERR_NOMEM;
    for (int r = 0; st == DDPH_OK && r < world; r++)
        counts[r] = b->numel;
    if (st == DDPH_OK && skew && s->rank != 0) {
        counts[0] += 8;
        counts[s->rank] -= 8;
    }
    if (st == DDPH_OK)
        st = s->allgatherv(s, s->world, b->buffer, all, counts, DDPH_F32);
    float *mean = b->buffer;
    for (size_t i = 0; st == DDPH_OK && i < b->numel; i++) {
        float sum = 0;
        for (int r = 0; r < world; r++)
            sum += all[(size_t)r * b->numel + i];
        mean[i] = sum / (float)world;
    }
    s->free(s, all);
    s->free(s, counts);
    return st;
}

/* `mode = uneven`: the odd ranks send their bucket but its last 8
 * elements; each element is the mean of the ranks that sent it.  `swap`:
 * this rank's counts swap ranks 0 and 1's. */
static ddph_status uneven_mean(const ddph_services *s, const ddph_bucket *b,
                               int swap)
{
    int world = s->world_size;
    if (b->dtype != DDPH_F32 || b->numel < 8 || world < 2)
        return DDPH_ERR_INVALID;
    size_t *counts = s->alloc(s, (size_t)world * sizeof *counts);
    float *all = s->alloc(s, (size_t)world * b->numel * sizeof *all);
    ddph_status st = counts && all ? DDPH_OK : DDPH_ERR_NOMEM;
    for (int r = 0; st == DDPH_OK && r < world; r++)
        counts[r] = b->numel - (r % 2 ? 8 : 0);
    if (st == DDPH_OK && swap) {
        size_t c = counts[0];
        counts[0] = counts[1];
        counts[1] = c;
    }
    if (st == DDPH_OK)
        st = s->allgatherv(s, s->world, b->buffer, all, counts, DDPH_F32);
    float *mean = b->buffer;
    for (size_t i = 0; st == DDPH_OK && i < b->numel; i++) {
        float sum = 0;
        int n = 0;
        size_t at = 0;
        for (int r = 0; r < world; at += counts[r], r++)
            if (i < counts[r]) {
                sum += all[at + i];
                n++;
            }
        mean[i] = sum / (float)n;
    }
    s->free(s, all);
    s->free(s, counts);
    return st;
}

static ddph_status misstep_on_bucket(void *state, const ddph_bucket *b,
                                     const ddph_services *s)
{
    const misstep *m = state;
    int now = m->at < 0 || (int64_t)b->iteration == m->at;
    int me = now && s->rank == m->rank;
    size_t half = b->numel / 2;
    ddph_status st = DDPH_OK;
    if (m->mode == 'c')
        return gathered_mean(s, b, me);
    if (m->mode == 'u')
        return uneven_mean(s, b, me);
    if (m->mode == 'o' && now) {
        ddph_request *all = NULL, *middle = NULL;
        st = s->iallreduce(s, s->world, b->buffer, b->numel, b->dtype,
                           DDPH_SUM, &all);
        if (st == DDPH_OK)
            st = s->iallreduce(s, s->world, element(b, b->numel / 4), half,
                               b->dtype, DDPH_SUM, &middle);
        if (middle)
            s->wait(s, middle);
        if (all) {
            ddph_status w = s->wait(s, all);
            st = st ? st : w;
        }
    } else if (me && m->mode == 's') {
        /* no collective at all */
    } else if (me && m->mode == 'f') {
        st = sum(s, b, 0, b->numel - 1);
    } else if (me && m->mode == 'd') {
        st = s->allreduce(s, s->world, b->buffer, b->numel,
                          b->dtype == DDPH_F32 ? DDPH_I32 : DDPH_BF16,
                          DDPH_SUM);
    } else if (me && m->mode == 'g') {
        void *all = s->alloc(s, (size_t)s->world_size * b->numel * 4);
        st = all ? s->allgather(s, s->world, b->buffer, all, b->numel,
                                b->dtype)
                 : DDPH_ERR_NOMEM;
        s->free(s, all);
    } else if (me && m->mode == 'r') {
        st = sum(s, b, half, b->numel - half);
        if (st == DDPH_OK)
            st = sum(s, b, 0, half);
    } else if (m->mode == 'r') {
        st = sum(s, b, 0, half);
        if (st == DDPH_OK)
            st = sum(s, b, half, b->numel - half);
    } else {
        st = sum(s, b, 0, b->numel);
        if (st == DDPH_OK && me && m->mode == 'e')
            st = sum(s, b, 0, b->numel);
    }
#ifdef MISSTEP_SUMS
    return st;
#else
    return st ? st
              : s->divide(s, b->buffer, b->dtype, b->numel,
                          (double)s->world_size);
#endif
}

static const ddph_option_spec misstep_options[] = {
    {"mode", DDPH_OPT_STRING, "none", 0, 0,
     "none | skip | extra | reorder | overlap | counts | uneven | "
     "fewer | dtype | gather"},
    {"at", DDPH_OPT_INT, "-1", -1, 1e9, "the iteration (-1: every one)"},
    {"rank", DDPH_OPT_INT, "-1", -1, 1e6, "the rank (-1: the last)"},
    {NULL, 0, NULL, 0, 0, NULL},
};

static const ddph_plugin_api_v1 misstep_plugin = {
    .abi_major = DDPH_PLUGIN_ABI_MAJOR,
    .abi_minor = DDPH_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(ddph_plugin_api_v1),
    .name = "misstep",
    .version = "1.0.0",
    .description = "allreduce, run differently by one rank on purpose",
    .options = misstep_options,
    .create = misstep_create,
    .destroy = misstep_destroy,
    .on_bucket = misstep_on_bucket,
};

DDPH_PLUGIN_EXPORT const ddph_plugin_api_v1 *ddph_plugin_v1(uint32_t host_minor)
{
    (void)host_minor;
    return &misstep_plugin;
}
