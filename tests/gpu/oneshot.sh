#!/bin/sh
# oneshot.sh: the most evidence one short call on a machine with one GPU
# can give, in 9 minutes at most (its start-up not counted), every step
# with a time limit of its own, cut to what is left:
#
#   1. the driver against the CUDA the programs were built with;
#   2. tests/gpu/nccl_probe: what the real CUDA and NCCL do where
#      tests/fake_nccl stands in for them (the last error after
#      cudaStreamQuery, ncclCommSplit's returns and *newcomm, nonblocking
#      init settling, ncclCommAbort's time, a blocking and a nonblocking
#      1-rank group's latency, a lone nonblocking enqueue's answer; with
#      2 GPUs, a 2-rank allreduce's latency, blocking against nonblocking):
#      its lines are the evidence;
#   3. tests/gpu/test_device_ops: every CUDA device operation bit for bit
#      against its CPU twin (stochastic rounding and 2/4-bit codes too,
#      whose bits travel between CPU and GPU ranks; top-k's and absmax's
#      scratch kept out of the device's default memory pool);
#   4. tests/gpu/test_gpu at 1 rank: every shipped hook, and post-local-
#      SGD, on GPU memory against the CPU backend;
#   5. examples/gpu_trainer under PowerSGD against the same training with
#      --host (backend = mpi): the loss falls, the final losses within 2%;
#   6. tests/gpu/torch_cuda.py: a CUDA DDP model through ddphook.torch
#      (backend = nccl, fp16 and PowerSGD) against the same model on the
#      CPU (not run where Python has no torch with CUDA);
#   7. two ranks on the one GPU: refused at once, naming the shared GPU;
#   8. ddphook bench gpu at 1 rank: casts against cudaMemcpy, the hooks
#      against an out-of-place ncclAllReduce (at 1 rank, a copy);
#   9. test_gpu under compute-sanitizer memcheck, with the time left.
#
# The report, OUT/oneshot-report.txt, ends each step with "pass", "FAIL"
# or "not run: REASON", and its last line counts them; exit 0 when every
# step passed, 1 when one failed, 77 when one did not run (without a GPU,
# every step: "not run: no CUDA device", and nothing is built).
#
#   bash tests/gpu/oneshot.sh --out DIR [--kit ddphook-gpu-kit.tar.gz]
#
# The programs come from the kit (tests/gpu/kit.sh, built on a machine
# with ddphook's build dependencies; ./ddphook-gpu-kit.tar.gz is used when
# it is there and --kit is not given), else from a build here, which needs
# those dependencies (README.md).
set -u
cd "$(dirname "$0")/../.." || exit 1
top=$PWD
out="" kit=""
while [ $# -gt 0 ]; do
    case $1 in
    --out) out=${2:?"--out needs a folder"}; shift 2 ;;
    --kit) kit=${2:?"--kit needs the kit's .tar.gz (from tests/gpu/kit.sh)"}; shift 2 ;;
    *) echo "usage: bash tests/gpu/oneshot.sh --out DIR [--kit KIT.tar.gz]" >&2; exit 2 ;;
    esac
done
[ -n "$out" ] || { echo "oneshot.sh: --out DIR is needed" >&2; exit 2; }
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
[ -z "$kit" ] && [ -f "$top/ddphook-gpu-kit.tar.gz" ] && kit=$top/ddphook-gpu-kit.tar.gz
title="one-call GPU check" budget=${ONESHOT_BUDGET_S:-540}
report=$out/oneshot-report.txt
. "$top/tests/gpu/common.sh"
say "== programs: ${kit:-built here}"
# Without a GPU nothing is built: every step is "not run".
if [ -n "$gpu_skip" ]; then
    say "== driver"
    skipped driver "$gpu_skip"
else
    prepare
fi
unset NCCL_COMM_BLOCKING

gpu_step 60 "CUDA and NCCL semantics (nccl_probe)" "$PROBE"
gpu_step 60 "device operations against the CPU, bit for bit" "$DEVICE_OPS"
gpu_step 90 "every hook at 1 rank against the CPU backend (test_gpu)" \
    "$TEST_GPU" "$PLUGINS" "$LSGD"
trainer_jobs
gpu_step 120 "gpu_trainer, powersgd, 1 rank, against --host (CPU backend)" \
    sh "$checks" trainer "$out" "$TRAINER" "$job" "$cpu_job"
# A CUDA DDP model through ddphook.torch (backend = nccl; fp16 and
# PowerSGD) against the same model on the CPU: not run where Python has
# no torch with CUDA.
may_skip=yes
gpu_step 180 "PyTorch DDP, CUDA model through ddphook.torch, against the CPU" \
    sh "$checks" torch "$out" "$LIBDDPHOOK" "$PLUGINS"
may_skip=
# NCCL refuses two ranks of a communicator on one GPU: ddph_open must say
# so before NCCL is asked (one GPU made visible, whatever the machine has).
gpu_step 30 "two ranks on one GPU refused at once" \
    env CUDA_VISIBLE_DEVICES=0 sh "$checks" refused "would share GPU" \
    mpiexec -n 2 "$TRAINER" "$job" 5
gpu_step 90 "ddphook bench gpu, 1 rank, against an out-of-place ncclAllReduce" \
    sh "$checks" bench "$out" allreduce,fp16,int8,topk \
    "$DDPHOOK" bench gpu --mib 64 --plugin-path "$PLUGINS" \
    --hooks allreduce,fp16,int8,topk
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
label="test_gpu under compute-sanitizer memcheck, with the time left"
if [ -z "$gpu_skip" ] && [ ! -x "$sanitizer" ]; then
    say "== $label"
    skipped "$label" "no compute-sanitizer here"
else
    # All that is left but 5 seconds for the report.
    gpu_step $(( deadline - $(date +%s) - 5 )) "$label" "$sanitizer" \
        --tool memcheck --error-exitcode 3 "$TEST_GPU" "$PLUGINS" "$LSGD"
fi
finish
