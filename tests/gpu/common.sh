# common.sh: what tests/gpu/run.sh and tests/gpu/oneshot.sh share,
# sourced by them after they set top (the tree), out (the output folder),
# report (the report file), kit (a kit's .tar.gz, or "" to build here),
# title and budget (seconds for the whole): the report and its counts
# (say, step, gpu_step, skipped, finish), the driver check, and the
# programs' paths, from the kit or built here (prepare: DDPHOOK, TEST_GPU,
# DEVICE_OPS, TRAINER, PROBE, PLUGINS, LSGD, LIBDDPHOOK, DDPH_BACKEND_DIR).  Every
# step ends as "pass", "FAIL" or "not run: REASON" in the report, and its
# last line counts them: PASS only when every step ran and passed (exit
# 0), FAIL when one failed (exit 1), NOT RUN otherwise (exit 77).
# shellcheck shell=sh
say() { printf '%s\n' "$*" | tee -a "$report"; }
: > "$report"
say "== ddphook $title, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(git rev-parse --short HEAD 2>/dev/null || echo 'no git')"
nvidia-smi -L 2>&1 | tee -a "$report"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')

passed=0 failed=0 notrun=0 kit_dir=""
DDPHOOK="" TEST_GPU="" TRAINER="" DEVICE_OPS="" PROBE="" PLUGINS="" LSGD=""
LIBDDPHOOK=""
deadline=$(( $(date +%s) + budget ))
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
        skipped "$label" "the $budget-second budget is spent"
        return 124
    fi
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -le 0 ]; then
        skipped "$label" "no time left for it"
        return 124
    fi
    # timeout starts programs only: a shell function or a missing file
    # would end as "exit 127" without running anything.
    case $(command -v "$1") in
    */*) ;;
    *)  say "-- $label: FAIL: $1 is not a program"
        failed=$((failed + 1))
        return 127 ;;
    esac
    timeout "$limit" "$@" >"$out/step.log" 2>&1
    rc=$?
    cat "$out/step.log" >>"$report"
    # A step that may find nothing to run on (may_skip=yes: the PyTorch
    # row without a torch with CUDA) says why on its last line.
    if [ $rc -eq 77 ] && [ -n "${may_skip:-}" ]; then
        skipped "$label" "$(tail -n 1 "$out/step.log" | sed 's/^not run: //')"
        return 77
    fi
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
# The GPU trainer's jobs for tests/gpu/checks.sh (job: PowerSGD on the
# nccl backend; cpu_job: the same on the CPU backend, for --host).
trainer_jobs() {
    job=$out/gpu_powersgd.ini cpu_job=$out/cpu_powersgd.ini
    checks=$top/tests/gpu/checks.sh
    sed "s|^\[runtime\]|[runtime]\nplugin_path = $PLUGINS|" \
        "$top/examples/configs/gpu_powersgd.ini" >"$job"
    sed 's|^backend = nccl|backend = mpi|' "$job" >"$cpu_job"
}
# The last line: how many of each, and the overall result.
finish() {
    if [ $failed -gt 0 ]; then result=FAIL rc=1
    elif [ $notrun -gt 0 ]; then result="NOT RUN" rc=77
    else result=PASS rc=0
    fi
    rm -f "$out/step.log" "$out/gpu_powersgd.ini" "$out/cpu_powersgd.ini" \
        "$out/trainer.log" "$out/trainer_cpu.log" "$out/bench.log"
    [ -z "$kit_dir" ] || rm -rf "$kit_dir"
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

# Where CUDA's and NCCL's libraries may be: the usual folders and the
# Python environment's (pip's nvidia-* packages, e.g. nvidia-nccl-cu13).
lib_roots() {
    echo /usr/local /opt /usr/lib /usr/lib64
    python3 -c 'import site, sys; print("\n".join(p for p in sys.path + site.getsitepackages() if p.startswith("/")))' 2>/dev/null
}
# Of several copies of a library, the newest (by version in its real name).
newest() { # newest SONAME
    # shellcheck disable=SC2046 # one folder a word
    find $(lib_roots | sort -u) -name "$1" 2>/dev/null |
        while read -r f; do printf '%s %s\n' "$(readlink -f "$f")" "$f"; done |
        sort -V | tail -n 1 | cut -d' ' -f2
}

# The kit: its libraries first, then wherever this machine keeps the CUDA
# libraries it was linked against (searched for by name when the linker
# does not find them itself; again for what those need, since pip's
# nvidia-* packages keep each library in a folder of its own).
use_kit() {
    kit_dir=$(mktemp -d "${TMPDIR:-/tmp}/ddphook-gpu-kit.XXXXXX") ||
        fail_now "cannot make a folder for the kit"
    if ! tar -xzf "$1" -C "$kit_dir"; then
        fail_now "cannot unpack $1"
    fi
    k=$kit_dir/ddphook-gpu-kit
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
            if [ -z "$found" ]; then
                case $soname in
                libnccl*) fail_now "$soname (NCCL) not found on this machine: the kit carries none; make it with KIT_NCCL=yes sh tests/gpu/kit.sh, or install NCCL (e.g. pip install nvidia-nccl-cu13)" ;;
                *) fail_now "$soname (CUDA) not found on this machine" ;;
                esac
            fi
            # shellcheck disable=SC2046
            say "using $found (the newest of: $(find $(lib_roots | sort -u) -name "$soname" 2>/dev/null | sort -u | tr '\n' ' '))"
            LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$found")
        done
    done
    DDPHOOK=$k/bin/ddphook TEST_GPU=$k/bin/test_gpu TRAINER=$k/bin/gpu_trainer
    DEVICE_OPS=$k/bin/test_device_ops PROBE=$k/bin/nccl_probe
    PLUGINS=$k/plugins LSGD=$k/lib/post_localsgd.so
    LIBDDPHOOK=$k/lib/libddphook.so.1
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
    step 150 build sh -c "make -j$jobs && make -j$jobs tests/gpu/test_gpu tests/gpu/test_device_ops tests/gpu/nccl_probe tests/gpu/post_localsgd.la tests/gpu/qsgd.la" ||
        { build_failed; return; }
    DDPHOOK=$PWD/ddphook TEST_GPU=$PWD/tests/gpu/test_gpu
    DEVICE_OPS=$PWD/tests/gpu/test_device_ops PROBE=$PWD/tests/gpu/nccl_probe
    TRAINER=$PWD/examples/gpu_trainer PLUGINS=$PWD/plugins/.libs
    LSGD=$PWD/tests/gpu/.libs/post_localsgd.so
    LIBDDPHOOK=$PWD/.libs/libddphook.so
    DDPH_BACKEND_DIR=$PWD/runtime/backends/nccl/.libs; export DDPH_BACKEND_DIR
}

# The programs: from the kit, or built here.
prepare() {
    if [ -n "$kit" ]; then
        case $kit in /*) ;; *) kit=$top/$kit ;; esac
        use_kit "$kit"
    else
        build_here
    fi
}

