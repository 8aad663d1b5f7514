#!/usr/bin/python3
"""train_ddp.py: a small GPT (bytes in, next byte out) trained with PyTorch
DistributedDataParallel, whose gradients go through the hook of a ddphook
job file.

    mpiexec -n 2 python3 examples/pytorch/train_ddp.py \\
        --config examples/configs/gpt_powersgd.ini [--steps 200]
    torchrun --nproc_per_node 2 --redirects 1 --tee 1 \\
        examples/pytorch/train_ddp.py --config ...   (the torch backend)

Every job file of examples/configs runs but two: gpu_powersgd.ini needs a
GPU build and CUDA tensors, which this CPU example does not make, and
two_models.ini configures the two models of examples/two_models.c (this
program has one, and is refused at its first step, naming the section).
post_localsgd.ini's hook is built by make -C examples/post_localsgd.  From a
build tree, add --plugin-path plugins/.libs (and PYTHONPATH=python).  The
text is the fortunes files (apt-get install fortunes), or --text FILE.

What it shows, in order: ddphook.torch.init_process_group (gloo's
rendezvous through ddphook's MPI, no MASTER_ADDR needed; under torchrun
from its variables, the job over the torch backend), DDP on the
model, register_comm_hook with ddphook.torch.comm_hook, accumulation with
no_sync() when the job file asks for it, and what the hook did: the loss
averaged over the ranks, the bytes each rank sent per step, the hook's
own statistics.
"""
import argparse
import atexit
import math
import os
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import ddphook.torch


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.fcproj = nn.Linear(4 * width, width)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, -1).transpose(1, 2)
                   for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, seq, width, heads, layers):
        super().__init__()
        self.wte = nn.Embedding(256, width)
        self.wpe = nn.Embedding(seq, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(width)
        # examples/train_gpt's (GPT-2's) initialisation: matrices N(0, 0.02)
        # (the residual projections 0.02 / sqrt(2 layers)), biases 0.  Not
        # PyTorch's defaults: nn.Embedding's N(0, 1), tied to the output,
        # starts the loss near 40, and a hook that sends 1% of a bucket a
        # step (topk.ini) then needs hundreds of steps to bring it down.
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                resid = name.endswith("proj.weight")  # proj, fcproj
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers)
                                if resid else 0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.reshape(-1, 256), targets.reshape(-1))


def load_text(path):
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path)
                       if not n.startswith(".") and "." not in n)
        data = b"".join(open(os.path.join(path, n), "rb").read()
                        for n in names if os.path.isfile(os.path.join(path, n)))
    else:
        data = open(path, "rb").read()
    if len(data) < 4096:
        raise SystemExit("train_ddp.py: %s: too little text" % path)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


def batch(text, gen, size, seq):
    at = torch.randint(0, len(text) - seq - 1, (size,), generator=gen)
    x = torch.stack([text[i:i + seq] for i in at.tolist()])
    y = torch.stack([text[i + 1:i + seq + 1] for i in at.tolist()])
    return x, y


def job_file(config, plugin_path, rank):
    """The job file, with [runtime] plugin_path first when one is given:
    a copy beside it (so that paths in it still resolve), or in the
    temporary folder where that one is read-only; one per rank (no rank
    reads what another is writing), removed at exit (main)."""
    if not plugin_path:
        return config
    with open(config) as src:
        text = "[runtime]\nplugin_path = %s\n%s" % (
            os.path.abspath(plugin_path), src.read())
    name = ".train_ddp.%d.%d.ini" % (os.getppid(), rank)
    for folder in (os.path.dirname(os.path.abspath(config)),
                   tempfile.gettempdir()):
        path = os.path.join(folder, name)
        try:
            with open(path, "w") as out:
                out.write(text)
        except OSError:
            continue
        return path
    raise SystemExit("train_ddp.py: cannot write a copy of %s" % config)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="ddphook job file")
    ap.add_argument("--plugin-path", help="hooks folder (a build tree's "
                    "plugins/.libs) put before the job file's own settings")
    ap.add_argument("--text", default="/usr/share/games/fortunes",
                    help="training text: a file, or a folder of files "
                    "(default %(default)s)")
    ap.add_argument("--steps", type=int, default=200,
                    help="optimizer steps (default 200)")
    ap.add_argument("--layers", type=int, default=2,
                    help="transformer blocks (default 2)")
    ap.add_argument("--width", type=int, default=64,
                    help="embedding width (default 64)")
    ap.add_argument("--heads", type=int, default=4,
                    help="attention heads (default 4)")
    ap.add_argument("--seq", type=int, default=64,
                    help="context length in bytes (default 64)")
    ap.add_argument("--batch", type=int, default=8,
                    help="sequences per rank per step (default 8)")
    ap.add_argument("--lr", type=float, default=3e-3,
                    help="AdamW learning rate (default 3e-3)")
    ap.add_argument("--every", type=int, default=20,
                    help="print the loss every this many steps")
    ap.add_argument("--save", help="save the hook's state here at the end")
    a = ap.parse_args()
    torch.set_num_threads(1)
    rank = int(os.environ.get("PMI_RANK", os.environ.get("RANK", "0")))
    config = job_file(a.config, a.plugin_path, rank)
    try:
        job = ddphook.torch.init_process_group(config)
    finally:
        # Registered after the job's own exit handler, so run before it
        # (which ends a failed job's process at once).
        if config != a.config:
            atexit.register(os.remove, config)
    text = load_text(a.text)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        GPT(a.seq, a.width, a.heads, a.layers))
    state, hook = ddphook.torch.comm_hook(config, model=model)
    model.register_comm_hook(state, hook)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    accumulate = state.accumulate_steps
    gen = torch.Generator().manual_seed(1 + rank)
    if rank == 0:
        print("train_ddp: %d ranks, %d parameters, hook '%s' (%s), "
              "%d backward pass%s per step" % (
                  job.world_size, sum(p.numel() for p in model.parameters()),
                  os.path.basename(a.config), config,
                  accumulate, "" if accumulate == 1 else "es"), flush=True)
    t0 = time.time()
    for step in range(1, a.steps + 1):
        opt.zero_grad()
        total = 0.0
        for micro in range(accumulate):
            x, y = batch(text, gen, a.batch, a.seq)
            last = micro == accumulate - 1
            if last:
                loss = model(x, y) / accumulate
                loss.backward()
            else:
                with model.no_sync():
                    loss = model(x, y) / accumulate
                    loss.backward()
            total += loss.item()
        opt.step()
        if step % a.every == 0 or step == a.steps:
            mean = job.average([total])[0]
            if rank == 0:
                print("step %4d  loss %.4f  %.0f bytes sent per step  "
                      "%.2f s/step" % (step, mean, state.bytes_sent() / step,
                                       (time.time() - t0) / step), flush=True)
    if a.save:
        state.save(a.save)
        state.flush()  # no step follows: written now, not at the close
    if rank == 0:
        stats = state.hook_stats()
        print("hook '%s': %s" % (state.hook_name(), ", ".join(
            "%s %g" % kv for kv in stats.items()) or "no statistics"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
