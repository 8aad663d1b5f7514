#!/usr/bin/python3
"""pytorch_ddp.py: PyTorch DDP's own communication hooks over gloo, timed
the way `ddphook bench hooks` times ddphook's, for a side-by-side table.

    mpiexec -n W /usr/bin/python3 pytorch_ddp.py --shapes FILE --hook NAME
        [--bucket-cap-mb 25] [--repeats 5] [--rank 4] [--csv FILE]

Run one process per rank under hydra's mpiexec (tests/cluster/cluster.sh
starts it on each simulated host): the rank and world size come from
hydra's PMI_RANK and PMI_SIZE, the rendezvous from MASTER_ADDR and
MASTER_PORT (default 10.231.0.1:29500, the first simulated host) and gloo
uses GLOO_SOCKET_IFNAME (default eth0).  FILE holds the model's parameter
shapes (`ddphook bench shapes --model NAME`), registered in that order, so
DDP builds its buckets from the same list as ddphook (reverse order, capped
at bucket_cap_mb).  Each step runs a backward pass whose gradients are all
ones (loss = sum of the parameters); the communication time is the step
time minus the same step under no_sync() (no hook, no communication), both
medians of --repeats steps after 2 warm-up steps (PowerSGD starts
compressing after them, as in `ddphook bench`).

Hooks: allreduce, fp16, bf16, powersgd, batched_powersgd (PyTorch 1.13's
default_hooks and powerSGD_hook).  Whatever PyTorch refuses or aborts on is
printed as it fails, and the process exits 3.
"""
import argparse
import datetime
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook


class Shapes(torch.nn.Module):
    def __init__(self, shapes):
        super().__init__()
        for i, (name, dims) in enumerate(shapes):
            self.register_parameter(
                "p%d_%s" % (i, name.replace(".", "_")),
                torch.nn.Parameter(torch.zeros(dims)))

    def forward(self):
        return sum(p.sum() for p in self.parameters())


def read_shapes(path):
    out = []
    with open(path) as f:
        for line in f:
            words = line.split()
            if words:
                out.append((words[0], [int(d) for d in words[1:]]))
    return out


def register(ddp, hook, rank):
    if hook == "allreduce":
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    elif hook == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif hook == "bf16":
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif hook in ("powersgd", "batched_powersgd"):
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=rank,
            start_powerSGD_iter=2, min_compression_rate=2,
            use_error_feedback=True, warm_start=True, random_seed=0)
        fn = (powerSGD_hook.powerSGD_hook if hook == "powersgd"
              else powerSGD_hook.batched_powerSGD_hook)
        ddp.register_comm_hook(state, fn)
    else:
        raise SystemExit("pytorch_ddp.py: unknown hook %s" % hook)


def timed_step(ddp, sync):
    ddp.zero_grad(set_to_none=False)
    dist.barrier()
    t0 = time.perf_counter()
    if sync:
        ddp().backward()
    else:
        with ddp.no_sync():
            ddp().backward()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--hook", required=True)
    ap.add_argument("--bucket-cap-mb", type=float, default=25)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rank", type=int, default=4)
    ap.add_argument("--csv")
    a = ap.parse_args()
    rank = int(os.environ.get("PMI_RANK", "0"))
    world = int(os.environ.get("PMI_SIZE", "1"))
    os.environ.setdefault("MASTER_ADDR", "10.231.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0")
    torch.set_num_threads(1)
    # gloo's default is 30 minutes: a collective that hangs (PowerSGD with
    # several buckets at 10 Gbit/s did) ends in its own error within 2.
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    shapes = read_shapes(a.shapes)
    model = Shapes(shapes)
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, bucket_cap_mb=a.bucket_cap_mb)
    try:
        register(ddp, a.hook, a.rank)  # PyTorch refuses some here (bf16)
        for _ in range(2):
            timed_step(ddp, True)
        step = statistics.median(timed_step(ddp, True)
                                 for _ in range(a.repeats))
        local = statistics.median(timed_step(ddp, False)
                                  for _ in range(a.repeats))
    except Exception as e:  # what PyTorch cannot do, as it says it
        print("pytorch_ddp.py: rank %d: hook %s failed: %s: %s"
              % (rank, a.hook, type(e).__name__, str(e).splitlines()[0]),
              file=sys.stderr)
        sys.exit(3)
    comm = max(step - local, 0.0)
    if rank == 0:
        print("pytorch %s: %.3f s per step, %.3f s of it without "
              "communication, %.3f s communicating (%d ranks, torch %s)"
              % (a.hook, step, local, comm, world, torch.__version__))
        if a.csv:
            with open(a.csv, "a") as f:
                f.write("%s,%.6f,%.6f,%.6f\n" % (a.hook, step, local, comm))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
