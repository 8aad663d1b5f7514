#!/bin/sh
# torchrun.sh: ddphook.torch under an env:// launcher (torchrun's way: RANK,
# WORLD_SIZE, MASTER_ADDR, MASTER_PORT, no mpiexec), where the job runs
# over the torch backend (torch.so: gloo groups made from the store of the
# script's process group).  tests/python/env_launch.py starts the ranks;
# the job files name no backend.
#  - DDP's gradients through ddphook's hooks, allreduce, fp16 (hook and
#    wrapper), bf16 and PowerSGD (plain and batched, Q drawn by ddphook as
#    torch.randn draws it) equal PyTorch's own hooks over gloo, step by
#    step, within the reference vectors' tolerances (tests/python/ddp_hooks.py,
#    as tests/pytorch.sh runs it under mpiexec), on 2 ranks;
#  - a wait of the torch backend ends when gloo completes the collective
#    (300 small broadcasts, median at most 4 ms; tests/python/pg_wait.py);
#  - torchrun itself (torch.distributed.run, its agent serving the store)
#    runs fp16 and PowerSGD equal to PyTorch's;
#  - the hooks that move data otherwise (int8: ialltoall, iallgather, an
#    int32 max; topk and signsgd: iallgather), allreduce and
#    post_localsgd (groups split from the world) give the same gradients,
#    bit for bit, as under mpiexec (tests/python/ddp_same.py; where
#    mpiexec is found);
#  - the f16 and bf16 sums, at 2, 3 and 4 ranks, equal the order of
#    additions of the rings (tests/python/ddp_halfsum.py), and the MPI
#    backend's bit for bit where it goes round its ring too;
#  - PowerSGD's state saved and loaded from Python resumes a run exactly,
#    through state.save/load and through torch.save(state.state_dict())
#    (tests/python/ddp_resume.py and ddp_state_dict.py, as
#    tests/pytorch.sh checks them); rank 0's gathering state_dict names a
#    rank that closed its job and exited within seconds (its closing
#    notice in the store), not at its timeout, and waits on for a later
#    rank's part when the rank that closed had given its own;
#  - a hook that fails on every rank, and one that fails on the last rank
#    only, raise on every rank, naming the cause, within seconds
#    (tests/python/ddp_errors.py); so do an allgatherv whose counts differ
#    on one rank and two sums issued in another order on one rank;
#  - with check_collectives, a hook that on the last of 2 or 3 ranks runs
#    an extra collective, or one of another count, dtype or kind, raises
#    on every rank within seconds, naming that rank and what it called
#    (compared before gloo, which would abort a rank with SIGABRT), and a
#    hook that skips its collective there is named at once, not at
#    timeout_s; so does a trainer broadcast of another size on one rank;
#  - a rank that closes the job after 2 steps while the other goes on to a
#    third: the other raises at once, naming it (its closing notice in the
#    store), and the closing rank learns why; a rank whose script ends
#    with sys.exit(0) there exits 1;
#  - a rank killed (SIGKILL) mid-training: the other raises within seconds,
#    saying a peer died, and exits non-zero (timeout_s = 120).
# Skips (77) without a Python 3 with torch, or a ddphook built without the
# torch backend (configure found no libtorch-dev or pybind11-dev).
set -u
B=${DDPH_TEST_BUILDDIR:?run through make check}
S=${DDPH_TEST_SRCDIR:?run through make check}
. "$S/tests/torch_python.sh"
torch_backend_env
OUT="$B/tests/out/torchrun"
rm -rf "$OUT"
mkdir -p "$OUT"
LAUNCH="$PY $S/tests/python/env_launch.py"
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "PASS: $*"; }
ko() { fail=$((fail + 1)); echo "FAIL: $*"; }

CASES=allreduce,fp16,fp16_wrapper,bf16,powersgd_own_q,batched_own_q
for w in 2 4; do
    log="$OUT/hooks-ws$w.log"
    timeout 600 $LAUNCH -n $w --timeout 500 "$S/tests/python/ddp_hooks.py" \
        --plugin-dir "$DDPH_TEST_PLUGIN_DIR" --out "$OUT/hooks-ws$w" \
        --only "$CASES" >"$log" 2>&1
    rc=$?
    grep '^\[rank 0\] PASS: \|^\[rank 0\] FAIL: ' "$log"
    got=$(grep -c '^\[rank 0\] PASS: ' "$log")
    if [ "$rc" -eq 0 ] && [ "$got" -eq 6 ]; then
        ok "ddp_hooks.py on $w ranks without mpiexec: $got of 6 hooks equal PyTorch's"
    else
        ko "ddp_hooks.py on $w ranks without mpiexec: exit $rc, $got of 6 passed (see $log)"
    fi
done

# A wait ends when gloo completes the collective (its future wakes the
# waiting thread), not at the thread's next look (every 20 ms).
log="$OUT/pg-wait.log"
timeout 200 $LAUNCH -n 2 --timeout 180 "$S/tests/python/pg_wait.py" >"$log" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && grep -q '^\[rank 0\] PASS: ' "$log"; then
    ok "pg_wait.py: $(sed -n 's/^\[rank 0\] PASS: //p' "$log")"
else
    ko "pg_wait.py: exit $rc: $(sed -n 's/^\[rank 0\] FAIL: //p' "$log") (see $log)"
fi

# torchrun itself: --redirects 1 --tee 1, without which Debian's torchrun
# (PyTorch 1.13, Python 3.11) crashes in to_map before starting anything.
log="$OUT/torchrun.log"
port=$($PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
timeout 300 $PY -m torch.distributed.run --nproc_per_node 2 \
    --master_addr 127.0.0.1 --master_port "$port" --redirects 1 --tee 1 \
    "$S/tests/python/ddp_hooks.py" --plugin-dir "$DDPH_TEST_PLUGIN_DIR" \
    --out "$OUT/torchrun" --only fp16,powersgd_own_q </dev/null >"$log" 2>&1
rc=$?
got=$(grep -c '^\[default0\]:PASS: ' "$log")
if [ "$rc" -eq 0 ] && [ "$got" -eq 2 ]; then
    ok "torchrun --nproc_per_node 2: fp16 and powersgd_own_q equal PyTorch's"
else
    ko "torchrun --nproc_per_node 2: exit $rc, $got of 2 passed (see $log)"
fi

SAME="$S/tests/python/ddp_same.py --plugin-dir $DDPH_TEST_PLUGIN_DIR"
SAME_HOOKS="allreduce int8 topk signsgd"
# post_localsgd splits the world (a group per rank after two steps)
LOCALSGD="$B/tests/gpu/.libs/post_localsgd.so"
if [ -f "$LOCALSGD" ]; then
    SAME="$SAME --localsgd $LOCALSGD"
    SAME_HOOKS="$SAME_HOOKS post_localsgd"
fi
timeout 300 $LAUNCH -n 2 --timeout 280 $SAME --out "$OUT/same-torch" \
    >"$OUT/same-torch.log" 2>&1 ||
    ko "ddp_same.py without mpiexec (see $OUT/same-torch.log)"
if [ -n "${MPIEXEC:-}" ] && command -v "$MPIEXEC" >/dev/null 2>&1; then
    timeout 300 "$MPIEXEC" -n 2 $PY $SAME --out "$OUT/same-mpi" </dev/null \
        >"$OUT/same-mpi.log" 2>&1 ||
        ko "ddp_same.py under mpiexec (see $OUT/same-mpi.log)"
    for h in $SAME_HOOKS; do
        same=0
        for r in 0 1; do
            [ -s "$OUT/same-mpi/$h.rank$r.f32" ] &&
                cmp -s "$OUT/same-mpi/$h.rank$r.f32" "$OUT/same-torch/$h.rank$r.f32" &&
                same=$((same + 1))
        done
        if [ "$same" -eq 2 ]; then
            ok "$h: the torch backend's gradients = the MPI backend's, bit for bit, on both ranks"
        else
            ko "$h: the gradients of $((2 - same)) of 2 ranks differ between the torch and MPI backends (or are missing)"
        fi
    done
else
    echo "(mpiexec not found: the comparison with the MPI backend is left out)"
fi

# The f16 and bf16 sums (fp16 and bf16 hooks) at 2, 3 and 4 ranks, bucket
# by bucket (1 element, fewer than the ranks, odd lengths, one past
# 32 KiB): the torch backend's equal the rings' order of additions at
# every size, and the MPI backend's from 32 KiB (where it goes round its
# ring; below, MPICH adds in an order of its own), and the large bucket's
# gradients are the same bits under both backends.
for w in 2 3 4; do
    log="$OUT/halfsum-torch-ws$w.log"
    timeout 300 $LAUNCH -n $w --timeout 280 "$S/tests/python/ddp_halfsum.py" \
        --plugin-dir "$DDPH_TEST_PLUGIN_DIR" --out "$OUT/halfsum-torch-ws$w" \
        --all >"$log" 2>&1
    rc=$?
    got=$(grep -c '^\[rank 0\] PASS: ' "$log")
    if [ "$rc" -eq 0 ] && [ "$got" -eq 2 ]; then
        ok "ddp_halfsum.py on $w ranks (torch backend): $(sed -n 's/^\[rank 0\] PASS: //p' "$log" | tr '\n' ';')"
    else
        ko "ddp_halfsum.py on $w ranks (torch backend): exit $rc, $got of 2 hooks passed (see $log)"
    fi
    if [ -z "${MPIEXEC:-}" ] || ! command -v "$MPIEXEC" >/dev/null 2>&1; then
        continue
    fi
    log="$OUT/halfsum-mpi-ws$w.log"
    timeout 300 "$MPIEXEC" -n $w $PY "$S/tests/python/ddp_halfsum.py" \
        --plugin-dir "$DDPH_TEST_PLUGIN_DIR" --out "$OUT/halfsum-mpi-ws$w" \
        </dev/null >"$log" 2>&1
    rc=$?
    same=0
    for h in fp16 bf16; do
        r=0
        while [ "$r" -lt "$w" ]; do
            [ -s "$OUT/halfsum-mpi-ws$w/$h.big.rank$r.f32" ] &&
                cmp -s "$OUT/halfsum-mpi-ws$w/$h.big.rank$r.f32" \
                    "$OUT/halfsum-torch-ws$w/$h.big.rank$r.f32" &&
                same=$((same + 1))
            r=$((r + 1))
        done
    done
    if [ "$rc" -eq 0 ] && [ "$same" -eq $((2 * w)) ]; then
        ok "f16 and bf16 sums on $w ranks: the torch backend's = the MPI backend's, bit for bit, on every rank (and both = the ring's order)"
    else
        ko "f16 and bf16 sums on $w ranks: MPI run exit $rc, $same of $((2 * w)) gradients equal between backends (see $log)"
    fi
done

for phase in full resume resume-resaved resume-without-state; do
    timeout 300 $LAUNCH -n 2 --timeout 250 "$S/tests/python/ddp_resume.py" \
        --plugin-dir "$DDPH_TEST_PLUGIN_DIR" --out "$OUT/resume" \
        --phase "$phase" >"$OUT/resume-$phase.log" 2>&1 ||
        ko "ddp_resume.py --phase $phase (see $OUT/resume-$phase.log)"
done
resumed_checks "$OUT/resume"
# The same through torch.save(state.state_dict()): rank 0 gathers the
# other rank's part through the launcher's store.
for phase in full resume resume-resaved resume-without-state; do
    timeout 300 $LAUNCH -n 2 --timeout 250 "$S/tests/python/ddp_state_dict.py" \
        --plugin-dir "$DDPH_TEST_PLUGIN_DIR" --out "$OUT/state_dict" \
        --phase "$phase" >"$OUT/state_dict-$phase.log" 2>&1 ||
        ko "ddp_state_dict.py --phase $phase (see $OUT/state_dict-$phase.log)"
done
for r in 0 1; do
    if resumed_same "$OUT/state_dict" $r; then
        ok "rank $r: resumed through torch.save(state.state_dict()) = uninterrupted, byte for byte (and not without it)"
    else
        ko "rank $r: resumed through state_dict differs from the uninterrupted run, or equals it without the hook's state (see $OUT/state_dict)"
    fi
done
# Rank 1 closes its job and exits before state_dict: rank 0's gather (a
# timeout of 2 minutes) reads its closing notice in the store and raises
# within 10 s, naming it.
log="$OUT/state_dict-rank1-closed.log"
if timeout 300 $LAUNCH -n 2 --timeout 250 "$S/tests/python/ddp_state_dict.py" \
    --plugin-dir "$DDPH_TEST_PLUGIN_DIR" --out "$OUT/state_dict" \
    --phase rank1-closed >"$log" 2>&1 &&
    grep -q "^\[rank 0\] rank 0 raised Error after .*rank 1 closed the job" "$log"; then
    ok "state_dict on rank 0 after rank 1 closed its job and exited: rank 0 raises within 10 s (timeout 2 min), naming rank 1"
else
    ko "state_dict on rank 0 after rank 1 closed its job and exited (see $log)"
fi
# 3 ranks: rank 1 gives its part and closes its job at once, rank 2 gives
# its part 2 s later: rank 0's gather waits for it (rank 1's closing notice
# is no reason to stop) and returns the 3 parts.
log="$OUT/state_dict-rank1-done-closed.log"
if timeout 300 $LAUNCH -n 3 --timeout 250 "$S/tests/python/ddp_state_dict.py" \
    --plugin-dir "$DDPH_TEST_PLUGIN_DIR" --out "$OUT/state_dict3" \
    --phase rank1-done-closed >"$log" 2>&1 &&
    grep -q "^\[rank 0\] rank 0 gathered 3 parts" "$log"; then
    ok "state_dict on 3 ranks, rank 1 closed after giving its part: rank 0 waits for rank 2's and returns 3 parts"
else
    ko "state_dict on 3 ranks, rank 1 closed after giving its part (see $log)"
fi
# 3 ranks: rank 1 gives its part and closes its job, then rank 2 closes
# its job without giving its part: rank 0's gather (a timeout of 2
# minutes) names rank 2 within 10 s, though rank 1's close came first.
log="$OUT/state_dict-rank1-done-last-closed.log"
if timeout 300 $LAUNCH -n 3 --timeout 250 "$S/tests/python/ddp_state_dict.py" \
    --plugin-dir "$DDPH_TEST_PLUGIN_DIR" --out "$OUT/state_dict3" \
    --phase rank1-done-last-closed >"$log" 2>&1 &&
    grep -q "^\[rank 0\] rank 0 raised Error after .*rank 2 closed the job" "$log"; then
    ok "state_dict on 3 ranks, rank 1 closed after giving its part, rank 2 closed without: rank 0 names rank 2 within 10 s (timeout 2 min)"
else
    ko "state_dict on 3 ranks, rank 1 closed after giving its part, rank 2 closed without (see $log)"
fi

# errors: CASE NAME WANT JOB-TEXT (WANT: a pattern every rank's message has)
errors() {
    case=$1 name=$2 want=$3
    job="$OUT/err-$name.ini"
    printf '%b' "$4" > "$job"
    log="$OUT/err-$name.log"
    t0=$(date +%s)
    timeout 240 $LAUNCH -n 2 --timeout 200 "$S/tests/python/ddp_errors.py" \
        --job "$job" --case "$case" >"$log" 2>&1
    rc=$?
    t=$(( $(date +%s) - t0 ))
    n=$(grep -c "^\[rank [01]\] rank [01] raised .*$want" "$log")
    if [ "$rc" -ne 124 ] && [ "$rc" -ne 0 ] && [ "$n" -eq 2 ] && [ "$t" -le 60 ]; then
        ok "$name: both ranks raised, naming '$want', in ${t}s"
    else
        ko "$name: exit $rc after ${t}s, $n of 2 ranks raised naming '$want' (see $log)"
    fi
}
# timeout_s = 120: a failure heard only at the timeout takes longer than
# the 60 s the cases allow (starting Python and torch included, on a
# loaded machine).
R="[runtime]\nplugin_path = $DDPH_TEST_PLUGIN_DIR\ntimeout_s = 120\n"
CAPS="bucket_cap_mb = 0.0002\nfirst_bucket_cap_mb = 0.0002\n"
errors hook failing-hook "fake failure on bucket 1" \
    "${R}${CAPS}[hook]\nname = $DDPH_TEST_FAKE_DIR/failing.so\n"
errors peer failing-peer "fake failure of the last rank" \
    "${R}${CAPS}[hook]\nname = $DDPH_TEST_FAKE_DIR/failing_last_rank.so\n"
# An allgatherv whose counts differ on one rank but share their largest
# count (padded blocks of one size would move, then be cut wrongly): its
# fingerprint's counts digest tells before it runs; without
# check_collectives, the counts its blocks carry tell after.
errors hook uneven-counts "rank 1 called allgatherv(f32, [0-9]*, counts digest [0-9a-f]*) .*(the ranks passed different allgatherv counts" \
    "${R}[hook]\nname = $DDPH_TEST_FAKE_DIR/misstep.so\n[hook.misstep]\nmode = uneven\nat = 1\n"
errors hook uneven-counts-unchecked "rank [01] gives rank 0's block [0-9]* elements where this rank gives [0-9]* (the ranks' allgatherv counts differ)" \
    "${R}check_collectives = false\n[hook]\nname = $DDPH_TEST_FAKE_DIR/misstep.so\n[hook.misstep]\nmode = uneven\nat = 1\n"
# Two sums of one size issued in the other order on the last rank: gloo
# pairs them by order and size; their fingerprints' byte offsets tell.
errors hook reordered "rank 1 called allreduce(f32, [0-9]*, sum) as its hook collective #[0-9]* on this group (iteration 1, bucket 0, from its byte [1-9][0-9]*) where rank 0 called .*(the ranks reduce different parts of the bucket here" \
    "${R}[hook]\nname = $DDPH_TEST_FAKE_DIR/misstep.so\n[hook.misstep]\nmode = reorder\nat = 1\n"
# The last rank's hook issues no collective: the other's fingerprint meets
# its end of step at once.  Iteration 0 issued 2 collectives (ddp_errors.py's
# buckets): rank 1 stopped after them, rank 0 is in its third.
errors hook skipped "rank 1 reached the end of its step after 2 hook collectives on this group where rank 0 called allreduce(f32, [0-9]*, sum) as its hook collective #3 " \
    "${R}[hook]\nname = $DDPH_TEST_FAKE_DIR/misstep.so\n[hook.misstep]\nmode = skip\nat = 1\n"
# A trainer call (ddphook's broadcast_bytes) of 16 bytes on the last rank
# where rank 0 broadcasts 8: compared before gloo, which would abort.
errors broadcast-size broadcast-size "the ranks' trainer calls differ (group of 2 ranks): rank 1 called ddph_broadcast(u8, 16, root 0) as its trainer call #1 where rank 0 called ddph_broadcast(u8, 8, root 0)" \
    "${R}[hook]\nname = allreduce\n"

# mismatch N MODE WANT: on N ranks the last runs misstep's MODE at
# iteration 1: a collective its peers do not (extra), or one of another
# count (fewer), dtype (dtype) or kind (gather).  gloo would abort the
# rank that receives more bytes than it posted (SIGABRT); with
# check_collectives every rank must raise, naming the last rank and what
# it called (WANT), within seconds, and none may die of a signal.
mismatch() {
    n=$1 mode=$2 want=$3
    job="$OUT/mismatch-$mode-$n.ini"
    printf '%b' "${R}[hook]\nname = $DDPH_TEST_FAKE_DIR/misstep.so\n[hook.misstep]\nmode = $mode\nat = 1\n" > "$job"
    log="$OUT/mismatch-$mode-$n.log"
    t0=$(date +%s)
    timeout 240 $LAUNCH -n "$n" --timeout 200 "$S/tests/python/ddp_errors.py" \
        --job "$job" --case hook >"$log" 2>&1
    rc=$?
    t=$(( $(date +%s) - t0 ))
    last=$((n - 1))
    raised=$(grep -c "^\[rank [0-9]*\] rank [0-9]* raised .*the ranks' collectives differ (group of $n ranks): rank $last called $want" "$log")
    signalled=$(grep -c '^env_launch.py: rank [0-9]* exited -' "$log")
    if [ "$rc" -ne 124 ] && [ "$rc" -ne 0 ] && [ "$raised" -eq "$n" ] &&
        [ "$signalled" -eq 0 ] && [ "$t" -le 60 ]; then
        ok "mismatch $mode, $n ranks: every rank raised, naming rank $last's '$want', in ${t}s, none by a signal"
    else
        ko "mismatch $mode, $n ranks: exit $rc after ${t}s, $raised of $n ranks raised naming '$want', $signalled died of a signal (see $log)"
    fi
}
mismatch 2 extra "allreduce(f32, [0-9]*, sum) as its hook collective #[0-9]* on this group (iteration 1, bucket 0"
mismatch 2 fewer "allreduce(f32, [0-9]*, sum) as its hook collective #[0-9]* on this group (iteration 1, bucket 0, from its byte 0) where rank 0 called allreduce(f32, "
for n in 2 3; do
    mismatch $n dtype "allreduce(i32, "
    mismatch $n gather "allgather(f32, "
done
mismatch 3 extra "allreduce(f32, [0-9]*, sum) as its hook collective #[0-9]* on this group (iteration 1, bucket 0"
mismatch 3 fewer "allreduce(f32, [0-9]*, sum) as its hook collective #[0-9]* on this group (iteration 1, bucket 0, from its byte 0) where ranks 0, 1 called allreduce(f32, "

# What rank 0 raises when rank 1 closed the job after 2 steps.
CLOSED='^\[rank 0\] rank 0 raised .*rank 1 closed the job (ddph_close) after 2 synchronised steps'
# early_close NAME HEARD [ARGS]: rank 1 closes the job of
# $OUT/early-close.ini after 2 steps while rank 0 waits in its third
# (ddp_errors.py --case early-close ARGS): rank 0 must raise within 60 s,
# naming the close, and where HEARD is 1 rank 1 must learn why.
early_close() {
    name=$1 want_heard=$2
    shift 2
    log="$OUT/$name.log"
    t0=$(date +%s)
    timeout 240 $LAUNCH -n 2 --timeout 200 "$S/tests/python/ddp_errors.py" \
        --job "$OUT/early-close.ini" --case early-close "$@" >"$log" 2>&1
    rc=$?
    t=$(( $(date +%s) - t0 ))
    named=$(grep -c "$CLOSED" "$log")
    heard=$(grep -c '^\[rank 1\] ddphook\[rank 1\]: error: .*rank 0 failed: rank 1 closed the job' "$log")
    said="rank 0 named rank 1's close"
    [ "$want_heard" -eq 1 ] && said="$said, rank 1 heard why,"
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$named" -ge 1 ] &&
        { [ "$want_heard" -eq 0 ] || [ "$heard" -ge 1 ]; } &&
        [ "$t" -le 60 ]; then
        ok "$name: $said in ${t}s"
    else
        ko "$name: exit $rc after ${t}s, rank 0 named the close $named times, rank 1 heard it $heard times (see $log)"
    fi
}

# Both with allreduce (gloo's f32 sum) and fp16 (the torch backend's own
# ring of send/recv for half-precision sums).
for hk in allreduce fp16; do
    printf '%b' "${R}[hook]\nname = $hk\n" > "$OUT/early-close.ini"
    early_close "early-close-$hk" 1
    # The same after a barrier on every rank: rank 1's earlier notice
    # (its trainer call) must not hide its close.
    [ "$hk" = allreduce ] && early_close early-close-barrier 0 --barrier-first

    # Rank 1 kills itself (SIGKILL) before its step 5: rank 0's wait on gloo
    # ends at once (the connection is gone), not after timeout_s = 120.
    log="$OUT/killed-$hk.log"
    printf '%b' "${R}[hook]\nname = $hk\n" > "$OUT/killed.ini"
    t0=$(date +%s)
    timeout 240 $LAUNCH -n 2 --timeout 200 "$S/tests/python/ddp_errors.py" \
        --job "$OUT/killed.ini" --case killed >"$log" 2>&1
    t=$(( $(date +%s) - t0 ))
    said=$(grep -c '^\[rank 0\] rank 0 raised .*a peer rank died' "$log")
    if grep -q '^env_launch.py: rank 0 exited [1-9]' "$log" && [ "$said" -ge 1 ] &&
        [ "$t" -le 60 ]; then
        ok "killed ($hk): rank 1 killed in step 5, rank 0 raised saying a peer died, ${t}s in all"
    else
        ko "killed ($hk): after ${t}s, rank 0 raised $said times saying a peer died (see $log)"
    fi
done

# Rank 1's script ends with sys.exit(0) in its third step (no close of its
# own: the bridge closes the job at exit): rank 0 names it, and rank 1's
# process exits 1, not 0, so the launcher sees the job fail.
log="$OUT/exit0.log"
timeout 240 $LAUNCH -n 2 --timeout 200 "$S/tests/python/ddp_errors.py" \
    --job "$OUT/early-close.ini" --case exit0 >"$log" 2>&1
named=$(grep -c "$CLOSED" "$log")
if [ "$named" -ge 1 ] && grep -q '^env_launch.py: rank 1 exited 1$' "$log"; then
    ok "exit0: rank 1's sys.exit(0) mid-training: rank 0 named it, rank 1 exited 1"
else
    ko "exit0: rank 0 named rank 1 $named times; $(grep '^env_launch.py: rank 1 exited' "$log") (see $log)"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
