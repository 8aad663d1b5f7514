#!/bin/sh
# run.sh: the check to run on a machine with a GPU (the `device` tool, or
# any CUDA machine): builds ddphook with the nccl backend for the GPU
# present, runs the GPU tests (tests/gpu/test_gpu: every shipped hook and
# post-local-SGD on GPU memory against the CPU backend), the GPU trainer
# (examples/gpu_trainer under PowerSGD: the loss must fall) and the GPU
# benchmark (`ddphook bench gpu`: casts against cudaMemcpy, allreduce and
# fp16 hooks against a raw ncclAllReduce), and writes a short report to
# ${OUT:-.}/gpu-report.txt.  Takes about 2-3 minutes on one GPU; every
# step has a time limit so that the whole stays under 5.
#
# World size 1 on one GPU: NCCL refuses two ranks of one communicator on
# the same device, so the -n 2 runs happen only with two GPUs or more.
#
#   sh tests/gpu/run.sh   (from anywhere; builds in _gpu/, or in the tree
#                          when it is configured in place)
set -u
cd "$(dirname "$0")/../.."
top=$PWD
out=${OUT:-$top}
mkdir -p "$out"
report=$out/gpu-report.txt
say() { printf '%s\n' "$*" | tee -a "$report"; }
: > "$report"
say "== ddphook GPU check, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(git rev-parse --short HEAD 2>/dev/null || echo 'no git')"
nvidia-smi -L 2>&1 | tee -a "$report"
/usr/local/cuda/bin/nvcc --version 2>&1 | tail -n 1 | tee -a "$report"

# What the build needs; say what is missing instead of failing later.
missing=""
for tool in autoreconf libtoolize pkg-config mpicc mpiexec make cc; do
    command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
for pc in inih openblas lapacke check zlib mpich; do
    pkg-config --exists "$pc" 2>/dev/null || missing="$missing $pc(pkg-config)"
done
if [ -n "$missing" ]; then
    say "FAIL: missing build prerequisites:$missing"
    say "  (Debian: apt-get install build-essential autoconf automake libtool pkg-config mpich libmpich-dev libinih-dev libopenblas-dev liblapacke-dev check zlib1g-dev)"
    exit 1
fi

jobs=$(nproc)
step() { # step SECONDS LABEL COMMAND...: runs it, logs it, keeps its status
    limit=$1 label=$2
    shift 2
    say "== $label"
    start=$(date +%s)
    timeout "$limit" "$@" >"$out/step.log" 2>&1
    rc=$?
    cat "$out/step.log" >>"$report"
    say "-- $label: exit $rc in $(( $(date +%s) - start )) s"
    return $rc
}

[ -x ./configure ] || step 120 autogen ./autogen.sh || { cat "$report"; exit 1; }
# A tree configured in place cannot host a separate build: build there,
# with the options it was configured with, and CUDA required.
if [ -f config.status ]; then
    opts=$(./config.status --config)
    step 120 configure sh -c "./configure $opts --with-cuda=/usr/local/cuda" ||
        { cat "$report"; exit 1; }
else
    mkdir -p _gpu
    cd _gpu
    step 120 configure ../configure --with-cuda=/usr/local/cuda ||
        { cat "$report"; exit 1; }
fi
step 240 build sh -c "make -j$jobs && make -j$jobs tests/gpu/test_gpu tests/gpu/post_localsgd.la" ||
    { tail -n 40 "$report"; exit 1; }
status=0
step 120 "test_gpu, 1 rank" ./tests/gpu/test_gpu "$PWD/plugins/.libs" \
    "$PWD/tests/gpu/.libs/post_localsgd.so"
case $? in
0) ;;
77) say "== overall: SKIP (test_gpu found no CUDA device)"; exit 77 ;;
*) status=1 ;;
esac
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "${ngpu:-0}" -ge 2 ]; then
    step 120 "test_gpu, 2 ranks" mpiexec -n 2 ./tests/gpu/test_gpu \
        "$PWD/plugins/.libs" "$PWD/tests/gpu/.libs/post_localsgd.so" || status=1
fi
# The GPU trainer end to end: the loss must fall under PowerSGD on GPU.
job=$out/gpu_powersgd.ini
sed "s|^\[runtime\]|[runtime]\nplugin_path = $PWD/plugins/.libs|" \
    "$top/examples/configs/gpu_powersgd.ini" > "$job"
step 120 "examples/gpu_trainer, powersgd, 1 rank" ./examples/gpu_trainer "$job" 200 ||
    status=1
step 120 "ddphook bench gpu, 1 rank" ./ddphook bench gpu --mib 64 \
    --plugin-path "$PWD/plugins/.libs" --hooks allreduce,fp16,powersgd || status=1
if [ "${ngpu:-0}" -ge 2 ]; then
    step 120 "ddphook bench gpu, 2 ranks" mpiexec -n 2 ./ddphook bench gpu \
        --mib 64 --plugin-path "$PWD/plugins/.libs" || status=1
    step 120 "examples/gpu_trainer, powersgd, 2 ranks" mpiexec -n 2 \
        ./examples/gpu_trainer "$job" 200 || status=1
fi
rm -f "$job"
say "== overall: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
rm -f "$out/step.log"
exit $status
