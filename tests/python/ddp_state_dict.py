#!/usr/bin/python3
"""ddp_state_dict.py: the hook's state in a rank-0 torch.save checkpoint
(HookState.state_dict/load_state_dict) under DDP, PowerSGD with error
feedback and warm start compressing from step 2.

    mpiexec -n W python3 ddp_state_dict.py --plugin-dir DIR --out DIR --phase P

--phase full: 6 steps of SGD; after step 3, as nanoGPT's train.py does,
rank 0 alone evaluates through the DDP model (whose forward broadcasts
the module's buffer over gloo: rank 1 joins that broadcast in its next
forward), then every rank asks for state.state_dict() and rank 0 alone
saves it with the model and the optimizer in OUT/ckpt.pt (a state_dict
that waited for a collective of every rank would hang here); writes the
parameters after step 6.
--phase resume: every rank loads OUT/ckpt.pt (the hook's state before the
first step) and at once takes state_dict() again, which rank 0 saves in
OUT/ckpt-again.pt; runs steps 4 to 6, writes the parameters.
--phase resume-resaved: as resume, from OUT/ckpt-again.pt.
--phase resume-without-state: as resume without the hook's state.
tests/pytorch.sh compares the parameters byte for byte.
Refusals (each rank prints "rank R raised ERROR: MESSAGE" and returns 3):
--phase wrong-world: OUT/ckpt.pt on another world size (refused at once,
the job goes on: returns 0 after the message); --phase other-hook: the
same model with the fp16 hook loads it after a step; --phase damaged:
rank 1's part has one byte changed.
--phase rank0-alone: after a step, rank 0 alone calls state_dict (a
timeout of 2 s) while rank 1 waits 4 s: it must raise at its timeout,
naming rank 1 (returns 0 then); --phase rank1-closed: after a step and a
barrier (a trainer call) rank 1 closes its job instead: rank 0's
state_dict (a timeout of 2 minutes) must raise within 10 s, naming rank 1
and its close; --phase rank1-done-closed (3 ranks or more): rank 1
gives its part and closes its job, the last rank gives its part 2 s
later: rank 0's state_dict must return every part; --phase
rank1-done-last-closed: the same, but the last rank closes its job 2 s
later without giving its part: rank 0's state_dict (a timeout of 2
minutes) must raise within 10 s, naming the last rank and its close;
--phase rank1-forged: rank 1 puts its own part with one byte changed
where rank 0's gather reads it (as any process that reaches the store
could): rank 0 must refuse it, naming rank 1's part as not an intact
hook state; --phase retry-after-timeout: rank 0's gather times out
(1 s) while rank 1 calls 3 s late, and rank 1's part lands while rank 0
does nothing; then both call state_dict() again: rank 0 must gather both
parts of that call (the late part left nothing behind that breaks the
store's next calls); run twice in one process (ddp_suite.py), the second
job's gather must not take the first job's late part."""
import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import ddphook
import ddphook.torch
from ddp_resume import start, train_step


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--plugin-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--other", help="mixed: the folder of another job's "
                    "full phase, whose rank 1 part is taken")
    ap.add_argument("--phase", required=True,
                    choices=["full", "resume", "resume-resaved",
                             "resume-without-state", "wrong-world",
                             "other-hook", "damaged", "mixed", "skewed",
                             "rank0-alone", "rank1-closed",
                             "rank1-done-closed", "rank1-done-last-closed",
                             "rank1-forged", "retry-after-timeout"])
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    rank = int(os.environ.get("PMI_RANK", os.environ.get("RANK", "0")))
    os.makedirs(a.out, exist_ok=True)
    job, net = start(a.plugin_dir,
                     os.path.join(a.out, "sd.%s.r%d.ini" % (a.phase, rank)),
                     "fp16" if a.phase == "other-hook" else "powersgd")
    # Set here, the same in every phase (ddp_suite.py runs other programs
    # in this process first): DDP's first bucket of 8 KiB and 10 KB
    # buckets after it, ddphook's the same (comm_hook's model=), so that
    # PowerSGD's state has several buckets.
    torch.distributed._DEFAULT_FIRST_BUCKET_BYTES = 8192
    model = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=0.01)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state, hook_fn = ddphook.torch.comm_hook(job, model=model)
    model.register_comm_hook(state, hook_fn)
    saved = os.path.join(a.out, "ckpt.pt")
    resaved = os.path.join(a.out, "ckpt-again.pt")

    def step(i):
        train_step(model, opt, i, rank)

    if a.phase in ("rank0-alone", "rank1-closed"):
        step(0)
        if a.phase == "rank1-closed":
            # A trainer call on every rank first: its notice comes before
            # rank 1's closing one, which must still be heard.
            ddphook.current_job().barrier()
        if rank != 0:
            if a.phase == "rank0-alone":
                time.sleep(4)  # alive, in the job, past rank 0's timeout
            else:
                ddphook.current_job().close()
            return 0
        alone = a.phase == "rank0-alone"
        start_s = time.monotonic()
        try:
            state.state_dict(timeout=datetime.timedelta(
                seconds=2 if alone else 120))
        except ddphook.Error as e:
            took = time.monotonic() - start_s
            print("rank 0 raised %s after %.1f s: %s" % (
                type(e).__name__, took, e), flush=True)
            if alone:
                return 0 if "waited 0:00:02 for rank 1 to call" in str(e) \
                    else 1
            return 0 if took < 10 and "stopped waiting for rank 1 to call " \
                "state.state_dict(): rank 1 closed the job" in str(e) else 1
        print("rank 0: no exception", flush=True)
        return 1
    if a.phase in ("rank1-done-closed", "rank1-done-last-closed"):
        # 3 ranks or more: rank 1 gives its part and closes its job at
        # once, the last rank gives its part 2 s later; rank 0's gather
        # must wait for it (rank 1's close is no reason to stop).
        step(0)
        last = int(os.environ.get("PMI_SIZE", os.environ.get("WORLD_SIZE")))
        if rank == last - 1:
            time.sleep(2)
            if a.phase == "rank1-done-last-closed":
                ddphook.current_job().close()
                return 0
        start_s = time.monotonic()
        try:
            sd = state.state_dict(timeout=datetime.timedelta(seconds=120))
        except ddphook.Error as e:
            took = time.monotonic() - start_s
            print("rank %d raised %s after %.1f s: %s" % (
                rank, type(e).__name__, took, e), flush=True)
            return 0 if rank == 0 and a.phase == "rank1-done-last-closed" \
                and took < 10 and ("stopped waiting for rank %d to call "
                                   "state.state_dict(): rank %d closed the "
                                   "job" % (last - 1, last - 1)) in str(e) \
                else 1
        if rank == 1:
            ddphook.current_job().close()
            return 0
        if rank == 0:
            if a.phase == "rank1-done-last-closed":
                print("rank 0: no exception", flush=True)
                return 1
            print("rank 0 gathered %d parts after %.1f s" % (
                len(sd["ranks"]), time.monotonic() - start_s), flush=True)
            return 0 if len(sd["ranks"]) == last else 1
        return 0
    if a.phase == "retry-after-timeout":
        step(0)
        if rank == 1:
            time.sleep(3)
            state.state_dict()
        else:
            try:
                state.state_dict(timeout=datetime.timedelta(seconds=1))
                print("rank 0: no exception at the timeout", flush=True)
                return 1
            except ddphook.Error as e:
                print("rank 0 raised %s: %s" % (type(e).__name__, e),
                      flush=True)
                # Run twice in one process: the first run's late part of
                # rank 1 must not be taken by the second's gather.
                if "waited 0:00:01 for rank 1 to call" not in str(e):
                    return 1
            time.sleep(4)  # rank 1's late part comes meanwhile
        start_s = time.monotonic()
        sd = state.state_dict(timeout=datetime.timedelta(seconds=30))
        if rank == 0:
            print("rank 0 gathered %d parts after %.1f s" % (
                len(sd["ranks"]), time.monotonic() - start_s), flush=True)
            return 0 if len(sd["ranks"]) == 2 else 1
        return 0
    if a.phase == "rank1-forged":
        step(0)
        if rank == 1:
            part = bytearray(state.state_dict(gather=False)["ranks"][1])
            part[len(part) // 2] ^= 0x10
            # Where rank 0's gather of the same call reads rank 1's part.
            seq = state._state_dicts - 1
            ddphook.torch._put_part(dist.PrefixStore(
                "ddphook/state_dict/%d/%s/%d/" % (state.job.number,
                                                  state.name, seq),
                dist.distributed_c10d._get_default_store()), 1,
                b"S" + bytes(part))
            return 0
        try:
            state.state_dict(timeout=datetime.timedelta(seconds=60))
        except ddphook.Error as e:
            print("rank 0 raised %s: %s" % (type(e).__name__, e), flush=True)
            return 0 if "rank 1's part (" in str(e) and "bytes) is not an " \
                "intact ddphook hook state" in str(e) else 1
        print("rank 0: no exception", flush=True)
        return 1
    if a.phase == "skewed":
        # Rank 1 calls state_dict() once more than rank 0, a step early:
        # rank 0 pairs its call with that one and must refuse the part.
        step(0)
        if rank == 1:
            state.state_dict()
        step(1)
        try:
            state.state_dict()
        except ddphook.Error as e:
            print("rank %d raised %s: %s" % (rank, type(e).__name__, e),
                  flush=True)
            return 0 if rank == 0 and "the part of rank 1 was taken by " \
                "another call than rank 0's" in str(e) else 1
        print("rank %d: no exception" % rank, flush=True)
        return 0 if rank == 1 else 1
    if a.phase in ("wrong-world", "other-hook", "damaged", "mixed"):
        ckpt = torch.load(saved)
        if a.phase == "mixed":
            # Rank 1's part from another job's save at the same step.
            other = torch.load(os.path.join(a.other, "ckpt.pt"))
            ckpt["hooks"]["ranks"][1] = other["hooks"]["ranks"][1]
        if a.phase == "damaged":
            part = bytearray(ckpt["hooks"]["ranks"][1])
            part[len(part) // 2] ^= 0x10
            ckpt["hooks"]["ranks"][1] = bytes(part)
        step(0)
        try:
            state.load_state_dict(ckpt["hooks"])
        except ddphook.Error as e:
            # One write with its newline: the ranks share mpiexec's output.
            sys.stdout.write("rank %d raised %s: %s\n" % (
                rank, type(e).__name__, e))
            sys.stdout.flush()
            return 0 if a.phase == "wrong-world" else 3
        print("rank %d: no exception" % rank, flush=True)
        return 1
    first = 0
    if a.phase != "full":
        ckpt = torch.load(saved if a.phase != "resume-resaved" else resaved)
        model.module.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        if a.phase != "resume-without-state":
            state.load_state_dict(ckpt["hooks"])
        if a.phase == "resume":
            # Before any step: the state just loaded, every rank's.
            again = state.state_dict()
            if rank == 0:
                ckpt["hooks"] = again
                torch.save(ckpt, resaved)
        first = 3
    for i in range(first, 6):
        step(i)
        if a.phase == "full" and i == 2:
            if rank == 0:
                with torch.no_grad():
                    model(torch.randn(4, 32))  # a gloo broadcast
            hooks = state.state_dict()
            if rank == 0:
                torch.save({"model": model.module.state_dict(),
                            "opt": opt.state_dict(), "hooks": hooks}, saved)
            if sorted(hooks["ranks"]) != (
                    list(range(2)) if rank == 0 else [rank]):
                print("FAIL: rank %d: state_dict() holds ranks %s" %
                      (rank, sorted(hooks["ranks"])), flush=True)
                return 1
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    flat.numpy().tofile(os.path.join(a.out, "%s.rank%d.f32" % (a.phase, rank)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
