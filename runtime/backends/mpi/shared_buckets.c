/* shared_buckets.c: see shared_buckets.h. */
#include "build-config.h"

#include "backends/mpi/shared_buckets.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "device/cpu_ops.h"

/* Below this a buffer goes through MPI: a small sum is all latency, and
 * MPICH's one collective then costs less than the two that order the
 * shared phases. */
#define SHARED_MIN_BYTES ((size_t)64 << 10)
/* Slices are combined a block at a time, so that the block of part 0
 * that accumulates is still in cache when it is copied to the others. */
#define SLICE_BLOCK_BYTES ((size_t)16 << 10)

static size_t page_round(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (n + page - 1) / page * page;
}

/* What rank 0 tells the others: where to open the segment, or why there
 * is none. */
typedef struct announce {
    int32_t ok;
    int32_t named; /* a /dev/shm name, to unlink once all have it open */
    char text[200];
} announce;

/* Rank 0: a new, empty segment of `total` bytes that never has a name: a
 * file made with O_TMPFILE in /dev/shm's file system (so /dev/shm's size
 * still bounds it), which the other ranks open through
 * /proc/<pid>/fd/<fd> while rank 0 holds it open.  Nothing is left in
 * /dev/shm whenever a rank is killed.  Where O_TMPFILE is not supported,
 * a named segment made with O_EXCL and mode 0600, unlinked as soon as
 * every rank has it open. */
static int create_segment(announce *a, size_t total)
{
    int fd = open("/dev/shm", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) {
        if (ftruncate(fd, (off_t)total) == 0) {
            a->ok = 1;
            snprintf(a->text, sizeof a->text, "/proc/%ld/fd/%d",
                     (long)getpid(), fd);
            return fd;
        }
        int rc = errno;
        close(fd);
        snprintf(a->text, sizeof a->text, "rank 0 could not size an unnamed "
                 "segment of %zu bytes in /dev/shm: %s", total, strerror(rc));
        return -1;
    }
    uint64_t nonce = 0;
    if (getrandom(&nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce)
        nonce = (uint64_t)getpid() * 2654435761u;
    char name[64];
    snprintf(name, sizeof name, "/ddphook-%ld-%016llx", (long)getpid(),
             (unsigned long long)nonce);
    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd >= 0 && ftruncate(fd, (off_t)total) == 0) {
        a->ok = 1;
        a->named = 1;
        snprintf(a->text, sizeof a->text, "%s", name);
        return fd;
    }
    int rc = errno;
    if (fd >= 0) {
        close(fd);
        shm_unlink(name);
    }
    snprintf(a->text, sizeof a->text, "rank 0 could not make %s in /dev/shm "
             "(%zu bytes): %s", name, total, strerror(rc));
    return -1;
}

/* Checks that the segment is the one rank 0 made (this user's, of the
 * size asked), reserves this rank's part and maps the whole.  Each rank
 * reserves its own part, so that its pages come from its own NUMA node
 * (the one that writes them most), and a full /dev/shm fails here, not
 * later with SIGBUS on a first touch. */
static char *map_segment(int fd, size_t total, size_t part, int rank,
                         char *why, size_t cap)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_uid != geteuid() ||
        (size_t)sb.st_size != total) {
        snprintf(why, cap, "the shared segment is not this user's or not "
                 "%zu bytes", total);
        return NULL;
    }
    int rc = posix_fallocate(fd, (off_t)(part * (size_t)rank), (off_t)part);
    if (rc != 0) {
        snprintf(why, cap, "could not reserve %zu bytes in /dev/shm: %s",
                 part, strerror(rc));
        return NULL;
    }
    void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        snprintf(why, cap, "mmap of %zu bytes: %s", total, strerror(errno));
        return NULL;
    }
    return p;
}

ddph_status ddph__shared_open(ddph_mpi *m, size_t bytes, int wanted,
                              ddph_shared_segment **out, char *why,
                              size_t why_cap, int *failed, ddph_err *err)
{
    *out = NULL;
    *failed = 0;
    snprintf(why, why_cap, "no buckets in host memory");
    size_t part = page_round(bytes);
    int w = m->world.size;
    /* Does every rank want a segment of the same size, on this host? */
    int64_t v[3] = {wanted && bytes > 0 && m->node_size == w, (int64_t)part,
                    -(int64_t)part};
    ddph_status st = ddph__mpi_allreduce_i64(m, v, 3, DDPH_MIN, err);
    if (st != DDPH_OK)
        return st;
    if (w < 2 || !v[0] || v[1] != -v[2]) {
        snprintf(why, why_cap, "%s",
                 w < 2 ? "one rank"
                 : m->node_size != w ? "the ranks are on more than one host"
                 : v[1] != -v[2] ? "the ranks' buckets differ in size"
                                 : "not wanted on every rank, or no host buckets");
        return DDPH_OK;
    }
    size_t total = part * (size_t)w;
    announce a;
    memset(&a, 0, sizeof a);
    int fd = m->world.rank == 0 ? create_segment(&a, total) : -1;
    if ((st = ddph__mpi_bcast_bytes(m, &a, sizeof a, 0, err)) != DDPH_OK) {
        if (fd >= 0) {
            close(fd);
            if (a.named)
                shm_unlink(a.text);
        }
        return st;
    }
    a.text[sizeof a.text - 1] = '\0';
    if (!a.ok) {
        snprintf(why, why_cap, "%s", a.text);
        *failed = 1;
        return DDPH_OK;
    }
    /* Its record first, so that running out of memory is part of the
     * agreement: a rank without the segment in its list would skip the
     * allgather of every shared allreduce that the others make. */
    char local[256] = "out of memory";
    ddph_shared_segment *seg = calloc(1, sizeof *seg);
    int mine = fd >= 0; /* rank 0's own descriptor */
    if (seg && fd < 0) {
        fd = a.named ? shm_open(a.text, O_RDWR, 0)
                     : open(a.text, O_RDWR | O_CLOEXEC);
        if (fd < 0)
            snprintf(local, sizeof local, "%s %s: %s",
                     a.named ? "shm_open" : "open", a.text, strerror(errno));
    }
    char *map = fd >= 0 && seg ? map_segment(fd, total, part, m->world.rank,
                                             local, sizeof local)
                               : NULL;
    /* Rank 0's descriptor is how the others reach an unnamed segment: it
     * stays open until they all have it. */
    if (fd >= 0 && !mine)
        close(fd);
    /* Every rank has opened it (or failed to) once this agreement is over;
     * a name goes at once, so nothing is left in /dev/shm whatever
     * happens to the job later. */
    ddph_err agreed;
    ddph_status ag = ddph__mpi_agree(m, map ? DDPH_OK : DDPH_ERR_IO, local,
                                     &agreed);
    if (mine) {
        close(fd);
        if (a.named)
            shm_unlink(a.text);
    }
    if (ag != DDPH_OK) {
        if (map)
            munmap(map, total);
        free(seg);
        if ((st = ddph__mpi_fault(m, err)) != DDPH_OK)
            return st;
        snprintf(why, why_cap, "%s", agreed.msg);
        *failed = 1;
        return DDPH_OK;
    }
    seg->map = map;
    seg->part_bytes = part;
    seg->nranks = w;
    seg->rank = m->world.rank;
    seg->id = ++m->segments_made; /* the same on every rank: made in step */
    seg->next = atomic_load(&m->segments);
    atomic_store(&m->segments, seg);
    *out = seg;
    return DDPH_OK;
}

void *ddph__shared_part(const ddph_shared_segment *s)
{
    return s->map + s->part_bytes * (size_t)s->rank;
}

void ddph__shared_close(ddph_mpi *m, ddph_shared_segment *s)
{
    if (!s)
        return;
    /* Called from ddph_close once no lane runs any more. */
    ddph_shared_segment *head = atomic_load(&m->segments);
    if (head == s)
        atomic_store(&m->segments, s->next);
    else
        for (ddph_shared_segment *p = head; p; p = p->next)
            if (p->next == s) {
                p->next = s->next;
                break;
            }
    munmap(s->map, s->part_bytes * (size_t)s->nranks);
    free(s);
}

/* Where buf lies in this rank's part of a segment: its offset, or -1. */
static int64_t offset_in(ddph_mpi *m, const void *buf, size_t bytes,
                         ddph_shared_segment **seg)
{
    const char *p = buf;
    for (ddph_shared_segment *s = atomic_load(&m->segments); s; s = s->next) {
        const char *part = ddph__shared_part(s);
        if (p >= part && p < part + s->part_bytes &&
            bytes <= s->part_bytes - (size_t)(p - part)) {
            *seg = s;
            return (int64_t)(p - part);
        }
    }
    return -1;
}

static void combine(void *a, const void *b, ddph_dtype dtype, ddph_redop op,
                    size_t n)
{
    if (op == DDPH_SUM)
        ddph__cpu_add(a, b, dtype, n);
    else if (op == DDPH_MAX)
        ddph__cpu_max(a, b, dtype, n);
    else
        ddph__cpu_min(a, b, dtype, n);
}

ddph_status ddph__shared_allreduce(ddph_mpi *m, ddph_mpi_group *g,
                                   void *buf, size_t count, ddph_dtype dtype,
                                   ddph_redop op, int *done, ddph_err *err)
{
    *done = 0;
    size_t es = ddph__dtype_size(dtype);
    int w = g->size;
    /* count, dtype and op are the same on every rank, so this test is too. */
    if (w < 2 || count * es < SHARED_MIN_BYTES || dtype > DDPH_BF16)
        return DDPH_OK;
    ddph_shared_segment *seg = NULL;
    /* Heap, not stack: a collective abandoned on a timeout may still be
     * written into by a late peer (the job is broken then). */
    int64_t *where = malloc(sizeof *where * 2 * (size_t)(w + 1));
    if (!where)
        return ddph__fail(err, DDPH_ERR_NOMEM, "out of memory");
    int64_t *mine = where + 2 * w;
    mine[1] = offset_in(m, buf, count * es, &seg);
    mine[0] = seg ? seg->id : -1;
    /* Every rank has written its part of buf before it sends this: the
     * allgather is also the barrier before the sums. */
    atomic_thread_fence(memory_order_seq_cst);
    ddph_status st = ddph__mpi_allgather(m, g, mine, where, 2, DDPH_I64,
                                         "allreduce", err);
    if (st != DDPH_OK)
        return st;
    int same = where[0] >= 0;
    for (int r = 1; r < w; r++)
        same &= where[2 * r] == where[0] && where[2 * r + 1] == where[1];
    size_t off = (size_t)where[1];
    free(where);
    if (!same || !seg) /* the same outcome on every rank */
        return DDPH_OK;
    /* This rank's slice, over every rank's part, combined into part 0 in
     * rank order and copied to the others: every rank ends up with the
     * same bits. */
    size_t at, n;
    ddph__chunk(count, w, g->rank, &at, &n);
    size_t blk = SLICE_BLOCK_BYTES / es;
    char *first = seg->map + off + at * es;
    for (size_t i = 0; i < n; i += blk) {
        size_t k = n - i < blk ? n - i : blk;
        char *acc = first + i * es;
        for (int r = 1; r < w; r++)
            combine(acc, acc + (size_t)r * seg->part_bytes, dtype, op, k);
        for (int r = 1; r < w; r++)
            memcpy(acc + (size_t)r * seg->part_bytes, acc, k * es);
    }
    atomic_thread_fence(memory_order_seq_cst);
    st = ddph__mpi_barrier(m, g, "allreduce", err);
    atomic_thread_fence(memory_order_seq_cst);
    *done = st == DDPH_OK;
    return st;
}
