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

passed=0 failed=0 notrun=0
DDPHOOK="" TEST_GPU="" TRAINER="" DEVICE_OPS="" PLUGINS="" LSGD=""
deadline=$(( $(date +%s) + 290 ))
# The GPU steps' common reason not to run ("" when they can).
gpu_skip=""
[ "${ngpu:-0}" -ge 1 ] || gpu_skip="no CUDA device"
skipped() { # skipped LABEL REASON
    say "-- $1: not run: $2"
    notrun=$((notrun + 1))
}
step() { # step SECONDS LABEL COMMAND...: runs it, logs it, counts it
    limit=$1 label=$2
    shift 2
    say "== $label"
    start=$(date +%s)
    left=$(( deadline - start ))
    if [ "$left" -le 0 ]; then
        skipped "$label" "the 5-minute budget is spent"
        return 124
    fi
    [ "$left" -lt "$limit" ] && limit=$left
    timeout "$limit" "$@" >"$out/step.log" 2>&1
    rc=$?
    cat "$out/step.log" >>"$report"
    if [ $rc -eq 0 ]; then
        say "-- $label: pass in $(( $(date +%s) - start )) s"
        passed=$((passed + 1))
    else
        say "-- $label: FAIL (exit $rc) in $(( $(date +%s) - start )) s"
        failed=$((failed + 1))
    fi
    return $rc
}
gpu_step() { # gpu_step SECONDS LABEL COMMAND...: a step that needs the GPU
    if [ -n "$gpu_skip" ]; then
        say "== $2"
        skipped "$2" "$gpu_skip"
        return 77
    fi
    step "$@"
}
# The last line: how many of each, and the overall result.
finish() {
    if [ $failed -gt 0 ]; then result=FAIL rc=1
    elif [ $notrun -gt 0 ]; then result="NOT RUN" rc=77
    else result=PASS rc=0
    fi
    rm -f "$out/step.log"
    say "== $result: $passed passed, $failed failed, $notrun not run"
    exit $rc
}
fail_now() { # fail_now MESSAGE: a failure that ends the check
    say "FAIL: $*"
    failed=$((failed + 1))
    finish
}

# The driver must be new enough for the CUDA the programs were built
# with (CUDA 13: 580 or later; CUDA 12: 525 or later).
check_driver() { # check_driver CUDA_VERSION
    [ -z "$gpu_skip" ] || return 0
    need_cuda=$1
    case $need_cuda in
    13*) need=580 ;;
    12*) need=525 ;;
    *) need=0 ;;
    esac
    have=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
    say "== driver $have, CUDA $need_cuda (needs driver >= $need)"
    if [ -z "$have" ] || [ "${have%%.*}" -lt "$need" ]; then
        say "-- driver: FAIL: NVIDIA driver ${have:-unknown} is older than $need, which CUDA $need_cuda needs"
        failed=$((failed + 1))
        gpu_skip="driver ${have:-unknown} too old for CUDA $need_cuda (needs $need)"
    else
        say "-- driver: pass"
        passed=$((passed + 1))
    fi
}

# Of several copies of a library, the newest (by version in its real name).
newest() { # newest SONAME
    find /usr/local /opt /usr/lib /usr/lib64 -name "$1" 2>/dev/null |
        while read -r f; do printf '%s %s\n' "$(readlink -f "$f")" "$f"; done |
        sort -V | tail -n 1 | cut -d' ' -f2
}

# The kit: its libraries first, then wherever this machine keeps the CUDA
# libraries it was linked against (searched for by name when the linker
# does not find them itself; again for what those need, since pip's
# nvidia-* packages keep each library in a folder of its own).
use_kit() {
    dir=/tmp/ddphook-gpu-kit
    rm -rf "$dir"
    if ! mkdir -p "$dir" || ! tar -xzf "$1" -C "$dir"; then
        fail_now "cannot unpack $1"
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
            fail_now "still unresolved: $unresolved"
        fi
        for soname in $unresolved; do
            found=$(newest "$soname")
            [ -n "$found" ] || fail_now "$soname (CUDA) not found on this machine"
            say "using $found (the newest of: $(find /usr/local /opt /usr/lib /usr/lib64 -name "$soname" 2>/dev/null | tr '\n' ' '))"
            LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$found")
        done
    done
    DDPHOOK=$k/bin/ddphook TEST_GPU=$k/bin/test_gpu TRAINER=$k/bin/gpu_trainer
    DEVICE_OPS=$k/bin/test_device_ops
    PLUGINS=$k/plugins LSGD=$k/lib/post_localsgd.so
    DDPH_BACKEND_DIR=$k/backends; export DDPH_BACKEND_DIR
    check_driver "$(sed -n 's/.*CUDA \([0-9.]*\),.*/\1/p' "$k/MANIFEST")"
}

build_failed() {
    gpu_skip="the build failed"
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
        say "  (Debian: apt-get install build-essential autoconf automake libtool pkg-config mpich libmpich-dev libinih-dev libopenblas-dev liblapacke-dev check zlib1g-dev;"
        say "   or build tests/gpu/kit.sh on a machine that has them and run this with --kit)"
        fail_now "missing build prerequisites:$missing"
    fi
    jobs=$(nproc)
    # The architectures a release ships (configure's default) and this
    # GPU's, so that the kernels run here as they would from the package.
    local_arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
                 head -n 1 | tr -d '.[:space:]')
    archs="80 90"
    case " $archs " in *" $local_arch "*|"  ") ;; *) archs="$archs $local_arch" ;; esac
    say "== CUDA architectures: $archs"
    arch_flag="--with-cuda-arch=$archs"
    check_driver "$(/usr/local/cuda/bin/nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
    if [ -n "$gpu_skip" ]; then
        say "== build"
        skipped build "$gpu_skip (it builds for the GPU present)"
        return
    fi
    [ -x ./configure ] || step 60 autogen ./autogen.sh || { build_failed; return; }
    # A tree configured in place cannot host a separate build: build there,
    # with the options it was configured with, and CUDA required.
    if [ -f config.status ]; then
        opts=$(./config.status --config)
        step 60 configure sh -c "./configure $opts --with-cuda=/usr/local/cuda '$arch_flag' NVCCFLAGS=" ||
            { build_failed; return; }
    else
        mkdir -p _gpu
        cd _gpu || exit 1
        step 60 configure ../configure --with-cuda=/usr/local/cuda "$arch_flag" \
            NVCCFLAGS= || { build_failed; return; }
    fi
    step 150 build sh -c "make -j$jobs && make -j$jobs tests/gpu/test_gpu tests/gpu/test_device_ops tests/gpu/post_localsgd.la" ||
        { build_failed; return; }
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
# backend (--host: the same training on the GPU, the gradients handed to
# the runtime in host memory, backend = mpi): its loss must fall, and its
# final loss be the CPU backend's within 2% (the hooks' GEMMs and sums
# round differently on the two devices).
job=$out/gpu_powersgd.ini
cpu_job=$out/cpu_powersgd.ini
sed "s|^\[runtime\]|[runtime]\nplugin_path = $PLUGINS|" \
    "$top/examples/configs/gpu_powersgd.ini" > "$job"
sed 's|^backend = nccl|backend = mpi|' "$job" > "$cpu_job"
final_loss() { # final_loss LOG: "first last" of "loss A -> B over"
    sed -n 's/.*loss \([0-9.e+-]*\) -> \([0-9.e+-]*\) over.*/\1 \2/p' "$1"
}
trainer_check() { # trainer_check LAUNCH...: both runs, then the losses
    "$@" "$TRAINER" "$job" 200 > "$out/trainer.log" 2>&1
    rc=$?
    cat "$out/trainer.log"
    [ $rc -eq 0 ] || return $rc
    "$@" "$TRAINER" "$cpu_job" 200 --host > "$out/trainer_cpu.log" 2>&1
    rc=$?
    sed 's/^/cpu backend: /' "$out/trainer_cpu.log"
    [ $rc -eq 0 ] || return $rc
    printf '%s %s\n' "$(final_loss "$out/trainer.log")" \
        "$(final_loss "$out/trainer_cpu.log")" | awk '
        NF != 4 { print "no final loss in the output"; exit 1 }
        { d = $2 - $4; if (d < 0) d = -d
          fell = $2 < $1; near = d <= 0.02 * $4
          print "loss " $1 " -> " $2 (fell ? " (fell)" : " (did NOT fall)")
          print "cpu backend: " $4 ", difference " d (near ? " (within 2%)" : " (NOT within 2%)")
          exit !(fell && near) }'
}
gpu_step 120 "examples/gpu_trainer, powersgd, 1 rank, against the CPU backend" \
    trainer_check
# The benchmark: it must run every hook asked for and print its line.
bench_check() { # bench_check HOOKS COMMAND...
    hooks=$1
    shift
    "$@" > "$out/bench.log" 2>&1
    rc=$?
    cat "$out/bench.log"
    [ $rc -eq 0 ] || return $rc
    for h in $(echo "$hooks" | tr ',' ' '); do
        grep -q "$h" "$out/bench.log" || { echo "no result for hook $h"; return 1; }
    done
}
gpu_step 90 "ddphook bench gpu, 1 rank" bench_check allreduce,fp16,powersgd \
    "$DDPHOOK" bench gpu --mib 64 --plugin-path "$PLUGINS" \
    --hooks allreduce,fp16,powersgd
two 90 "ddphook bench gpu, 2 ranks" bench_check allreduce mpiexec -n 2 \
    "$DDPHOOK" bench gpu --mib 64 --plugin-path "$PLUGINS"
two 120 "examples/gpu_trainer, powersgd, 2 ranks, against the CPU backend" \
    trainer_check mpiexec -n 2
rm -f "$job" "$cpu_job" "$out/trainer.log" "$out/trainer_cpu.log" \
    "$out/bench.log"
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
