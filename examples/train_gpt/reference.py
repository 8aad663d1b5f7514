#!/usr/bin/python3
"""reference.py: train_gpt's twin in PyTorch, to check the C trainer.

Runs examples/train_gpt/train_gpt for --steps steps (its initial weights
saved with --save-init, its losses with --csv at every step), then builds
the same model in PyTorch (nn.Linear, nn.LayerNorm, GELU with the tanh
approximation, the head tied to the token embedding), loads those initial
weights, draws the same batches from the same text (the same splitmix64
offsets) and trains with the same AdamW, clipping and learning-rate
schedule: on 1 rank plainly, on W ranks under DistributedDataParallel
(gloo), whose default allreduce matches ddphook's allreduce hook.  It
prints both losses step by step and exits 1 if any differs by more than
--rtol (1e-6) relative.

    /usr/bin/python3 examples/train_gpt/reference.py --world 2 --steps 20 \\
        --trainer examples/train_gpt/train_gpt --plugin-path plugins/.libs

--accum K runs K micro-batches an optimizer step on both sides
([accumulate] steps = K in train_gpt's job; no_sync() but for the last
under DistributedDataParallel).  --large-weights X starts both from
random weights of standard deviation X instead of train_gpt's
initialisation (LayerNorm gains 1 + that noise), written as a train_gpt
checkpoint that it resumes from: at the default N(0, 0.02) GELU and
softmax are nearly linear, and a wrong GELU constant or attention scale
would go unseen; the first loss is then a check of the forward pass
alone.

--time instead times the optimizer steps of both after the first few (1
rank, --threads OpenBLAS and torch threads on both sides) and prints
ms/step for each.

Needs Debian's python3-torch (1.13).
"""
import argparse
import contextlib
import csv
import os
import struct
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

MASK = (1 << 64) - 1
TENSORS = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw",
           "attprojb", "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb",
           "lnfw", "lnfb"]
PER_LAYER = set(TENSORS[2:14])
DECAY = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


# ---- the data, as text.c draws it -------------------------------------------

def splitmix(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def load_text(folder):
    names = sorted(n for n in os.listdir(folder)
                   if not n.startswith(".") and not n.endswith((".dat", ".u8")))
    data = b""
    for n in names:
        path = os.path.join(folder, n)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                data += f.read()
    return np.frombuffer(data, dtype=np.uint8), len(data) // 10 * 9


def train_sequence(text, train_end, seed, step, micro, i, T):
    s = ((seed * 0x9E3779B97F4A7C15) & MASK) ^ ((step * 1000003) & MASK) \
        ^ ((micro * 7919) & MASK) ^ ((i * 104729) & MASK)
    s, _ = splitmix(s)
    s, r = splitmix(s)
    at = r % (train_end - T - 1)
    seq = text[at:at + T + 1].astype(np.int64)
    return seq[:T], seq[1:]


# ---- the model ------------------------------------------------------------------

class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.attproj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.H
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / hs ** 0.5)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.attproj(y)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, C, H, L):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, H) for _ in range(L))
        self.lnf = nn.LayerNorm(C)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]),
                               targets.view(-1))

    def by_name(self, L):
        """train_gpt's tensors, in its order, as lists of torch tensors."""
        blk = self.blocks
        per = {
            "ln1w": [b.ln1.weight for b in blk], "ln1b": [b.ln1.bias for b in blk],
            "qkvw": [b.qkv.weight for b in blk], "qkvb": [b.qkv.bias for b in blk],
            "attprojw": [b.attproj.weight for b in blk],
            "attprojb": [b.attproj.bias for b in blk],
            "ln2w": [b.ln2.weight for b in blk], "ln2b": [b.ln2.bias for b in blk],
            "fcw": [b.fc.weight for b in blk], "fcb": [b.fc.bias for b in blk],
            "fcprojw": [b.fcproj.weight for b in blk],
            "fcprojb": [b.fcproj.bias for b in blk],
        }
        out = {"wte": [self.wte.weight], "wpe": [self.wpe.weight],
               "lnfw": [self.lnf.weight], "lnfb": [self.lnf.bias]}
        out.update(per)
        return out


def load_weights(model, path, cfg):
    with open(path, "rb") as f:
        raw = f.read()
    magic, V, T, C, H, L, _, step, n = struct.unpack("<8s6iqq", raw[:48])
    assert magic == b"DDPHGPT1" and (V, T, C, H, L) == cfg, (magic, V, T, C, H, L)
    params = np.frombuffer(raw[48:48 + 4 * n], dtype=np.float32)
    tensors = model.by_name(L)
    at = 0
    with torch.no_grad():
        for name in TENSORS:
            for t in tensors[name]:
                k = t.numel()
                t.copy_(torch.from_numpy(params[at:at + k].copy()).view_as(t))
                at += k
    assert at == n


def write_large_weights(a, path):
    """Rewrites train_gpt's checkpoint `path` with N(0, a.large_weights)
    weights (LayerNorm gains 1 + that noise), AdamW's moments zero and
    step 0, and its crc32."""
    with open(path, "rb") as f:
        head = bytearray(f.read(48))
    n = struct.unpack("<q", head[40:48])[0]
    head[32:40] = struct.pack("<q", 0)
    rng = np.random.RandomState(a.seed)
    params = (rng.standard_normal(n) * a.large_weights).astype(np.float32)
    model = GPT(256, a.context, a.width, a.heads, a.layers)
    tensors = model.by_name(a.layers)
    at = 0
    for name in TENSORS:
        for t in tensors[name]:
            if name in ("ln1w", "ln2w", "lnfw"):
                params[at:at + t.numel()] += 1
            at += t.numel()
    body = bytes(head) + params.tobytes() + bytes(8 * n)
    with open(path, "wb") as f:
        f.write(body + struct.pack("<I", zlib.crc32(body)))


def learning_rate(a, step):
    warmup = a.steps // 10 if a.warmup < 0 else a.warmup
    if step < warmup:
        return a.lr * (step + 1) / warmup
    p = (step - warmup) / max(a.steps - warmup, 1)
    return a.lr * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * min(p, 1.0))))


def make_optimizer(model, L):
    tensors = model.by_name(L)
    decay = [t for n in TENSORS if n in DECAY for t in tensors[n]]
    rest = [t for n in TENSORS if n not in DECAY for t in tensors[n]]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                              {"params": rest, "weight_decay": 0.0}],
                             lr=1.0, betas=(0.9, 0.95), eps=1e-8)


def train_step(net, model, opt, a, text, train_end, step, rank, local, T):
    """One of train_gpt's optimizer steps on this rank's `local` sequences
    of each of a.accum micro-batches: the gradients summed over them
    (synchronised on the last only), their mean clipped to global norm 1,
    at the schedule's learning rate (a.lr, a.steps, a.warmup).  Returns
    the rank's loss, the mean over the micro-batches."""
    opt.zero_grad(set_to_none=False)
    loss = 0.0
    for micro in range(a.accum):
        xs, ys = zip(*(train_sequence(text, train_end, a.seed, step, micro,
                                      rank * local + i, T)
                       for i in range(local)))
        x = torch.from_numpy(np.stack(xs))
        y = torch.from_numpy(np.stack(ys))
        last = micro == a.accum - 1
        sync = net.no_sync() if not last and net is not model \
            else contextlib.nullcontext()
        with sync:
            micro_loss = net(x, y)
            micro_loss.backward()
        loss += micro_loss.detach().double() / a.accum
    # train_gpt: norm = |sum of grads| / accum, scale = min(1, 1/norm) / accum
    norm = torch.sqrt(sum((p.grad.double() ** 2).sum()
                          for p in model.parameters())) / a.accum
    scale = (1 / norm if norm > 1 else 1.0) / a.accum
    if scale != 1:
        for p in model.parameters():
            p.grad.mul_(float(scale))
    for g in opt.param_groups:
        g["lr"] = learning_rate(a, step)
    opt.step()
    return loss


def replica(a, weights):
    """This process's model from train_gpt's `weights` (on a.threads
    torch threads), its AdamW, and the text: (model, opt, text,
    train_end)."""
    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    cfg = (256, a.context, a.width, a.heads, a.layers)
    model = GPT(*cfg)
    load_weights(model, weights, cfg)
    text, train_end = load_text(a.data)
    return model, make_optimizer(model, a.layers), text, train_end


def train(rank, world, a, weights, out):
    if world > 1:
        dist.init_process_group("gloo", init_method="file://" + a.rendezvous,
                                rank=rank, world_size=world)
    model, opt, text, train_end = replica(a, weights)
    net = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    local = a.batch // world
    losses = []
    for step in range(a.steps):
        loss = train_step(net, model, opt, a, text, train_end, step, rank,
                          local, a.context)
        mean = loss.clone()
        if world > 1:
            dist.all_reduce(mean)
            mean /= world
        losses.append(float(mean))
    if rank == 0:
        np.save(out, np.array(losses))
    if world > 1:
        dist.destroy_process_group()


def run_c(a, tmp, extra):
    job = os.path.join(tmp, "job.ini")
    with open(job, "w") as f:
        f.write("[runtime]\nplugin_path = %s\n[hook]\nname = allreduce\n"
                "[accumulate]\nsteps = %d\n"
                % (os.path.abspath(a.plugin_path), a.accum))
    cmd = ["mpiexec", "-n", str(a.world), a.trainer, "--config", job,
           "--steps", str(a.steps), "--seed", str(a.seed), "--batch",
           str(a.batch), "--layers", str(a.layers), "--width", str(a.width),
           "--heads", str(a.heads), "--context", str(a.context), "--lr",
           str(a.lr), "--data", a.data, "--sample", "0"] + extra
    if a.warmup >= 0:
        cmd += ["--warmup", str(a.warmup)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trainer", default="examples/train_gpt/train_gpt")
    p.add_argument("--plugin-path", default="plugins/.libs")
    p.add_argument("--data", default="/usr/share/games/fortunes")
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--context", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=-1)
    p.add_argument("--rtol", type=float, default=1e-6)
    p.add_argument("--accum", type=int, default=1,
                   help="micro-batches an optimizer step on both sides")
    p.add_argument("--large-weights", type=float, default=0.0,
                   metavar="X", help="start both from N(0, X) weights")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--time", action="store_true",
                   help="time a step of each instead (1 rank)")
    a = p.parse_args()
    if a.time and os.environ.get("OPENBLAS_NUM_THREADS") != str(a.threads):
        # OpenBLAS (the BLAS under torch here, as under train_gpt) takes
        # its thread count from the environment when torch loads it, and
        # torch.set_num_threads does not change it: start again with it set.
        os.environ["OPENBLAS_NUM_THREADS"] = str(a.threads)
        os.execv(sys.executable, [sys.executable] + sys.argv)
    with tempfile.TemporaryDirectory() as tmp:
        if a.time:
            return time_both(a, tmp)
        a.rendezvous = os.path.join(tmp, "rendezvous")
        ckpt = os.path.join(tmp, "init")
        csv_path = os.path.join(tmp, "losses.csv")
        every = ["--csv", csv_path, "--eval-every", "1", "--eval-batches",
                 str(a.world)]
        if a.large_weights > 0:
            # A checkpoint of train_gpt's (its hook state from one step of
            # a throw-away run), its weights replaced; both sides start
            # from step 0 of it.
            run_c(a, tmp, ["--stop-at", "1", "--save", ckpt,
                           "--eval-batches", str(a.world)])
            write_large_weights(a, ckpt + ".model")
            with open(csv_path, "w") as f:  # --resume appends rows only
                f.write("step,seconds,train_loss,val_loss,bytes_sent,lr\n")
            run_c(a, tmp, ["--resume", ckpt] + every)
        else:
            run_c(a, tmp, ["--save-init", ckpt] + every)
        with open(csv_path) as f:
            c_losses = [float(r["train_loss"]) for r in csv.DictReader(f)]
        out = os.path.join(tmp, "torch.npy")
        if a.world == 1:
            train(0, 1, a, ckpt + ".model", out)
        else:
            mp.spawn(train, args=(a.world, a, ckpt + ".model", out),
                     nprocs=a.world)
        t_losses = np.load(out)
    worst = 0.0
    print("step  train_gpt (C)  PyTorch %s  rel. diff" % torch.__version__)
    for i, (c, t) in enumerate(zip(c_losses, t_losses)):
        rel = abs(c - t) / abs(t)
        worst = max(worst, rel)
        print("%4d  %.7f      %.7f      %.2e" % (i + 1, c, t, rel))
    ok = len(c_losses) == a.steps and worst <= a.rtol
    how = ("" if a.accum == 1 else ", %d micro-batches a step" % a.accum) + \
        ("" if a.large_weights <= 0
         else ", from N(0, %g) weights" % a.large_weights)
    print("%s: %d ranks, %d steps%s, largest relative difference %.2e "
          "(rtol %g)" % ("agree" if ok else "DIFFER", a.world, a.steps, how,
                         worst, a.rtol))
    return 0 if ok else 1


def time_both(a, tmp):
    """ms per optimizer step on 1 rank, the same model, batch and number
    of BLAS threads on both sides, over the steps after the first
    `warm` (start-up, first touches of memory and one-time BLAS set-up
    left out).  The C trainer's clock is its --csv `seconds` (validation
    on one sequence, every `warm` steps, is the only other work in it)."""
    if a.steps < 2:
        sys.exit("reference.py: --time needs --steps 2 or more")
    a.world = 1
    warm = max(1, min(10, a.steps // 3))
    csv_path = os.path.join(tmp, "time.csv")
    run_c(a, tmp, ["--eval-every", str(warm), "--eval-batches", "1",
                   "--csv", csv_path])
    with open(csv_path) as f:
        secs = {int(r["step"]): float(r["seconds"]) for r in csv.DictReader(f)}
    c_ms = (secs[a.steps] - secs[warm]) * 1000 / (a.steps - warm)
    ckpt = os.path.join(tmp, "init")
    run_c(a, tmp, ["--save-init", ckpt, "--steps", "1"])
    model, opt, text, train_end = replica(a, ckpt + ".model")
    for step in range(a.steps):
        if step == warm:
            t0 = time.perf_counter()
        train_step(model, model, opt, a, text, train_end, step, 0, a.batch,
                   a.context)
    t_ms = (time.perf_counter() - t0) * 1000 / (a.steps - warm)
    print("ms/step (1 rank, %d BLAS thread%s, steps %d-%d): train_gpt %.1f, "
          "PyTorch %s %.1f" % (a.threads, "" if a.threads == 1 else "s",
                               warm + 1, a.steps, c_ms, torch.__version__,
                               t_ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
