#!/usr/bin/python3
"""ddp_hooks.py: ddphook's hooks under PyTorch DDP (ddphook.torch) against
PyTorch's own hooks, gradient for gradient, on the ranks mpiexec starts
(or torchrun, or tests/python/env_launch.py: the torch backend).

    mpiexec -n W /usr/bin/python3 tests/python/ddp_hooks.py \\
        --plugin-dir plugins/.libs --out DIR [--steps 6]

One job file gives each hook its own ddphook model ([model.NAME] hook =).
For each hook, two DDP replicas of one model (5 layers, 4 buckets of 8
KiB after DDP's rebuild, the same layout as ddphook's) see the same
inputs, step by step, without optimizer (so that gradients stay
comparable): one with PyTorch's hook, one with ddphook's. After every
step their gradients must agree within the tolerances that the reference
vectors use (the README of --with-reference-vectors' folder). PowerSGD's
random Q is PyTorch's own: torch.randn's output is captured as PyTorch's
hook draws it and handed to ddphook's hook through q_init_dir, and, in the
*_own_q cases, drawn by ddphook itself as torch.randn draws it. PyTorch
1.13 cannot run two of these hooks as shipped, so their references are
the same algorithms made to run: bf16_compress_hook needs NCCL (gloo
cannot sum bf16), so its reference casts, divides and sums in bf16 in
rank order over gathered values; batched_powerSGD_hook hands 2-D
matrices to its 3-D _orthogonalize, which is given a batch dimension.
Prints one PASS/FAIL line per hook (rank 0) and exits 1 on any failure.

--bytes-dir DIR: for each hook, the bytes this rank sent per step through
the bridge (DIR/NAME.bytes, rank 0's), and what the C runtime needs to
send the same buckets itself: a job file of that hook alone
(DIR/NAME.rR.ini) and a gradient trace of the parameters as the bridge
registered them (DIR/NAME.trace, docs/replay.md); tests/pytorch.sh runs
`ddphook replay` on them and compares its bytes per step.
"""
import argparse
import faulthandler
import signal
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

import ddphook.torch

CAP = 8192  # bytes: both of DDP's bucket caps, and ddphook's


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(24, 48)
        self.fc2 = torch.nn.Linear(48, 64)
        self.norm = torch.nn.LayerNorm(64)
        self.fc3 = torch.nn.Linear(64, 32)
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x):
        x = torch.relu(self.fc1(x))
        x = self.norm(torch.relu(self.fc2(x)))
        return self.head(torch.tanh(self.fc3(x)))


class NetUnused(Net):
    """Net and a layer only odd steps use, for DDP's
    find_unused_parameters=True (whose buckets DDP never rebuilds), and
    for static_graph=True with the layer never used."""
    def __init__(self):
        super().__init__()
        self.spare = torch.nn.Linear(10, 10)
        self.use_spare = False

    def forward(self, x):
        y = super().forward(x)
        return self.spare(y) if self.use_spare else y


def bf16_reference_hook(state, bucket):
    """bf16_compress_hook's arithmetic on gloo: cast, divide in bf16, sum in
    bf16 in rank order (gathered as float32, exactly), cast back."""
    world = dist.get_world_size()
    c = bucket.buffer().to(torch.bfloat16).div_(world)
    parts = [torch.empty(c.numel()) for _ in range(world)]
    dist.all_gather(parts, c.float())  # exact both ways
    total = parts[0].to(torch.bfloat16)
    for p in parts[1:]:
        total += p.to(torch.bfloat16)
    bucket.buffer().copy_(total)
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def batched_orthogonalize(orig):
    """_orthogonalize taking batched_powerSGD_hook's 2-D matrices as a
    batch of one (in place, as it works); 3-D batches as before."""
    def orth(m, epsilon=0):
        orig(m.unsqueeze(0) if m.dim() == 2 else m, epsilon)
    orth.batched = True
    return orth


def QCapture(folder, rank, fn):
    """fn, with torch.randn's output, as PyTorch's PowerSGD hook draws it,
    written in ddphook's q_init_dir layout: r{rank}_it{iter}_b{bucket}_qinit.f32
    (folder None: nothing written, ddphook draws the same Q itself)."""
    if folder is not None:
        os.makedirs(folder, exist_ok=True)

    def captured(state, bucket):
        drawn = []
        randn = torch.randn
        it = state.iter  # the last bucket's call counts the step

        def capture(*args, **kwargs):
            t = randn(*args, **kwargs)
            drawn.append(t.detach().reshape(-1).float().clone())
            return t
        torch.randn = capture
        try:
            fut = fn(state, bucket)
            # One bucket's collectives at a time: gloo 1.13 aborts on
            # PowerSGD's concurrent ones (op.preamble.length <= op.nbytes).
            fut.wait()
        finally:
            torch.randn = randn
        if drawn and folder is not None:
            path = os.path.join(folder, "r%d_it%d_b%d_qinit.f32" % (
                rank, it, bucket.index()))
            torch.cat(drawn).numpy().tofile(path)
        return fut
    return captured


def psgd_state(rank, ef=True, warm=True):
    return psgd.PowerSGDState(process_group=None, matrix_approximation_rank=rank,
                              start_powerSGD_iter=2, use_error_feedback=ef,
                              warm_start=warm, random_seed=0)


# name: (ddphook hook, wrapper, options, PyTorch state and hook, W=2 and W=4
# tolerances (rtol, atol))
def cases(out, rank):
    q = lambda name: os.path.join(out, "q_" + name)
    # W = 4 sums in another order than gloo's ring: the vectors' rtol 1e-5,
    # plus 1e-7 absolute for gradients near 0 (their inputs have none).
    exact, ring4 = (1e-5, 0.0), (1e-5, 1e-7)
    psgd_tol = (1e-4, 1e-5)
    return {
        "allreduce": ("allreduce", "none", {}, None,
                      default_hooks.allreduce_hook, exact, ring4),
        "fp16": ("fp16", "none", {}, None, default_hooks.fp16_compress_hook,
                 (0.0, 0.0), (0.0, 2e-3)),
        "fp16_wrapper": ("allreduce", "fp16", {}, None,
                         default_hooks.fp16_compress_hook, (0.0, 0.0),
                         (0.0, 2e-3)),
        "bf16": ("bf16", "none", {}, None, bf16_reference_hook, (0.0, 0.0),
                 (0.0, 1.6e-2)),
        "powersgd": ("powersgd", "none",
                     {"matrix_approximation_rank": 2,
                      "start_powerSGD_iter": 2, "q_init_dir": q("powersgd")},
                     lambda: psgd_state(2),
                     QCapture(q("powersgd"), rank, psgd.powerSGD_hook),
                     psgd_tol, psgd_tol),
        "powersgd_noef": ("powersgd", "none",
                          {"matrix_approximation_rank": 1,
                           "start_powerSGD_iter": 2,
                           "use_error_feedback": "false",
                           "warm_start": "false",
                           "q_init_dir": q("powersgd_noef")},
                          lambda: psgd_state(1, False, False),
                          QCapture(q("powersgd_noef"), rank,
                                   psgd.powerSGD_hook),
                          psgd_tol, psgd_tol),
        "batched_powersgd": ("batched_powersgd", "none",
                             {"matrix_approximation_rank": 2,
                              "start_powerSGD_iter": 2,
                              "q_init_dir": q("batched")},
                             lambda: psgd_state(2),
                             QCapture(q("batched"), rank,
                                      psgd.batched_powerSGD_hook),
                             psgd_tol, psgd_tol),
        # No q_init_dir: ddphook draws Q as torch.randn does.
        # Rank 3: Qs of 72 and 96 floats, torch.randn's redrawn tails.
        "powersgd_own_q": ("powersgd", "none",
                           {"matrix_approximation_rank": 3,
                            "start_powerSGD_iter": 2},
                           lambda: psgd_state(3),
                           QCapture(None, rank, psgd.powerSGD_hook),
                           psgd_tol, psgd_tol),
        "batched_own_q": ("batched_powersgd", "none",
                          {"matrix_approximation_rank": 2,
                           "start_powerSGD_iter": 2},
                          lambda: psgd_state(2),
                          QCapture(None, rank, psgd.batched_powerSGD_hook),
                          psgd_tol, psgd_tol),
        # find_unused_parameters=True (NetUnused): DDP's first buckets,
        # filled in registration order, are final; options as above.
        "powersgd_unused": ("powersgd", "none",
                            {"matrix_approximation_rank": 3,
                             "start_powerSGD_iter": 2},
                            lambda: psgd_state(3),
                            QCapture(None, rank, psgd.powerSGD_hook),
                            psgd_tol, psgd_tol),
        # static_graph=True with a layer no step uses (NetUnused): DDP's
        # rebuilt buckets put it after the others, ddphook's too.
        "powersgd_static_unused": ("powersgd", "none",
                                   {"matrix_approximation_rank": 3,
                                    "start_powerSGD_iter": 2},
                                   lambda: psgd_state(3),
                                   QCapture(None, rank, psgd.powerSGD_hook),
                                   psgd_tol, psgd_tol),
        "batched_unused": ("batched_powersgd", "none",
                           {"matrix_approximation_rank": 2,
                            "start_powerSGD_iter": 2},
                           lambda: psgd_state(2),
                           QCapture(None, rank, psgd.batched_powerSGD_hook),
                           psgd_tol, psgd_tol),
    }


def job_head(plugin_dir, cap=CAP):
    """A job file's [runtime] (cap-sized buckets) and an allreduce [hook]."""
    return ("[runtime]\nplugin_path = %s\nbucket_cap_mb = %r\n"
            "first_bucket_cap_mb = %r\ntimeout_s = 60\n"
            "[hook]\nname = allreduce\n" % (plugin_dir, cap / 2**20,
                                            cap / 2**20))


def write_job(path, plugin_dir, table):
    with open(path, "w") as f:
        f.write(job_head(plugin_dir))
        sections = {}
        for name, (hook, wrapper, opts, *_rest) in table.items():
            f.write("[model.%s]\nhook = %s\nwrapper = %s\n" % (
                name, hook, wrapper))
            if opts and sections.setdefault(hook, opts) != opts:
                raise SystemExit("ddp_hooks.py: two cases give %s different "
                                 "options: run them apart (--only)" % hook)
        for hook, opts in sections.items():
            f.write("[hook.%s]\n" % hook)
            for k, v in opts.items():
                f.write("%s = %s\n" % (k, v))


def write_single_job(path, plugin_dir, hook, wrapper, opts):
    """The job of one case alone, for `ddphook replay` (model 'model')."""
    with open(path, "w") as f:
        f.write("[runtime]\nplugin_path = %s\nbucket_cap_mb = %r\n"
                "first_bucket_cap_mb = %r\ntimeout_s = 60\n"
                "[hook]\nname = %s\nwrapper = %s\n" % (
                    plugin_dir, CAP / 2**20, CAP / 2**20, hook, wrapper))
        if opts:
            f.write("[hook.%s]\n" % hook)
            for k, v in opts.items():
                f.write("%s = %s\n" % (k, v))


def write_trace(folder, state, steps, rank, world):
    """A trace of the bridge's parameters, in its registration order, with
    random gradients (bytes on the wire depend on shapes only)."""
    os.makedirs(folder, exist_ok=True)
    shapes = [list(p.shape) or [1] for p in state.params]
    if rank == 0:
        with open(os.path.join(folder, "trace.ini"), "w") as f:
            f.write("[trace]\nworld_size = %d\nsteps = %d\ndtype = f32\n"
                    % (world, steps))
            for i, shape in enumerate(shapes):
                f.write("[param.p%d]\nshape = %s\n" % (
                    i, ",".join(map(str, shape))))
    g = torch.Generator().manual_seed(7 + rank)
    total = sum(p.numel() for p in state.params)
    for step in range(steps):
        torch.randn(total, generator=g).numpy().tofile(os.path.join(
            folder, "rank%d.step%d.f32" % (rank, step)))


def compare(a, b, rtol, atol):
    """Largest excess of |a-b| over atol + rtol|a| (<= 0: within)."""
    if any((x.grad is None) != (y.grad is None)
           for x, y in zip(a.parameters(), b.parameters())):
        return float("inf")
    return max(((x.grad - y.grad).abs() - atol - rtol * x.grad.abs()).max().item()
               for x, y in zip(a.parameters(), b.parameters())
               if x.grad is not None)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--plugin-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--bytes-dir", help="bytes per step and replay inputs")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    faulthandler.register(signal.SIGTERM)
    if not getattr(psgd._orthogonalize, "batched", False):
        psgd._orthogonalize = batched_orthogonalize(psgd._orthogonalize)
    # mpiexec's rank, or an env:// launcher's (the torch backend)
    rank = int(os.environ.get("PMI_RANK", os.environ.get("RANK", "0")))
    table = cases(a.out, rank)
    if a.only:
        table = {k: v for k, v in table.items() if k in a.only.split(",")}
    # One file per rank, all alike: no rank reads what another writes.
    os.makedirs(a.out, exist_ok=True)
    if a.bytes_dir:
        os.makedirs(a.bytes_dir, exist_ok=True)
    job_path = os.path.join(a.out, "ddp_hooks.r%d.ini" % rank)
    write_job(job_path, a.plugin_dir, table)
    ddphook.torch.init_process_group(job_path)
    world = dist.get_world_size()
    dist._DEFAULT_FIRST_BUCKET_BYTES = CAP
    # allreduce learns its parameters from DDP's buckets (the LayerNorm's
    # weight comes before its bias in the backward pass, so its buckets
    # differ from DDP's, which allreduce does not mind); the others from
    # the module, in DDP's order.
    runs = []
    for name, case in table.items():
        lazy = name == "allreduce"
        make_state, torch_hook = case[3], case[4]
        unused = name.endswith("_unused")
        static = "_static_" in name
        torch.manual_seed(0)
        net = NetUnused() if unused else Net()
        theirs, ours = (torch.nn.parallel.DistributedDataParallel(
            n, bucket_cap_mb=CAP / 2**20, static_graph=static,
            find_unused_parameters=unused and not static)
            for n in (net, net_copy(net)))
        theirs.register_comm_hook(make_state() if make_state else None,
                                  torch_hook)
        state, hook = ddphook.torch.comm_hook(
            job_path, model=None if lazy else ours, name=name)
        ours.register_comm_hook(state, hook)
        runs.append((name, theirs, ours, case[5] if world == 2 else case[6],
                     None if lazy else state, state))
    failed = 0
    for name, theirs, ours, (rtol, atol), state, bridge in runs:
        worst = -1.0
        sent = [0]
        for step in range(a.steps):
            g = torch.Generator().manual_seed(1000 * step + rank)
            x = torch.randn(8, 24, generator=g)
            y = torch.randint(0, 10, (8,), generator=g)
            for m in (theirs, ours):
                # NetUnused's; never under static_graph=True
                m.module.use_spare = step % 2 == 1 and not m.static_graph
                m.zero_grad()
                torch.nn.functional.cross_entropy(m(x), y).backward()
            worst = max(worst, compare(theirs, ours, rtol, atol))
            bridge.step_end()  # bytes_sent is read between steps
            sent.append(bridge.bytes_sent())
        if a.bytes_dir:
            hook, wrapper, opts = table[name][:3]
            write_single_job(os.path.join(a.bytes_dir, "%s.r%d.ini" % (
                name, rank)), a.plugin_dir, hook, wrapper, opts)
            write_trace(os.path.join(a.bytes_dir, name + ".trace"), bridge,
                        a.steps, rank, world)
            if rank == 0:
                with open(os.path.join(a.bytes_dir, name + ".bytes"),
                          "w") as f:
                    f.write(" ".join(str(y - x) for x, y in
                                     zip(sent, sent[1:])) + "\n")
        # DDP's buckets must be ddphook's (PowerSGD's result depends on them).
        layout = "" if state is None or not state._warned_layout else \
            ", but DDP's buckets are not ddphook's"
        # All but the step's last DDP bucket (two or more a step here,
        # once DDP has rebuilt its buckets: after its first step, its
        # second with static_graph=True) are completed as their buckets
        # are reduced.
        early = bridge.completed_by_comm_thread
        if early < 2 * (a.steps - (2 if ours.static_graph else 1)):
            layout += ", only %d futures completed by ddphook's " \
                "communication thread" % early
        verdict = "PASS" if worst <= 0 and not layout else "FAIL"
        failed += verdict == "FAIL"
        if rank == 0:
            print("%s: %s W=%d, %d steps (rtol %g atol %g): worst excess %.3g%s"
                  % (verdict, name, world, a.steps, rtol, atol, worst, layout),
                  flush=True)
    return 1 if failed else 0


def net_copy(net):
    other = type(net)()
    other.load_state_dict(net.state_dict())
    return other


if __name__ == "__main__":
    sys.exit(main())
