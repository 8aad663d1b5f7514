#!/bin/sh
# checkpoint.sh: hook state checkpoints resume bit for bit.  For PowerSGD
# and batched PowerSGD on 2 and 4 ranks: replay 8 steps saving the state
# after step 4; a fresh process loads it and replays steps 5-7; its outputs
# must equal the first run's exactly.  Also: a corrupt state file, files
# of two different saves and a checkpoint of another world size are
# refused on every rank with a message, and tests/tools/state_tamper's
# matrix of tampered files loads none.
set -u
if [ -z "${MPIEXEC:-}" ] || ! command -v "$MPIEXEC" >/dev/null 2>&1; then
    echo "SKIP: mpiexec not found (apt-get install mpich)"
    exit 77
fi
B=${DDPH_TEST_BUILDDIR:?run through make check}
OUT="$B/tests/out/checkpoint"
rm -rf "$OUT"
mkdir -p "$OUT"
pass=0
fail=0
check() { # name, command...
    name=$1; shift
    if out=$("$@" </dev/null 2>&1); then
        pass=$((pass + 1)); echo "PASS: $name"
    else
        fail=$((fail + 1)); echo "FAIL: $name"; printf '%s\n' "$out" | sed 's/^/    /'
    fi
}
for w in 2 4; do
    "$B/tests/tools/make_trace" "$OUT/trace$w" "$w" 8 7 \
        conv.weight=16,8,3,3 conv.bias=16 fc.weight=64,48 fc.bias=64 \
        head.weight=10,64 head.bias=10
    for hook in powersgd batched_powersgd; do
        job="$OUT/$hook.ini"
        printf '[runtime]\nplugin_path = %s\nbucket_cap_mb = 0.01\nfirst_bucket_cap_mb = 0.01\ntimeout_s = 60\n[hook]\nname = %s\n[hook.%s]\nmatrix_approximation_rank = 2\nstart_powerSGD_iter = 2\n' \
            "$DDPH_TEST_PLUGIN_DIR" "$hook" "$hook" > "$job"
        check "$hook ws$w: first run, saving after step 4" \
            timeout 120 "$MPIEXEC" -n "$w" "$B/ddphook" replay --job "$job" \
            --trace "$OUT/trace$w" --out "$OUT/a-$hook-$w" \
            --save-state "$OUT/state-$hook-$w" --save-after 4
        check "$hook ws$w: resumed run from step 5" \
            timeout 120 "$MPIEXEC" -n "$w" "$B/ddphook" replay --job "$job" \
            --trace "$OUT/trace$w" --out "$OUT/b-$hook-$w" \
            --load-state "$OUT/state-$hook-$w" --from-step 5
        check "$hook ws$w: steps 5-7 identical bit for bit" \
            "$B/tests/tools/compare_f32" "$OUT/b-$hook-$w" "$OUT/a-$hook-$w" "$w" 8 0 0
        # The control: the state matters.  Resuming at step 5 from the
        # state of step 2 must give different numbers.
        timeout 120 "$MPIEXEC" -n "$w" "$B/ddphook" replay --job "$job" \
            --trace "$OUT/trace$w" --out "$OUT/x-$hook-$w" \
            --save-state "$OUT/early-$hook-$w" --save-after 2 </dev/null >/dev/null
        timeout 120 "$MPIEXEC" -n "$w" "$B/ddphook" replay --job "$job" \
            --trace "$OUT/trace$w" --out "$OUT/c-$hook-$w" \
            --load-state "$OUT/early-$hook-$w" --from-step 5 </dev/null >/dev/null
        if "$B/tests/tools/compare_f32" "$OUT/c-$hook-$w" "$OUT/a-$hook-$w" "$w" 8 0 0 >/dev/null 2>&1; then
            fail=$((fail + 1)); echo "FAIL: $hook ws$w: a stale state gave the same results"
        else
            pass=$((pass + 1)); echo "PASS: $hook ws$w: a stale state gives different results (the state matters)"
        fi
    done
done
# refused NAME PATTERN RANKS TRACE STATE: resuming from STATE must fail on
# every rank with a message matching PATTERN.
refused() {
    if msg=$(timeout 60 "$MPIEXEC" -n "$3" "$B/ddphook" replay --job "$job" \
            --trace "$4" --out "$OUT/c" --load-state "$5" --from-step 5 </dev/null 2>&1); then
        fail=$((fail + 1)); echo "FAIL: $1: loaded"
    elif printf '%s\n' "$msg" | grep -q -- "$2"; then
        pass=$((pass + 1)); echo "PASS: $1 refused"
    else
        fail=$((fail + 1)); echo "FAIL: $1: unexpected message:"; printf '%s\n' "$msg"
    fi
}
job="$OUT/powersgd.ini"
# A corrupt file: flip a byte in the payload; rank 1 gets rank 0's message.
printf 'X' | dd of="$OUT/state-powersgd-2.rank0" bs=1 seek=200 conv=notrunc 2>/dev/null
refused "a corrupt state file" \
    "rank 0 failed: .*state-powersgd-2.rank0: checksum mismatch (corrupt or altered file)" \
    2 "$OUT/trace2" "$OUT/state-powersgd-2"
# Files of two different saves (rank 1's save "failed"): never mixed.
timeout 120 "$MPIEXEC" -n 2 "$B/ddphook" replay --job "$job" --trace "$OUT/trace2" \
    --out "$OUT/y" --save-state "$OUT/other" --save-after 4 </dev/null >/dev/null 2>&1
cp "$OUT/other.rank1" "$OUT/mixed.rank1"
cp "$OUT/early-powersgd-2.rank0" "$OUT/mixed.rank0"
refused "rank files of different saves" \
    "the ranks' files come from different saves" 2 "$OUT/trace2" "$OUT/mixed"
# A 2-rank checkpoint on 4 ranks (rank 0's file names its world).
for r in 2 3; do cp "$OUT/other.rank1" "$OUT/other.rank$r"; done
refused "a 2-rank checkpoint on 4 ranks" \
    "other.rank0 was saved by rank 0 of 2 ranks; this is rank 0 of 4" \
    4 "$OUT/trace4" "$OUT/other"
# A 4 GiB sparse file in place of rank 0's: refused before it is read,
# on both ranks, at once.
cp "$OUT/other.rank1" "$OUT/huge.rank1"
truncate -s 4G "$OUT/huge.rank0"
t0=$(date +%s)
refused "a 4 GiB state file" \
    "huge.rank0: 4294967296 bytes is more than [0-9]*, the most a state file of this job's models can hold" \
    2 "$OUT/trace2" "$OUT/huge"
t1=$(date +%s)
if [ $((t1 - t0)) -le 10 ]; then
    pass=$((pass + 1)); echo "PASS: the 4 GiB file refused in $((t1 - t0)) s"
else
    fail=$((fail + 1)); echo "FAIL: the 4 GiB file took $((t1 - t0)) s to refuse"
fi
rm -f "$OUT/huge.rank0"
# Outputs never follow a link planted at their path: replay's outputs and
# the timeline replace the links; the files they pointed to are intact.
mkdir -p "$OUT/planted"
echo precious > "$OUT/victim-out"
echo precious > "$OUT/victim-trace"
ln -s "$OUT/victim-out" "$OUT/planted/rank0.step0.out.f32"
ln -s "$OUT/victim-trace" "$OUT/planted.json"
printf '[runtime]\nplugin_path = %s\ntimeout_s = 60\ntrace = %s\n' \
    "$DDPH_TEST_PLUGIN_DIR" "$OUT/planted.json" > "$OUT/planted.ini"
timeout 120 "$MPIEXEC" -n 2 "$B/ddphook" replay --job "$OUT/planted.ini" \
    --trace "$OUT/trace2" --out "$OUT/planted" </dev/null >/dev/null 2>&1
if [ "$(cat "$OUT/victim-out")" = precious ] && [ "$(cat "$OUT/victim-trace")" = precious ] &&
   [ -f "$OUT/planted/rank0.step0.out.f32" ] && [ ! -L "$OUT/planted/rank0.step0.out.f32" ] &&
   [ -f "$OUT/planted.json" ] && [ ! -L "$OUT/planted.json" ] &&
   grep -q traceEvents "$OUT/planted.json"; then
    pass=$((pass + 1)); echo "PASS: replay --out and [runtime] trace replace planted links"
else
    fail=$((fail + 1)); echo "FAIL: an output followed a planted link"
    ls -l "$OUT/planted.json" "$OUT/planted/rank0.step0.out.f32" | sed 's/^/    /'
fi
# The tamper matrix (one process, MPI singleton).
mkdir -p "$OUT/tamper"
printf '[runtime]\nplugin_path = %s\nbucket_cap_mb = 0.002\nfirst_bucket_cap_mb = 0.002\ntimeout_s = 60\n[hook]\nname = powersgd\n[hook.powersgd]\nmatrix_approximation_rank = 2\nstart_powerSGD_iter = 2\n' \
    "$DDPH_TEST_PLUGIN_DIR" > "$OUT/tamper.ini"
if out=$(timeout 300 "$B/tests/tools/state_tamper" "$OUT/tamper.ini" "$OUT/tamper" 2>&1 </dev/null); then
    pass=$((pass + 1)); echo "PASS: tamper matrix :: $(printf '%s\n' "$out" | tail -n 1)"
    printf '%s\n' "$out" | sed 's/^/    /'
else
    fail=$((fail + 1)); echo "FAIL: tamper matrix"; printf '%s\n' "$out" | sed 's/^/    /'
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
