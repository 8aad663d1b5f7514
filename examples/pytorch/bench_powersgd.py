#!/usr/bin/python3
"""bench_powersgd.py: a DDP step with ddphook's PowerSGD through
ddphook.torch against the same step with PyTorch's own powerSGD_hook,
side by side in one run (steps interleaved, so both see the same load).

    mpiexec -n 2 python3 examples/pytorch/bench_powersgd.py \\
        --plugin-path plugins/.libs [--shapes FILE | --gpt] [--rank 4]

--shapes FILE: a model of those parameter shapes (`ddphook bench shapes
--model gpt2-124m`), whose backward pass gives constant gradients (the
time is communication and compression); --gpt: train_ddp.py's GPT on
random bytes (forward and backward included).  Both replicas use
start_powerSGD_iter = 2, error feedback and warm start, and
--bucket-cap-mb (default 25, DDP's).  gloo aborts PyTorch's hook when two
buckets' collectives overlap (op.preamble.length <= op.nbytes), so its
buckets run one at a time (each future waited in the hook); "pytorch 1
bucket" is PyTorch's hook on a single bucket, which needs no waiting.
Prints, per variant, the median step time over --steps steps after
--warmup, the step under no_sync() (no communication) and, for ddphook,
the bridge's own time per step (gradients copied in and out).
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

import ddphook
import ddphook.torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_ddp import GPT  # noqa: E402


class Shapes(torch.nn.Module):
    def __init__(self, shapes):
        super().__init__()
        for i, dims in enumerate(shapes):
            self.register_parameter("p%d" % i,
                                    torch.nn.Parameter(torch.zeros(dims)))

    def forward(self, consts):
        return sum((p * c).sum() for p, c in zip(self.parameters(), consts))


def serialized(hook):
    def one_bucket_at_a_time(state, bucket):
        fut = hook(state, bucket)
        fut.wait()
        return fut
    return one_bucket_at_a_time


def main():
    ap = argparse.ArgumentParser(
        description="ddphook's PowerSGD through ddphook.torch against "
        "PyTorch's powerSGD_hook, steps interleaved in one run; run under "
        "mpiexec -n W.")
    ap.add_argument("--plugin-path", default="",
                    help="folder of ddphook's hook plugins (plugins/.libs "
                    "in a build tree; default: the installed ones)")
    ap.add_argument("--shapes", metavar="FILE",
                    help="a model of these parameter shapes, a name and its "
                    "dimensions a line (`ddphook bench shapes --model "
                    "gpt2-124m`), with constant gradients")
    ap.add_argument("--gpt", action="store_true",
                    help="train_ddp.py's GPT on random bytes (forward and "
                    "backward included) instead of --shapes")
    ap.add_argument("--rank", type=int, default=4,
                    help="PowerSGD's matrix approximation rank (default 4)")
    ap.add_argument("--steps", type=int, default=8,
                    help="timed steps per variant (default 8)")
    ap.add_argument("--warmup", type=int, default=3,
                    help="untimed steps first (default 3; PowerSGD "
                    "compresses from step 2)")
    ap.add_argument("--bucket-cap-mb", type=float, default=25,
                    help="DDP's bucket_cap_mb for every variant (default "
                    "25, DDP's)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch.set_num_threads per rank (default 1)")
    ap.add_argument("--no-single", action="store_true",
                    help="leave out PyTorch on one bucket (memory)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    rank = int(os.environ.get("PMI_RANK", "0"))
    job = os.path.join(os.environ.get("TMPDIR", "/tmp"),
                       ".bench_powersgd.%d.%d.ini" % (os.getppid(), rank))
    with open(job, "w") as f:
        f.write("[runtime]\n")
        if a.plugin_path:
            f.write("plugin_path = %s\n" % os.path.abspath(a.plugin_path))
        f.write("bucket_cap_mb = %r\n[hook]\nname = powersgd\n"
                "[hook.powersgd]\nmatrix_approximation_rank = %d\n"
                "start_powerSGD_iter = 2\n" % (a.bucket_cap_mb, a.rank))
    ddphook.torch.init_process_group(job)
    os.remove(job)
    if a.gpt:
        make = lambda: GPT(64, 64, 4, 2)
        gen = torch.Generator().manual_seed(rank)
        x = torch.randint(0, 256, (8, 64), generator=gen)
        y = torch.randint(0, 256, (8, 64), generator=gen)
        loss = lambda m: m(x, y)
        what = "GPT of train_ddp.py (2 layers, width 64)"
    else:
        shapes = []
        with open(a.shapes) as f:
            for line in f:
                w = line.split()
                if w:
                    shapes.append([int(d) for d in w[1:]])
        make = lambda: Shapes(shapes)
        consts = [torch.full(s, 1.0 + rank) for s in shapes]
        loss = lambda m: m(consts)
        what = "%s (%d tensors)" % (os.path.basename(a.shapes), len(shapes))
    torch.manual_seed(0)
    variants = []

    def ddp(cap):
        return torch.nn.parallel.DistributedDataParallel(make(),
                                                         bucket_cap_mb=cap)

    def state():
        return psgd.PowerSGDState(None, matrix_approximation_rank=a.rank,
                                  start_powerSGD_iter=2)
    m = ddp(a.bucket_cap_mb)
    m.register_comm_hook(state(), serialized(psgd.powerSGD_hook))
    variants.append(("pytorch", m, None))
    if not a.no_single:
        m = ddp(1e6)
        m.register_comm_hook(state(), psgd.powerSGD_hook)
        variants.append(("pytorch 1 bucket", m, None))
    m = ddp(a.bucket_cap_mb)
    st, hook = ddphook.torch.comm_hook(ddphook.current_job().path, model=m)
    m.register_comm_hook(st, hook)
    variants.append(("ddphook", m, st))
    times = {name: [] for name, _, _ in variants}
    local = []
    bridge = []
    for step in range(a.warmup + a.steps):
        for name, m, st in variants:
            m.zero_grad()
            dist.barrier()
            b0 = st.bridge_s if st is not None else 0.0
            t0 = time.perf_counter()
            loss(m).backward()
            if st is not None:
                st.step_end()
            t = time.perf_counter() - t0
            if step >= a.warmup:
                times[name].append(t)
                if st is not None:
                    bridge.append(st.bridge_s - b0)
        m = variants[0][1]
        with m.no_sync():
            m.zero_grad()
            t0 = time.perf_counter()
            loss(m).backward()
            if step >= a.warmup:
                local.append(time.perf_counter() - t0)
    if rank == 0:
        base = statistics.median(local)
        print("%s, %d ranks, PowerSGD rank %d, buckets of %g MiB, median of "
              "%d steps (load average %.1f):" % (
                  what, dist.get_world_size(), a.rank, a.bucket_cap_mb,
                  a.steps, os.getloadavg()[0]))
        print("  no_sync (no communication)  %8.1f ms" % (1e3 * base))
        ours = statistics.median(times["ddphook"])
        for name, m, st in variants:
            med = statistics.median(times[name])
            extra = ""
            if st is not None:
                extra = ", the bridge's copies %.2f ms of it" % (
                    1e3 * statistics.median(bridge))
            print("  %-26s  %8.1f ms  (communication and compression "
                  "%.1f ms; ddphook's step / this %.2f%s)" % (
                      name, 1e3 * med, 1e3 * (med - base), ours / med, extra))
    return 0


if __name__ == "__main__":
    sys.exit(main())
