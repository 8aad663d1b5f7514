#!/bin/sh
# faults.sh: a rank is lost (it exits, is killed, is stopped, or closes the
# job early) at several points of a job, or fails alone (its hook, a NaN
# under check_finite).
# Every survivor must report the failure, naming the lost rank or the
# timeout, return from ddph_close and exit non-zero by itself within
# timeout_s + 5 s of the fault; a failure that is not a death must reach
# every rank within about a second, with the failed rank's message.
# mpiexec runs with -disable-auto-cleanup, so hydra never ends a survivor
# for us.  Exit 77 (skip) only when mpiexec is absent.
set -u
if [ -z "${MPIEXEC:-}" ] || ! command -v "$MPIEXEC" >/dev/null 2>&1; then
    echo "SKIP: mpiexec not found (apt-get install mpich)"
    exit 77
fi
B=${DDPH_TEST_BUILDDIR:?run through make check}
. "${DDPH_TEST_SRCDIR:?run through make check}/tests/ranks.sh"
TIMEOUT_S=3
LIMIT=$((TIMEOUT_S + 5))
OUT="$B/tests/out/faults"
rm -rf "$OUT"
mkdir -p "$OUT"
export DDPH_TEST_TMPDIR="$OUT" # test_runtime's job files (scenario_util.c)
job() { # job FILE HOOK [EXTRA] (EXTRA may set the bucket caps instead)
    caps='bucket_cap_mb = 0.02\nfirst_bucket_cap_mb = 0.02\n'
    case ${3:-} in *bucket_cap_mb*) caps= ;; esac
    printf "[runtime]\\nplugin_path = %s\\ntimeout_s = %s\\n$caps%s\\n[hook]\\nname = %s\\n" \
        "$DDPH_TEST_PLUGIN_DIR" "$TIMEOUT_S" "${3:-}" "$2" > "$1"
}
job "$OUT/allreduce.ini" allreduce
# One 64 KiB fp16 bucket: its sum goes round the ring of point-to-point
# messages (runtime/backends/mpi/mpi_fault.c), which must end in time as well.
job "$OUT/fp16.ini" fp16 "bucket_cap_mb = 1
shared_buckets = false"
# The same bucket summed in the memory the ranks share
# (runtime/backends/mpi/shared_buckets.c): a peer lost between its two collectives.
job "$OUT/shared.ini" fp16 "bucket_cap_mb = 1"
job "$OUT/powersgd.ini" powersgd "check_finite = true"
job "$OUT/hang.ini" "$DDPH_TEST_FAKE_DIR/hangs_last_rank.so"
job "$OUT/hook.ini" "$DDPH_TEST_FAKE_DIR/failing_last_rank.so" \
    "trace = $OUT/hook-trace.json"

pass=0
fail=0
# record WHY NAME SUMMARY LOG: a PASS line when WHY is empty, else a FAIL
# line with the log (and status 1).
record() {
    if [ -z "$1" ]; then
        pass=$((pass + 1))
        echo "PASS: $2 :: $3"
        return 0
    fi
    fail=$((fail + 1))
    echo "FAIL: $2: $1"
    sed 's/^/    /' "$4"
    return 1
}
now() { date +%s.%N; }
# Seconds from a to b, one decimal.
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
# The time on a rank's last "SURVIVOR rank R: ... at T, exit 4" line.
exit_time() {
    grep "^SURVIVOR rank $2: .* exit 4" "$1" | tail -n 1 |
        sed -n 's/.* at \([0-9.]*\), exit 4$/\1/p'
}

# snapshot DIR LASTRANK [stacks]: each rank's process as the wait for it
# ended (its state, each thread's kernel wait channel and, with "stacks"
# where gdb is installed, its stack), printed if the scenario fails: a rank
# that said nothing must still show where it was.
snapshot() {
    for _r in $(seq 0 "$2"); do
        _pid=$(cat "$1/pid.$_r" 2>/dev/null) ||
            { echo "rank $_r: no pid file (ddph_open never returned)"; continue; }
        _st=$(ps -o stat=,etimes= -p "$_pid" 2>/dev/null)
        echo "rank $_r: pid $_pid, state/age ${_st:-gone}"
        [ -n "$_st" ] || continue
        for _t in /proc/"$_pid"/task/*; do
            echo "  thread $(cat "$_t/comm" 2>/dev/null): $(cat "$_t/wchan" 2>/dev/null)"
        done
        [ "${3:-}" = stacks ] && command -v gdb >/dev/null 2>&1 &&
            timeout 20 gdb -p "$_pid" -batch -ex 'thread apply all bt 12' 2>/dev/null |
            grep '^#\|^Thread' | sed 's/^/    /'
    done
}

# scenario N FAULT POINT JOB
scenario() {
    n=$1 what=$2 point=$3 ini=$4
    jobname=$(basename "$ini" .ini)
    dir="$OUT/$n-$what-$point-$jobname"
    mkdir -p "$dir"
    log="$dir/log"
    # UCX's single-copy shared-memory transport (CMA) aborts a rank whose
    # peer vanished in the middle of a large copy, before ddphook can say
    # anything (a failed job's peers exit while its transfers are in
    # flight), and so does its TCP transport's zero-copy PUT (tcp_ep.c:
    # "Assertion `ep->flags & UCT_TCP_EP_FLAG_PUT_TX_WAITING_ACK'
    # failed", in MPI_Test); the scenarios that end in a failure test
    # ddphook's reports, so both are off for them (and on for SIGKILL: see
    # kill below).  Jobs that end well keep them: MPICH 4.0's finalize can
    # deadlock without CMA.
    tls=""
    case $what in exit | exit0 | stop | close | hook | hang | last | average)
        tls="UCX_TLS=^cma UCX_TCP_PUT_ENABLE=n" ;;
    esac
    # shellcheck disable=SC2086 # $tls is assignments or nothing
    env $tls "$MPIEXEC" -disable-auto-cleanup -n "$n" \
        "$B/tests/mpi/fault_trainer" "$ini" "$what" "$point" "$dir" \
        </dev/null >"$log" 2>&1 &
    mp=$!
    victim=$((n - 1))
    t_gone=""
    t0=$(now)
    # Wait until every survivor is gone (or far too long has passed).
    while :; do
        sleep 0.2
        # shellcheck disable=SC2046 # the ranks, one word each
        if ranks_gone "$dir" $(seq 0 $((victim - 1))); then
            t_gone=$(now)
            break
        fi
        awk -v a="$t0" -v b="$(now)" -v l=$((LIMIT + 20)) \
            'BEGIN { exit !(b - a > l) }' && break
    done
    waited=$(elapsed "$t0" "$(now)")
    # Stacks only when the wait ran out: attaching gdb takes seconds.
    stacks=""
    [ -n "$t_gone" ] || stacks=stacks
    snapshot "$dir" "$victim" $stacks >"$dir/state" 2>&1
    # The victim may be stopped, and mpiexec waits for it.
    vpid=$(cat "$dir/pid.$victim" 2>/dev/null) && kill -KILL "$vpid" 2>/dev/null
    why=""
    stamp=$(cat "$dir/fault" 2>/dev/null)
    case $what in
    kill)
        # SIGKILL is reported by hydra itself, which then ends the job even
        # with -disable-auto-cleanup (and UCX's shared-memory transport
        # aborts a rank whose peer vanished mid-copy): the survivors must be
        # gone in time, by their own exit or the launcher's.
        if [ -z "$stamp" ]; then
            why="the victim never reached its fault"
        elif [ -z "$t_gone" ]; then
            why="survivors still running $((LIMIT + 20)) s after the start"
        else
            worst=$(elapsed "$stamp" "$t_gone")
            awk -v x="$worst" -v l=$LIMIT 'BEGIN { exit !(x > l) }' &&
                why="survivors gone only ${worst} s after the fault (limit $LIMIT s)"
        fi
        reported=$(grep -c "^SURVIVOR rank [0-9]*: .* exit 4" "$log")
        summary="every survivor gone ${worst:-?} s after the fault ($reported reported and exited 4 themselves, the launcher ended the rest)"
        ;;
    exit | exit0 | stop | close)
        [ -n "$stamp" ] || why="the victim never reached its fault"
        for r in $(seq 0 $((victim - 1))); do
            [ -n "$why" ] && break
            pid=$(cat "$dir/pid.$r")
            if alive "$pid"; then
                why="rank $r still running"
                break
            fi
            t=$(exit_time "$log" "$r")
            if [ -z "$t" ]; then
                why="rank $r did not report and exit 4"
                break
            fi
            took=$(elapsed "$stamp" "$t")
            # A rank that closes early says so: no timeout to wait for.
            limit=$LIMIT
            case $what in close | exit0) limit=2 ;; esac
            if awk -v x="$took" -v l=$limit 'BEGIN { exit !(x > l) }'; then
                why="rank $r exited ${took} s after the fault (limit $limit s)"
                break
            fi
            grep -q "rank $r.*\(timeout_s = $TIMEOUT_S\|rank [0-9]* failed\|rank [0-9]* closed the job\|ranks* [0-9, ]* cannot be reached\)" "$log" ||
                why="rank $r names neither the timeout nor the failed rank"
            # A stopped rank answers no roll call: every survivor names it
            # (from its own roll call, or in the notice of the first).
            # exit() ran ddphook's exit handler: the victim said how it left.
            [ "$what" = exit0 ] && [ -z "$why" ] &&
                ! grep -q "^ddphook\[rank $r\]: error: .*rank $victim failed: rank $victim exited (exit(), quick_exit() or a return from main)" "$log" &&
                why="rank $r does not say that rank $victim exited"
            [ "$what" = stop ] && [ -z "$why" ] &&
                ! grep -q "rank $r.*ranks* \([0-9]*, \)*$victim\(, [0-9]*\)* did not answer" "$log" &&
                why="rank $r does not name the stopped rank $victim"
            worst=$took
        done
        summary="every survivor exited 4 by itself, the last ${worst:-?} s after the fault"
        ;;
    hook | nan | hang)
        want="rank $victim failed: hook 'fake' failed on model 'net' bucket 1 (rank $victim): DDPH_ERR_HOOK: fake failure of the last rank"
        [ "$what" = hang ] &&
            want="rank $victim failed: hook 'fake' has not returned from model 'net' bucket 1 (rank $victim) after [0-9.]* s, [0-9.]* s of it outside any collective (timeout_s = $TIMEOUT_S): it is stuck"
        [ "$what" = nan ] &&
            want="rank $victim failed: model 'net' bucket [0-9]* (rank $victim): gradient of 'w2' is not finite at element 7"
        first="" last=""
        for r in $(seq 0 $victim); do
            t=$(exit_time "$log" "$r")
            if [ -z "$t" ]; then
                why="rank $r did not report and exit 4"
                break
            fi
            [ -z "$first" ] || awk -v a="$t" -v b="$first" 'BEGIN { exit !(a < b) }' && first=$t
            [ -z "$last" ] || awk -v a="$t" -v b="$last" 'BEGIN { exit !(a > b) }' && last=$t
            [ "$r" -eq "$victim" ] && continue
            grep -q "^SURVIVOR rank $r: .*$want" "$log" ||
                why="rank $r's report lacks '$want'"
        done
        spread=$(elapsed "${first:-0}" "${last:-0}")
        [ -z "$why" ] && awk -v x="$spread" 'BEGIN { exit !(x > 1.5) }' &&
            why="reports spread over $spread s"
        summary="every rank reported rank $victim's failure within $spread s of each other"
        ;;
    last | average)
        # Uneven inputs: the survivors, still stepping, hear at once that
        # the victim left its steps, and say which rank and when.
        want="rank $victim ended its data (DDPH_STEP_LAST) after [0-9]* synchronised steps, while this rank waits on a collective of its step [0-9]*"
        [ "$what" = average ] &&
            want="rank $victim called ddph_average_f64 after [0-9]* synchronised steps, while this rank waits on a collective of its step [0-9]*"
        [ -n "$stamp" ] || why="the victim never reached its fault"
        for r in $(seq 0 $((victim - 1))); do
            [ -n "$why" ] && break
            t=$(exit_time "$log" "$r")
            if [ -z "$t" ]; then
                why="rank $r did not report and exit 4"
                break
            fi
            took=$(elapsed "$stamp" "$t")
            if awk -v x="$took" 'BEGIN { exit !(x > 2) }'; then
                why="rank $r exited ${took} s after the fault (limit 2 s)"
                break
            fi
            grep -q "^SURVIVOR rank $r: .*$want" "$log" ||
                why="rank $r's report lacks '$want'"
            worst=$took
        done
        summary="every other rank named rank $victim and exited 4, the last ${worst:-?} s after its last step"
        ;;
    none | fork)
        grep -q '^ok$' "$log" || why="the healthy job did not finish"
        summary="the healthy job finished"
        ;;
    esac
    # Whatever is left of the job (survivors that failed the test).
    for r in $(seq 0 "$victim"); do
        pid=$(cat "$dir/pid.$r" 2>/dev/null) && kill -KILL "$pid" 2>/dev/null
    done
    pkill -KILL -P "$mp" 2>/dev/null
    kill -KILL "$mp" 2>/dev/null
    wait "$mp" 2>/dev/null
    record "$why" "-n $n $what $point ($jobname)" "$summary" "$log" || {
        echo "  the ranks $waited s after the start, when the wait for them ended:"
        sed 's/^/    /' "$dir/state"
    }
}

A="$OUT/allreduce.ini"
scenario 4 none none "$A"
# A forked child (a data loader) that calls exit(0) leaves the job alone.
scenario 4 fork mid-step "$A"
for point in mid-step mid-accumulation during-save before-close; do
    scenario 4 exit "$point" "$A"
    scenario 4 stop "$point" "$A"
done
scenario 4 close mid-step "$A"
scenario 4 close mid-accumulation "$A"
scenario 4 kill mid-step "$A"
scenario 4 kill during-save "$A"
scenario 2 exit mid-step "$A"
# exit(0) with the job open: the leaving rank's own exit handler tells
# its peers at once, with or without a step in flight.
scenario 4 exit0 mid-step "$A"
scenario 2 exit0 before-close "$A"

# under_launcher N FAULT POINT: exit(0) under hydra's own clean-up (no
# -disable-auto-cleanup), which kills the other ranks within tens of
# milliseconds of the first one's end and, without ddphook's exit handler,
# reports success (-n 2) or its own bare "BAD TERMINATION" (-n 4).
# mpiexec must end non-zero with the leaving rank named.
under_launcher() {
    dir="$OUT/launcher-$1-$2-$3"
    mkdir -p "$dir"
    UCX_TLS=^cma UCX_TCP_PUT_ENABLE=n timeout $((LIMIT + 20)) "$MPIEXEC" -n "$1" \
        "$B/tests/mpi/fault_trainer" "$A" "$2" "$3" "$dir" </dev/null >"$dir/log" 2>&1
    rc=$?
    v=$(($1 - 1))
    named=$(grep "^ddphook\[rank [0-9]*\]: error: .*rank $v failed: rank $v exited" "$dir/log" |
        sed 's/\].*//' | sort -u | wc -l)
    why=""
    if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
        why="mpiexec status $rc"
    elif ! grep -q "rank $v exited (exit(), quick_exit() or a return from main) .*without ddph_close: the job fails; exiting with status 1" "$dir/log"; then
        why="rank $v does not say that it exited"
    fi
    record "$why" "-n $1 $2 $3 under hydra's clean-up" \
        "mpiexec status $rc, rank $v named by itself and by $named of $v survivors" "$dir/log"
}
under_launcher 2 exit0 mid-step
under_launcher 4 exit0 mid-step
under_launcher 4 exit0 before-close
under_launcher 2 quick_exit0 mid-step
scenario 2 stop before-close "$A"
scenario 4 hook mid-step "$OUT/hook.ini"
rm -f "$OUT"/hook-trace.json*
scenario 2 hook mid-step "$OUT/hook.ini"
# A failed job still leaves its timeline: each rank's own, marked.
traces_ok=1
for r in 0 1; do
    t="$OUT/hook-trace.json.rank$r"
    grep -q '"ended":"in failure"' "$t" 2>/dev/null &&
        grep -q '"name":"job failed"' "$t" &&
        grep -q 'fake failure of the last rank' "$t" &&
        grep -q '"name":"step_wait"\|"name":"hook ' "$t" || traces_ok=0
done
if [ "$traces_ok" -eq 1 ] && [ ! -e "$OUT/hook-trace.json" ]; then
    pass=$((pass + 1)); echo "PASS: a failed job writes each rank's timeline, marked as ending in failure"
else
    fail=$((fail + 1)); echo "FAIL: timeline of a failed job:"; ls -l "$OUT"/hook-trace.json* 2>&1 | sed 's/^/    /'
fi
scenario 4 nan mid-step "$OUT/powersgd.ini"
# A rank stopped before MPI's start-up: the others are in MPI_Init_thread,
# which nothing can interrupt; its watchdog ends them after timeout_s.
dir="$OUT/2-stop-before-open"
mkdir -p "$dir"
t0=$(now)
timeout 60 "$MPIEXEC" -disable-auto-cleanup -n 2 "$B/tests/mpi/fault_trainer" \
    "$A" stop before-open "$dir" </dev/null >"$dir/log" 2>&1 &
mp=$!
for i in $(seq 1 100); do
    sleep 0.2
    grep -q "MPI_Init_thread (in ddph_open) did not return within $TIMEOUT_S s" "$dir/log" && break
done
t1=$(now)
vpid=$(cat "$dir/pid.1" 2>/dev/null) && kill -KILL "$vpid" 2>/dev/null
pkill -KILL -P "$mp" 2>/dev/null
kill -KILL "$mp" 2>/dev/null
wait "$mp" 2>/dev/null
took=$(elapsed "$t0" "$t1")
if grep -q "MPI_Init_thread (in ddph_open) did not return within $TIMEOUT_S s (a peer rank stopped" "$dir/log" &&
   awk -v x="$took" -v l=$LIMIT 'BEGIN { exit !(x <= l) }'; then
    pass=$((pass + 1)); echo "PASS: -n 2 stop before-open :: rank 0 gave up MPI's start-up after ${took} s, saying why"
else
    fail=$((fail + 1)); echo "FAIL: -n 2 stop before-open (${took} s)"; sed 's/^/    /' "$dir/log"
fi
scenario 2 last short "$A"
scenario 4 last short "$A"
scenario 2 average short "$A"
scenario 4 average short "$A"
scenario 2 hang mid-step "$OUT/hang.ini"
scenario 4 hang mid-step "$OUT/hang.ini"
scenario 4 kill mid-step "$OUT/fp16.ini"
scenario 4 stop mid-step "$OUT/fp16.ini"
scenario 3 exit mid-step "$OUT/fp16.ini"
scenario 4 kill mid-step "$OUT/shared.ini"
scenario 4 stop mid-step "$OUT/shared.ini"
scenario 3 exit mid-step "$OUT/shared.ini"
# Killed at random moments while the shared segments are made and used:
# nothing is ever left in /dev/shm (the segment never has a name).
before=$(ls /dev/shm | grep -c '^ddphook' || true)
for i in $(seq 1 10); do
    delay=$(awk -v i="$i" 'BEGIN { srand(i * 7919); printf "%.2f", 0.05 + rand() * 0.6 }')
    DDPH_TEST_PLUGIN_DIR="$DDPH_TEST_PLUGIN_DIR" "$MPIEXEC" -n 2 \
        "$B/tests/mpi/test_runtime" shared-buckets </dev/null >/dev/null 2>&1 &
    mp=$!
    sleep "$delay"
    # The ranks are the children of hydra's proxies, mpiexec's children:
    # found by pid (a pattern would also kill run_mpi.sh's own
    # shared-buckets job when make check runs both at once); mpiexec and
    # each proxy are stopped first so that none starts a process after
    # its list is read.
    kill -STOP "$mp" 2>/dev/null
    for proxy in $(pgrep -P "$mp"); do
        kill -STOP "$proxy" 2>/dev/null
        pkill -KILL -P "$proxy" 2>/dev/null
        kill -KILL "$proxy" 2>/dev/null
    done
    kill -KILL "$mp" 2>/dev/null
    wait "$mp" 2>/dev/null
done
after=$(ls /dev/shm | grep -c '^ddphook' || true)
if [ "$after" -le "$before" ]; then
    pass=$((pass + 1)); echo "PASS: 10 jobs killed at random moments while making shared buckets: nothing left in /dev/shm"
else
    fail=$((fail + 1)); echo "FAIL: killed jobs left files in /dev/shm:"; ls -l /dev/shm | grep ddphook | sed 's/^/    /'
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
