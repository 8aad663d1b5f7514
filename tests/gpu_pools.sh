#!/bin/sh
# gpu_pools.sh: the GPU module allocates stream-ordered memory only from
# the hooks' own pools (cudaMallocFromPoolAsync), never from the device's
# default pool through cudaMallocAsync: that pool is the trainer's, and
# its settings (release threshold 0) would hand the memory back to the
# driver at each synchronisation (docs/usage.md, GPU section); and the
# kernels' scratch (top-k, absmax) comes from the module's one pool per
# device (device_cuda.c), which the kernels' object never creates a
# second of.  Checked on the built module's and object's imports, so it runs without a GPU; test_device_ops
# checks the default pool itself on one.
set -u
mod=${DDPH_BACKEND_DIR:?run through make check}/nccl.so
if [ ! -f "$mod" ]; then
    echo "SKIP: no GPU module in this build (configure found no CUDA/NCCL)"
    exit 77
fi
imports=$(nm -D --undefined-only "$mod") || { echo "FAIL: nm -D $mod"; exit 1; }
bad=$(printf '%s\n' "$imports" | grep -Ew 'cudaMallocAsync(@.*)?' || true)
if [ -n "$bad" ]; then
    echo "FAIL: $mod allocates from the device's default pool: $bad"
    exit 1
fi
if ! printf '%s\n' "$imports" | grep -q 'cudaMallocFromPoolAsync'; then
    echo "FAIL: $mod imports no cudaMallocFromPoolAsync: the check reads the wrong thing"
    exit 1
fi
echo "PASS: $mod imports cudaMallocFromPoolAsync and no cudaMallocAsync"
# The kernels' object: it takes a pool, it makes none.
ops=${DDPH_TEST_BUILDDIR:?run through make check}/runtime/backends/nccl/cuda_ops.o
ops_imports=$(nm --undefined-only "$ops") || { echo "FAIL: nm $ops"; exit 1; }
if ! printf '%s\n' "$ops_imports" | grep -q 'cudaMallocFromPoolAsync'; then
    echo "FAIL: $ops imports no cudaMallocFromPoolAsync: the check reads the wrong thing"
    exit 1
fi
if printf '%s\n' "$ops_imports" | grep -qw 'cudaMemPoolCreate'; then
    echo "FAIL: $ops creates a memory pool of its own: top-k's and absmax's scratch must come from the module's (ddph__cuda_pool)"
    exit 1
fi
echo "PASS: $ops allocates from the pool it is given and creates none"
