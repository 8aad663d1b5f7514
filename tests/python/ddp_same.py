#!/usr/bin/python3
"""ddp_same.py: the gradients of ddphook's hooks under DDP, step by step,
written for comparison between backends: tests/torchrun.sh runs it under
mpiexec (MPI) and under an env:// launcher (the torch backend) and
compares the files byte for byte.

    mpiexec -n 2 /usr/bin/python3 ddp_same.py --plugin-dir DIR --out DIR

The hooks cover the collectives the shipped plugins use besides sums:
int8 (allreduce of int32 maxima, ialltoall and iallgather of int8 and
float32), topk (iallgather of float32 values and int32 indices), signsgd
(iallgather of packed signs), allreduce, and with --localsgd PATH the
post_localsgd example (examples/post_localsgd, built as PATH): after two
steps each rank averages alone, in a group split from the world.  On 2 ranks every sum has
two terms, so the bits cannot depend on the order a backend adds in.
Writes DIR/HOOK.rankR.f32: every step's gradients, in parameter order."""
import argparse
import os
import sys

import torch
import torch.distributed as dist

import ddphook.torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_hooks import CAP, Net, job_head  # noqa: E402

HOOKS = ("allreduce", "int8", "topk", "signsgd")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plugin-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--localsgd", help="post_localsgd.so")
    a = ap.parse_args()
    torch.set_num_threads(1)
    rank = int(os.environ.get("PMI_RANK", os.environ.get("RANK", "0")))
    os.makedirs(a.out, exist_ok=True)
    job = os.path.join(a.out, "job.r%d.ini" % rank)
    with open(job, "w") as f:
        f.write(job_head(a.plugin_dir))
        for h in HOOKS:
            f.write("[model.%s]\nhook = %s\n" % (h, h))
        if a.localsgd:
            f.write("[model.post_localsgd]\nhook = %s\n[hook.post_localsgd]\n"
                    "start_localSGD_iter = 2\nsubgroup_size = 1\n" % a.localsgd)
    ddphook.torch.init_process_group(job)
    dist._DEFAULT_FIRST_BUCKET_BYTES = CAP
    # Every model exists before the first step (its [model.NAME] applies).
    runs = []
    for h in HOOKS + (("post_localsgd",) if a.localsgd else ()):
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(
            Net(), bucket_cap_mb=CAP / 2**20)
        state, hook = ddphook.torch.comm_hook(job, model=model, name=h)
        model.register_comm_hook(state, hook)
        runs.append((h, model, state))
    for h, model, state in runs:
        with open(os.path.join(a.out, "%s.rank%d.f32" % (h, rank)), "wb") as f:
            for step in range(a.steps):
                g = torch.Generator().manual_seed(1000 * step + rank)
                x = torch.randn(8, 24, generator=g)
                y = torch.randint(0, 10, (8,), generator=g)
                model.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                state.step_end()
                for p in model.parameters():
                    f.write(p.grad.detach().float().contiguous().numpy()
                            .tobytes())
    return 0


if __name__ == "__main__":
    sys.exit(main())
