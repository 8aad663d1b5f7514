#!/usr/bin/python3
"""ddp_resume.py: the hook's state saved and loaded from Python
(HookState.save/load) under DDP, PowerSGD with error feedback and warm
start compressing from step 2.

    mpiexec -n W python3 ddp_resume.py --plugin-dir DIR --out DIR --phase P

--phase full: 6 steps of SGD; after step 3, as nanoGPT's train.py does,
rank 0 alone evaluates through the DDP model (whose forward broadcasts
the module's buffer over gloo: rank 1 joins that broadcast in its next
forward) and saves the model and the optimizer, then every rank asks for
the hook's state beside them (state.save returns at once; written at the
next step's first bucket: a save that waited for the other ranks would
hang here); writes the parameters after step 6, and asks for one more
save that no step follows (written when the job closes).
--phase resume: loads what full saved (the hook's state before the first
step) and at once saves it again (written at the first step), runs steps
4 to 6, writes the parameters, then saves and flushes (written at once).
--phase resume-resaved: as resume, from the state resume saved again.
tests/pytorch.sh compares the parameters byte for byte (resume and
resume-resaved then equal an uninterrupted run); one more run with the
hook's state not loaded must differ."""
import argparse
import os
import sys

import torch

import ddphook.torch


def start(plugin_dir, job, hook="powersgd"):
    """Writes the job file `job` (PowerSGD of rank 1 from step 2, or
    `hook`), opens the job and returns it with the seeded MLP (shared with
    ddp_state_dict.py)."""
    with open(job, "w") as f:
        f.write("[runtime]\nplugin_path = %s\nbucket_cap_mb = 0.01\n"
                "first_bucket_cap_mb = 0.01\ntimeout_s = 30\n"
                "[hook]\nname = %s\n"
                "[hook.powersgd]\nmatrix_approximation_rank = 1\n"
                "start_powerSGD_iter = 2\n" % (plugin_dir, hook))
    ddphook.torch.init_process_group(job)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                              torch.nn.Linear(64, 64), torch.nn.ReLU(),
                              torch.nn.Linear(64, 10))
    # A buffer, as nanoGPT's attention mask: DDP's forward broadcasts it.
    net.register_buffer("mask", torch.ones(4))
    return job, net


def train_step(model, opt, step, rank):
    """One step of SGD on this rank's batch of `step`."""
    g = torch.Generator().manual_seed(100 * step + rank)
    x = torch.randn(16, 32, generator=g)
    y = torch.randint(0, 10, (16,), generator=g)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--plugin-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--phase", required=True,
                    choices=["full", "resume", "resume-resaved",
                             "resume-without-state"])
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    rank = int(os.environ.get("PMI_RANK", os.environ.get("RANK", "0")))
    os.makedirs(a.out, exist_ok=True)
    job, net = start(a.plugin_dir, os.path.join(
        a.out, "resume.%s.r%d.ini" % (a.phase, rank)))
    model = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state, hook = ddphook.torch.comm_hook(job, model=model)
    model.register_comm_hook(state, hook)
    saved = os.path.join(a.out, "step3")
    resaved = os.path.join(a.out, "step3-again")
    first = 0
    if a.phase != "full":
        ckpt = torch.load(saved + ".pt")
        model.module.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        if a.phase == "resume":
            state.load(saved + ".hooks")
            # Before any step: the state just loaded.
            assert state.save(resaved + ".hooks") == resaved + ".hooks"
        elif a.phase == "resume-resaved":
            state.load(resaved + ".hooks")
        first = 3
    for step in range(first, 6):
        train_step(model, opt, step, rank)
        if a.phase == "full" and step == 2:
            if rank == 0:
                with torch.no_grad():
                    model(torch.randn(4, 32))  # a gloo broadcast
                torch.save({"model": model.module.state_dict(),
                            "opt": opt.state_dict()}, saved + ".pt")
            state.save(saved + ".hooks")
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    flat.numpy().tofile(os.path.join(a.out, "%s.rank%d.f32" % (a.phase, rank)))
    last = os.path.join(a.out, "%s-last.hooks" % a.phase)
    state.save(last)
    if a.phase == "resume":
        state.flush()
        if not os.path.exists("%s.rank%d" % (last, rank)):
            print("FAIL: rank %d: state.flush() left %s.rank%d unwritten" %
                  (rank, last, rank), flush=True)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
