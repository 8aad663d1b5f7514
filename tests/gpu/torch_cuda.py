"""torch_cuda.py: a CUDA DDP model through ddphook.torch with
[runtime] backend = nccl, against the same model on the CPU through the
bridge (backend = mpi), one rank, the fp16 and PowerSGD hooks.

    python3 tests/gpu/torch_cuda.py --out DIR --plugin-path DIR

Runs itself twice (--device cpu, --device cuda: one ddphook job a
process), each training both DDP models STEPS steps on the same data, and
compares their gradients step by step: fp16 within one half-precision
step (rtol 2e-3; the CPU and the GPU round the model's own gradients
differently before the cast), PowerSGD within tests/pytorch.sh's
tolerance (rtol 1e-4, atol 1e-5).  The CUDA run also checks that
ddphook's gradient memory is on the GPU and that the communication
thread completed futures (the bucket callback on GPU buckets).  Exits 77
with the reason where torch has no CUDA (or no GPU), 1 on a failure."""
import argparse
import os
import subprocess
import sys

CAP = 8192  # bytes: DDP's bucket cap after its first bucket
STEPS = 6
CASES = {  # name: ([hook.NAME] options, rtol, atol)
    "fp16": ({}, 2e-3, 1e-6),
    "powersgd": ({"matrix_approximation_rank": 2, "start_powerSGD_iter": 2},
                 1e-4, 1e-5),
}


def write_job(path, plugin_dir, backend):
    with open(path, "w") as f:
        f.write("[runtime]\nbackend = %s\nplugin_path = %s\ntimeout_s = 60\n"
                "[hook]\nname = allreduce\n" % (backend, plugin_dir))
        for name, (opts, _rtol, _atol) in CASES.items():
            f.write("[model.%s]\nhook = %s\n" % (name, name))
            if opts:
                f.write("[hook.%s]\n" % name)
                for k, v in opts.items():
                    f.write("%s = %s\n" % (k, v))


def train(device, job, out):
    """One process: both models, STEPS steps; their gradients to OUT."""
    import torch
    import ddphook.torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cuda = device == "cuda"
    ddphook.torch.init_process_group(job, backend="nccl" if cuda else "gloo")
    job_ = ddphook.current_job()
    if cuda:
        gpu = ddphook.lib().ddph_cuda_device(job_.ctx)
        torch.cuda.set_device(gpu)
        device = torch.device("cuda", gpu)
    results, notes, models = {}, [], {}
    # Every model of the job (its [model.NAME]) exists before any step.
    for name in CASES:
        torch.manual_seed(0)
        net = torch.nn.Sequential(
            torch.nn.Linear(24, 512), torch.nn.ReLU(),
            torch.nn.Linear(512, 512), torch.nn.ReLU(),
            torch.nn.Linear(512, 512), torch.nn.ReLU(),
            torch.nn.Linear(512, 10)).to(device)  # past DDP's 1 MiB first bucket
        model = DDP(net, device_ids=[device] if cuda else None,
                    bucket_cap_mb=CAP / 2 ** 20)
        state, hook = ddphook.torch.comm_hook(job, model=model, name=name)
        model.register_comm_hook(state, hook)
        models[name] = (model, state)
    for name, (model, state) in models.items():
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        grads = []
        for step in range(STEPS):
            g = torch.Generator().manual_seed(100 + step)
            x = torch.randn(16, 24, generator=g).to(device)
            y = torch.randint(0, 10, (16,), generator=g).to(device)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            grads.append([p.grad.detach().cpu().clone()
                          for p in model.parameters()])
            opt.step()
        state.step_end()
        on_gpu = all(t.is_cuda for t in state.grads)
        if cuda and not on_gpu:
            raise SystemExit("FAIL: %s: ddphook's gradient memory is not on "
                             "the GPU" % name)
        nbuckets = len(state.buckets())
        notes.append("%s: %d buckets, hook %s, %d of %d futures completed "
                     "by the communication thread, gradients on %s" % (
                         name, nbuckets, state.hook_name(),
                         state.completed_by_comm_thread,
                         nbuckets * STEPS, "the GPU" if on_gpu else "the CPU"))
        if nbuckets > 1 and state.completed_by_comm_thread == 0:
            raise SystemExit("FAIL: %s: %d buckets a step, and the "
                             "communication thread completed no future"
                             % (name, nbuckets))
        results[name] = grads
    torch.save({"grads": results, "notes": notes}, out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--plugin-path", required=True)
    ap.add_argument("--device", choices=("cpu", "cuda"))
    args = ap.parse_args()
    args.plugin_path = os.path.abspath(args.plugin_path)  # the job is elsewhere
    if args.device:
        train(args.device, os.path.join(args.out, "%s.ini" % args.device),
              os.path.join(args.out, "%s.pt" % args.device))
        return 0
    try:
        import torch
    except ImportError as e:
        print("not run: no torch in %s (%s)" % (sys.executable, e))
        return 77
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        print("not run: torch %s in %s has no CUDA device (torch.version.cuda"
              " %s)" % (torch.__version__, sys.executable, torch.version.cuda))
        return 77
    os.makedirs(args.out, exist_ok=True)
    runs = {}
    for device, backend in (("cpu", "mpi"), ("cuda", "nccl")):
        write_job(os.path.join(args.out, "%s.ini" % device),
                  args.plugin_path, backend)
        rc = subprocess.call([sys.executable, os.path.abspath(__file__),
                              "--out", args.out, "--plugin-path",
                              args.plugin_path, "--device", device],
                             timeout=240)
        if rc != 0:
            print("FAIL: the %s run (backend = %s) exited %d" % (
                device, backend, rc))
            return 1
        saved = os.path.join(args.out, "%s.pt" % device)
        runs[device] = torch.load(saved)
        os.remove(saved)  # tens of MB: not for the report's folder
        for line in runs[device]["notes"]:
            print("%s run: %s" % (device, line))
    failed = 0
    for name, (_opts, rtol, atol) in CASES.items():
        cpu, gpu = runs["cpu"]["grads"][name], runs["cuda"]["grads"][name]
        worst = max(((g - c).abs() - atol - rtol * c.abs()).max().item()
                    for cs, gs in zip(cpu, gpu) for c, g in zip(cs, gs))
        ok = worst <= 0 and len(cpu) == len(gpu) == STEPS
        failed += not ok
        print("%s: %s, CUDA model (backend = nccl) against the CPU model "
              "(backend = mpi), %d steps (rtol %g atol %g): worst excess %.3g"
              % ("PASS" if ok else "FAIL", name, STEPS, rtol, atol, worst))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
