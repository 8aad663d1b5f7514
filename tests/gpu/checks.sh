#!/bin/sh
# checks.sh: the GPU checks that are more than one program, as a script
# of their own so that run.sh and oneshot.sh can start them under
# `timeout` (which starts programs, never a shell function).
#
#   sh checks.sh trainer OUT TRAINER JOB CPU_JOB [LAUNCH...]
#       the GPU trainer under JOB, then with --host under CPU_JOB (the
#       same training, gradients handed over in host memory, backend =
#       mpi), both 200 steps, LAUNCH (e.g. mpiexec -n 2) before each: the
#       loss must fall and the final losses agree within 2% (the hooks'
#       GEMMs and sums round differently on the two devices)
#   sh checks.sh bench OUT HOOKS COMMAND...
#       COMMAND (ddphook bench gpu) must succeed and print its baseline
#       and a line for each hook of the comma-separated HOOKS
#   sh checks.sh torch OUT LIBDDPHOOK PLUGINS
#       tests/gpu/torch_cuda.py: a CUDA DDP model through ddphook.torch
#       (backend = nccl, fp16 and PowerSGD) against the same model on the
#       CPU; Python is $PYTHON, else python3; exit 77 (with the reason
#       on the last line) where it has no torch with CUDA
#   sh checks.sh refused PATTERN COMMAND...
#       COMMAND must fail, and say PATTERN (grep -E)
# Logs go to OUT; the output is what the report keeps.
set -u
final_loss() { # final_loss LOG: "first last" of "loss A -> B over"
    sed -n 's/.*loss \([0-9.e+-]*\) -> \([0-9.e+-]*\) over.*/\1 \2/p' "$1"
}
what=${1:?"usage: checks.sh trainer|bench|torch|refused ..."}
shift
case $what in
trainer)
    out=$1 trainer=$2 job=$3 cpu_job=$4
    shift 4
    "$@" "$trainer" "$job" 200 >"$out/trainer.log" 2>&1
    rc=$?
    cat "$out/trainer.log"
    [ $rc -eq 0 ] || exit $rc
    "$@" "$trainer" "$cpu_job" 200 --host >"$out/trainer_cpu.log" 2>&1
    rc=$?
    sed 's/^/cpu backend: /' "$out/trainer_cpu.log"
    [ $rc -eq 0 ] || exit $rc
    printf '%s %s\n' "$(final_loss "$out/trainer.log")" \
        "$(final_loss "$out/trainer_cpu.log")" | awk '
        NF != 4 { print "no final loss in the output"; exit 1 }
        { d = $2 - $4; if (d < 0) d = -d
          fell = $2 < $1; near = d <= 0.02 * $4
          print "loss " $1 " -> " $2 (fell ? " (fell)" : " (did NOT fall)")
          print "cpu backend: " $4 ", difference " d (near ? " (within 2%)" : " (NOT within 2%)")
          exit !(fell && near) }'
    ;;
bench)
    out=$1 hooks=$2
    shift 2
    "$@" >"$out/bench.log" 2>&1
    rc=$?
    cat "$out/bench.log"
    [ $rc -eq 0 ] || exit $rc
    # The baseline first: a hook's ratio means nothing without it.
    for h in "raw ncclAllReduce" $(echo "$hooks" | tr ',' ' '); do
        grep -q "$h" "$out/bench.log" || { echo "no result for $h"; exit 1; }
    done
    ;;
torch)
    out=$1 lib=$2 plugins=$3
    py=${PYTHON:-python3}
    command -v "$py" >/dev/null 2>&1 || { echo "no $py here"; exit 77; }
    top=$(cd "$(dirname "$0")/../.." && pwd)
    DDPHOOK_LIBRARY=$lib PYTHONPATH=$top/python${PYTHONPATH:+:$PYTHONPATH} \
        "$py" "$top/tests/gpu/torch_cuda.py" --out "$out/torch_cuda" \
        --plugin-path "$plugins"
    ;;
refused)
    pattern=$1
    shift
    log=$("$@" 2>&1)
    rc=$?
    printf '%s\n' "$log"
    [ $rc -ne 0 ] || { echo "it ran: exit 0, where a refusal was due"; exit 1; }
    printf '%s\n' "$log" | grep -Eq "$pattern" ||
        { echo "exit $rc, but no line says: $pattern"; exit 1; }
    echo "refused (exit $rc), saying: $pattern"
    ;;
*)
    echo "checks.sh: unknown check $what" >&2
    exit 2
    ;;
esac
