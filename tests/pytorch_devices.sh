#!/bin/sh
# pytorch_devices.sh: ddphook.torch's device rules without a GPU
# (tests/python/bridge_devices.py): CPU parameters on a host backend,
# CUDA ones with backend = nccl on the GPU the runtime chose for the
# rank, and the refusals' messages otherwise.  What a GPU does with them
# is tests/gpu/torch_cuda.py's (tests/gpu/run.sh).
# Skips (77) without a Python 3 with torch.
set -u
B=${DDPH_TEST_BUILDDIR:?run through make check}
S=${DDPH_TEST_SRCDIR:?run through make check}
. "$S/tests/torch_python.sh"
PYTHONPATH="$S/python${PYTHONPATH:+:$PYTHONPATH}"
DDPHOOK_LIBRARY="$B/.libs/libddphook.so"
export PYTHONPATH DDPHOOK_LIBRARY
exec timeout 120 "$PY" "$S/tests/python/bridge_devices.py"
