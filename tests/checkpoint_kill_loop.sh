#!/bin/sh
# checkpoint_kill_loop.sh: random kills never lose the last good
# checkpoint.  4 ranks of tests/mpi/ckpt_trainer save their hook state
# (topk) after each of STEPS steps; a random rank is SIGKILLed at a random
# moment.  After each kill every rank loads: the load must succeed and
# give, bit for bit, the state of the last save that returned DDPH_OK
# (rank 0 records it) or of the one after it (a save in flight may have
# completed), never an older one.  Not part of make check (a short run is,
# from tests/checkpoint_crash.sh); run it from the build folder:
#
#   KILLS=50 sh tests/checkpoint_kill_loop.sh
#
# KILLS (50) kills that landed before the run ended; STEPS (8); CKPT_NUMEL
# (262144) floats of state a rank; KILL_LOOP_OUT (tests/out/...) its
# folder; DDPH_TEST_BUILDDIR (.), MPIEXEC
# (mpiexec), DDPH_TEST_PLUGIN_DIR (plugins/.libs) as under make check.
# Prints one line per kill and "N kills, M inside a save, 0 lost" last.
set -u
B=${DDPH_TEST_BUILDDIR:-$(pwd)}
MPIEXEC=${MPIEXEC:-mpiexec}
PLUGINS=${DDPH_TEST_PLUGIN_DIR:-$B/plugins/.libs}
KILLS=${KILLS:-50}
STEPS=${STEPS:-8}
NUMEL=${CKPT_NUMEL:-262144}
W=4
T="$B/tests/mpi/ckpt_trainer"
OUT=${KILL_LOOP_OUT:-$B/tests/out/checkpoint_kill_loop}
if ! command -v "$MPIEXEC" >/dev/null 2>&1 || [ ! -x "$T" ]; then
    echo "SKIP: needs $MPIEXEC and $T (make check builds it)"
    exit 77
fi
rm -rf "$OUT"
mkdir -p "$OUT/state"
chmod 755 "$OUT" "$OUT/state"
OPENBLAS_NUM_THREADS=1
export OPENBLAS_NUM_THREADS
job="$OUT/topk.ini"
printf '[runtime]\nplugin_path = %s\ntimeout_s = 20\n[hook]\nname = topk\n[hook.topk]\nratio = 0.01\n' \
    "$PLUGINS" > "$job"
payload() { tail -c +37 "$1" | head -c -4 | cksum; }
# The state of every step, from one uninterrupted run.
t0=$(date +%s.%N)
if ! out=$(timeout 600 "$MPIEXEC" -n $W "$T" "$job" "$OUT/ref" $NUMEL refs "$STEPS" </dev/null 2>&1); then
    echo "FAIL: reference run"
    printf '%s\n' "$out"
    exit 1
fi
t1=$(date +%s.%N)
run_s=$(echo "$t0 $t1" | awk '{print $2 - $1}')
for k in $(seq 1 "$STEPS"); do
    for r in 0 1 2 3; do
        payload "$OUT/ref.step$k.rank$r" > "$OUT/ref.step$k.rank$r.sum"
    done
done
# which_step PREFIX: the step whose reference every rank's file equals.
which_step() {
    for k in $(seq 1 "$STEPS"); do
        same=1
        for r in 0 1 2 3; do
            [ -f "$1.rank$r" ] && [ "$(payload "$1.rank$r")" = "$(cat "$OUT/ref.step$k.rank$r.sum")" ] || same=0
        done
        [ "$same" = 1 ] && { echo "$k"; return; }
    done
    echo none
}
rand() { od -An -N4 -tu4 /dev/urandom | tr -d ' '; }

kills=0 inside=0 lost=0 tries=0
echo "one run: $run_s s (start-up included); killing at random moments after a rank's start-up"
while [ "$kills" -lt "$KILLS" ] && [ "$tries" -lt $((KILLS * 4)) ]; do
    tries=$((tries + 1))
    rm -f "$OUT"/pid.*
    before=$(cat "$OUT/committed" 2>/dev/null || echo "none 0")
    CKPT_PIDS="$OUT/pid" timeout 300 "$MPIEXEC" -n $W "$T" "$job" "$OUT/state/ck" \
        $NUMEL run "$STEPS" "$OUT/committed" "$tries" </dev/null >"$OUT/log" 2>&1 &
    launcher=$!
    # A rank, and a moment after its start-up (ddph_open) in the run.
    victim=$(( $(rand) % W ))
    waited=0
    while [ ! -s "$OUT/pid.$victim" ] && [ "$waited" -lt 600 ] &&
          kill -0 "$launcher" 2>/dev/null; do
        sleep 0.1
        waited=$((waited + 1))
    done
    # (start-up is about half a run: the rest of it is the window)
    delay=$(echo "$(rand) $run_s" | awk '{printf "%.3f", ($1 % 1000000) / 1000000 * $2 * 0.6}')
    sleep "$delay"
    pid=$(cat "$OUT/pid.$victim" 2>/dev/null || true)
    killed=0
    if [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; then
        killed=1
    fi
    wait "$launcher"
    rc=$?
    if [ "$killed" = 0 ] || [ "$rc" -eq 0 ]; then
        continue # the run had not started or had ended: not a kill
    fi
    kills=$((kills + 1))
    # A kill between a rank's write and its commit leaves a .next file.
    if ls "$OUT/state" | grep -q -e '\.next' -e '\.rank[0-9]*\.[A-Za-z0-9]\{6\}$'; then
        inside=$((inside + 1))
        where="inside a save"
    else
        where="between saves"
    fi
    now=$(cat "$OUT/committed" 2>/dev/null || echo "none 0")
    # Allowed: the last committed step, or the one after it (this run's
    # next save, or its first if it committed none yet).
    set -- $now
    if [ "$1" = "$tries" ]; then
        allowed="$2 $(($2 + 1))"
    else
        allowed="$2 1"
    fi
    rm -f "$OUT"/check.rank*
    if [ "$now" = "none 0" ]; then
        # Nothing was ever committed: nothing to lose.
        echo "kill $kills: rank $victim at $delay s, $where, before any save completed"
        continue
    fi
    if ! out=$(timeout 300 "$MPIEXEC" -n $W "$T" "$job" "$OUT/state/ck" $NUMEL verify "$OUT/check" </dev/null 2>&1); then
        lost=$((lost + 1))
        echo "LOST: kill $kills (rank $victim at $delay s, $where): the load failed"
        printf '%s\n' "$out" | tail -5 | sed 's/^/    /'
        continue
    fi
    got=$(which_step "$OUT/check")
    case " $allowed " in
    *" $got "*)
        echo "kill $kills: rank $victim at $delay s, $where; committed: $before -> $now; loaded step $got bit for bit" ;;
    *)
        lost=$((lost + 1))
        echo "LOST: kill $kills (rank $victim at $delay s, $where): loaded step $got, allowed $allowed" ;;
    esac
done
echo "$kills kills, $inside inside a save, $lost lost"
[ "$lost" -eq 0 ] && [ "$kills" -ge "$KILLS" ]
