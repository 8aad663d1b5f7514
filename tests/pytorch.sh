#!/bin/sh
# pytorch.sh: the Python package under PyTorch DDP (ddphook.torch), on 2
# and 4 ranks:
#  - DDP's gradients through ddphook's allreduce, fp16 (hook and wrapper),
#    bf16, PowerSGD (with and without error feedback and warm start) and
#    batched PowerSGD equal those of PyTorch's own hooks, step by step,
#    also on DDP's buckets of find_unused_parameters=True (never rebuilt)
#    and of static_graph=True with a layer no step uses,
#    within the reference vectors' tolerances, every DDP bucket's future
#    but the step's last completed by ddphook's communication thread
#    (tests/python/ddp_hooks.py);
#  - PyTorch's reference vectors (allreduce, fp16, bf16, PowerSGD) fed
#    through DDP come out as PyTorch recorded them (tests/python/ddp_vectors.py,
#    where configure found the vectors);
#  - PowerSGD's state saved and loaded from Python resumes a run exactly,
#    saved as nanoGPT saves its checkpoint (rank 0 alone runs a gloo
#    collective first: state.save must not wait for the other ranks), or
#    saved again right after loading; a save no step follows is written at
#    the job's close (tests/python/ddp_resume.py);
#  - the hook's state in a rank-0 torch.save checkpoint
#    (state.state_dict() on every rank after rank 0's lone gloo
#    collective, load_state_dict on every rank) resumes a run exactly; one
#    from another world size, another hook, damaged, or with a part of
#    another job's save, is refused on every rank, naming the cause, and
#    rank 0 refuses to gather a part another rank took by an extra call;
#    rank 0 alone in state_dict raises at its timeout, naming the rank
#    that did not call it, and within seconds, naming it, where that rank
#    closed its job (tests/python/ddp_state_dict.py);
#  - DDP's static_graph=True gives the gradients and parameters of
#    static_graph=False, bit for bit, with fp16 and PowerSGD, and no
#    bucket layout warning (tests/python/ddp_static_graph.py);
#  - the bytes each rank sends per step through the bridge, for every hook
#    above, equal what the C runtime sends for the same parameters,
#    buckets and job (`ddphook replay` of a trace of the bridge's
#    parameters);
#  - a bad job file, a missing plugin, a hook that fails on every rank and
#    one that fails on the last rank only raise on every rank, naming the
#    cause, within seconds; so does one comm_hook pair registered on two
#    DDP models, and the process exits non-zero even when the script
#    catches that exception and returns 0; a rank interrupted by SIGINT
#    says so and the other names it (never the other way round);
#    processes started without mpiexec are refused
#    (tests/python/ddp_errors.py).
# All but the error cases run in one launch per world size
# (tests/python/ddp_suite.py): each start of Python and torch costs
# seconds.
# Skips (77) without a Python 3 with torch (apt-get install python3-torch).
set -u
if [ -z "${MPIEXEC:-}" ] || ! command -v "$MPIEXEC" >/dev/null 2>&1; then
    echo "SKIP: mpiexec not found (apt-get install mpich)"
    exit 77
fi
B=${DDPH_TEST_BUILDDIR:?run through make check}
S=${DDPH_TEST_SRCDIR:?run through make check}
. "$S/tests/torch_python.sh"
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

# One launch per world size runs tests/python's programs in turn
# (ddp_suite.py: Python and torch start once).  Three ddp_hooks.py runs:
# PyTorch's options for PowerSGD are one set per job file
# ([hook.powersgd]), as are the reference vectors', and the last draws
# its own Q.
V=${REFERENCE_VECTORS:-}
[ -n "$V" ] && [ -f "$V/ws2/inputs/trace.ini" ] || V=
BYTES="$OUT/bytes"
MAIN=allreduce,fp16,fp16_wrapper,bf16,powersgd,batched_powersgd
P="--plugin-dir $DDPH_TEST_PLUGIN_DIR"
for w in 2 4; do
    set -- "ddp_hooks.py $P --out $OUT/ws$w --only $MAIN" \
        "ddp_hooks.py $P --out $OUT/ws$w --only powersgd_noef" \
        "ddp_hooks.py $P --out $OUT/ws$w --only powersgd_own_q,batched_own_q,powersgd_unused,batched_unused,powersgd_static_unused"
    if [ "$w" -eq 2 ]; then
        # The bridge's bytes per step, and replay's inputs for them.
        set -- "$1 --bytes-dir $BYTES" "$2 --bytes-dir $BYTES" "$3"
    fi
    [ -n "$V" ] && set -- "$@" "ddp_vectors.py --vectors $V/ws$w $P --out $OUT/vectors-ws$w"
    if [ "$w" -eq 2 ]; then
        for phase in full resume resume-resaved resume-without-state; do
            set -- "$@" "ddp_resume.py $P --out $OUT/resume --phase $phase"
        done
        for hook in fp16 powersgd; do
            for static in 0 1; do
                set -- "$@" "ddp_static_graph.py $P --out $OUT/static --hook $hook --static $static"
            done
        done
        for phase in full resume resume-resaved resume-without-state rank0-alone rank1-closed retry-after-timeout retry-after-timeout rank1-forged; do
            set -- "$@" "ddp_state_dict.py $P --out $OUT/state_dict --phase $phase"
        done
    else
        # The 2-rank checkpoint on 4 ranks: refused at once on every rank.
        set -- "$@" "ddp_state_dict.py $P --out $OUT/state_dict --phase wrong-world"
    fi
    log="$OUT/suite-ws$w.log"
    timeout 900 "$MPIEXEC" -n "$w" "$PY" "$S/tests/python/ddp_suite.py" "$@" \
        </dev/null >"$log" 2>&1
    rc=$?
    grep '^PASS: \|^FAIL: ' "$log"
    [ "$rc" -eq 0 ] || ko "ddp_suite.py on $w ranks: exit $rc (see $log)"
    # section K: the lines of the K-th program run, then "exit N"
    section() { awk -v want="$1" '/^== exit /{ if (k == want) print "exit " $3; next } /^== /{k++; next} k == want' "$log"; }
    passed() { section "$1" | grep -c '^PASS: '; }
    exited() { section "$1" | grep -q '^exit 0$'; }
    got=$(( $(passed 1) + $(passed 2) + $(passed 3) ))
    if exited 1 && exited 2 && exited 3 && [ "$got" -eq 12 ]; then
        ok "ddp_hooks.py on $w ranks: $got of 12 hooks equal PyTorch's"
    else
        ko "ddp_hooks.py on $w ranks: $got of 12 passed (see $log)"
    fi
    k=4
    if [ -n "$V" ]; then
        # The C runtime's replay of them is tests/vectors.sh.
        if exited $k && [ "$(passed $k)" -eq 4 ]; then
            ok "ddp_vectors.py on $w ranks: the reference vectors through DDP"
        else
            ko "ddp_vectors.py on $w ranks (see $log)"
        fi
        k=$((k + 1))
    fi
    if [ "$w" -eq 2 ]; then
        exited $k && exited $((k + 1)) && exited $((k + 2)) &&
            exited $((k + 3)) || ko "ddp_resume.py (see $log)"
        k=$((k + 4))
        exited $k && exited $((k + 1)) && exited $((k + 2)) &&
            exited $((k + 3)) || ko "ddp_static_graph.py (see $log)"
        warned=$(for j in 0 1 2 3; do section $((k + j)); done | grep -c 'bucket layout warnings: 0$')
        k=$((k + 4))
        exited $k && exited $((k + 1)) && exited $((k + 2)) &&
            exited $((k + 3)) || ko "ddp_state_dict.py (see $log)"
        if exited $((k + 4)); then
            ok "state_dict called by rank 0 alone: rank 0 raises after its timeout, naming rank 1"
        else
            ko "state_dict called by rank 0 alone (see $log)"
        fi
        if exited $((k + 5)); then
            ok "state_dict on rank 0 after rank 1 closed its job: rank 0 raises within 10 s (timeout 2 min), naming rank 1's close"
        else
            ko "state_dict on rank 0 after rank 1 closed its job (see $log)"
        fi
    else
        n=$(section $k | sed 's/rank [0-3] raised /\n&/g' | grep -c "^rank [0-3] raised Error: .*the state dict was taken in a job of 2 ranks; this job has 4")
        if exited $k && [ "$n" -eq 4 ]; then
            ok "state_dict: a 2-rank checkpoint refused on 4 ranks, on every rank, naming both world sizes"
        else
            ko "state_dict: a 2-rank checkpoint on 4 ranks: $n of 4 ranks refused it naming the world sizes (see $log)"
        fi
    fi
done
[ -n "$V" ] || echo "(reference vectors not found at '${REFERENCE_VECTORS:-}': their DDP check is left out; configure --with-reference-vectors=DIR)"

# The hook's state through state.save/state.load, saved the way nanoGPT
# saves its checkpoint (rank 0 alone runs a gloo collective first): a run
# resumed after step 3 ends where an uninterrupted one does, byte for
# byte, also from the state saved again right after loading it; without
# the hook's state it does not.  A save no step follows is written when
# the job closes.
resumed_checks "$OUT/resume"

# The hook's state in a rank-0 torch.save checkpoint (state_dict, taken
# after rank 0's lone gloo collective: only rank 0 waits, for the other
# ranks' state_dict calls alone): a run resumed from it after step 3 ends
# where an uninterrupted one does, byte for byte, also from the state dict
# taken again right after loading it; without the hook's state it does
# not.
res="$OUT/state_dict"
for r in 0 1; do
    if resumed_same "$res" $r; then
        ok "rank $r: resumed through torch.save(state.state_dict()) and load_state_dict = uninterrupted, byte for byte (and not without it)"
    else
        ko "rank $r: resumed through state_dict differs from the uninterrupted run, or equals it without the hook's state (see $res)"
    fi
done
# ... and refused, on both ranks, naming the cause: loaded by a model
# whose hook is fp16, with a byte of rank 1's part changed, and with rank
# 1's part from another job's save at the same step.
timeout 120 "$MPIEXEC" -disable-auto-cleanup -n 2 "$PY" "$S/tests/python/ddp_state_dict.py" \
    $P --out "$res-other" --phase full </dev/null >"$OUT/state_dict-other.log" 2>&1 ||
    ko "ddp_state_dict.py --phase full, another job (see $OUT/state_dict-other.log)"
for case in "other-hook:holds the state of model 'model' with hook 'powersgd' [^;]*; this job's is 'model' with hook 'fp16'" \
    "damaged:the hook state in memory given to rank 1: checksum mismatch (corrupt or altered bytes)" \
    "mixed:the ranks' parts come from different saves"; do
    name=${case%%:*} want=${case#*:}
    log="$OUT/state_dict-$name.log"
    timeout 120 "$MPIEXEC" -disable-auto-cleanup -n 2 "$PY" "$S/tests/python/ddp_state_dict.py" \
        $P --out "$res" --other "$res-other" --phase "$name" </dev/null >"$log" 2>&1
    rc=$?
    n=$(sed 's/rank [01] raised /\n&/g' "$log" | grep -c "^rank [01] raised Error: ddphook: load_state_dict: .*$want")
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$n" -eq 2 ]; then
        ok "state_dict $name: refused on both ranks, naming the cause"
    else
        ko "state_dict $name: exit $rc, $n of 2 ranks refused naming '$want' (see $log)"
    fi
done

# Rank 1 calls state_dict() once more than rank 0: rank 0's gathered
# dict would hold rank 1's part of another step, and is refused.
log="$OUT/state_dict-skewed.log"
timeout 120 "$MPIEXEC" -disable-auto-cleanup -n 2 "$PY" "$S/tests/python/ddp_state_dict.py" \
    $P --out "$res" --phase skewed </dev/null >"$log" 2>&1
if [ $? -eq 0 ]; then
    ok "state_dict called once more on rank 1: rank 0 refuses the part of another call"
else
    ko "state_dict called once more on rank 1 (see $log)"
fi

# DDP's static_graph=True (its first two steps hand the hook one bucket of
# every parameter; its buckets are rebuilt at the third) gives the
# gradients and parameters of static_graph=False, bit for bit, with fp16
# and PowerSGD; no layout warning: the bridge compares DDP's buckets with
# its own once DDP has rebuilt them.
for hook in fp16 powersgd; do
    same=0
    for r in 0 1; do
        cmp -s "$OUT/static/$hook.static0.rank$r.f32" "$OUT/static/$hook.static1.rank$r.f32" &&
            [ -s "$OUT/static/$hook.static0.rank$r.f32" ] && same=$((same + 1))
    done
    if [ "$same" -eq 2 ]; then
        ok "$hook: static_graph=True = static_graph=False, gradients of 6 steps and parameters, bit for bit, on 2 of 2 ranks"
    else
        ko "$hook: static_graph=True differs from static_graph=False on $((2 - same)) of 2 ranks (see $OUT/static)"
    fi
done
if [ "${warned:-0}" -eq 4 ]; then
    ok "static_graph=True and False: no bucket layout warning in 4 of 4 runs"
else
    ko "static_graph: ${warned:-0} of 4 runs without a bucket layout warning (see $OUT/suite-ws2.log)"
fi

# Bytes per step: the bridge's (state.bytes_sent) against the C runtime's
# for the same parameters, buckets, hook and options (ddphook replay of a
# trace of the bridge's parameters, on 2 ranks).
for name in $(echo "$MAIN,powersgd_noef" | tr ',' ' '); do
    log="$OUT/replay-$name.log"
    timeout 120 "$MPIEXEC" -n 2 sh -c 'exec "$0" replay --job "$1.r$PMI_RANK.ini" --trace "$1.trace" --out "$2"' \
        "$B/ddphook" "$BYTES/$name" "$OUT/replay-$name" </dev/null >"$log" 2>&1
    theirs=$(sed -n 's/^ddphook replay: bytes sent by rank 0 per synchronised step: //p' "$log")
    ours=$(cat "$BYTES/$name.bytes" 2>/dev/null)
    if [ -n "$ours" ] && [ "$ours" = "$theirs" ]; then
        ok "$name: bytes sent per step through the bridge = the C runtime's ($ours)"
    else
        ko "$name: bytes sent per step: bridge '$ours', C runtime '$theirs' (see $log)"
    fi
done

# errors: CASE NAME WANT JOB-TEXT [ARGS] (WANT: a pattern every rank's
# message has; ARGS: more arguments of ddp_errors.py)
errors() {
    case=$1 name=$2 want=$3 args=${5:-}
    job="$OUT/err-$name.ini"
    printf '%b' "$4" > "$job"
    log="$OUT/err-$name.log"
    t0=$(date +%s)
    # -disable-auto-cleanup: hydra would otherwise kill the other ranks as
    # soon as the first one exits non-zero, before they can report.
    timeout 120 "$MPIEXEC" -disable-auto-cleanup -n 2 "$PY" "$S/tests/python/ddp_errors.py" \
        --job "$job" --case "$case" $args </dev/null >"$log" 2>&1
    rc=$?
    t=$(( $(date +%s) - t0 ))
    # One line a verdict, even where two ranks' writes met on one line.
    n=$(sed 's/rank [01] raised /\n&/g' "$log" | grep -c "^rank [01] raised .*$want")
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

errors two-models two-models "one comm_hook pair serves one DDP model" "${R}[hook]\nname = allreduce\n"
# The script catches the exception and returns 0: ddphook declared the
# job failed, so the process still exits non-zero.
errors two-models two-models-swallowed "one comm_hook pair serves one DDP model" \
    "${R}[hook]\nname = allreduce\n" --swallow

# A save into a folder anyone may write is refused by state.save() itself.
mkdir -p "$OUT/open-folder" && chmod 777 "$OUT/open-folder"
errors save-insecure save-insecure "ddphook: save [^ ]*: state_check: .*writable by other users" \
    "${R}[hook]\nname = powersgd\n[hook.powersgd]\nstart_powerSGD_iter = 2\n" \
    "--dir $OUT/open-folder"
# A save asked for and never written (the job ended before its next step)
# leaves the older state at the path: the next load refuses it on every
# rank, though only rank 1 still has its marker.
rm -rf "$OUT/stale" && mkdir -p "$OUT/stale" && chmod 755 "$OUT/stale"
printf '%b' "${R}[hook]\nname = powersgd\n[hook.powersgd]\nstart_powerSGD_iter = 2\n" > "$OUT/err-stale.ini"
timeout 120 "$MPIEXEC" -disable-auto-cleanup -n 2 "$PY" "$S/tests/python/ddp_errors.py" \
    --job "$OUT/err-stale.ini" --case stale-save --dir "$OUT/stale" </dev/null >"$OUT/err-stale-save.log" 2>&1
if [ -f "$OUT/stale/ck.rank0" ] && [ -f "$OUT/stale/ck.rank1.pending" ]; then
    errors stale-load stale-load "state.save() of it was asked for but never written" \
        "${R}[hook]\nname = powersgd\n[hook.powersgd]\nstart_powerSGD_iter = 2\n" \
        "--dir $OUT/stale"
else
    ko "stale-save: the first save or the second's marker is missing (see $OUT/err-stale-save.log)"
fi

# SIGINT to rank 1 between steps (it dies of its KeyboardInterrupt): rank
# 1 says it was interrupted, rank 0 names rank 1, neither blames rank 0.
log="$OUT/err-sigint.log"
printf '%b' "${R}[hook]\nname = allreduce\n" > "$OUT/err-sigint.ini"
timeout 120 "$MPIEXEC" -disable-auto-cleanup -n 2 "$PY" "$S/tests/python/ddp_errors.py" \
    --job "$OUT/err-sigint.ini" --case sigint </dev/null >"$log" 2>&1
rc=$?
said=$(grep -c '^ddphook\[rank 1\]: error: .*rank 1 aborted the job: interrupted (SIGINT' "$log")
named=$(grep -c '^ddphook\[rank 0\]: error: .*rank 1 failed: rank 1 aborted the job: interrupted (SIGINT' "$log")
blamed=$(grep -c 'rank 0 failed\|rank 0 aborted\|rank 1 closed the job' "$log")
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$said" -ge 1 ] && [ "$named" -ge 1 ] && [ "$blamed" -eq 0 ]; then
    ok "sigint: rank 1 says it was interrupted, rank 0 names it, no rank blames rank 0"
else
    ko "sigint: exit $rc, rank 1 said so $said times, rank 0 named it $named times, $blamed lines blame the wrong rank (see $log)"
fi

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
n=$(cat "$log.0" "$log.1" | grep -c "^rank [01] raised Error: .*rank [01] of 2 but ddphook's job is rank 0 of 1")
if [ "$n" -eq 2 ]; then
    ok "ranks: torch.distributed's 2 ranks against MPI's 1 refused on both"
else
    ko "ranks: $n of 2 processes refused the mismatch (see $log.0, $log.1)"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
