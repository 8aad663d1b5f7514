#!/usr/bin/python3
"""gpt_ddp.py: the GPT of examples/train_gpt trained by PyTorch DDP (gloo).

The peer that tests/cluster/gpt_loss_time.sh runs on the simulated hosts
beside the C trainer: the same model (examples/train_gpt/reference.py's
twin), from the C trainer's initial weights (--init, written by train_gpt
--save-init), on the same batches and validation sequences, with the same
AdamW, clipping and learning-rate schedule, under DistributedDataParallel
with one of PyTorch's communication hooks: allreduce (DDP's default),
fp16 (fp16_compress_hook) or powersgd (PowerSGD, rank 4 from step 10, as
examples/configs/gpt_powersgd.ini).  Rank and world come from hydra's
PMI_RANK and PMI_SIZE (mpiexec starts it); gloo talks over eth0, the
simulated link.  Rank 0 writes train_gpt's CSV columns (bytes_sent left
empty: DDP does not count them).

    mpiexec -n 2 /usr/bin/python3 tests/cluster/peers/gpt_ddp.py \\
        --init INIT.model --hook powersgd --steps 600 --csv out.csv \\
        --rendezvous /tmp/shared-file

Needs Debian's python3-torch (1.13).  Threads: --threads (default 1, as
the C trainer's OpenBLAS on a host with one rank per core).
"""
import argparse
import csv
import importlib.util
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook


def load_reference(path):
    spec = importlib.util.spec_from_file_location("reference", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def val_sequence(text, train_end, i, n, T):
    """text.c's text_val_sequence: sequence i of n, evenly spaced."""
    span = len(text) - train_end - T - 1
    at = train_end + span // n * i
    seq = text[at:at + T + 1].astype(np.int64)
    return seq[:T], seq[1:]


def validate(model, text, train_end, nseq, T, local, rank, world):
    """train_gpt's validate(): sequence i on rank i % W, in batches of at
    most `local`, the mean over all sequences."""
    total = torch.zeros(2, dtype=torch.float64)
    mine = []
    with torch.no_grad():
        for i in range(rank, nseq, world):
            mine.append(val_sequence(text, train_end, i, nseq, T))
            if len(mine) == local or i + world >= nseq:
                x = torch.from_numpy(np.stack([m[0] for m in mine]))
                y = torch.from_numpy(np.stack([m[1] for m in mine]))
                total[0] += float(model(x, y)) * len(mine)
                total[1] += len(mine)
                mine = []
    dist.all_reduce(total)
    return float(total[0] / total[1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    p.add_argument("--reference", default=os.path.join(
        here, "..", "..", "..", "examples", "train_gpt", "reference.py"))
    p.add_argument("--init", required=True)
    p.add_argument("--hook", choices=["allreduce", "fp16", "powersgd"],
                   default="allreduce")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--batch", type=int, default=24)
    p.add_argument("--accum", type=int, default=1,
                   help="micro-batches per optimizer step (train_gpt's "
                        "[accumulate] steps)")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=-1)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--eval-batches", type=int, default=64)
    p.add_argument("--data", default="/usr/share/games/fortunes")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rendezvous", required=True)
    p.add_argument("--csv")
    a = p.parse_args()
    ref = load_reference(a.reference)
    rank = int(os.environ.get("PMI_RANK", "0"))
    world = int(os.environ.get("PMI_SIZE", "1"))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0")
    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method="file://" + a.rendezvous,
                            rank=rank, world_size=world)
    with open(a.init, "rb") as f:
        magic, V, T, C, H, L = struct.unpack("<8s5i", f.read(28))
    cfg = (V, T, C, H, L)
    model = ref.GPT(*cfg)
    ref.load_weights(model, a.init, cfg)
    if a.hook == "powersgd":
        # PowerSGD's hook starts the P allreduce of one bucket from a
        # callback of the previous allreduce, so with two buckets the ranks
        # can enqueue them on gloo in different orders (gloo then aborts:
        # "op.preamble.length <= op.nbytes"): one bucket, first one too.
        dist._DEFAULT_FIRST_BUCKET_BYTES = 1 << 30
    net = nn.parallel.DistributedDataParallel(model)
    if a.hook == "fp16":
        net.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif a.hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None,
                                            matrix_approximation_rank=4,
                                            start_powerSGD_iter=10)
        net.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    opt = ref.make_optimizer(model, L)
    text, train_end = ref.load_text(a.data)
    local = a.batch // world
    out = None
    if rank == 0 and a.csv:
        out = open(a.csv, "w", newline="")
        out.write("step,seconds,train_loss,val_loss,bytes_sent,lr\n")
    t0 = time.perf_counter()
    for step in range(a.steps):
        loss = ref.train_step(net, model, opt, a, text, train_end, step, rank,
                              local, T)
        lr = ref.learning_rate(a, step)
        last = step == a.steps - 1
        if (step + 1) % a.eval_every == 0 or last:
            mean = loss.detach().double()
            dist.all_reduce(mean)
            val = validate(model, text, train_end, a.eval_batches, T, local,
                           rank, world)
            secs = time.perf_counter() - t0
            if rank == 0:
                print("step %5d  %7.1f s  train %.4f  val %.4f  lr %.2e"
                      % (step + 1, secs, float(mean) / world, val, lr),
                      flush=True)
            if out:
                out.write("%d,%.3f,%.7f,%.7f,,%.3e\n"
                          % (step + 1, secs, float(mean) / world, val, lr))
                out.flush()
    if out:
        out.close()
    # Every rank is done with its collectives; then out without PyTorch's
    # teardown, which left one rank of four waiting for ever at exit now
    # and then (gloo's threads, 2 hosts x 2 ranks).
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
