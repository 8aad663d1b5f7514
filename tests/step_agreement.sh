#!/bin/sh
# step_agreement.sh: no step returns DDPH_OK unless every rank did the
# same step, for what a hook does (runtime/core/ranks/step_check.h).  On 2 and 4
# ranks, through `ddphook replay` of a 3-step trace with the misstep test
# hook, the last rank misbehaving:
#  - it skips its collective, adds one, or sums its bucket's halves in the
#    other order, at the first, a middle and the last iteration: every
#    rank fails in that very iteration, naming the rank;
#  - every rank starts two overlapping nonblocking sums: refused, naming
#    both buffers;
#  - every rank averages by an allgatherv, the last one with counts that
#    differ but add up to the same total (MPI accepts the shorter
#    messages) at iteration 1: every rank fails in that iteration, naming
#    the rank and a count that differs;
#  - it loads another build of the hook (same name, version, options):
#    refused at finalize on every rank, naming both files;
#  - PowerSGD and batched PowerSGD with it on another OpenBLAS kernel
#    (OPENBLAS_CORETYPE) and thread count, at ranks 4, 65, 96 (and 4096):
#    the same bits on every rank;
#  - on 3 ranks, rank 0 adds a collective: named against ranks 1 and 2.
# (Models, NO_SYNC, trainer calls, Join and ddph_close: test_runtime's
# scenarios.)
set -u
if [ -z "${MPIEXEC:-}" ] || ! command -v "$MPIEXEC" >/dev/null 2>&1; then
    echo "SKIP: mpiexec not found (apt-get install mpich)"
    exit 77
fi
B=${DDPH_TEST_BUILDDIR:?run through make check}
F=${DDPH_TEST_FAKE_DIR:?}
OUT="$B/tests/out/step_agreement"
rm -rf "$OUT"
mkdir -p "$OUT"
pass=0
fail=0
# job NAME HOOK_FILE [OPTION LINES]: writes $OUT/NAME.ini
job() {
    printf '[runtime]\ntimeout_s = 30\nbucket_cap_mb = 1\n[hook]\nname = %s\n[hook.misstep]\n%s\n' \
        "$2" "${3:-}" > "$OUT/$1.ini"
}
# reported W PATTERN OUTPUT: every one of the W ranks logged PATTERN.
reported() {
    n=$(printf '%s\n' "$3" | grep -Ec "ddphook\[rank [0-9]*\]: error: .*$2")
    [ "$n" -ge "$1" ]
}
for w in 2 4; do
    last=$((w - 1))
    "$B/tests/tools/make_trace" "$OUT/t$w" "$w" 3 1 w=256,300 b=300
    for mode in skip extra reorder; do
        for at in 0 1 2; do
            job "$mode$at" "$F/misstep.so" "mode = $mode
at = $at"
            # -disable-auto-cleanup: hydra must not end the ranks that
            # have not reported yet when the first exits non-zero.
            out=$(timeout 120 "$MPIEXEC" -disable-auto-cleanup -n "$w" "$B/ddphook" replay \
                --job "$OUT/$mode$at.ini" --trace "$OUT/t$w" --out "$OUT/o-$mode$at-$w" </dev/null 2>&1)
            rc=$?
            want="the ranks' collectives differ \(group of $w ranks\): rank $last called .*iteration $at"
            if [ "$rc" -ne 0 ] && reported "$w" "$want" "$out"; then
                pass=$((pass + 1)); echo "PASS: $mode at iteration $at on $w ranks: every rank fails in that iteration, naming rank $last"
            else
                fail=$((fail + 1)); echo "FAIL: $mode at iteration $at on $w ranks (exit $rc)"
                printf '%s\n' "$out" | tail -20 | sed 's/^/    /'
            fi
        done
    done
    job overlap "$F/misstep.so" "mode = overlap"
    out=$(timeout 120 "$MPIEXEC" -disable-auto-cleanup -n "$w" "$B/ddphook" replay \
        --job "$OUT/overlap.ini" --trace "$OUT/t$w" --out "$OUT/o-overlap-$w" </dev/null 2>&1)
    rc=$?
    want="iallreduce: its receive buffer 0x[0-9a-f]* \([0-9]* bytes\) overlaps 0x[0-9a-f]* \([0-9]* bytes\), which the outstanding iallreduce of this call writes"
    if [ "$rc" -ne 0 ] && reported 1 "$want" "$out"; then
        pass=$((pass + 1)); echo "PASS: overlapping nonblocking sums on $w ranks: refused, naming both buffers"
    else
        fail=$((fail + 1)); echo "FAIL: overlapping nonblocking sums on $w ranks (exit $rc)"
        printf '%s\n' "$out" | tail -20 | sed 's/^/    /'
    fi
    job counts "$F/misstep.so" "mode = counts
at = 1"
    # Small buckets (eager messages: MPI takes the shorter ones and every
    # step ended OK) and large ones (where they used to hang until
    # timeout_s).
    "$B/tests/tools/make_trace" "$OUT/s$w" "$w" 3 1 w=16,16 b=16
    for trace in s t; do
        # The mismatch is found while the allgatherv's data moves: UCX's
        # single-copy transport would abort a rank whose peer exited
        # mid-copy before it could report (tests/faults.sh says more).
        out=$(UCX_TLS=^cma UCX_TCP_PUT_ENABLE=n timeout 120 "$MPIEXEC" -disable-auto-cleanup -n "$w" "$B/ddphook" replay \
            --job "$OUT/counts.ini" --trace "$OUT/$trace$w" --out "$OUT/o-counts-$trace$w" </dev/null 2>&1)
        rc=$?
        want="the ranks' collectives differ \(group of $w ranks\): rank $last called allgatherv\(f32, [0-9]*, counts digest [0-9a-f]*\) as its collective #[0-9]* \(iteration 1, .*the ranks passed different counts"
        # Each rank names a count that differs: its own, or the rank's
        # whose report reached it first.
        what="allgatherv counts skewed on rank $last of $w (same total, $(du -b "$OUT/$trace$w/rank0.step0.f32" | cut -f1)-byte gradients)"
        if [ "$rc" -ne 0 ] && reported "$w" "$want" "$out" &&
            reported "$w" "$want.*; on rank [0-9]*, counts\[[0-9]*\] is [0-9]*, but rank [0-9]* sends [0-9]*\)" "$out"; then
            pass=$((pass + 1)); echo "PASS: $what: every rank fails in that iteration, naming the rank and a count"
        else
            fail=$((fail + 1)); echo "FAIL: $what (exit $rc)"
            printf '%s\n' "$out" | tail -20 | sed 's/^/    /'
        fi
    done
    job build "$F/misstep.so"
    job other "$F/misstep_sums.so"
    out=$(timeout 120 "$MPIEXEC" -disable-auto-cleanup -n "$last" "$B/ddphook" replay \
        --job "$OUT/build.ini" --trace "$OUT/t$w" --out "$OUT/o-build-$w" : \
        -n 1 "$B/ddphook" replay --job "$OUT/other.ini" --trace "$OUT/t$w" \
        --out "$OUT/o-build-$w" </dev/null 2>&1)
    rc=$?
    want="rank 0 has 'hook build flags 0 tolerance 0 crc32 [0-9a-f]* size [0-9]*	\($F/misstep.so\)' where rank $last has 'hook build flags 0 tolerance 0 crc32 [0-9a-f]* size [0-9]*	\($F/misstep_sums.so\)'"
    if [ "$rc" -ne 0 ] && reported "$w" "$want" "$out"; then
        pass=$((pass + 1)); echo "PASS: another build of the hook on rank $last of $w: refused at finalize on every rank, naming both files"
    else
        fail=$((fail + 1)); echo "FAIL: another build of the hook on rank $last of $w (exit $rc)"
        printf '%s\n' "$out" | tail -20 | sed 's/^/    /'
    fi
    # PowerSGD with the last rank on another OpenBLAS kernel and thread
    # count (a cluster of mixed CPU generations and core counts): every
    # rank's averaged gradients are the same bits, at small ranks and at
    # ranks above 64 (the hook's own arithmetic does its orthogonalisation
    # and P Q^T whatever the rank; batched PowerSGD's 4096 is cut to its
    # 340 x 340 square).  min_compression_rate 1 compresses the 256 x 300
    # matrix up to rank 96 and the 300 x 128 one up to rank 89.
    "$B/tests/tools/make_trace" "$OUT/p$w" "$w" 4 1 w=256,300 v=300,128 b=300
    for run in powersgd:4 powersgd:65 powersgd:96 batched_powersgd:4 \
               batched_powersgd:65 batched_powersgd:96 batched_powersgd:4096; do
        hook=${run%%:*} rank=${run#*:}
        printf '[runtime]\nplugin_path = %s\ntimeout_s = 60\n[hook]\nname = %s\n[hook.%s]\nstart_powerSGD_iter = 2\nmin_compression_rate = 1\nmatrix_approximation_rank = %s\n' \
            "$DDPH_TEST_PLUGIN_DIR" "$hook" "$hook" "$rank" > "$OUT/$hook$rank.ini"
        o="$OUT/o-$hook$rank-$w"
        out=$(timeout 120 "$MPIEXEC" -n "$last" "$B/ddphook" replay --job "$OUT/$hook$rank.ini" \
            --trace "$OUT/p$w" --out "$o" : -n 1 env OPENBLAS_CORETYPE=Prescott OPENBLAS_NUM_THREADS=2 \
            "$B/ddphook" replay --job "$OUT/$hook$rank.ini" --trace "$OUT/p$w" --out "$o" </dev/null 2>&1)
        rc=$?
        differ=0
        for r in $(seq 1 "$last"); do
            for s in 0 1 2 3; do
                cmp -s "$o/rank0.step$s.out.f32" "$o/rank$r.step$s.out.f32" || differ=$((differ + 1))
            done
        done
        what="$hook at rank $rank with rank $last on OpenBLAS's Prescott kernels and 2 threads"
        if [ "$rc" -eq 0 ] && [ "$differ" -eq 0 ]; then
            pass=$((pass + 1)); echo "PASS: $what: every rank's 4 steps the same bits"
        else
            fail=$((fail + 1)); echo "FAIL: $what (exit $rc, $differ files differ from rank 0's)"
            printf '%s\n' "$out" | tail -20 | sed 's/^/    /'
        fi
    done
done
# Rank 0 the odd one of 3: the message names rank 0 against the two that
# agree, not rank 1 against rank 0.
"$B/tests/tools/make_trace" "$OUT/t3" 3 3 1 w=256,300 b=300
job extra0 "$F/misstep.so" "mode = extra
at = 1
rank = 0"
out=$(timeout 120 "$MPIEXEC" -disable-auto-cleanup -n 3 "$B/ddphook" replay \
    --job "$OUT/extra0.ini" --trace "$OUT/t3" --out "$OUT/o-extra0-3" </dev/null 2>&1)
rc=$?
if [ "$rc" -ne 0 ] && reported 3 "rank 0 called .* where ranks 1, 2 called .*iteration 1" "$out"; then
    pass=$((pass + 1)); echo "PASS: extra collective on rank 0 of 3: every rank names rank 0 against ranks 1, 2"
else
    fail=$((fail + 1)); echo "FAIL: extra collective on rank 0 of 3 (exit $rc)"
    printf '%s\n' "$out" | tail -20 | sed 's/^/    /'
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -eq 41 ]
