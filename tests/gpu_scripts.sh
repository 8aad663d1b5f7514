#!/bin/sh
# gpu_scripts.sh: tests/gpu/run.sh and tests/gpu/oneshot.sh start every
# step they list, checked here without a GPU, so that a step that cannot
# start never reaches a GPU machine.  Stand-ins: an nvidia-smi that shows
# N H100s with driver 580, a compute-sanitizer that runs its program, and
# a kit (as tests/gpu/kit.sh packs it) whose programs log each start and
# succeed, or fail when their name is in STANDIN_FAIL.  Each run must end
# every step as expected, and each program must have been started.
# Last, oneshot.sh without a GPU: every step "not run: no CUDA device",
# exit 77, nothing built.
set -u
S=${DDPH_TEST_SRCDIR:?run through make check}
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "PASS: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; }

mkdir -p "$T/bin" "$T/kit/ddphook-gpu-kit/bin" "$T/kit/ddphook-gpu-kit/lib" \
    "$T/kit/ddphook-gpu-kit/plugins" "$T/kit/ddphook-gpu-kit/backends"
cat >"$T/bin/nvidia-smi" <<'EOF'
#!/bin/sh
# STANDIN_GPUS H100s, driver 580, compute capability 9.0 (none: it fails).
n=${STANDIN_GPUS:-1}
[ "$n" -gt 0 ] || { echo "NVIDIA-SMI has failed: no device"; exit 9; }
i=0
while [ $i -lt "$n" ]; do
    case "$*" in
    -L) echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-standin-$i)" ;;
    *driver_version*) echo "580.159.04" ;;
    *compute_cap*) echo "9.0" ;;
    esac
    i=$((i + 1))
done
EOF
cat >"$T/bin/compute-sanitizer" <<'EOF'
#!/bin/sh
echo "compute-sanitizer $*" >>"$STANDIN_LOG"
while [ $# -gt 0 ]; do
    case $1 in --tool|--error-exitcode) shift 2 ;; *) break ;; esac
done
exec "$@"
EOF
# A kit program: logs its start, then does its part of the output.
standin() { # standin NAME BODY
    {
        echo '#!/bin/sh'
        echo "echo \"$1 \$*\" >>\"\$STANDIN_LOG\""
        echo "case \" \${STANDIN_FAIL:-} \" in *\" $1 \"*) echo \"$1: failing on demand\"; exit 1 ;; esac"
        printf '%s\n' "$2"
    } >"$T/kit/ddphook-gpu-kit/bin/$1"
}
standin test_gpu 'echo "test_gpu: all passed"'
standin test_device_ops 'echo "test_device_ops: all passed"'
standin nccl_probe 'echo "probe: done"'
standin gpu_trainer '
if [ "${STANDIN_RANKS:-1}" -gt 1 ] && [ "${CUDA_VISIBLE_DEVICES:-}" = 0 ]; then
    echo "rank 1 and rank 0 would share GPU 0 of their host"; exit 1
fi
[ "${STANDIN_RANK:-0}" -eq 0 ] || exit 0 # rank 0 reports
echo "gpu_trainer: ${STANDIN_RANKS:-1} ranks, loss 2.300000 -> 0.500000 over $2 steps"'
standin ddphook '
hooks=allreduce,fp16
while [ $# -gt 0 ]; do [ "$1" = --hooks ] && hooks=$2; shift; done
echo "  raw ncclAllReduce 1.000"
for h in $(echo "$hooks" | tr , " "); do echo "  $h 1.000"; done'
standin mpiexec '
[ "$1" = -n ] || exit 2
n=$2; shift 2
i=0
while [ $i -lt "$n" ]; do
    STANDIN_RANKS=$n STANDIN_RANK=$i "$@" || exit
    i=$((i + 1))
done'
cp "$T/kit/ddphook-gpu-kit/bin/mpiexec" "$T/kit/ddphook-gpu-kit/bin/hydra_pmi_proxy"
# Python for the PyTorch row (PYTHON): torch_cuda.py passes, or finds no
# CUDA (STANDIN_NO_CUDA) and says so.
cat >"$T/bin/standin-python" <<'EOF'
#!/bin/sh
echo "python $* DDPHOOK_LIBRARY=$DDPHOOK_LIBRARY" >>"$STANDIN_LOG"
case " ${STANDIN_FAIL:-} " in *" python "*) echo "python: failing on demand"; exit 1 ;; esac
[ -z "${STANDIN_NO_CUDA:-}" ] || { echo "not run: torch 2.9 has no CUDA device"; exit 77; }
echo "PASS: fp16"
EOF
chmod +x "$T/bin/"* "$T/kit/ddphook-gpu-kit/bin/"*
printf '%s\n' "ddphook GPU kit" "source: stand-in" \
    "built: now on x86_64, CUDA 13.0, sm 80 90" \
    "needs: NVIDIA driver >= 580, CUDA 13's libraries, glibc >= 2.34" \
    >"$T/kit/ddphook-gpu-kit/MANIFEST"
kit=$T/standin-kit.tar.gz
tar -czf "$kit" -C "$T/kit" ddphook-gpu-kit || exit 1

# run_script NAME GPUS FAIL SCRIPT ARGS...: runs it with the stand-ins;
# $T/NAME/report.txt is its report, $T/NAME/log what it started.
run_script() {
    name=$1 gpus=$2 failing=$3
    shift 3
    mkdir -p "$T/$name"
    : >"$T/$name/log"
    STANDIN_GPUS=$gpus STANDIN_FAIL=$failing STANDIN_LOG=$T/$name/log \
        PYTHON=$T/bin/standin-python \
        OUT=$T/$name PATH=$T/bin:$PATH TMPDIR=$T \
        timeout 120 sh "$@" >"$T/$name/stdout" 2>&1
    rc=$?
    cp "$T/$name"/*report.txt "$T/$name/report.txt" 2>/dev/null
}
# expect NAME RC LAST: the exit status and the report's last line.
expect() {
    if [ "$rc" -eq "$2" ] && [ "$(tail -n 1 "$T/$1/report.txt")" = "$3" ]; then
        ok "$1: exit $2, \"$3\""
    else
        bad "$1: exit $rc (want $2), last line \"$(tail -n 1 "$T/$1/report.txt" 2>/dev/null)\" (want \"$3\")"
        sed 's/^/    /' "$T/$1/stdout"
    fi
}
# step_is NAME LABEL RESULT: the report's line for LABEL says RESULT.
step_is() {
    if grep -q -- "^-- $2: $3" "$T/$1/report.txt"; then
        ok "$1: $2: $3"
    else
        bad "$1: $2: not \"$3\": $(grep -- "^-- $2:" "$T/$1/report.txt")"
    fi
}
# started NAME COUNT PATTERN: the stand-ins logged PATTERN COUNT times.
started() {
    n=$(grep -c -- "$3" "$T/$1/log")
    [ "$n" -eq "$2" ] && ok "$1: started \"$3\" $2 times" ||
        bad "$1: started \"$3\" $n times, not $2"
}

# The issue's machine: one H100, driver 580.  The 2-rank steps cannot run.
run_script run1 1 "" "$S/tests/gpu/run.sh" --kit "$kit"
expect run1 77 "== NOT RUN: 7 passed, 0 failed, 3 not run"
for label in driver "test_gpu, 1 rank" "device operations against the CPU" \
    "examples/gpu_trainer, powersgd, 1 rank, against the CPU backend" \
    "ddphook bench gpu, 1 rank" "test_gpu under compute-sanitizer memcheck"; do
    step_is run1 "$label" pass
done
step_is run1 "test_gpu, 2 ranks" "not run: only 1 GPU here"
started run1 1 "^gpu_trainer .*gpu_powersgd.ini 200$"
started run1 1 "^gpu_trainer .*cpu_powersgd.ini 200 --host$"
started run1 1 "^ddphook bench gpu .*--hooks allreduce,fp16,powersgd"
started run1 1 "^compute-sanitizer --tool memcheck"
step_is run1 "PyTorch DDP, CUDA model through ddphook.torch, against the CPU" pass
started run1 1 "^python .*tests/gpu/torch_cuda.py --out .* --plugin-path .*/plugins DDPHOOK_LIBRARY=.*/lib/libddphook.so.1$"
[ -z "$(ls -d "$T"/ddphook-gpu-kit.* 2>/dev/null)" ] &&
    ok "run1: the unpacked kit is removed" || bad "run1: the unpacked kit is left in $T"

# Two GPUs: every step runs, the 2-rank ones through mpiexec.
run_script run2 2 "" "$S/tests/gpu/run.sh" --kit "$kit"
expect run2 0 "== PASS: 10 passed, 0 failed, 0 not run"
started run2 1 "^mpiexec -n 2 .*gpu_trainer .*cpu_powersgd.ini 200 --host$"
started run2 1 "^mpiexec -n 2 .*ddphook bench gpu"

# A program that fails is its step's FAIL, and the others still run.
run_script run3 1 "gpu_trainer" "$S/tests/gpu/run.sh" --kit "$kit"
expect run3 1 "== FAIL: 6 passed, 1 failed, 3 not run"
step_is run3 "examples/gpu_trainer, powersgd, 1 rank, against the CPU backend" "FAIL"
step_is run3 "ddphook bench gpu, 1 rank" pass

# Python without a torch with CUDA: the PyTorch row is "not run", with
# torch_cuda.py's reason; the others still pass.
STANDIN_NO_CUDA=yes run_script run4 1 "" "$S/tests/gpu/run.sh" --kit "$kit"
expect run4 77 "== NOT RUN: 6 passed, 0 failed, 4 not run"
step_is run4 "PyTorch DDP, CUDA model through ddphook.torch, against the CPU" \
    "not run: torch 2.9 has no CUDA device"
# ... and a failing one is a FAIL.
run_script run5 1 "python" "$S/tests/gpu/run.sh" --kit "$kit"
expect run5 1 "== FAIL: 6 passed, 1 failed, 3 not run"

# The one-call script on one GPU: all 9 steps start and pass.
run_script one1 1 "" "$S/tests/gpu/oneshot.sh" --out "$T/one1" --kit "$kit"
expect one1 0 "== PASS: 9 passed, 0 failed, 0 not run"
started one1 1 "^nccl_probe"
started one1 1 "^python .*tests/gpu/torch_cuda.py"
started one1 1 "^test_device_ops"
started one1 2 "^test_gpu"
started one1 1 "^mpiexec -n 2 .*gpu_trainer"
started one1 1 "^ddphook bench gpu .*--hooks allreduce,fp16,int8,topk"
step_is one1 "two ranks on one GPU refused at once" pass
# A failing program (here the probe) is a FAIL, the steps after it run.
run_script one2 1 "nccl_probe" "$S/tests/gpu/oneshot.sh" --out "$T/one2" --kit "$kit"
expect one2 1 "== FAIL: 8 passed, 1 failed, 0 not run"
step_is one2 "CUDA and NCCL semantics (nccl_probe)" FAIL

# No GPU: the dry run.  Nothing is built (no kit is unpacked either).
run_script dry 0 "" "$S/tests/gpu/oneshot.sh" --out "$T/dry"
expect dry 77 "== NOT RUN: 0 passed, 0 failed, 9 not run"
n=$(grep -c -- "^-- .*: not run: no CUDA device$" "$T/dry/report.txt")
[ "$n" -eq 9 ] && ok "dry: every step \"not run: no CUDA device\"" ||
    bad "dry: $n steps of 9 say \"not run: no CUDA device\""
[ ! -s "$T/dry/log" ] && ok "dry: nothing started" || bad "dry: started $(cat "$T/dry/log")"

echo "gpu_scripts.sh: $pass passed, $fail failed"
[ $fail -eq 0 ]
