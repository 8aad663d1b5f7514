#!/bin/sh
# run_mpi.sh: the multi-rank tests.  Every scenario of tests/mpi/test_runtime
# on the rank counts its registry gives (`test_runtime --list`: 2 and 4,
# some also 3), and the example and test trainers under `mpiexec -n 2` and
# `-n 4` (this machine has 2 cores: 4 ranks oversubscribe, which MPICH
# allows).  Exit 77 (skip) only when mpiexec is truly absent.
set -u
if [ -z "${MPIEXEC:-}" ] || ! command -v "$MPIEXEC" >/dev/null 2>&1; then
    echo "SKIP: mpiexec not found (apt-get install mpich)"
    exit 77
fi
B=${DDPH_TEST_BUILDDIR:?run through make check}
# The scenarios' job and trace files (tests/mpi/scenario_util.c): here,
# not in /tmp, where the jobs that fail on purpose would leave them.
DDPH_TEST_TMPDIR="$B/tests/out/run_mpi"
rm -rf "$DDPH_TEST_TMPDIR"
mkdir -p "$DDPH_TEST_TMPDIR" || exit 1
export DDPH_TEST_TMPDIR
fail=0
pass=0
# run N [--fails NAME] [--limit S] PROGRAM ARGS...
run() {
    n=$1; shift
    fails= limit=120
    [ "$1" = --fails ] && { fails=$2; shift 2; }
    [ "$1" = --limit ] && { limit=$2; shift 2; }
    # A job that fails on purpose leaves MPI unfinalized and ends with
    # _exit once every rank has passed its checks and a barrier (rank 0
    # prints "ok NAME"): hydra takes the first such exit for a crash and
    # would kill rank 0 before it prints (-disable-auto-cleanup, as in
    # faults.sh; seen in 1 of 9 runs of timeout-polled); a rank still
    # inside MPI when a peer exits may also be ended by MPICH.
    cleanup=
    [ -n "$fails" ] && cleanup=-disable-auto-cleanup
    # shellcheck disable=SC2086 # $cleanup is empty or one flag
    out=$(timeout "$limit" "$MPIEXEC" $cleanup -n "$n" "$@" </dev/null 2>&1)
    rc=$?
    [ -n "$fails" ] && [ $rc -ne 124 ] &&
        printf '%s\n' "$out" | grep -q "^ok $fails\$" && rc=0
    if [ $rc -eq 0 ]; then
        pass=$((pass + 1))
        echo "PASS: -n $n $(basename "$1") ${2:-} :: $(printf '%s\n' "$out" | tail -n 1)"
    else
        fail=$((fail + 1))
        echo "FAIL: -n $n $* (exit $rc)"
        printf '%s\n' "$out" | sed 's/^/    /'
    fi
}
scenarios=$("$B/tests/mpi/test_runtime" --list) ||
    { echo "FAIL: test_runtime --list"; exit 1; }
# The registry held this many scenarios when this line last changed: fewer
# (an empty or broken --list) would pass by running nothing.  Raise it
# with the scenarios you add.
MIN_SCENARIOS=55
listed=$(printf '%s\n' "$scenarios" | grep -c .)
if [ "$listed" -lt $MIN_SCENARIOS ]; then
    echo "FAIL: test_runtime --list gives $listed scenarios, fewer than $MIN_SCENARIOS"
    exit 1
fi
for n in 2 3 4; do
    while read -r name ranks fails limit; do
        case ",$ranks," in
        *",$n,"*)
            if [ "$fails" = 1 ]; then
                run "$n" --fails "$name" --limit "$limit" "$B/tests/mpi/test_runtime" "$name"
            else
                run "$n" --limit "$limit" "$B/tests/mpi/test_runtime" "$name"
            fi ;;
        esac
    done <<EOF
$scenarios
EOF
    [ $n -eq 3 ] && continue
    job="$B/tests/out/minimal.ini"
    mkdir -p "$B/tests/out"
    printf '[runtime]\nplugin_path = %s\nbucket_cap_mb = 0.1\n' \
        "$DDPH_TEST_PLUGIN_DIR" > "$job"
    run "$n" "$B/examples/minimal_trainer" "$job"
    job2="$B/tests/out/two_models.ini"
    { printf '[runtime]\nplugin_path = %s\n' "$DDPH_TEST_PLUGIN_DIR"; cat "$DDPH_TEST_SRCDIR/examples/configs/two_models.ini"; } > "$job2"
    run "$n" "$B/examples/two_models" "$job2"
    # The summary names the generator's hook statistics (PowerSGD's).
    if [ $rc -eq 0 ] && ! printf '%s\n' "$out" | grep -q "gen's hook statistics: [a-z_]* [0-9]"; then
        fail=$((fail + 1))
        echo "FAIL: -n $n two_models: no hook statistics in its summary: $(printf '%s\n' "$out" | tail -n 1)"
    fi
    # The examples with their gradients inside the buckets (they ask
    # ddph_model_grad_ptr where to write): the same summary as with copies.
    copies=$(printf '%s\n' "$out" | tail -n 1)
    printf 'gradient_as_bucket_view = true\n' >> "$job"
    run "$n" "$B/examples/minimal_trainer" "$job"
    sed 's/^\[runtime\]$/[runtime]\ngradient_as_bucket_view = true/' "$job2" > "$job2.view"
    run "$n" "$B/examples/two_models" "$job2.view"
    if [ $rc -eq 0 ] && [ "$(printf '%s\n' "$out" | tail -n 1)" != "$copies" ]; then
        fail=$((fail + 1))
        echo "FAIL: -n $n two_models as a view ended otherwise than with copies:"
        echo "    $copies"
        echo "    $(printf '%s\n' "$out" | tail -n 1)"
    fi
    run "$n" "$B/tests/mpi/replicas_trainer" "$DDPH_TEST_PLUGIN_DIR"
    # Uneven inputs under join: rank r has 3 + r batches.  Averages over
    # the world, over the ranks still training, with accumulation, and
    # through a compressing hook.
    run "$n" "$B/tests/mpi/join_trainer" "$DDPH_TEST_PLUGIN_DIR" allreduce 1 1
    run "$n" "$B/tests/mpi/join_trainer" "$DDPH_TEST_PLUGIN_DIR" allreduce 0 1
    run "$n" "$B/tests/mpi/join_trainer" "$DDPH_TEST_PLUGIN_DIR" allreduce 0 2
    run "$n" "$B/tests/mpi/join_trainer" "$DDPH_TEST_PLUGIN_DIR" fp16 1 2
    run "$n" "$B/tests/mpi/join_trainer" "$DDPH_TEST_PLUGIN_DIR" allreduce 0 2 private
    # A trainer collective while a rank has joined: reported at once.
    run "$n" --fails join-average "$B/tests/mpi/join_trainer" "$DDPH_TEST_PLUGIN_DIR" allreduce 1 1 average
done
# Lost and failing ranks: tests/faults.sh.
echo "$pass passed, $fail failed ($listed scenarios listed)"
[ $fail -eq 0 ] && [ $pass -ge $listed ]
