#!/usr/bin/python3
"""ddp_two_models.py: two DDP models in one job, each with its own
ddphook.torch pair, against the same two models with PyTorch's
allreduce_hook, bit for bit (2 ranks, gloo's exact sum of 2).

    mpiexec -n 2 python3 ddp_two_models.py --plugin-dir DIR --out DIR

Model 'first' trains alone for 2 steps; then model 'second' is made and
its comm_hook pair asked for, with 'first''s last step still awaiting its
end (the bridge ends it at the next forward pass).  Then 6 steps of
`second(first(x))` (one backward pass through both: 'second''s buckets,
then 'first''s, which come while the bridge's thread may still be
waiting for 'second''s step) and 6 steps of `(first(x) + second(x2))`
under one backward().  Both models have several buckets (256-byte caps),
SGD with momentum updates them.  Prints one PASS/FAIL line per phase
(rank 0); exits 1 on any failure."""
import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

import ddphook.torch

CAP = 256  # bytes: DDP's caps (and so ddphook's): several buckets a model


def mlp(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 12), torch.nn.Tanh(),
                               torch.nn.Linear(12, 12))


def ddp(net):
    return torch.nn.parallel.DistributedDataParallel(
        net, bucket_cap_mb=CAP / 2**20)


def pair(job, name, seed):
    """(PyTorch's DDP model, ddphook's, an optimizer over each)."""
    theirs, ours = ddp(mlp(seed)), ddp(mlp(seed))
    theirs.register_comm_hook(None, default_hooks.allreduce_hook)
    ours.register_comm_hook(*ddphook.torch.comm_hook(job, model=ours,
                                                     name=name))
    return theirs, ours


def differs(a, b):
    """How many parameters' gradients or values differ at all."""
    return sum(not torch.equal(x.grad, y.grad) or not torch.equal(x, y)
               for x, y in zip(a.parameters(), b.parameters()))


def run(label, steps, rank, models, loss_of):
    """`steps` steps of loss_of(models, x) on PyTorch's models and on
    ddphook's; returns 0 if every gradient and parameter is the same."""
    opts = {side: torch.optim.SGD([p for m in models for p in
                                   m[side].parameters()],
                                  lr=0.05, momentum=0.9)
            for side in (0, 1)}
    bad = 0
    for step in range(steps):
        g = torch.Generator().manual_seed(100 * step + rank)
        x = torch.randn(6, 12, generator=g)
        for side in (0, 1):
            opts[side].zero_grad()
            loss_of([m[side] for m in models], x).backward()
        bad += sum(differs(m[0], m[1]) for m in models)
        for side in (0, 1):
            opts[side].step()
    if rank == 0:
        print("%s: %s, %d steps: %d parameter%s differ%s from PyTorch's "
              "allreduce_hook" % ("PASS" if bad == 0 else "FAIL", label,
                                  steps, bad, "" if bad == 1 else "s",
                                  "s" if bad == 1 else ""), flush=True)
    return 1 if bad else 0


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--plugin-dir", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    rank = int(os.environ.get("PMI_RANK", os.environ.get("RANK", "0")))
    os.makedirs(a.out, exist_ok=True)
    job = os.path.join(a.out, "two_models.r%d.ini" % rank)
    with open(job, "w") as f:
        f.write("[runtime]\nplugin_path = %s\ntimeout_s = 30\n"
                "[hook]\nname = allreduce\n" % a.plugin_dir)
    ddphook.torch.init_process_group(job)
    first_cap = dist._DEFAULT_FIRST_BUCKET_BYTES
    dist._DEFAULT_FIRST_BUCKET_BYTES = CAP
    try:
        first = pair(job, "first", 1)
        failed = run("'first' alone", 2, rank, [first],
                     lambda m, x: m[0](x).square().mean())
        # Asked for with 'first''s last step not ended yet.
        second = pair(job, "second", 2)
        failed += run("second(first(x)), one backward pass", 6, rank,
                      [first, second],
                      lambda m, x: m[1](m[0](x)).square().mean())
        failed += run("first(x) + second(x / 2), one backward pass", 6,
                      rank, [first, second],
                      lambda m, x: (m[0](x) + m[1](x / 2)).square().mean())
    finally:
        dist._DEFAULT_FIRST_BUCKET_BYTES = first_cap
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
