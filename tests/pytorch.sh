#!/bin/sh
# pytorch.sh: the Python package under PyTorch DDP (ddphook.torch), on 2
# and 4 ranks:
#  - DDP's gradients through ddphook's allreduce, fp16 (hook and wrapper),
#    bf16, PowerSGD (with and without error feedback and warm start) and
#    batched PowerSGD equal those of PyTorch's own hooks, step by step,
#    within the reference vectors' tolerances (tests/python/ddp_hooks.py);
#  - PyTorch's reference vectors (allreduce, fp16, bf16, PowerSGD) fed
#    through DDP come out as PyTorch recorded them (tests/python/ddp_vectors.py,
#    where configure found the vectors);
#  - PowerSGD's state saved and loaded from Python resumes a run exactly
#    (tests/python/ddp_resume.py);
#  - a bad job file, a missing plugin, a hook that fails on every rank and
#    one that fails on the last rank only raise on every rank, naming the
#    cause, within seconds; processes started without mpiexec are refused
#    (tests/python/ddp_errors.py).
# Skips (77) without a Python 3 with torch (apt-get install python3-torch).
set -u
if [ -z "${MPIEXEC:-}" ] || ! command -v "$MPIEXEC" >/dev/null 2>&1; then
    echo "SKIP: mpiexec not found (apt-get install mpich)"
    exit 77
fi
B=${DDPH_TEST_BUILDDIR:?run through make check}
S=${DDPH_TEST_SRCDIR:?run through make check}
PY=
for p in "${PYTHON:-}" /usr/bin/python3; do
    if [ -n "$p" ] && "$p" -c 'import torch.distributed' 2>/dev/null; then
        PY=$p
        break
    fi
done
if [ -z "$PY" ]; then
    echo "SKIP: no Python 3 with torch (${PYTHON:-python3}, /usr/bin/python3; apt-get install python3-torch)"
    exit 77
fi
OUT="$B/tests/out/pytorch"
rm -rf "$OUT"
mkdir -p "$OUT"
PYTHONPATH="$S/python${PYTHONPATH:+:$PYTHONPATH}"
DDPHOOK_LIBRARY="$B/.libs/libddphook.so"
export PYTHONPATH DDPHOOK_LIBRARY
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "PASS: $*"; }
ko() { fail=$((fail + 1)); echo "FAIL: $*"; }

# Two runs per world size: PyTorch's options for PowerSGD are one set per
# job file ([hook.powersgd]).
for w in 2 4; do
    for only in allreduce,fp16,fp16_wrapper,bf16,powersgd,batched_powersgd \
            powersgd_noef; do
        log="$OUT/hooks-ws$w-$only.log"
        timeout 600 "$MPIEXEC" -n "$w" "$PY" "$S/tests/python/ddp_hooks.py" \
            --plugin-dir "$DDPH_TEST_PLUGIN_DIR" --out "$OUT/ws$w" \
            --only "$only" </dev/null >"$log" 2>&1
        rc=$?
        grep '^PASS: \|^FAIL: ' "$log"
        want=$(echo "$only" | tr ',' '\n' | grep -c .)
        got=$(grep -c '^PASS: ' "$log")
        if [ "$rc" -eq 0 ] && [ "$got" -eq "$want" ]; then
            ok "ddp_hooks.py on $w ranks: $got of $want hooks equal PyTorch's"
        else
            ko "ddp_hooks.py on $w ranks ($only): exit $rc, $got of $want passed (see $log)"
        fi
    done
done

# PyTorch's reference vectors through DDP and the bridge (the C runtime's
# replay of them is tests/vectors.sh).
V=${REFERENCE_VECTORS:-}
if [ -n "$V" ] && [ -f "$V/ws2/inputs/trace.ini" ]; then
    for w in 2 4; do
        log="$OUT/vectors-ws$w.log"
        timeout 600 "$MPIEXEC" -n "$w" "$PY" "$S/tests/python/ddp_vectors.py" \
            --vectors "$V/ws$w" --plugin-dir "$DDPH_TEST_PLUGIN_DIR" \
            --out "$OUT/vectors-ws$w" </dev/null >"$log" 2>&1
        rc=$?
        grep '^PASS: \|^FAIL: ' "$log"
        if [ "$rc" -eq 0 ] && [ "$(grep -c '^PASS: ' "$log")" -eq 4 ]; then
            ok "ddp_vectors.py on $w ranks: the reference vectors through DDP"
        else
            ko "ddp_vectors.py on $w ranks: exit $rc (see $log)"
        fi
    done
else
    echo "(reference vectors not found at '${V}': their DDP check is left out; configure --with-reference-vectors=DIR)"
fi

# The hook's state through state.save/state.load: a run resumed after
# step 3 ends where an uninterrupted one does, byte for byte; without the
# hook's state it does not.
res="$OUT/resume"
for phase in full resume resume-without-state; do
    timeout 300 "$MPIEXEC" -n 2 "$PY" "$S/tests/python/ddp_resume.py" \
        --plugin-dir "$DDPH_TEST_PLUGIN_DIR" --out "$res" --phase "$phase" \
        </dev/null >"$res-$phase.log" 2>&1 || ko "ddp_resume.py --phase $phase (see $res-$phase.log)"
done
for r in 0 1; do
    if cmp -s "$res/full.rank$r.f32" "$res/resume.rank$r.f32" &&
        [ -s "$res/full.rank$r.f32" ] &&
        ! cmp -s "$res/full.rank$r.f32" "$res/resume-without-state.rank$r.f32"; then
        ok "rank $r: resumed with the hook's state = uninterrupted, byte for byte (and not without it)"
    else
        ko "rank $r: resumed parameters differ from the uninterrupted run's, or equal them without the hook's state"
    fi
done

# errors: CASE NAME WANT JOB-TEXT (WANT: a pattern every rank's message has)
errors() {
    case=$1 name=$2 want=$3
    job="$OUT/err-$name.ini"
    printf '%b' "$4" > "$job"
    log="$OUT/err-$name.log"
    t0=$(date +%s)
    timeout 120 "$MPIEXEC" -n 2 "$PY" "$S/tests/python/ddp_errors.py" \
        --job "$job" --case "$case" </dev/null >"$log" 2>&1
    rc=$?
    t=$(( $(date +%s) - t0 ))
    n=$(grep -c "^rank [01] raised .*$want" "$log")
    if [ "$rc" -ne 124 ] && [ "$rc" -ne 0 ] && [ "$n" -eq 2 ]; then
        ok "$name: both ranks raised, naming '$want', in ${t}s"
    else
        ko "$name: exit $rc after ${t}s, $n of 2 ranks raised naming '$want' (see $log)"
    fi
}
R="[runtime]\nplugin_path = $DDPH_TEST_PLUGIN_DIR\ntimeout_s = 60\n"
CAPS="bucket_cap_mb = 0.0002\nfirst_bucket_cap_mb = 0.0002\n"
errors open bad-key "err-bad-key.ini:4: unknown key 'bogus_key'" "${R}bogus_key = 1\n[hook]\nname = allreduce\n"
errors hook missing-plugin "no_such_hook" "${R}[hook]\nname = no_such_hook\n"
errors hook failing-hook "fake failure on bucket 1" \
    "${R}${CAPS}[hook]\nname = $DDPH_TEST_FAKE_DIR/failing.so\n"
errors peer failing-peer "fake failure of the last rank" \
    "${R}${CAPS}[hook]\nname = $DDPH_TEST_FAKE_DIR/failing_last_rank.so\n"

# Started without mpiexec (as torchrun does): refused on every rank.
log="$OUT/err-ranks.log"
printf '%b' "${R}[hook]\nname = allreduce\n" > "$OUT/err-ranks.ini"
rm -f "$OUT/ranks.rdv"
for r in 0 1; do
    RANK=$r WORLD_SIZE=2 RENDEZVOUS="$OUT/ranks.rdv" timeout 120 "$PY" \
        "$S/tests/python/ddp_errors.py" --job "$OUT/err-ranks.ini" \
        --case ranks </dev/null >"$log.$r" 2>&1 &
done
wait
n=$(cat "$log.0" "$log.1" | grep -c "^rank [01] raised Error: .*rank [01] of 2 but ddphook's MPI job is rank 0 of 1")
if [ "$n" -eq 2 ]; then
    ok "ranks: torch.distributed's 2 ranks against MPI's 1 refused on both"
else
    ko "ranks: $n of 2 processes refused the mismatch (see $log.0, $log.1)"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
