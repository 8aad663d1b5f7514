#!/bin/sh
# run.sh: the check to run on a machine with a GPU (the `device` tool, or
# any CUDA machine).  It runs the GPU tests (tests/gpu/test_gpu: every
# shipped hook and post-local-SGD on GPU memory against the CPU backend;
# tests/gpu/test_device_ops: every CUDA device operation against its CPU
# twin),
# the GPU trainer (examples/gpu_trainer under PowerSGD: the loss must
# fall), the GPU benchmark (`ddphook bench gpu`: casts against cudaMemcpy,
# allreduce and fp16 hooks against a raw ncclAllReduce) and, where the
# machine has compute-sanitizer, the GPU tests under memcheck, and writes
# a short report to ${OUT:-.}/gpu-report.txt.  About 1-2 minutes on one
# GPU (plus the build's); every step has a time limit, cut to what is left
# of a 290-second budget, so that the whole stays under 5 minutes.
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
report=$out/gpu-report.txt
say() { printf '%s\n' "$*" | tee -a "$report"; }
: > "$report"
say "== ddphook GPU check, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(git rev-parse --short HEAD 2>/dev/null || echo 'no git')"
nvidia-smi -L 2>&1 | tee -a "$report"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')

deadline=$(( $(date +%s) + 290 ))
step() { # step SECONDS LABEL COMMAND...: runs it, logs it, keeps its status
    limit=$1 label=$2
    shift 2
    say "== $label"
    start=$(date +%s)
    left=$(( deadline - start ))
    if [ "$left" -le 0 ]; then
        say "-- $label: not run: the 5-minute budget is spent"
        return 124
    fi
    [ "$left" -lt "$limit" ] && limit=$left
    timeout "$limit" "$@" >"$out/step.log" 2>&1
    rc=$?
    cat "$out/step.log" >>"$report"
    say "-- $label: exit $rc in $(( $(date +%s) - start )) s"
    return $rc
}

# The kit: its libraries first, then wherever this machine keeps the CUDA
# libraries it was linked against (searched for by name when the linker
# does not find them itself; again for what those need, since pip's
# nvidia-* packages keep each library in a folder of its own).
use_kit() {
    dir=/tmp/ddphook-gpu-kit
    rm -rf "$dir"
    if ! mkdir -p "$dir" || ! tar -xzf "$1" -C "$dir"; then
        say "FAIL: cannot unpack $1"
        exit 1
    fi
    k=$dir/ddphook-gpu-kit
    tee -a "$report" <"$k/MANIFEST"
    say "here: $(ldd --version 2>&1 | head -n 1)"
    LD_LIBRARY_PATH=$k/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    # The kit's mpiexec and hydra_pmi_proxy (the MPICH it was built with).
    PATH=$k/bin:$PATH
    export LD_LIBRARY_PATH PATH
    rounds=0
    while unresolved=$(ldd "$k"/bin/* "$k"/lib/*.so* "$k"/backends/*.so 2>/dev/null |
                       awk '$3 == "not" {print $1}' | sort -u) &&
          [ -n "$unresolved" ]; do
        rounds=$((rounds + 1))
        if [ $rounds -gt 8 ]; then
            say "FAIL: still unresolved: $unresolved"
            exit 1
        fi
        for soname in $unresolved; do
            found=$(find /usr/local /opt /usr/lib /usr/lib64 -name "$soname" \
                        2>/dev/null | head -n 1)
            [ -n "$found" ] || { say "FAIL: $soname (CUDA) not found on this machine"; exit 1; }
            say "using $found"
            LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$found")
        done
    done
    DDPHOOK=$k/bin/ddphook TEST_GPU=$k/bin/test_gpu TRAINER=$k/bin/gpu_trainer
    DEVICE_OPS=$k/bin/test_device_ops
    PLUGINS=$k/plugins LSGD=$k/lib/post_localsgd.so
    DDPH_BACKEND_DIR=$k/backends; export DDPH_BACKEND_DIR
}

# A build here, for the GPU present.
build_here() {
    /usr/local/cuda/bin/nvcc --version 2>&1 | tail -n 1 | tee -a "$report"
    missing=""
    for tool in autoreconf libtoolize pkg-config mpicc mpiexec make cc; do
        command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
    done
    for pc in inih openblas lapacke check zlib mpich; do
        pkg-config --exists "$pc" 2>/dev/null || missing="$missing $pc(pkg-config)"
    done
    if [ -n "$missing" ]; then
        say "FAIL: missing build prerequisites:$missing"
        say "  (Debian: apt-get install build-essential autoconf automake libtool pkg-config mpich libmpich-dev libinih-dev libopenblas-dev liblapacke-dev check zlib1g-dev;"
        say "   or build tests/gpu/kit.sh on a machine that has them and run this with --kit)"
        exit 1
    fi
    jobs=$(nproc)
    nvcc_flags="NVCCFLAGS=-O2 -arch=native"
    [ -x ./configure ] || step 60 autogen ./autogen.sh || { cat "$report"; exit 1; }
    # A tree configured in place cannot host a separate build: build there,
    # with the options it was configured with, and CUDA required.
    if [ -f config.status ]; then
        opts=$(./config.status --config)
        step 60 configure sh -c "./configure $opts --with-cuda=/usr/local/cuda '$nvcc_flags'" ||
            { cat "$report"; exit 1; }
    else
        mkdir -p _gpu
        cd _gpu || exit 1
        step 60 configure ../configure --with-cuda=/usr/local/cuda "$nvcc_flags" ||
            { cat "$report"; exit 1; }
    fi
    step 150 build sh -c "make -j$jobs && make -j$jobs tests/gpu/test_gpu tests/gpu/test_device_ops tests/gpu/post_localsgd.la" ||
        { tail -n 40 "$report"; exit 1; }
    DDPHOOK=$PWD/ddphook TEST_GPU=$PWD/tests/gpu/test_gpu
    DEVICE_OPS=$PWD/tests/gpu/test_device_ops
    TRAINER=$PWD/examples/gpu_trainer PLUGINS=$PWD/plugins/.libs
    LSGD=$PWD/tests/gpu/.libs/post_localsgd.so
    DDPH_BACKEND_DIR=$PWD/runtime/comm/nccl/.libs; export DDPH_BACKEND_DIR
}

if [ -n "$kit" ]; then
    case $kit in /*) ;; *) kit=$top/$kit ;; esac
    use_kit "$kit"
else
    build_here
fi

status=0
step 90 "test_gpu, 1 rank" "$TEST_GPU" "$PLUGINS" "$LSGD"
case $? in
0) ;;
77) say "== overall: SKIP (test_gpu found no CUDA device)"; exit 77 ;;
*) status=1 ;;
esac
# Every CUDA device operation against its CPU twin.
step 60 "device operations against the CPU" "$DEVICE_OPS" || status=1
multi=""
if [ "${ngpu:-0}" -ge 2 ]; then
    if command -v mpiexec >/dev/null 2>&1; then
        multi=yes
    else
        say "== no mpiexec here: the 2-rank runs are skipped"
    fi
fi
[ -n "$multi" ] && { step 90 "test_gpu, 2 ranks" mpiexec -n 2 "$TEST_GPU" \
    "$PLUGINS" "$LSGD" || status=1; }
# The GPU trainer end to end: the loss must fall under PowerSGD on GPU.
job=$out/gpu_powersgd.ini
sed "s|^\[runtime\]|[runtime]\nplugin_path = $PLUGINS|" \
    "$top/examples/configs/gpu_powersgd.ini" > "$job"
step 60 "examples/gpu_trainer, powersgd, 1 rank" "$TRAINER" "$job" 200 ||
    status=1
step 90 "ddphook bench gpu, 1 rank" "$DDPHOOK" bench gpu --mib 64 \
    --plugin-path "$PLUGINS" --hooks allreduce,fp16,powersgd || status=1
if [ -n "$multi" ]; then
    step 90 "ddphook bench gpu, 2 ranks" mpiexec -n 2 "$DDPHOOK" bench gpu \
        --mib 64 --plugin-path "$PLUGINS" || status=1
    step 60 "examples/gpu_trainer, powersgd, 2 ranks" mpiexec -n 2 \
        "$TRAINER" "$job" 200 || status=1
fi
rm -f "$job"
# Last, with what is left of the budget: the GPU tests under
# compute-sanitizer's memcheck (out-of-bounds and misaligned accesses in
# the kernels).  A sanitizer that cannot run on this machine is reported,
# not counted as a failure.
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x "$sanitizer" ]; then
    step 120 "test_gpu under compute-sanitizer memcheck" "$sanitizer" \
        --tool memcheck --error-exitcode 3 "$TEST_GPU" "$PLUGINS" "$LSGD"
    case $? in
    0) ;;
    3) status=1 ;;
    *) say "-- memcheck did not complete: not counted" ;;
    esac
else
    say "== no compute-sanitizer here: memcheck skipped"
fi
say "== overall: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
rm -f "$out/step.log"
exit $status
