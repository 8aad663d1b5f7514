#!/usr/bin/python3
"""ddp_static_graph.py: DDP's static_graph=True through the bridge.

    mpiexec -n W python3 ddp_static_graph.py --plugin-dir DIR --out DIR \\
        --hook fp16|powersgd --static 0|1

Trains a 5-layer MLP for 6 steps with DDP (several buckets) and ddphook's hook; writes every step's gradients and the
final parameters of this rank to OUT/HOOK.static<S>.rank<R>.f32, and
(rank 0) how many bucket layout warnings the bridge gave.
tests/pytorch.sh compares --static 1 with --static 0 byte for byte."""
import argparse
import os
import sys
import warnings

import torch

import ddphook.torch


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--plugin-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--hook", required=True, choices=["fp16", "powersgd"])
    ap.add_argument("--static", required=True, type=int, choices=[0, 1])
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    rank = int(os.environ.get("PMI_RANK", os.environ.get("RANK", "0")))
    os.makedirs(a.out, exist_ok=True)
    tag = "%s.static%d" % (a.hook, a.static)
    job = os.path.join(a.out, "%s.r%d.ini" % (tag, rank))
    options = ("[hook.powersgd]\nmatrix_approximation_rank = 1\n"
               "start_powerSGD_iter = 2\n" if a.hook == "powersgd" else "")
    with open(job, "w") as f:
        f.write("[runtime]\nplugin_path = %s\ntimeout_s = 30\n"
                "[hook]\nname = %s\n%s" % (a.plugin_dir, a.hook, options))
    ddphook.torch.init_process_group(job)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(),
                              torch.nn.Linear(256, 512), torch.nn.ReLU(),
                              torch.nn.Linear(512, 512), torch.nn.ReLU(),
                              torch.nn.Linear(512, 256), torch.nn.ReLU(),
                              torch.nn.Linear(256, 10))
    # 2.2 MB of parameters: DDP's 1 MiB first bucket (its default, set
    # here: ddp_suite.py runs other programs in this process first), then
    # buckets of 0.5 MiB.
    torch.distributed._DEFAULT_FIRST_BUCKET_BYTES = 1024 * 1024
    model = torch.nn.parallel.DistributedDataParallel(
        net, bucket_cap_mb=0.5, static_graph=bool(a.static))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state, hook = ddphook.torch.comm_hook(job, model=model, name=tag)
    model.register_comm_hook(state, hook)
    out = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(model, opt, rank, out)
    layout = [w for w in caught if "holds other parameters" in str(w.message)]
    out += [p.detach().reshape(-1) for p in model.parameters()]
    torch.cat(out).numpy().tofile(os.path.join(a.out, "%s.rank%d.f32" %
                                               (tag, rank)))
    if rank == 0:
        print("%s: %d ddphook buckets, DDP's futures completed by the "
              "communication thread: %d, bucket layout warnings: %d" % (
                  tag, len(state.buckets()), state.completed_by_comm_thread,
                  len(layout)), flush=True)
    return 0


def train(model, opt, rank, out):
    """6 steps; every step's gradients appended to out."""
    for step in range(6):
        g = torch.Generator().manual_seed(100 * step + rank)
        x = torch.randn(16, 32, generator=g)
        y = torch.randint(0, 10, (16,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        out += [p.grad.detach().reshape(-1).clone() for p in model.parameters()]
        opt.step()


if __name__ == "__main__":
    sys.exit(main())
