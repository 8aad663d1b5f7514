#!/usr/bin/python3
"""pg_wait.py: a wait of the torch backend ends when gloo completes the
collective, not at the waiting thread's next look at it.  Run by
tests/torchrun.sh under tests/python/env_launch.py (2 ranks):

    env_launch.py -n 2 pg_wait.py [--calls 300] [--limit-ms 4]

Times --calls broadcasts of 8 bytes (ddph_broadcast: one gloo broadcast
and one wait each) after 20 untimed ones, and fails when their median
exceeds --limit-ms.  Each takes a fraction of a millisecond over loopback;
a wait that sleeps until its next look at the peers' notices (every 20
ms) takes 20.  Prints "PASS: ..." or "FAIL: ..." on rank 0."""
import argparse
import os
import statistics
import sys
import tempfile
import time

import ddphook
import ddphook.torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--limit-ms", type=float, default=4.0)
    a = ap.parse_args()
    if not ddphook.torch._torch_launched():
        sys.exit("pg_wait.py: run it under an env:// launcher "
                 "(tests/python/env_launch.py)")
    with tempfile.NamedTemporaryFile("w", suffix=".ini", delete=False) as f:
        f.write("[runtime]\ntimeout_s = 60\n[hook]\nname = allreduce\n")
    try:
        job = ddphook.torch.init_process_group(f.name)
    finally:
        os.remove(f.name)
    times = []
    for i in range(20 + a.calls):
        t0 = time.perf_counter()
        got = job.broadcast_bytes(b"call%04d" % i, 8)
        if i >= 20:
            times.append(time.perf_counter() - t0)
        if got != b"call%04d" % i:
            print("FAIL: rank %d got %r from broadcast %d" % (job.rank, got, i))
            return 1
    median_ms = 1e3 * statistics.median(times)
    if job.rank == 0:
        if median_ms <= a.limit_ms:
            print("PASS: %d broadcasts of 8 bytes over the torch backend, "
                  "median %.3f ms each (at most %g)" % (
                      a.calls, median_ms, a.limit_ms), flush=True)
        else:
            print("FAIL: %d broadcasts of 8 bytes over the torch backend, "
                  "median %.3f ms each, above %g ms: the wait sleeps past "
                  "the collective's end" % (a.calls, median_ms, a.limit_ms),
                  flush=True)
            return 1
    job.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
