#!/usr/bin/python3
"""ddp_errors.py: ddphook.torch's failures, one per run, on the ranks
mpiexec starts.  Every rank must raise (or, for a peer's failure, see its
backward pass fail) with a message naming the cause, and return; the
caller (tests/pytorch.sh) checks each rank's output and that the run ends
well before timeout_s.

    mpiexec -n W /usr/bin/python3 ddp_errors.py --job JOB --case CASE [--swallow]

CASE: open (the job file itself is bad: ddphook.torch.comm_hook raises),
hook (the hook fails on every rank at the first backward pass), peer (the
last rank's hook fails, the others hear it), ranks (started without
mpiexec, as torchrun would, with RANK, WORLD_SIZE and a file rendezvous
RENDEZVOUS: each process is an MPI job of its own, and comm_hook must
refuse rather than reduce each rank alone), two-models (one comm_hook
pair registered on two DDP models: a clear ddphook.Error), sigint (the
last rank gets SIGINT between steps, as from a terminal's Ctrl-C, and
dies of its KeyboardInterrupt: it must say it was interrupted and the
others must name it), save-insecure (state.save() into the world-writable
folder --dir: refused by save() itself, before any step), stale-save
(a save is written, a second is asked for, and the processes end with
os._exit before the next step, as a preempted job: the second was never
written), stale-load (the next run loads that path: rank 0 first removes
its own marker, so that rank 1 alone knows, and both must fail naming
the save that was never written), broadcast-size (after a step the
last rank broadcasts 16 bytes where the others broadcast 8: every rank
must raise naming it).  --swallow: the script catches the exception and
returns 0, as a careless one would; the process must still exit non-zero
when ddphook declared the job failed."""
import argparse
import os
import signal
import sys
import time

import torch

import ddphook
import ddphook.torch


def say(line):
    """One write with its newline: the ranks share mpiexec's output, and
    print() may write the text and the newline apart (an unbuffered
    stdout), letting another rank's line in between."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--job", required=True)
    ap.add_argument("--case", required=True,
                    choices=["open", "hook", "peer", "ranks", "two-models",
                             "sigint", "save-insecure", "stale-save",
                             "stale-load", "killed", "early-close", "exit0",
                             "broadcast-size"])
    ap.add_argument("--swallow", action="store_true")
    ap.add_argument("--barrier-first", action="store_true",
                    help="every rank calls ddph_barrier after its first "
                    "step: a departure notice before the close's")
    ap.add_argument("--dir", help="the folder of the save cases")
    a = ap.parse_args()
    rank = int(os.environ.get("PMI_RANK", os.environ.get("RANK", "0")))
    try:
        if a.case == "ranks":
            torch.distributed.init_process_group(
                "gloo", init_method="file://" + os.environ["RENDEZVOUS"],
                rank=rank, world_size=int(os.environ["WORLD_SIZE"]))
        else:
            ddphook.torch.init_process_group(a.job)
        net = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 4))
        # Buckets of about 200 bytes (one per parameter), so that the
        # failing hooks meet a bucket 1: the bridge gives the runtime
        # DDP's caps.
        torch.distributed._DEFAULT_FIRST_BUCKET_BYTES = 200
        model = torch.nn.parallel.DistributedDataParallel(
            net, bucket_cap_mb=200 / 2**20)
        pair = ddphook.torch.comm_hook(a.job, model=model)
        model.register_comm_hook(*pair)
        models = [model]
        state = pair[0]
        ck = os.path.join(a.dir or ".", "ck")
        if a.case == "save-insecure":
            state.save(ck)
        if a.case == "stale-load":
            if rank == 0:
                os.unlink("%s.rank0.pending" % ck)
            state.load(ck)
        if a.case == "two-models":
            models.append(torch.nn.parallel.DistributedDataParallel(
                torch.nn.Linear(16, 4)))
            models[1].register_comm_hook(*pair)
        last = rank == torch.distributed.get_world_size() - 1
        for step in range(3 if a.case != "killed" else 10):
            # early-close: the last rank closes the job after 2 steps,
            # while the others go on to a third.
            if a.barrier_first and step == 1:
                ddphook.current_job().barrier()
            if a.case == "early-close" and step == 2 and last:
                state.step_end()
                ddphook.current_job().close()
                break
            # killed: the last rank dies (SIGKILL) before its step 5, while
            # the others wait for it in theirs.
            if a.case == "killed" and step == 5 and last:
                os.kill(os.getpid(), signal.SIGKILL)
            # exit0: the last rank's script ends with status 0 before its
            # third step's backward pass (sys.exit; the bridge closes the
            # job at exit), while the others go on.
            if a.case == "exit0" and step == 2 and last:
                sys.exit(0)
            for m in models:
                m(torch.randn(4, 16)).sum().backward()
            if a.case == "broadcast-size" and step == 1:
                ddphook.current_job().broadcast_bytes(b"x", 16 if last else 8)
            if a.case == "stale-save" and step == 0:
                state.save(ck)
                state.flush()
            if a.case == "stale-save" and step == 1:
                state.save(ck)
                sys.stdout.flush()
                os._exit(0)  # preempted before the next step
            if a.case == "sigint" and step == 1:
                if rank == int(os.environ.get("PMI_SIZE", "1")) - 1:
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(60)  # where the KeyboardInterrupt comes
    except Exception as e:  # the point: which exception, what message
        say("rank %d raised %s: %s" % (rank, type(e).__name__, e))
        return 0 if a.swallow else 3
    say("rank %d: no exception" % rank)
    return 0


if __name__ == "__main__":
    sys.exit(main())
