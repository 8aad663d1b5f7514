/* torch_ring.cc: see torch_ring.h.  The MPI backend's ring (mpi_allreduce.c)
 * over gloo's point-to-point messages: reduce-scatter, then allgather, W-1
 * steps each, every rank sending 2(W-1)/W of the buffer as plain bytes to
 * the next rank and adding what the previous one sent with the runtime's
 * register kernels (ddph__cpu_add: widened to float, rounded back after
 * each addition).  Chunks, blocks and the order of the additions are the
 * MPI ring's, so the two backends' sums agree bit for bit.
 *
 * With 2 ranks too: one exchange of the whole buffer (the same bytes in
 * one round, twice the additions) was no faster (docs/performance.md).
 *
 * Why a thread per ring: a step starts when the previous one has been
 * added, and the comm table's starts return at once (the trainer's
 * backward goes on); gloo's own collectives run on its threads likewise. */
#include "backends/torch/torch_ring.h"

#include <chrono>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include <ATen/ATen.h>

#include "device/cpu_ops.h"
#include "support/util.h"

namespace {

constexpr size_t RING_BLOCK_BYTES = (size_t)4 << 20; /* per message */

/* A work that the ring's thread ends; its future wakes tpg_wait. */
class RingWork : public c10d::Work {
  public:
    RingWork()
        : c10d::Work(-1, c10d::OpType::ALLREDUCE),
          fut_(c10::make_intrusive<c10::ivalue::Future>(c10::NoneType::get()))
    {
    }
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override
    {
        return fut_;
    }
    void end(std::exception_ptr e)
    {
        finish(e);
        if (e)
            fut_->setError(e);
        else
            fut_->markCompleted(c10::IValue());
    }

  private:
    c10::intrusive_ptr<c10::ivalue::Future> fut_;
};

/* Receive blocks, reused across rings (a fresh 4 MiB block would cost its
 * page faults on every bucket).  A ring abandoned with its job keeps its
 * block until its thread ends. */
std::mutex pool_mu;
std::vector<char *> pool;

char *take_block()
{
    {
        std::lock_guard<std::mutex> lock(pool_mu);
        if (!pool.empty()) {
            char *b = pool.back();
            pool.pop_back();
            return b;
        }
    }
    char *b = static_cast<char *>(malloc(RING_BLOCK_BYTES));
    if (!b)
        throw std::bad_alloc();
    return b;
}

void give_block(char *b)
{
    std::lock_guard<std::mutex> lock(pool_mu);
    pool.push_back(b);
}

struct Ring {
    c10::intrusive_ptr<c10d::ProcessGroup> pg;
    c10::intrusive_ptr<RingWork> work;
    char *buf;
    size_t count;
    ddph_dtype dtype;
    int tag;
    double deadline;
};

/* What is left of the ring's time, for gloo's waits (which break the
 * group's connections when they time out). */
std::chrono::milliseconds left(const Ring &g)
{
    double s = g.deadline - ddph__now();
    return std::chrono::milliseconds(s > 0 ? (long long)(s * 1000) + 1 : 1);
}

at::Tensor bytes_at(char *p, size_t n)
{
    return at::from_blob(p, {(int64_t)n}, at::TensorOptions().dtype(at::kByte));
}

/* One step, as mpi_allreduce.c's ring_step: chunk `out` to the next rank
 * while the previous rank's chunk `in` arrives, a block at a time; with
 * `sum`, each block lands in tmp and is added into buf, else in place. */
void step(const Ring &g, char *tmp, int out, int in, bool sum)
{
    int w = g.pg->getSize(), r = g.pg->getRank();
    size_t es = ddph__dtype_size(g.dtype), blk = RING_BLOCK_BYTES / es;
    size_t oat, on, iat, inn;
    ddph__chunk(g.count, w, out, &oat, &on);
    ddph__chunk(g.count, w, in, &iat, &inn);
    for (size_t i = 0; i < on || i < inn; i += blk) {
        size_t so = i < on ? (on - i < blk ? on - i : blk) : 0;
        size_t ri = i < inn ? (inn - i < blk ? inn - i : blk) : 0;
        char *into = g.buf + (iat + i) * es;
        std::vector<at::Tensor> rt, st;
        c10::intrusive_ptr<c10d::Work> rw, sw;
        if (ri) {
            rt = {bytes_at(sum ? tmp : into, ri * es)};
            rw = g.pg->recv(rt, (r + w - 1) % w, g.tag);
        }
        if (so) {
            st = {bytes_at(g.buf + (oat + i) * es, so * es)};
            sw = g.pg->send(st, (r + 1) % w, g.tag);
        }
        if (rw)
            rw->wait(left(g));
        if (sw)
            sw->wait(left(g));
        if (sum && ri)
            ddph__cpu_add(into, tmp, g.dtype, ri);
    }
}

void run(Ring g)
{
    std::exception_ptr error;
    char *tmp = nullptr;
    try {
        tmp = take_block();
        int w = g.pg->getSize(), r = g.pg->getRank();
        /* Reduce-scatter: at step s chunk r-s goes on, chunk r-s-1 comes
         * in and is added; rank r ends with chunk r+1 summed. */
        for (int s = 0; s < w - 1; s++)
            step(g, tmp, (r - s + w) % w, (r - s - 1 + w) % w, true);
        /* Allgather: the summed chunks go round. */
        for (int s = 0; s < w - 1; s++)
            step(g, tmp, (r + 1 - s + w) % w, (r - s + w) % w, false);
    } catch (...) {
        error = std::current_exception();
    }
    if (tmp)
        give_block(tmp);
    g.work->end(error);
}

} // namespace

bool tpg_ring_takes(int group_size, ddph_dtype dtype, ddph_redop op)
{
    return group_size > 1 && op == DDPH_SUM &&
           (dtype == DDPH_F16 || dtype == DDPH_BF16);
}

c10::intrusive_ptr<c10d::Work>
tpg_ring_start(const c10::intrusive_ptr<c10d::ProcessGroup> &pg, void *buf,
               size_t count, ddph_dtype dtype, int tag, double deadline)
{
    auto work = c10::make_intrusive<RingWork>();
    Ring g{pg, work, static_cast<char *>(buf), count, dtype, tag, deadline};
    std::thread(run, g).detach();
    return work;
}
