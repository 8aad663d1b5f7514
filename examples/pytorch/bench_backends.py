#!/usr/bin/python3
"""bench_backends.py: DDP steps with PyTorch's own fp16_compress_hook and
powerSGD_hook (gloo) beside ddphook's fp16 and powersgd hooks, over the
torch backend (an env:// launch, as torchrun's) and over the MPI backend
(an mpiexec launch), in one run, with the ratios.

    python3 examples/pytorch/bench_backends.py [--plugin-path DIR] \\
        [--rounds 3] [--steps 20] [--launch "mpiexec -n 2"] \\
        [--width 256 --layers 4]

From a build tree: PYTHONPATH=python DDPHOOK_LIBRARY=$PWD/.libs/libddphook.so
DDPH_BACKEND_DIR=$PWD/runtime/backends/torch/.libs and --plugin-path
plugins/.libs.

The driver starts --rounds pairs of launches of this script, the two
backends in turns (the order alternating from round to round), each with
--launch (default `mpiexec -n 2`).  In a launch for the torch backend,
each rank first replaces its MPI launcher's variables (PMI_RANK, PMI_FD,
...) with the env:// ones alone (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), as tests/python/env_launch.py
and torchrun give them, and re-executes itself: ddphook then runs the job
over the torch backend; the MPI launch runs it over MPI.  So the same
--launch serves one host and the simulated cluster:

    MASTER_ADDR=10.231.0.1 GLOO_SOCKET_IFNAME=eth0 \\
    python3 examples/pytorch/bench_backends.py --launch "sh tests/cluster/cluster.sh \\
        --hosts 2 --ranks-per-host 1 --rate 1gbit --"

Within a launch the steps of the four variants are interleaved (PyTorch's
fp16, ddphook's fp16, PyTorch's PowerSGD, ddphook's PowerSGD, then a
step under no_sync()), so that PyTorch's hook and ddphook's see the same
load.  The model is train_ddp.py's GPT (--width, --layers) on random
bytes, DDP's buckets (--bucket-cap-mb).  PowerSGD: rank 4, error feedback
and warm start, compressing from step 2, on both sides.  gloo aborts
PyTorch's powerSGD_hook when two buckets' collectives overlap, so its
buckets run one at a time (each future waited in the hook); its fp16 hook
and ddphook's overlap theirs.

Prints, per launch, the median step of each variant; then, over the
rounds, the median of those medians, and the ratios: ddphook's step over
PyTorch's hook's in the same launch, and the torch backend's over the MPI
backend's, raw and relative to PyTorch's hook (gloo's own time is the
same in both launches, so that quotient leaves out load that moved
between launches).
"""
import argparse
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MPI_VARIABLES = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE",
                 "PMI_FD", "PMI_PORT", "HYDRA_CONTROL_FD")
VARIANTS = ("pytorch fp16", "ddphook fp16", "pytorch powersgd",
            "ddphook powersgd")
RESULT = "bench_backends result: "


def as_env_launch():
    """Re-executes this rank with the env:// variables alone."""
    env = {k: v for k, v in os.environ.items() if k not in MPI_VARIABLES}
    rank = os.environ.get("PMI_RANK")
    size = os.environ.get("PMI_SIZE")
    if rank is None or size is None:
        sys.exit("bench_backends.py: --worker torch runs under an MPI "
                 "launcher (PMI_RANK, PMI_SIZE), which it replaces")
    local = os.environ.get("MPI_LOCALRANKID", "0")
    env.update(RANK=rank, WORLD_SIZE=size, LOCAL_RANK=local,
               LOCAL_WORLD_SIZE=os.environ.get("MPI_LOCALNRANKS", size))
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in env:
        sys.exit("bench_backends.py: MASTER_PORT is unset (the driver "
                 "sets it)")
    argv = [sys.executable, os.path.abspath(__file__)] + [
        "--env-launched" if a == "--worker" else a for a in sys.argv[1:]]
    os.execve(sys.executable, argv, env)


def write_job(a, rank):
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"),
                        ".bench_backends.%d.%d.ini" % (os.getpid(), rank))
    with open(path, "w") as f:
        f.write("[runtime]\n")
        if a.plugin_path:
            f.write("plugin_path = %s\n" % os.path.abspath(a.plugin_path))
        f.write("[model.fp16]\nhook = fp16\n"
                "[model.powersgd]\nhook = powersgd\n"
                "[hook.powersgd]\nmatrix_approximation_rank = %d\n"
                "start_powerSGD_iter = 2\n" % a.rank)
    return path


def worker(a):
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import (
        default_hooks, powerSGD_hook as psgd)
    import ddphook
    import ddphook.torch
    sys.path.insert(0, HERE)
    from train_ddp import GPT

    torch.set_num_threads(a.threads)
    rank = int(os.environ.get("RANK", os.environ.get("PMI_RANK", "0")))
    job_ini = write_job(a, rank)
    ddphook.torch.init_process_group(job_ini)
    # The bridge's own rule picks the backend: the torch one exactly when
    # the launch is an env:// one.
    if ddphook.torch._torch_launched() != (a.backend == "torch"):
        sys.exit("bench_backends.py: the %s launch is not seen as one"
                 % a.backend)
    backend = a.backend
    gen = torch.Generator().manual_seed(rank)
    x = torch.randint(0, 256, (a.batch, a.seq), generator=gen)
    y = torch.randint(0, 256, (a.batch, a.seq), generator=gen)

    def ddp():
        torch.manual_seed(0)
        return torch.nn.parallel.DistributedDataParallel(
            GPT(a.seq, a.width, 4, a.layers), bucket_cap_mb=a.bucket_cap_mb)

    def serialized(hook):
        def one_bucket_at_a_time(state, bucket):
            fut = hook(state, bucket)
            fut.wait()
            return fut
        return one_bucket_at_a_time

    models = {}
    m = ddp()
    m.register_comm_hook(None, default_hooks.fp16_compress_hook)
    models["pytorch fp16"] = (m, None)
    m = ddp()
    st, hook = ddphook.torch.comm_hook(job_ini, model=m, name="fp16")
    m.register_comm_hook(st, hook)
    models["ddphook fp16"] = (m, st)
    m = ddp()
    m.register_comm_hook(psgd.PowerSGDState(
        None, matrix_approximation_rank=a.rank, start_powerSGD_iter=2),
        serialized(psgd.powerSGD_hook))
    models["pytorch powersgd"] = (m, None)
    m = ddp()
    st, hook = ddphook.torch.comm_hook(job_ini, model=m, name="powersgd")
    m.register_comm_hook(st, hook)
    models["ddphook powersgd"] = (m, st)
    os.remove(job_ini)

    times = {name: [] for name in VARIANTS + ("no_sync",)}
    for step in range(a.warmup + a.steps):
        for name in VARIANTS:
            m, st = models[name]
            m.zero_grad()
            dist.barrier()
            t0 = time.perf_counter()
            m(x, y).backward()
            if st is not None:
                st.step_end()
            if step >= a.warmup:
                times[name].append(time.perf_counter() - t0)
        m = models["pytorch fp16"][0]
        with m.no_sync():
            m.zero_grad()
            t0 = time.perf_counter()
            m(x, y).backward()
            if step >= a.warmup:
                times["no_sync"].append(time.perf_counter() - t0)
    if rank == 0:
        med = {k: 1e3 * statistics.median(v) for k, v in times.items()}
        med["backend"] = backend
        med["load"] = os.getloadavg()[0]
        print(RESULT + json.dumps(med), flush=True)
    return 0


def free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def launch(a, backend):
    argv = shlex.split(a.launch) + [sys.executable, os.path.abspath(__file__),
                                   "--worker", backend] + a.passed
    env = dict(os.environ, MASTER_PORT=str(free_port()))
    p = subprocess.run(argv, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                       timeout=a.timeout)
    out = p.stdout.decode(errors="replace")
    for line in out.splitlines():
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT):])
    sys.stderr.write(out)
    sys.exit("bench_backends.py: the %s launch (%s) exited %d with no "
             "result" % (backend, " ".join(argv), p.returncode))


def driver(a):
    runs = {"torch": [], "mpi": []}
    for r in range(a.rounds):
        order = ("torch", "mpi") if r % 2 == 0 else ("mpi", "torch")
        for backend in order:
            res = launch(a, backend)
            runs[backend].append(res)
            print("round %d, %-5s backend: %s  (ms; load %.1f)" % (
                r + 1, backend, "  ".join(
                    "%s %.1f" % (k, res[k]) for k in VARIANTS + ("no_sync",)),
                res["load"]), flush=True)
    med = {b: {k: statistics.median(x[k] for x in runs[b])
               for k in VARIANTS + ("no_sync",)} for b in runs}
    print("\nmedian over %d rounds of each launch's median of %d steps "
          "(GPT width %d, %d layers, %d ranks by '%s'), ms a step:" % (
              a.rounds, a.steps, a.width, a.layers, a.ranks_hint, a.launch))
    print("  %-18s %10s %10s" % ("", "torch", "mpi"))
    for k in VARIANTS + ("no_sync",):
        print("  %-18s %10.1f %10.1f" % (k, med["torch"][k], med["mpi"][k]))
    print("ratios (below 1: ddphook faster / the torch backend faster):")
    for hook in ("fp16", "powersgd"):
        ours, theirs = "ddphook " + hook, "pytorch " + hook
        for b in ("torch", "mpi"):
            print("  %-8s ddphook / PyTorch's hook, %-5s launch   %.3f" % (
                hook, b, med[b][ours] / med[b][theirs]))
        raw = med["torch"][ours] / med["mpi"][ours]
        rel = (med["torch"][ours] / med["torch"][theirs]) / (
            med["mpi"][ours] / med["mpi"][theirs])
        print("  %-8s torch backend / MPI backend            %.3f  "
              "(relative to PyTorch's hook in each launch: %.3f)" % (
                  hook, raw, rel))
    return 0


def main():
    ap = argparse.ArgumentParser(
        description="PyTorch's fp16 and PowerSGD hooks against ddphook's "
        "over the torch backend (env:// launch) and the MPI backend "
        "(mpiexec), in one run.")
    ap.add_argument("--launch", default="mpiexec -n 2",
                    help="the MPI launcher command of each launch (default "
                    "'mpiexec -n 2'; tests/cluster/cluster.sh ... -- for "
                    "simulated hosts)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="launches per backend, in turns (default 3)")
    ap.add_argument("--timeout", type=float, default=900,
                    help="seconds a launch may take (default 900)")
    ap.add_argument("--worker", choices=("torch", "mpi"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--env-launched", choices=("torch",),
                    help=argparse.SUPPRESS)
    wa = ap.add_argument_group("each launch's")
    wa.add_argument("--plugin-path", default="",
                    help="folder of ddphook's hook plugins (plugins/.libs in "
                    "a build tree)")
    wa.add_argument("--steps", type=int, default=20,
                    help="timed steps per variant (default 20)")
    wa.add_argument("--warmup", type=int, default=4,
                    help="untimed steps first (default 4; PowerSGD "
                    "compresses from step 2)")
    wa.add_argument("--width", type=int, default=256,
                    help="the GPT's width (default 256)")
    wa.add_argument("--layers", type=int, default=4,
                    help="the GPT's layers (default 4)")
    wa.add_argument("--seq", type=int, default=64)
    wa.add_argument("--batch", type=int, default=8)
    wa.add_argument("--rank", type=int, default=4,
                    help="PowerSGD's matrix approximation rank (default 4)")
    wa.add_argument("--bucket-cap-mb", type=float, default=25,
                    help="DDP's bucket_cap_mb (default 25, DDP's)")
    wa.add_argument("--threads", type=int, default=1,
                    help="torch.set_num_threads per rank (default 1)")
    a = ap.parse_args()
    if a.env_launched:
        a.backend = "torch"
        return worker(a)
    if a.worker == "torch":
        as_env_launch()
    if a.worker == "mpi":
        a.backend = "mpi"
        return worker(a)
    a.passed = []
    for opt in ("plugin_path", "steps", "warmup", "width", "layers", "seq",
                "batch", "rank", "bucket_cap_mb", "threads"):
        a.passed += ["--" + opt.replace("_", "-"), str(getattr(a, opt))]
    a.ranks_hint = 0
    words = shlex.split(a.launch)
    for i, w in enumerate(words[:-1]):
        if w in ("-n", "-np"):
            a.ranks_hint = int(words[i + 1])
        if w == "--hosts":
            a.ranks_hint = int(words[i + 1]) * next(
                (int(words[j + 1]) for j in range(len(words) - 1)
                 if words[j] == "--ranks-per-host"), 1)
    return driver(a)


if __name__ == "__main__":
    sys.exit(main())
