"""bridge_devices.py: where ddphook.torch puts a parameter's gradients
(ddphook.torch._placement), on any machine: torch.device("cuda", i) is a
description, not a GPU, so the CUDA rules are checked without one.  CPU
tensors on a host backend; CUDA tensors with backend = nccl on the GPU
the runtime chose for the rank (ddph_cuda_device), and a clear refusal
otherwise.  Prints one PASS/FAIL line a case; exits 1 on a failure."""
import sys

import torch

import ddphook
import ddphook.torch as bridge
from ddphook import _capi

failed = 0


def check(label, device, cuda_device, want=None, status=None, words=()):
    global failed
    try:
        got = bridge._placement("parameter 'fc1.weight'", torch.device(device),
                                cuda_device, 3)
        ok = status is None and got == want
        what = "-> %s" % ("CUDA" if got == _capi.CUDA else "CPU")
    except ddphook.Error as e:
        text = str(e)
        ok = (status == e.status and "parameter 'fc1.weight' is on" in text and
              all(w in text for w in words))
        what = "%s: %s" % (e.status, text)
    print("%s: %s (%s)" % ("PASS" if ok else "FAIL", label, what))
    failed += not ok


check("a CPU parameter, host backend", "cpu", -1, want=_capi.CPU)
check("a CUDA parameter on the rank's GPU, backend = nccl", "cuda:0", 0,
      want=_capi.CUDA)
check("a CUDA parameter on GPU 2 = the rank's GPU", "cuda:2", 2,
      want=_capi.CUDA)
check("a CPU parameter with backend = nccl", "cpu", 1,
      status="DDPH_ERR_UNSUPPORTED",
      words=("backend = nccl", "cuda:1", "rank 3"))
check("a CUDA parameter on a host backend", "cuda:0", -1,
      status="DDPH_ERR_UNSUPPORTED", words=("backend = nccl",))
check("a CUDA parameter on another GPU than the runtime chose", "cuda:1", 0,
      status="DDPH_ERR_MISMATCH",
      words=("cuda:1", "rank 3 on cuda:0", "LOCAL_RANK",
             "torch.cuda.set_device(0)"))
check("a parameter on the meta device", "meta", -1,
      status="DDPH_ERR_UNSUPPORTED", words=("meta",))
check("a parameter on the meta device, backend = nccl", "meta", 0,
      status="DDPH_ERR_UNSUPPORTED", words=("meta",))
sys.exit(1 if failed else 0)
