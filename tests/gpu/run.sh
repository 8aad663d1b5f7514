#!/bin/sh
# run.sh: the check to run on a machine with a GPU (the `device` tool, or
# any CUDA machine).  It runs the GPU tests (tests/gpu/test_gpu: every
# shipped hook and post-local-SGD on GPU memory against the CPU backend;
# tests/gpu/test_device_ops: every CUDA device operation against its CPU
# twin),
# the GPU trainer (examples/gpu_trainer under PowerSGD: the loss must
# fall), a CUDA DDP model through ddphook.torch against the same model on
# the CPU (tests/gpu/torch_cuda.py; not run where Python has no torch with
# CUDA), the GPU benchmark (`ddphook bench gpu`: casts against cudaMemcpy,
# allreduce and fp16 hooks against a raw ncclAllReduce) and, where the
# machine has compute-sanitizer, the GPU tests under memcheck, and writes
# a short report to ${OUT:-.}/gpu-report.txt.  About 1-2 minutes on one
# GPU (plus the build's); every step has a time limit, cut to what is left
# of a 290-second budget, so that the whole stays under 5 minutes.
#
# Every step ends as "pass", "FAIL" or "not run: REASON" in the report,
# and its last line counts them; the overall result is PASS only when
# every step ran and passed (exit 0), FAIL when one failed (exit 1), and
# NOT RUN otherwise (exit 77: on a machine without a GPU every GPU step is
# "not run: no CUDA device").  A driver older than the CUDA the build
# needs is a FAIL that names both versions.
#
#   sh tests/gpu/run.sh           builds ddphook for the GPU present (in
#                                 _gpu/, or in the tree when it is
#                                 configured in place): the machine needs
#                                 the build dependencies of README.md
#   sh tests/gpu/run.sh --kit ddphook-gpu-kit.tar.gz
#                                 runs what tests/gpu/kit.sh built and
#                                 packed elsewhere: the machine needs only
#                                 the NVIDIA driver and CUDA 13's libraries
#
# The report, the driver check, the kit and the build are common.sh's
# (shared with oneshot.sh, the one-call check for one GPU); the checks
# that are more than one program are checks.sh's, so that `timeout` can
# start them.
#
# World size 1 on one GPU: NCCL refuses two ranks of one communicator on
# the same device, so the -n 2 runs happen only with two GPUs or more.
set -u
cd "$(dirname "$0")/../.." || exit 1
top=$PWD
kit=""
case "${1:-}" in
--kit) kit=${2:?"--kit needs the kit's .tar.gz (from tests/gpu/kit.sh)"} ;;
"") ;;
*) echo "usage: sh tests/gpu/run.sh [--kit ddphook-gpu-kit.tar.gz]" >&2; exit 2 ;;
esac
out=${OUT:-$top}
mkdir -p "$out"
title="GPU check" budget=290
report=$out/gpu-report.txt
. "$top/tests/gpu/common.sh"
prepare

# The backend needs nonblocking communicators (timeout_s); the variable
# would make every one blocking, and the backend refuses it.
unset NCCL_COMM_BLOCKING
gpu_step 90 "test_gpu, 1 rank" "$TEST_GPU" "$PLUGINS" "$LSGD"
# Every CUDA device operation against its CPU twin.
gpu_step 60 "device operations against the CPU" "$DEVICE_OPS"
multi=""
if [ "${ngpu:-0}" -ge 2 ]; then
    command -v mpiexec >/dev/null 2>&1 && multi=yes ||
        multi_skip="no mpiexec here"
else
    multi_skip="${gpu_skip:-only ${ngpu:-0} GPU here (2-rank runs need 2)}"
fi
[ -n "$gpu_skip" ] && multi_skip=$gpu_skip
two() { # two SECONDS LABEL COMMAND...: a 2-rank step
    if [ -n "$multi" ] && [ -z "$gpu_skip" ]; then
        step "$@"
    else
        say "== $2"
        skipped "$2" "$multi_skip"
    fi
}
two 90 "test_gpu, 2 ranks" mpiexec -n 2 "$TEST_GPU" "$PLUGINS" "$LSGD"
# The GPU trainer end to end under PowerSGD, and again with the CPU
# backend (--host): its loss must fall, and its final loss be the CPU
# backend's within 2% (checks.sh).
trainer_jobs
gpu_step 120 "examples/gpu_trainer, powersgd, 1 rank, against the CPU backend" \
    sh "$checks" trainer "$out" "$TRAINER" "$job" "$cpu_job"
# A CUDA DDP model through ddphook.torch (backend = nccl; fp16 and
# PowerSGD) against the same model on the CPU: not run where Python has
# no torch with CUDA.
may_skip=yes
gpu_step 180 "PyTorch DDP, CUDA model through ddphook.torch, against the CPU" \
    sh "$checks" torch "$out" "$LIBDDPHOOK" "$PLUGINS"
may_skip=
# The benchmark: it must print its baseline and run every hook asked for.
gpu_step 90 "ddphook bench gpu, 1 rank" \
    sh "$checks" bench "$out" allreduce,fp16,powersgd \
    "$DDPHOOK" bench gpu --mib 64 --plugin-path "$PLUGINS" \
    --hooks allreduce,fp16,powersgd
two 90 "ddphook bench gpu, 2 ranks" sh "$checks" bench "$out" allreduce \
    mpiexec -n 2 \
    "$DDPHOOK" bench gpu --mib 64 --plugin-path "$PLUGINS"
two 120 "examples/gpu_trainer, powersgd, 2 ranks, against the CPU backend" \
    sh "$checks" trainer "$out" "$TRAINER" "$job" "$cpu_job" mpiexec -n 2
# Last, with what is left of the budget: the GPU tests under
# compute-sanitizer's memcheck (out-of-bounds and misaligned accesses in
# the kernels).  A sanitizer that does not complete is a failure.
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -z "$gpu_skip" ] && [ ! -x "$sanitizer" ]; then
    say "== test_gpu under compute-sanitizer memcheck"
    skipped "test_gpu under compute-sanitizer memcheck" "no compute-sanitizer here"
else
    gpu_step 120 "test_gpu under compute-sanitizer memcheck" "$sanitizer" \
        --tool memcheck --error-exitcode 3 "$TEST_GPU" "$PLUGINS" "$LSGD"
fi
finish
