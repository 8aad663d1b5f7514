#!/bin/sh
# checkpoint_guard.sh: hook-state saves that cannot end well fail at that
# very save, on every rank, before anything is written; a damaged newer
# file never hides an intact checkpoint.  2 ranks of tests/mpi/ckpt_trainer
# (topk, error feedback):
#   - a save into a folder others can write (sticky, as /tmp) is refused
#     at the first save with what to do, and writes nothing; refused on
#     one rank's folder, it is refused on both; a folder of one's own
#     beside it saves and loads;
#   - a save into a folder that does not exist fails as DDPH_ERR_IO, and
#     a load of a path never saved says that PATH.rank<R> is looked for;
#   - a damaged PATH.rank1.next of a newer generation is skipped with a
#     warning naming it: the load takes the intact older generation, and
#     a save killed after it tidied leaves that generation intact;
#   - a second job saving to the path of a job whose save is in progress
#     is told "another job (pid P on HOST) is saving to PATH", and the
#     first job's save commits.
set -u
if [ -z "${MPIEXEC:-}" ] || ! command -v "$MPIEXEC" >/dev/null 2>&1; then
    echo "SKIP: mpiexec not found (apt-get install mpich)"
    exit 77
fi
B=${DDPH_TEST_BUILDDIR:?run through make check}
OUT="$B/tests/out/checkpoint_guard"
T="$B/tests/mpi/ckpt_trainer"
KILL_SO="$B/tests/tools/.libs/kill_at.so"
NUMEL=4096
W=2
# shellcheck source=tests/ckpt_common.sh
JOB_TIMEOUT=120
. "$DDPH_TEST_SRCDIR/tests/ckpt_common.sh"
trainer() { timeout 180 "$MPIEXEC" -n $W "$T" "$job" "$@" </dev/null 2>&1; }
# loads_step NAME STATE K: every rank loads STATE, and what it loaded is
# the state of step K of an uninterrupted run.
loads_step() {
    if ! out=$(trainer "$2" $NUMEL verify "$OUT/check"); then
        bad "$1: the load failed" "$out"
        return 1
    fi
    for r in 0 1; do
        if [ "$(payload "$OUT/check.rank$r")" != "$(payload "$OUT/ref.step$3.rank$r")" ]; then
            bad "$1: rank $r did not load step $3"
            return 1
        fi
    done
    ok "$1: loads step $3 bit for bit"
}
if ! out=$(trainer "$OUT/ref" $NUMEL refs 2); then
    bad "reference run" "$out"
    echo "$pass passed, $fail failed"
    exit 1
fi

# 1. A folder others can write, as /tmp: the first save is refused.
refused_save() { # NAME STATE-PATTERN FOLDERS PATTERN
    if out=$(trainer "$2" $NUMEL run 2 "$OUT/committed" yes); then
        bad "$1: saved" "$out"
    elif [ -e "$OUT/committed" ]; then
        bad "$1: a save returned DDPH_OK before the refusal" "$out"
    elif [ "$(printf '%s\n' "$out" | grep -c "^rank [0-9]: state_save failed: .*$4")" != $W ]; then
        bad "$1: not refused on every rank with the expected message" "$out"
    elif [ -n "$(find $3 -mindepth 1)" ]; then
        bad "$1: files written: $(find $3 -mindepth 1)"
    else
        ok "$1: the first save refused on every rank, nothing written ($(printf '%s\n' "$out" | grep -o "$4" | head -n 1))"
    fi
}
mkdir -m 1777 "$OUT/sticky"
chmod 1777 "$OUT/sticky"
refused_save "a sticky world-writable folder" "$OUT/sticky/ck" "$OUT/sticky" \
    "its folder $OUT/sticky is writable by other users, who could replace it (sticky, as /tmp, is not enough for the file's own folder): use a folder only you can write, e.g. \$HOME/ckpt or one made with mkdir -m 700 $OUT/sticky/mine"
mkdir -p "$OUT/per/r0" "$OUT/per/r1"
chmod 1777 "$OUT/per/r1"
refused_save "rank 1's folder alone" "$OUT/per/r%d/ck" "$OUT/per/r0 $OUT/per/r1" \
    "state_save (nothing was written): refusing state file $OUT/per/r1/ck.rank1 (at $OUT/per/r1): its folder"
# A folder that does not exist: an I/O failure (DDPH_ERR_IO), naming the
# file and the cause, not a hook plugin's (DDPH_ERR_PLUGIN).
if out=$(trainer "$OUT/absent/ck" $NUMEL run 2); then
    bad "a missing folder: saved" "$out"
elif [ "$(printf '%s\n' "$out" | grep -c "^rank [0-9]: state_save failed: .*cannot write state file $OUT/absent/ck.rank[0-9] (at $OUT/absent): No such file or directory")" != $W ] ||
    ! printf '%s\n' "$out" | grep -q "reported DDPH_ERR_IO" ||
    printf '%s\n' "$out" | grep -q DDPH_ERR_PLUGIN; then
    bad "a missing folder: not refused on every rank as an I/O error" "$out"
else
    ok "a missing folder: refused on every rank as DDPH_ERR_IO, naming the file"
fi
# A load of a path never saved says what the load looks for.
if out=$(trainer "$OUT/never" $NUMEL verify "$OUT/never-check"); then
    bad "a path never saved: loaded" "$out"
elif [ "$(printf '%s\n' "$out" | grep -c "state_load failed: .*$OUT/never.rank0: No such file or directory: nothing was saved at $OUT/never (ddph_state_save(ctx, PATH) writes PATH.rank<R>: give the load the same PATH)")" != $W ]; then
    bad "a path never saved: not refused on every rank saying what was looked for" "$out"
else
    ok "a path never saved: refused on every rank, naming PATH.rank<R>"
fi
mkdir -m 700 "$OUT/sticky/mine"
if out=$(trainer "$OUT/sticky/mine/ck" $NUMEL run 2); then
    printf '%s\n' "$out" | grep -q warn && bad "saves to a new path warn" "$out" ||
        ok "saves to a new path warn of nothing"
    loads_step "a folder of one's own in the sticky folder" "$OUT/sticky/mine/ck" 2
    left=$(ls "$OUT/sticky/mine" | grep -v '^ck\.rank[0-9]$')
    [ -z "$left" ] && ok "saves leave only PATH.rank<R> (no lock file)" ||
        bad "saves left: $left"
else
    bad "a folder of one's own in the sticky folder: the save failed" "$out"
fi

# 2. A damaged newer generation in rank 1's .next.  gen1: one step,
# gen2: two steps (each all ranks' files of one save).
mkdir -p "$OUT/g1" "$OUT/g2" "$OUT/damaged"
trainer "$OUT/g1/ck" $NUMEL run 1 >/dev/null
trainer "$OUT/g2/ck" $NUMEL run 2 >/dev/null
for r in 0 1; do
    cp "$OUT/g1/ck.rank$r" "$OUT/damaged/ck.rank$r"
    cp "$OUT/g2/ck.rank$r" "$OUT/damaged/ck.rank$r.next"
done
loads_step "an interrupted commit, .next intact (the control)" "$OUT/damaged/ck" 2
printf 'X' | dd of="$OUT/damaged/ck.rank1.next" bs=1 seek=200 conv=notrunc 2>/dev/null
if loads_step "a damaged newer .next on rank 1" "$OUT/damaged/ck" 1; then
    if printf '%s\n' "$out" | grep -q "ddphook\[rank 1\]: warn: state_load: a file is skipped: $OUT/damaged/ck.rank1.next: checksum mismatch (corrupt or altered file); loading generation 1"; then
        ok "the damaged file is named in a warning of rank 1"
    else
        bad "no warning names the damaged file" "$out"
    fi
fi
# A save killed on rank 1 after it tidied (at its first temporary): the
# damaged file must not have replaced the intact one.
KILL_AT=mkstemp:1:before KILL_MATCH=.rank1 preload_on 1 180 \
    "$T" "$job" "$OUT/damaged/ck" $NUMEL run 1 </dev/null >"$OUT/damaged.log" 2>&1
if grep -q "ddphook\[rank 1\]: warn: state_save: a file is skipped: $OUT/damaged/ck.rank1.next: checksum mismatch" "$OUT/damaged.log"; then
    ok "the save names the damaged file in a warning of rank 1"
else
    bad "the save did not name the damaged file" "$(cat "$OUT/damaged.log")"
fi
if cmp -s "$OUT/damaged/ck.rank1" "$OUT/g1/ck.rank1"; then
    ok "a save after the damage keeps rank 1's intact file"
else
    bad "a save after the damage replaced rank 1's intact file" "$(cat "$OUT/damaged.log")"
fi
loads_step "after that save was killed" "$OUT/damaged/ck" 1

# 3. Two jobs, one path.  Job A's rank 1 stops just before its commit
# rename (every rank of A holds its lock); job B saves to the same path.
mkdir -p "$OUT/two"
KILL_SIGNAL=STOP KILL_AT=rename:4:before KILL_MATCH=.rank1 CKPT_PIDS="$OUT/pid" \
    preload_on 1 300 "$T" "$job" "$OUT/two/ck" $NUMEL run 2 </dev/null >"$OUT/two.log" 2>&1 &
job_a=$!
stopped=""
i=0
while [ $i -lt 600 ] && [ -z "$stopped" ]; do
    if [ -f "$OUT/pid.1" ] && [ "$(awk '{print $3}' "/proc/$(cat "$OUT/pid.1")/stat" 2>/dev/null)" = T ]; then
        stopped=$(cat "$OUT/pid.1")
    else
        sleep 0.1
    fi
    i=$((i + 1))
done
if [ -z "$stopped" ]; then
    bad "job A's rank 1 never reached its commit" "$(cat "$OUT/two.log")"
    kill "$job_a" 2>/dev/null
else
    if out=$(trainer "$OUT/two/ck" $NUMEL run 1); then
        bad "job B saved to job A's path while A was saving" "$out"
    elif printf '%s\n' "$out" | grep -q "rank 0: state_save failed: state_save (nothing was written): another job (pid $(cat "$OUT/pid.0") on [^)]*) is saving to $OUT/two/ck" &&
         printf '%s\n' "$out" | grep -q "rank 1: state_save failed: rank 0 failed: .*another job"; then
        ok "job B is told that another job (job A's pid) saves there, on both ranks"
    else
        bad "job B: unexpected message" "$out"
    fi
    kill -CONT "$stopped"
    if wait "$job_a"; then
        ok "job A's save commits after job B's attempt"
        loads_step "job A's checkpoint" "$OUT/two/ck" 2
    else
        bad "job A failed" "$(cat "$OUT/two.log")"
    fi
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
