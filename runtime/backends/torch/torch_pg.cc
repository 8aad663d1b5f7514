/* torch_pg.cc: see torch_pg.h.  The job's state, its gloo groups, their
 * collectives bounded by timeout_s, and the notices peers leave in the
 * store (a failure, a departure, a close), polled while this rank waits. */
#include "backends/torch/torch_pg.h"

#include <time.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <memory>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "backends/peer_notices.h"
#include "backends/torch/torch_attach.h"
#include "backends/torch/torch_ring.h"

namespace {

/* ddph__now's clock. */
double now_s()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

ddph_status fail(char *msg, size_t cap, ddph_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
ddph_status fail(char *msg, size_t cap, ddph_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (msg && cap)
        vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    return st;
}

/* c10d's messages span lines (a C++ stack trace follows the first). */
std::string first_line(const char *what)
{
    std::string s(what ? what : "(no message)");
    size_t nl = s.find('\n');
    return nl == std::string::npos ? s : s.substr(0, nl);
}

std::mutex attach_mu;
ddph_torch_attachment attached;
bool have_attachment = false;
int jobs_opened = 0; /* the store's prefix of each job of this process */

/* How often a waiting rank reads the store's notices at most: every read
 * is a round trip to the store's server. */
constexpr double POLL_S = 0.02;

} // namespace

extern "C" __attribute__((visibility("default"))) int
ddph_torch_attach_v1(const ddph_torch_attachment *a)
{
    if (!a || a->version != DDPH_TORCH_ATTACH_VERSION || !a->make_group ||
        !a->store)
        return -1;
    std::lock_guard<std::mutex> lock(attach_mu);
    attached = *a;
    have_attachment = true;
    return 0;
}

struct tpg_group {
    c10::intrusive_ptr<c10d::ProcessGroup> pg;
    std::atomic<uint32_t> rings{0}; /* the tag of the next ring */
};

struct tpg_job {
    ddph_torch_attachment at;
    c10::intrusive_ptr<c10d::Store> store; /* this job's prefix */
    int rank = 0, size = 1;
    double timeout_s = 0;
    void (*activity_touch)(void) = nullptr; /* the waiting lane's clock */
    std::mutex mu; /* guards the fields below */
    std::vector<tpg_group *> groups;
    std::atomic<int> broken{0};
    ddph_status fault_status = DDPH_OK;
    std::string fault_msg;
    bool notified = false; /* the peers know (or it came from one) */
    int64_t notices_seen = 0;
    /* Each peer's latest departure and close (peer_notices.h). */
    ddph_peer_notices *notices = nullptr;
    std::mutex poll_mu; /* one thread reads the notices at a time */
    std::atomic<double> polled{0};
    /* Where this rank is (torch_backend.c keeps them current). */
    std::atomic<int> in_sync{0}, closing{0};
    std::atomic<int64_t> syncs{0}, calls{0};
    ~tpg_job() { ddph__notices_free(notices); }
};

namespace {

/* A notice in the store: "KIND RANK SYNCS CALLS STATUS TEXT", KIND
 * being F (failed), or a departure (TPG_CLOSED, DDPH__DEPART_*). */
void post_notice(tpg_job *j, char kind, int64_t syncs, int64_t calls,
                 ddph_status st, const std::string &text)
{
    char head[96];
    snprintf(head, sizeof head, "%c %d %lld %lld %d ", kind, j->rank,
             (long long)syncs, (long long)calls, (int)st);
    std::string body = head + text;
    try {
        int64_t n = j->store->add("notices", 1);
        j->store->set("notice/" + std::to_string(n - 1),
                      std::vector<uint8_t>(body.begin(), body.end()));
    } catch (const std::exception &) {
        /* The store is gone (its host died): the peers find the job
         * broken through their own collectives and waits. */
    }
}

/* Records the first fault, with j->mu held. */
void set_fault_locked(tpg_job *j, ddph_status st, const std::string &msg,
                      bool notified)
{
    if (j->broken.load())
        return;
    j->fault_status = st == DDPH_OK ? DDPH_ERR_BACKEND : st;
    j->fault_msg = msg;
    j->notified = notified;
    j->broken.store(1);
}

void fail_job(tpg_job *j, ddph_status st, const std::string &msg)
{
    std::lock_guard<std::mutex> lock(j->mu);
    if (!j->broken.load())
        set_fault_locked(j, st, msg, false);
    else if (!j->notified)
        j->fault_msg = msg; /* the caller knows more (hook, bucket) */
    if (!j->notified) {
        j->notified = true;
        post_notice(j, 'F', j->syncs.load(), j->calls.load(), j->fault_status,
                    j->fault_msg);
    }
}

/* A peer that left breaks the job only for a rank waiting on a
 * collective of a synchronised step past the peer's last (the rule and
 * its words: peer_notices.c, as over MPI). */
void check_peer_left(tpg_job *j)
{
    if (j->broken.load() || j->closing.load() || !j->in_sync.load())
        return;
    char text[512];
    if (ddph__notices_breaking(j->notices, j->syncs.load(), j->calls.load(),
                               text, sizeof text) >= 0)
        fail_job(j, DDPH_ERR_STATE, text);
}

void read_notice(tpg_job *j, const std::string &body)
{
    char kind = 0;
    int rank = -1, status = 0, used = 0;
    long long syncs = 0, calls = 0;
    if (sscanf(body.c_str(), "%c %d %lld %lld %d %n", &kind, &rank, &syncs,
               &calls, &status, &used) < 5 ||
        rank == j->rank)
        return;
    std::string text = body.substr((size_t)used);
    std::lock_guard<std::mutex> lock(j->mu);
    if (kind == 'F') {
        ddph_status st = (ddph_status)status;
        if (st == DDPH_OK)
            st = DDPH_ERR_BACKEND;
        set_fault_locked(j, st,
                         "rank " + std::to_string(rank) + " failed: " + text,
                         true);
        return;
    }
    int departure = kind - '0' == TPG_CLOSED ? DDPH__DEPART_CLOSED : kind - '0';
    ddph__notices_record(j->notices, rank, departure, syncs, calls,
                         text.c_str());
}

/* Reads the notices posted since the last poll (at most every POLL_S,
 * unless `now`). */
void poll_notices(tpg_job *j, bool now = false)
{
    double t = now_s();
    if (j->broken.load() || (!now && t - j->polled.load() < POLL_S))
        return;
    std::unique_lock<std::mutex> reading(j->poll_mu, std::try_to_lock);
    if (!reading.owns_lock())
        return; /* another thread is reading them */
    j->polled.store(t);
    try {
        int64_t n = j->store->add("notices", 0);
        for (int64_t i = j->notices_seen; i < n; i++) {
            std::string key = "notice/" + std::to_string(i);
            if (!j->store->check({key}))
                break; /* counted, not written yet: the next poll */
            std::vector<uint8_t> v = j->store->get(key);
            read_notice(j, std::string(v.begin(), v.end()));
            j->notices_seen = i + 1;
        }
    } catch (const std::exception &e) {
        std::lock_guard<std::mutex> lock(j->mu);
        set_fault_locked(j, DDPH_ERR_BACKEND,
                         "rank " + std::to_string(j->rank) +
                             ": the job's store cannot be reached (its "
                             "host, rank 0 or the launcher, is gone?): " +
                             first_line(e.what()),
                         true);
    }
    check_peer_left(j);
}

ddph_status fault_of(tpg_job *j, char *msg, size_t cap)
{
    if (!j->broken.load())
        return DDPH_OK;
    std::lock_guard<std::mutex> lock(j->mu);
    return fail(msg, cap, j->fault_status, "%s", j->fault_msg.c_str());
}

at::ScalarType scalar_type(ddph_dtype d)
{
    switch (d) {
    case DDPH_F32: return at::kFloat;
    case DDPH_F64: return at::kDouble;
    case DDPH_F16: return at::kHalf;
    case DDPH_BF16: return at::kBFloat16;
    case DDPH_I32: return at::kInt;
    case DDPH_I64: return at::kLong;
    case DDPH_U8: return at::kByte;
    case DDPH_I8: return at::kChar;
    default: return at::kByte;
    }
}

at::Tensor over(const void *p, size_t n, at::ScalarType t)
{
    return at::from_blob(const_cast<void *>(p), {(int64_t)n},
                         at::TensorOptions().dtype(t));
}

/* Bytes, for the collectives that move data without reducing it (gloo
 * knows no bfloat16). */
at::Tensor bytes_over(const void *p, size_t count, ddph_dtype d)
{
    return over(p, count * at::elementSize(scalar_type(d)), at::kByte);
}

c10d::ReduceOp reduce_op(ddph_redop op)
{
    return op == DDPH_MAX ? c10d::ReduceOp::MAX
           : op == DDPH_MIN ? c10d::ReduceOp::MIN
                            : c10d::ReduceOp::SUM;
}

} // namespace

/* Set by gloo's thread when a collective ends (its future's callback):
 * the waiting thread sleeps on it and wakes at once, with no polling.
 * Shared with the callback, which may outlive an abandoned tpg_work. */
struct tpg_waker {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
};

/* A collective in flight, and what its end copies where: a reduce-scatter
 * is an allreduce of a copy (gloo has none), an allgatherv an allgather
 * of blocks padded to the largest, a bfloat16 reduction a float one.
 * Each allgatherv block starts with its sender's counts, which every
 * rank compares with its own: with counts that differ but share their
 * largest, the padded blocks would move and be cut wrongly, in silence. */
struct tpg_work {
    c10::intrusive_ptr<c10d::Work> work;
    std::vector<at::Tensor> tensors;
    std::vector<std::vector<at::Tensor>> gathered;
    at::Tensor staged;  /* the copy reduced, or the padded blocks */
    at::Tensor target;  /* where the result goes */
    enum { NONE, SLICE, UNPAD, NARROW } finish = NONE;
    std::vector<size_t> counts;
    size_t offset = 0, elem = 0;
    std::shared_ptr<tpg_waker> waker; /* null: the work has no future */
};

namespace {

/* The bytes before each allgatherv block: the sender's counts. */
size_t counts_header(size_t ranks)
{
    return ranks * sizeof(uint64_t);
}

/* Where the blocks' counts differ from this rank's: "" when nowhere. */
std::string counts_mismatch(const tpg_work *w, size_t block)
{
    size_t n = w->counts.size();
    const uint8_t *in = (const uint8_t *)w->staged.data_ptr();
    for (size_t r = 0; r < n; r++)
        for (size_t k = 0; k < n; k++) {
            uint64_t theirs;
            memcpy(&theirs, in + r * block + k * sizeof theirs, sizeof theirs);
            if (theirs != (uint64_t)w->counts[k])
                return "rank " + std::to_string(r) + " gives rank " +
                       std::to_string(k) + "'s block " +
                       std::to_string(theirs) + " elements where this rank "
                       "gives " + std::to_string(w->counts[k]) +
                       " (the ranks' allgatherv counts differ)";
        }
    return "";
}

/* Copies the result where it goes; "" or why it cannot be trusted. */
std::string finish(tpg_work *w)
{
    switch (w->finish) {
    case tpg_work::NONE:
        break;
    case tpg_work::NARROW: /* bfloat16 reduced as float */
        w->target.copy_(w->staged);
        break;
    case tpg_work::SLICE:
        w->target.copy_(w->staged.narrow(0, (int64_t)w->offset,
                                         w->target.numel()));
        break;
    case tpg_work::UNPAD: {
        size_t pad = 0, at_byte = 0, head = counts_header(w->counts.size());
        for (size_t c : w->counts)
            pad = c > pad ? c : pad;
        size_t block = head + pad * w->elem;
        std::string differ = counts_mismatch(w, block);
        if (!differ.empty())
            return differ;
        uint8_t *out = (uint8_t *)w->target.data_ptr();
        const uint8_t *in = (const uint8_t *)w->staged.data_ptr();
        for (size_t r = 0; r < w->counts.size(); r++) {
            memcpy(out + at_byte, in + r * block + head,
                   w->counts[r] * w->elem);
            at_byte += w->counts[r] * w->elem;
        }
        break;
    }
    }
    return "";
}

/* deadline: for a ring's own waits (a second past the caller's, which
 * reports the timeout). */
c10::intrusive_ptr<c10d::Work> launch(tpg_group *g, const tpg_args *a,
                                      tpg_work *w, double deadline)
{
    int size = g->pg->getSize(), rank = g->pg->getRank();
    if (a->kind == TPG_ALLREDUCE && tpg_ring_takes(size, a->dtype, a->op))
        return tpg_ring_start(g->pg, a->buf, a->count, a->dtype,
                              (int)(g->rings++ & 0x7fffffff), deadline);
    at::ScalarType t = scalar_type(a->dtype);
    size_t elem = at::elementSize(t);
    switch (a->kind) {
    case TPG_ALLREDUCE:
    case TPG_REDUCE_SCATTER: {
        size_t total = a->kind == TPG_ALLREDUCE ? a->count
                                                : a->count * (size_t)size;
        at::Tensor in = over(a->kind == TPG_ALLREDUCE ? a->buf : a->send,
                             total, t);
        at::Tensor out = over(a->buf, a->count, t);
        at::Tensor reduced = in;
        if (t == at::kBFloat16) {
            reduced = in.to(at::kFloat);
            w->finish = tpg_work::NARROW;
        } else if (a->kind == TPG_REDUCE_SCATTER) {
            reduced = in.clone();
        }
        if (a->kind == TPG_REDUCE_SCATTER) {
            w->finish = tpg_work::SLICE;
            w->offset = (size_t)rank * a->count;
        }
        w->staged = reduced;
        w->target = a->kind == TPG_ALLREDUCE ? in : out;
        w->tensors = {reduced};
        c10d::AllreduceOptions o;
        o.reduceOp = reduce_op(a->op);
        return g->pg->allreduce(w->tensors, o);
    }
    case TPG_BROADCAST: {
        w->tensors = {bytes_over(a->buf, a->count, a->dtype)};
        c10d::BroadcastOptions o;
        o.rootRank = a->root;
        return g->pg->broadcast(w->tensors, o);
    }
    case TPG_ALLGATHER:
    case TPG_ALLGATHERV: {
        size_t block = a->count * elem;
        if (a->kind == TPG_ALLGATHERV) {
            size_t pad = 0, head = counts_header((size_t)size);
            for (int r = 0; r < size; r++)
                pad = a->counts[r] > pad ? a->counts[r] : pad;
            w->counts.assign(a->counts, a->counts + size);
            w->elem = elem;
            w->finish = tpg_work::UNPAD;
            block = head + pad * elem;
            w->staged = at::empty({(int64_t)(block * (size_t)size)},
                                  at::kByte);
            w->target = bytes_over(a->buf, 1, DDPH_U8);
            at::Tensor mine = at::zeros({(int64_t)block}, at::kByte);
            uint8_t *at_mine = (uint8_t *)mine.data_ptr();
            for (int r = 0; r < size; r++) {
                uint64_t c = a->counts[r];
                memcpy(at_mine + r * sizeof c, &c, sizeof c);
            }
            if (a->counts[rank])
                memcpy(at_mine + head, a->send, a->counts[rank] * elem);
            w->tensors = {mine};
        } else {
            w->staged = bytes_over(a->buf, a->count * (size_t)size, a->dtype);
            w->tensors = {bytes_over(a->send, a->count, a->dtype)};
        }
        std::vector<at::Tensor> blocks;
        for (int r = 0; r < size; r++)
            blocks.push_back(w->staged.narrow(0, (int64_t)(r * block),
                                              (int64_t)block));
        w->gathered = {blocks};
        return g->pg->allgather(w->gathered, w->tensors);
    }
    case TPG_ALLTOALL: {
        at::Tensor in = bytes_over(a->send, a->count * (size_t)size, a->dtype);
        at::Tensor out = bytes_over(a->buf, a->count * (size_t)size, a->dtype);
        w->tensors = {in, out};
        std::vector<int64_t> none;
        return g->pg->alltoall_base(out, in, none, none);
    }
    case TPG_BARRIER:
        return g->pg->barrier();
    }
    return {};
}

/* A collective of no data (gloo refuses empty tensors): counts are the
 * same on every rank, so every rank skips it.  An allgatherv always runs:
 * its blocks carry the counts, which the ranks compare. */
bool moves_nothing(const tpg_args *a)
{
    if (a->kind == TPG_BARRIER || a->kind == TPG_ALLGATHERV)
        return false;
    return a->count == 0;
}

/* Has the work's future wake the waiting thread when it ends.  Without a
 * future (a process group whose Work has none), waits poll. */
void watch(tpg_work *w)
{
    try {
        c10::intrusive_ptr<c10::ivalue::Future> fut = w->work->getFuture();
        auto waker = std::make_shared<tpg_waker>();
        fut->addCallback([waker](c10::ivalue::Future &) {
            std::lock_guard<std::mutex> lock(waker->mu);
            waker->done = true;
            waker->cv.notify_all();
        });
        w->waker = waker;
    } catch (const std::exception &) {
        w->waker.reset();
    }
}

/* Sleeps until the work ends or `slice_s` passed; 1 once it ended.
 * gloo completes the future just before the Work itself: outcome()'s
 * wait() covers the microseconds between. */
int sleep_on(tpg_work *w, double slice_s)
{
    tpg_waker *k = w->waker.get();
    std::unique_lock<std::mutex> lock(k->mu);
    return k->cv.wait_for(lock, std::chrono::duration<double>(slice_s),
                          [k] { return k->done; });
}

/* The work's outcome once completed: DDPH_OK, or gloo's error. */
ddph_status outcome(tpg_job *j, tpg_work *w, const char *what, char *msg,
                    size_t cap)
{
    try {
        w->work->wait();
        std::string wrong = finish(w);
        if (wrong.empty())
            return DDPH_OK;
        char text[1024];
        snprintf(text, sizeof text, "rank %d: %s: %s", j->rank, what,
                 wrong.c_str());
        fail_job(j, DDPH_ERR_MISMATCH, text);
        return fault_of(j, msg, cap);
    } catch (const std::exception &e) {
        /* A failing peer leaves its notice before it exits and closes
         * its connections: its cause, if it is there, is the job's. */
        poll_notices(j, true);
        char text[1024];
        snprintf(text, sizeof text, "rank %d: %s failed: %s (a peer rank "
                 "died or left the job?)", j->rank, what,
                 first_line(e.what()).c_str());
        fail_job(j, DDPH_ERR_BACKEND, text);
        return fault_of(j, msg, cap);
    }
}

/* Completed (1), still running (0), or failed / past the deadline
 * (-1, the job broken). */
int check(tpg_job *j, tpg_work *w, const char *what, double deadline,
          ddph_status *st, char *msg, size_t cap)
{
    if (w->work->isCompleted())
        return 1;
    if (j->activity_touch)
        j->activity_touch(); /* a bounded wait, not a stuck hook */
    poll_notices(j);
    if ((*st = fault_of(j, msg, cap)) != DDPH_OK)
        return -1;
    if (now_s() > deadline) {
        char text[512];
        snprintf(text, sizeof text,
                 "rank %d: %s did not complete within timeout_s = %g s (a "
                 "peer rank died, is stuck, or called a different "
                 "collective)",
                 j->rank, what, j->timeout_s);
        fail_job(j, DDPH_ERR_TIMEOUT, text);
        *st = fault_of(j, msg, cap);
        return -1;
    }
    return 0;
}

} // namespace

extern "C" {

ddph_status tpg_job_open(double timeout_s, void (*activity_touch)(void),
                         tpg_job **out, int *rank, int *size, char *msg,
                         size_t cap)
{
    tpg_job *j = new (std::nothrow) tpg_job;
    *out = j;
    if (!j)
        return fail(msg, cap, DDPH_ERR_NOMEM, "out of memory");
    int n;
    {
        std::lock_guard<std::mutex> lock(attach_mu);
        if (!have_attachment)
            return fail(msg, cap, DDPH_ERR_UNSUPPORTED,
                        "the torch backend runs a job that a Python script "
                        "opened through ddphook.torch after "
                        "torch.distributed.init_process_group (it hands "
                        "over the process group's store); a C trainer: "
                        "launch it with mpiexec (backend = mpi)");
        j->at = attached;
        n = jobs_opened++;
    }
    j->rank = *rank = j->at.rank;
    j->size = *size = j->at.size;
    j->notices = ddph__notices_new(j->size);
    if (!j->notices)
        return fail(msg, cap, DDPH_ERR_NOMEM, "out of memory");
    j->timeout_s = timeout_s;
    j->activity_touch = activity_touch;
    try {
        j->store = c10::make_intrusive<c10d::PrefixStore>(
            "ddphook/" + std::to_string(n), j->at.store);
    } catch (const std::exception &e) {
        return fail(msg, cap, DDPH_ERR_BACKEND, "rank %d: the job's store: %s",
                    j->rank, first_line(e.what()).c_str());
    }
    return DDPH_OK;
}

void tpg_job_free(tpg_job *j, int abandon)
{
    if (!j)
        return;
    if (abandon)
        return; /* gloo's threads may still use the groups: kept */
    for (tpg_group *g : j->groups)
        delete g;
    delete j;
}

ddph_status tpg_group_new(tpg_job *j, const char *name, int rank, int size,
                          tpg_group **out, char *msg, size_t cap)
{
    *out = nullptr;
    std::string error;
    c10::intrusive_ptr<c10d::ProcessGroup> pg;
    try {
        pg = j->at.make_group(j->at.user, j->store, std::string("group/") + name,
                              rank, size, j->timeout_s, &error);
    } catch (const std::exception &e) {
        error = first_line(e.what());
    }
    if (!pg)
        return fail(msg, cap, DDPH_ERR_BACKEND,
                    "rank %d: cannot make the gloo group '%s' (%d ranks): %s",
                    j->rank, name, size, error.c_str());
    tpg_group *g = new tpg_group{pg};
    std::lock_guard<std::mutex> lock(j->mu);
    j->groups.push_back(g);
    *out = g;
    return DDPH_OK;
}

ddph_status tpg_start(tpg_job *j, tpg_group *g, const tpg_args *a,
                      tpg_work **out, char *msg, size_t cap)
{
    *out = nullptr;
    poll_notices(j);
    ddph_status st = fault_of(j, msg, cap);
    if (st != DDPH_OK)
        return st;
    if (moves_nothing(a))
        return DDPH_OK; /* the same on every rank: none calls gloo */
    tpg_work *w = new (std::nothrow) tpg_work;
    if (!w)
        return fail(msg, cap, DDPH_ERR_NOMEM, "out of memory");
    try {
        w->work = launch(g, a, w, now_s() + j->timeout_s + 1.0);
    } catch (const std::exception &e) {
        delete w;
        return fail(msg, cap, DDPH_ERR_BACKEND, "rank %d: gloo refused: %s",
                    j->rank, first_line(e.what()).c_str());
    }
    watch(w);
    *out = w;
    return DDPH_OK;
}

ddph_status tpg_wait(tpg_job *j, tpg_work *w, const char *what,
                     double deadline, char *msg, size_t cap)
{
    ddph_status st = DDPH_OK;
    /* Sleeps until gloo's thread says the work ended, waking every POLL_S
     * for the peers' notices and the deadline.  Without a future: spins
     * briefly, then sleeps a little longer each time, up to 1 ms. */
    for (long pause_ns = 0;; pause_ns = pause_ns < 1000000 ? pause_ns + 20000
                                                           : pause_ns) {
        int c = check(j, w, what, deadline, &st, msg, cap);
        if (c > 0)
            break;
        if (c < 0)
            return st; /* w abandoned: gloo may still write its memory */
        if (w->waker) {
            double left = deadline - now_s();
            if (sleep_on(w, left < POLL_S ? (left > 0 ? left : 0) : POLL_S))
                break;
        } else if (pause_ns) {
            struct timespec ts = {0, pause_ns};
            nanosleep(&ts, nullptr);
        } else {
            std::this_thread::yield();
        }
    }
    st = outcome(j, w, what, msg, cap);
    if (st == DDPH_OK)
        delete w;
    return st;
}

ddph_status tpg_test(tpg_job *j, tpg_work *w, const char *what,
                     double deadline, int *done, char *msg, size_t cap)
{
    ddph_status st = DDPH_OK;
    int c = check(j, w, what, deadline, &st, msg, cap);
    *done = c != 0;
    if (c <= 0)
        return st;
    st = outcome(j, w, what, msg, cap);
    if (st == DDPH_OK)
        delete w;
    return st;
}

ddph_status tpg_progress(tpg_job *j, tpg_work *w, const char *what,
                         double deadline, char *msg, size_t cap)
{
    ddph_status st = DDPH_OK;
    check(j, w, what, deadline, &st, msg, cap);
    return st;
}

ddph_status tpg_fault(tpg_job *j, char *msg, size_t cap)
{
    poll_notices(j);
    return fault_of(j, msg, cap);
}

int tpg_broken(tpg_job *j)
{
    return j->broken.load();
}

int tpg_peer_closed(tpg_job *j, int rank, int64_t *syncs_done)
{
    poll_notices(j, true);
    return ddph__notices_closed(j->notices, rank, syncs_done);
}

void tpg_fail(tpg_job *j, ddph_status st, const char *msg)
{
    fail_job(j, st, msg ? msg : "");
}

void tpg_set_progress(tpg_job *j, int in_sync_step, int64_t syncs_done,
                      int64_t trainer_calls)
{
    j->in_sync.store(in_sync_step);
    j->syncs.store(syncs_done);
    j->calls.store(trainer_calls);
}

void tpg_notify_leaving(tpg_job *j, int kind, const char *what,
                        int64_t syncs_done, int64_t trainer_calls)
{
    if (kind == TPG_CLOSED)
        j->closing.store(1);
    if (!j->broken.load())
        post_notice(j, (char)('0' + kind), syncs_done, trainer_calls,
                    DDPH_OK, what ? what : "");
}

} // extern "C"
