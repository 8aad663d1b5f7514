#!/usr/bin/python3
"""step_time.py: the time of a DDP step through a ddphook hook, on the
ranks an env:// launcher starts (tests/python/env_launch.py: the torch
backend), for docs/performance.md's figures.

    env_launch.py -n 2 step_time.py --job JOB [--width 64] [--layers 5]
        [--bucket-kb 8] [--steps 200]

The model: `layers` Linear(width, width); DDP's buckets are capped at
`bucket-kb` KiB.  After 20 warm-up steps, rank 0 prints the median and
the mean of `steps` steps (forward, backward, the hook), in ms."""
import argparse
import statistics
import time

import torch

import ddphook.torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--job", required=True)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--layers", type=int, default=5)
    ap.add_argument("--bucket-kb", type=float, default=8)
    ap.add_argument("--steps", type=int, default=200)
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    ddphook.torch.init_process_group(a.job)
    net = torch.nn.Sequential(*[torch.nn.Linear(a.width, a.width)
                                for _ in range(a.layers)])
    torch.distributed._DEFAULT_FIRST_BUCKET_BYTES = int(a.bucket_kb * 1024)
    model = torch.nn.parallel.DistributedDataParallel(
        net, bucket_cap_mb=a.bucket_kb / 1024)
    model.register_comm_hook(*ddphook.torch.comm_hook(a.job, model=model))
    x = torch.randn(8, a.width)
    times = []
    for step in range(20 + a.steps):
        t0 = time.perf_counter()
        model(x).sum().backward()
        if step >= 20:
            times.append((time.perf_counter() - t0) * 1e3)
    if torch.distributed.get_rank() == 0:
        print("step_time: median %.3f ms, mean %.3f ms over %d steps"
              % (statistics.median(times), statistics.mean(times), len(times)))
    ddphook.current_job().close()


if __name__ == "__main__":
    main()
