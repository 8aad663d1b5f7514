#!/usr/bin/python3
"""ddp_halfsum.py: the f16 and bf16 sums of the fp16 and bf16 hooks, bucket
by bucket, against the order both backends' rings add in.

    mpiexec -n W /usr/bin/python3 ddp_halfsum.py --plugin-dir DIR --out DIR
    env_launch.py -n W ddp_halfsum.py ... --all     (the torch backend)

One parameter a bucket, of LENGTHS elements (1, fewer than the ranks, odd,
and one past 32 KiB of halves, where the MPI backend's sum goes round its
ring too).  Rank r's gradient is W * h_r with h_r of a few significant
bits, so that the hook's cast and division by W give h_r exactly on every
rank and the only rounding left is the sum's.  The exponents spread over
13 binades, so the sum's bits depend on the order of the additions; the
reference adds chunk c (ddph__chunk's split of the bucket W ways) in the
ring's order, x_c + x_(c+1) + ... + x_(c-1), rounding to the half type
after each addition.  Checked: every bucket with --all (the torch
backend's ring takes every size), else the ones of RING_ELEMS or more
(below, the MPI backend leaves the sum to MPICH's own order).  Writes
DIR/HOOK.big.rankR.f32 (the large bucket's gradient) for comparison
between backends; prints PASS/FAIL per hook and exits non-zero on a
failure."""
import argparse
import os
import sys

import torch
import torch.distributed as dist

import ddphook.torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_hooks import job_head  # noqa: E402

LENGTHS = (1, 2, 3, 5, 17, 1001, 20011)
RING_ELEMS = 16384  # 32 KiB of halves: the MPI backend's ring from there
CAP = 4  # bytes: every parameter its own bucket
HOOKS = {"fp16": (torch.float16, 8), "bf16": (torch.bfloat16, 6)}


class Halves(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.p = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.zeros(n)) for n in LENGTHS])

    def forward(self, xs):
        return sum((p * x).sum() for p, x in zip(self.p, xs))


def few_bits(n, bits, dtype, gen):
    """n values of `bits` significant bits, exponents -8..4, either sign:
    exact in dtype, and so are 2, 3 and 4 times them."""
    m = torch.randint(2 ** (bits - 1), 2 ** bits, (n,), generator=gen)
    e = torch.randint(-8, 5, (n,), generator=gen)
    s = torch.randint(0, 2, (n,), generator=gen) * 2 - 1
    v = (s * m).double() * torch.pow(2.0, (e - bits + 1).double())
    assert torch.equal(v.to(dtype).double(), v)
    return v


def ring_sum(terms, dtype):
    """The ring's sum of the ranks' terms (each already in dtype)."""
    w, n = len(terms), terms[0].numel()
    out = torch.empty(n, dtype=dtype)
    for c in range(w):
        at, end = n * c // w, n * (c + 1) // w
        acc = terms[c][at:end].clone()
        for k in range(1, w):
            acc = (acc.float() + terms[(c + k) % w][at:end].float()).to(dtype)
        out[at:end] = acc
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plugin-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--all", action="store_true",
                    help="check every bucket (the torch backend)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    rank = int(os.environ.get("PMI_RANK", os.environ.get("RANK", "0")))
    os.makedirs(a.out, exist_ok=True)
    job = os.path.join(a.out, "job.r%d.ini" % rank)
    with open(job, "w") as f:
        f.write(job_head(a.plugin_dir, CAP))
        for h in HOOKS:
            f.write("[model.%s]\nhook = %s\n" % (h, h))
    ddphook.torch.init_process_group(job)
    dist._DEFAULT_FIRST_BUCKET_BYTES = CAP
    world = dist.get_world_size()
    runs = []
    for h in HOOKS:
        model = torch.nn.parallel.DistributedDataParallel(
            Halves(), bucket_cap_mb=CAP / 2**20)
        state, hook = ddphook.torch.comm_hook(job, model=model, name=h)
        model.register_comm_hook(state, hook)
        runs.append((h, model, state))
    bad = 0
    for h, model, state in runs:
        dtype, bits = HOOKS[h]
        terms = []  # [length][rank]: every rank's h_r, drawn alike everywhere
        for n in LENGTHS:
            terms.append([few_bits(n, bits, dtype,
                                   torch.Generator().manual_seed(
                                       7919 * n + 31 * r + len(h)))
                          for r in range(world)])
        xs = [(world * t[rank]).float() for t in terms]
        model.zero_grad()
        model(xs).backward()
        state.step_end()
        checked = wrong = 0
        for n, t, p in zip(LENGTHS, terms, model.module.p):
            if n < RING_ELEMS and not a.all:
                continue
            want = ring_sum([v.to(dtype) for v in t], dtype).float()
            got = p.grad.detach()
            checked += 1
            if not torch.equal(got.view(torch.int32), want.view(torch.int32)):
                wrong += 1
                i = int((got.view(torch.int32) != want.view(torch.int32))
                        .nonzero()[0])
                print("%s: %d elements: element %d is %r, the ring's order "
                      "gives %r" % (h, n, i, float(got[i]), float(want[i])))
            if n >= RING_ELEMS:
                with open(os.path.join(a.out, "%s.big.rank%d.f32" %
                                       (h, rank)), "wb") as f:
                    f.write(got.contiguous().numpy().tobytes())
        if wrong:
            bad += 1
            print("FAIL: %s on %d ranks: %d of %d buckets differ from the "
                  "ring's order" % (h, world, wrong, checked))
        else:
            print("PASS: %s on %d ranks: %d buckets (%s elements) equal the "
                  "ring's order bit for bit" % (
                      h, world, checked,
                      ", ".join(str(n) for n in LENGTHS
                                if a.all or n >= RING_ELEMS)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
