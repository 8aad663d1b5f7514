#!/usr/bin/python3
"""env_launch.py: starts N ranks of a Python program the way torchrun's
workers are started, with only the env:// variables (RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and no MPI
launcher's, so that ddphook runs the job over the torch backend.

    env_launch.py -n 2 [--timeout 300] PROGRAM ARGS...

Each rank's output goes to stdout, its lines prefixed "[rank R] ".  Exits
with the first non-zero exit status of a rank (124 when one outlived
--timeout and was killed), else 0."""
import argparse
import os
import socket
import subprocess
import sys
import threading
import time

MPI_VARIABLES = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE",
                 "PMI_FD", "PMI_PORT", "HYDRA_CONTROL_FD")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def relay(rank, stream):
    for line in iter(stream.readline, b""):
        sys.stdout.write("[rank %d] %s" % (rank, line.decode(errors="replace")))
        sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("program", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in MPI_VARIABLES}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(a.n), LOCAL_WORLD_SIZE=str(a.n))
    procs, relays = [], []
    for r in range(a.n):
        e = dict(env, RANK=str(r), LOCAL_RANK=str(r))
        p = subprocess.Popen([sys.executable] + a.program, env=e,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
        procs.append(p)
        t = threading.Thread(target=relay, args=(r, p.stdout), daemon=True)
        t.start()
        relays.append(t)
    deadline = time.monotonic() + a.timeout
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            codes.append(124)
    for t in relays:
        t.join(5)
    for r, c in enumerate(codes):
        print("env_launch.py: rank %d exited %d" % (r, c), flush=True)
    return next((c for c in codes if c != 0), 0)


if __name__ == "__main__":
    sys.exit(main())
