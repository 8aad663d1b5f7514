#!/usr/bin/python3
"""ddp_vectors.py: PyTorch's reference vectors (shared/reference/vectors)
through DDP and ddphook.torch: the trace's gradients go in as DDP's, and
DDP's reduced gradients must equal PyTorch's recorded ones, as they do
for the C runtime's replay (tests/vectors.sh).

    mpiexec -n W /usr/bin/python3 ddp_vectors.py --vectors DIR/wsW \\
        --plugin-dir DIR --out DIR

A module holds one parameter per [param.NAME] of the trace; its loss is
the sum of each parameter times that rank's recorded gradient (so the
gradient is the recorded one), summed in registration order so that the
backward pass completes them in reverse, as the trace's buckets.ini
says.  Buckets of 8 KiB on both sides.  Hooks: allreduce, fp16, bf16
(bf16_emul), powersgd (rank 1, PyTorch's own Q from the vectors' psgd/).
Prints a PASS/FAIL line per hook (rank 0); exits 1 on any failure."""
import argparse
import configparser
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

import ddphook.torch

CAP = 8192


class Trace(torch.nn.Module):
    def __init__(self, shapes):
        super().__init__()
        self.shapes = shapes
        self.flat = torch.nn.ParameterList(
            torch.nn.Parameter(torch.zeros(s)) for s in shapes)

    def forward(self, grads):
        loss = 0
        for p, g in zip(self.flat, grads):
            loss = loss + (p * g).sum()
        return loss


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--vectors", required=True)
    ap.add_argument("--plugin-dir", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    rank = int(os.environ.get("PMI_RANK", "0"))
    trace = configparser.ConfigParser(inline_comment_prefixes=(";",))
    trace.read(os.path.join(a.vectors, "inputs", "trace.ini"))
    steps = trace.getint("trace", "steps")
    shapes = [[int(d) for d in trace[s]["shape"].split(",")]
              for s in trace.sections() if s.startswith("param.")]
    sizes = [int(np.prod(s)) for s in shapes]
    world = trace.getint("trace", "world_size")
    # folder: (hook, W=2 tolerances, W=4 tolerances), as tests/vectors.sh
    cases = {"allreduce": ("allreduce", (1e-5, 0), (1e-5, 0)),
             "fp16": ("fp16", (0, 0), (0, 2e-3)),
             "bf16_emul": ("bf16", (0, 0), (0, 1.6e-2)),
             "powerSGD_r1": ("powersgd", (1e-4, 1e-5), (1e-4, 1e-5))}
    os.makedirs(a.out, exist_ok=True)
    job = os.path.join(a.out, "vectors.r%d.ini" % rank)
    with open(job, "w") as f:
        f.write("[runtime]\nplugin_path = %s\nbucket_cap_mb = %r\n"
                "first_bucket_cap_mb = %r\ntimeout_s = 60\n[hook]\n"
                "name = allreduce\n" % (a.plugin_dir, CAP / 2**20,
                                        CAP / 2**20))
        for folder, (hook, _, _) in cases.items():
            f.write("[model.%s]\nhook = %s\n" % (folder, hook))
        f.write("[hook.powersgd]\nmatrix_approximation_rank = 1\n"
                "start_powerSGD_iter = 2\nq_init_dir = %s\n" %
                os.path.join(a.vectors, "powerSGD_r1", "psgd"))
    ddphook.torch.init_process_group(job)
    if dist.get_world_size() != world:
        raise SystemExit("ddp_vectors.py: %s is for %d ranks" % (a.vectors,
                                                                 world))
    dist._DEFAULT_FIRST_BUCKET_BYTES = CAP
    runs = []
    for folder, (hook, tol2, tol4) in cases.items():
        model = torch.nn.parallel.DistributedDataParallel(
            Trace(shapes), bucket_cap_mb=CAP / 2**20)
        state, fn = ddphook.torch.comm_hook(job, model=model, name=folder)
        model.register_comm_hook(state, fn)
        runs.append((folder, model, state, tol2 if world == 2 else tol4))
    failed = 0
    for folder, model, state, (rtol, atol) in runs:
        worst = -1.0
        for step in range(steps):
            raw = np.fromfile(os.path.join(
                a.vectors, "inputs", "rank%d.step%d.f32" % (rank, step)),
                dtype=np.float32)
            grads = [torch.from_numpy(c.copy()).reshape(s) for c, s in
                     zip(np.split(raw, np.cumsum(sizes)[:-1]), shapes)]
            model.zero_grad()
            model(grads).backward()
            want = torch.from_numpy(np.fromfile(os.path.join(
                a.vectors, folder, "rank%d.step%d.out.f32" % (rank, step)),
                dtype=np.float32))
            got = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
            worst = max(worst, ((got - want).abs() - atol -
                                rtol * want.abs()).max().item())
        ok = worst <= 0 and not state._warned_layout
        failed += not ok
        if rank == 0:
            print("%s: vectors %s W=%d through DDP, %d steps (rtol %g atol "
                  "%g): worst excess %.3g%s" % (
                      "PASS" if ok else "FAIL", folder, world, steps, rtol,
                      atol, worst, ", DDP's buckets are not ddphook's"
                      if state._warned_layout else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
