#!/bin/sh
# checkpoint_crash.sh: a hook-state save interrupted anywhere leaves the
# last complete save loadable, bit for bit, on every rank.  4 ranks of
# tests/mpi/ckpt_trainer (topk, error feedback of NUMEL floats a rank)
# save after steps 1 and 2; the second save is broken:
#   - one rank is SIGKILLed (tests/tools/kill_at, LD_PRELOAD on that rank
#     only) before it writes, after it wrote its new file, before its
#     commit rename (the others' renames race with the kill) and after it;
#   - one rank's disk is full (a small tmpfs for its folder alone), and
#     all ranks share one tmpfs too small for two saves (needs root to
#     mount: skipped otherwise).
# Then every rank loads (ckpt_trainer verify): the load must succeed, and
# what it loaded, saved again, must equal byte for byte the state of step
# 1 or step 2 of an uninterrupted run (which one is said per point).  A
# later save must leave no temporary or .next file behind.
# A short run of tests/checkpoint_kill_loop.sh (random kills) ends it.
set -u
if [ -z "${MPIEXEC:-}" ] || ! command -v "$MPIEXEC" >/dev/null 2>&1; then
    echo "SKIP: mpiexec not found (apt-get install mpich)"
    exit 77
fi
B=${DDPH_TEST_BUILDDIR:?run through make check}
OUT="$B/tests/out/checkpoint_crash"
T="$B/tests/mpi/ckpt_trainer"
KILL_SO="$B/tests/tools/.libs/kill_at.so"
NUMEL=${CKPT_NUMEL:-262144}
W=4
# shellcheck source=tests/ckpt_common.sh
JOB_TIMEOUT=20
. "$DDPH_TEST_SRCDIR/tests/ckpt_common.sh"

# which_step PREFIX: the step of the reference that every PREFIX.rank<R>
# equals, or "none".
which_step() {
    for k in 1 2; do
        same=1
        for r in 0 1 2 3; do
            [ -f "$1.rank$r" ] && [ "$(payload "$1.rank$r")" = "$(payload "$OUT/ref.step$k.rank$r")" ] || same=0
        done
        [ "$same" = 1 ] && { echo "$k"; return; }
    done
    echo none
}
# leftovers DIR: files in DIR other than a rank's final file or a check.
leftovers() { ls "$1" | grep -v -e '^ck\.rank[0-9]*$' -e '^check\.rank[0-9]*$' -e '^pid' ; }
# verify NAME STATE DIR ALLOWED: load STATE on every rank; the state
# loaded must be one of the steps in ALLOWED.
verify() {
    if ! out=$(timeout 120 "$MPIEXEC" -n $W "$T" "$job" "$2" $NUMEL verify "$3/check" </dev/null 2>&1); then
        bad "$1: the load failed" "$out"
        return 1
    fi
    got=$(which_step "$3/check")
    case " $4 " in
    *" $got "*) ok "$1: loads step $got bit for bit (allowed: $4)" ;;
    *) bad "$1: loaded state is step $got (allowed: $4)" ;;
    esac
}

if ! out=$(timeout 300 "$MPIEXEC" -n $W "$T" "$job" "$OUT/ref" $NUMEL refs 2 </dev/null 2>&1); then
    bad "reference run" "$out"
    echo "$pass passed, $fail failed"
    exit 1
fi

# crash NAME RANK KILL_AT ALLOWED
crash() {
    d="$OUT/$1"
    mkdir -p "$d"
    KILL_AT=$3 KILL_MATCH=".rank$2" preload_on "$2" 120 \
        "$T" "$job" "$d/ck" $NUMEL run 2 </dev/null >"$d/log" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
        bad "$1: the run was not killed (exit $rc)" "$(cat "$d/log")"
        return
    fi
    verify "$1 (rank $2 killed at $3)" "$d/ck" "$d" "$4" || return
    # The next save tidies what the killed one left.
    timeout 120 "$MPIEXEC" -n $W "$T" "$job" "$d/ck" $NUMEL run 1 </dev/null >/dev/null 2>&1
    left=$(leftovers "$d" | grep -v '^log$')
    if [ -z "$left" ]; then
        ok "$1: the next save left only PATH.rank<R>"
    else
        bad "$1: left behind after the next save: $left"
    fi
}
# Per rank, the second save is mkstemp 2 (its new file), rename 3 (the
# new file to PATH.rankR.next) and rename 4 (.next over PATH.rankR).
crash before-write 2 mkstemp:2:before "1"
crash after-write 2 rename:3:after "1 2"
crash between-renames 2 rename:4:before "2"
crash between-renames-rank0 0 rename:4:before "2"
crash after-commit 2 rename:4:after "2"

# Disk full.  A tmpfs of 1.5 state files for rank 2's folder alone; then
# one of 6 state files for the folder of all 4 ranks.
size=$(stat -c %s "$OUT/ref.step1.rank2")
full() { # NAME STATE-PATTERN
    d=$(dirname "$(printf '%s' "$2" | sed 's/%d/2/')")
    if ! out=$(timeout 120 "$MPIEXEC" -n $W "$T" "$job" "$2" $NUMEL run 2 </dev/null 2>&1); then
        if printf '%s\n' "$out" | grep -q "rank [0-9] failed: .*No space left on device"; then
            ok "$1: the second save fails on every rank, naming the full rank's file"
        else
            bad "$1: unexpected failure" "$out"
        fi
    else
        bad "$1: the second save succeeded on a full disk"
    fi
    verify "$1" "$2" "$OUT/$1" "1"
    left=$(for r in 0 1 2 3; do ls "$(dirname "$(printf '%s' "$2" | sed "s/%d/$r/")")"; done |
        grep -e '\.next' -e '\.rank[0-9]*\.[A-Za-z0-9]\{6\}$')
    if [ -z "$left" ]; then
        ok "$1: no .next file or temporary left"
    else
        bad "$1: left behind: $left"
    fi
}
if [ "$(id -u)" = 0 ]; then
    for r in 0 1 2 3; do mkdir -p "$OUT/full-r$r"; done
    mkdir -p "$OUT/disk-full-one-rank" "$OUT/disk-full-shared" "$OUT/shared"
    if mount -t tmpfs -o size=$((size * 3 / 2)),mode=0755 tmpfs "$OUT/full-r2" 2>/dev/null; then
        full disk-full-one-rank "$OUT/full-r%d/ck"
        umount "$OUT/full-r2"
    else
        echo "SKIP: disk full on one rank: cannot mount a tmpfs"
    fi
    if mount -t tmpfs -o size=$((size * 6)),mode=0755 tmpfs "$OUT/shared" 2>/dev/null; then
        full disk-full-shared "$OUT/shared/ck"
        umount "$OUT/shared"
    else
        echo "SKIP: disk full, shared: cannot mount a tmpfs"
    fi
else
    echo "SKIP: disk full: mounting a small tmpfs needs root"
fi

# State files are trusted as plugins are.  refused_load NAME DIR PATTERN
refused_load() {
    if out=$(timeout 120 "$MPIEXEC" -n $W "$T" "$job" "$2/ck" $NUMEL verify "$2/check" </dev/null 2>&1); then
        bad "$1: loaded"
    elif printf '%s\n' "$out" | grep -q -- "$3"; then
        ok "$1: refused ($(printf '%s\n' "$out" | grep -o -- "$3" | head -n 1))"
    else
        bad "$1: unexpected message" "$out"
    fi
}
if [ "$(id -u)" = 0 ]; then
    d="$OUT/trust"
    mkdir -p "$d"
    for r in 0 1 2 3; do cp "$OUT/ref.step1.rank$r" "$d/ck.rank$r"; done
    chown 65534 "$d/ck.rank1"
    refused_load "a state file another user owns" "$d" \
        "rank 1 failed: refusing state file $d/ck.rank1: the file is owned by uid 65534, neither root nor you (set \[runtime\] allow_insecure_state = true"
    chown 0 "$d/ck.rank1"
    chmod g+w "$d/ck.rank3"
    refused_load "a state file its group can write" "$d" \
        "refusing state file $d/ck.rank3: the file is writable by its group"
    chmod g-w "$d/ck.rank3"
    chmod o+w "$d"
    refused_load "a state file in a folder others can write" "$d" \
        "the folder $d is writable by other users"
    printf '[runtime]\nplugin_path = %s\ntimeout_s = 20\nallow_insecure_state = true\n[hook]\nname = topk\n[hook.topk]\nratio = 0.01\n' \
        "$DDPH_TEST_PLUGIN_DIR" > "$d/insecure.ini"
    if out=$(timeout 120 "$MPIEXEC" -n $W "$T" "$d/insecure.ini" "$d/ck" $NUMEL verify "$d/check" </dev/null 2>&1); then
        bad "allow_insecure_state as root without the operator's word: accepted"
    elif printf '%s\n' "$out" | grep -q "allow_insecure_state = true is refused for a job run as root unless the operator agrees: set DDPHOOK_ALLOW_INSECURE_AS_ROOT=1"; then
        ok "allow_insecure_state as root without the operator's word: refused"
    else
        bad "allow_insecure_state as root: unexpected message" "$out"
    fi
    if out=$(DDPHOOK_ALLOW_INSECURE_AS_ROOT=1 timeout 120 "$MPIEXEC" -n $W "$T" "$d/insecure.ini" "$d/ck" $NUMEL verify "$d/check" </dev/null 2>&1) &&
       [ "$(which_step "$d/check")" = 1 ]; then
        ok "allow_insecure_state with DDPHOOK_ALLOW_INSECURE_AS_ROOT=1: loads"
    else
        bad "allow_insecure_state with DDPHOOK_ALLOW_INSECURE_AS_ROOT=1" "$out"
    fi
    chmod o-w "$d"
else
    echo "SKIP: state files of another user: chown needs root"
fi

# A few random kills (the long loop: tests/checkpoint_kill_loop.sh).
if out=$(KILLS=${CKPT_KILLS:-4} CKPT_NUMEL=$NUMEL KILL_LOOP_OUT="$OUT/kill_loop" sh "$DDPH_TEST_SRCDIR/tests/checkpoint_kill_loop.sh" 2>&1); then
    ok "random kills :: $(printf '%s\n' "$out" | tail -n 1)"
else
    bad "random kills" "$out"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
