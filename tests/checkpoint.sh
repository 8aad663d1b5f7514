#!/bin/sh
# checkpoint.sh: hook state checkpoints resume bit for bit.  For PowerSGD
# and batched PowerSGD on 2 and 4 ranks: replay 8 steps saving the state
# after step 4; a fresh process loads it and replays steps 5-7; its outputs
# must equal the first run's exactly.  Also: a corrupt state file is
# refused with a message.
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
# A corrupt file: flip a byte in the payload; the load must fail, saying so.
f="$OUT/state-powersgd-2.rank0"
printf 'X' | dd of="$f" bs=1 seek=200 conv=notrunc 2>/dev/null
job="$OUT/powersgd.ini"
if msg=$(timeout 60 "$MPIEXEC" -n 2 "$B/ddphook" replay --job "$job" --trace "$OUT/trace2" \
        --out "$OUT/c" --load-state "$OUT/state-powersgd-2" --from-step 5 </dev/null 2>&1); then
    fail=$((fail + 1)); echo "FAIL: a corrupt state file was accepted"
elif printf '%s' "$msg" | grep -q "checksum mismatch in model 'model' (corrupt file)"; then
    pass=$((pass + 1)); echo "PASS: corrupt state refused"
else
    fail=$((fail + 1)); echo "FAIL: corrupt state: unexpected message:"; printf '%s\n' "$msg"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
