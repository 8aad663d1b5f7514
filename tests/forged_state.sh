#!/bin/sh
# forged_state.sh: forged hook states with a valid crc32 never crash a
# job (tests/tools/state_forge), for every shipped hook, the wrappers and
# the post-local-SGD example, with one bucket and with several.
# make check-sanitizers runs it under ASan and UBSan.
set -u
# One OpenBLAS thread: thousands of short loads and steps.
OPENBLAS_NUM_THREADS=1
export OPENBLAS_NUM_THREADS
B=${DDPH_TEST_BUILDDIR:?run through make check}
OUT="$B/tests/out/forged_state"
rm -rf "$OUT"
mkdir -p "$OUT"
pass=0
fail=0
# name, hook, wrapper, options, bucket_cap_mb values
run() {
    for cap in $5; do
        job="$OUT/$1-$cap.ini"
        printf '[runtime]\nplugin_path = %s\nbucket_cap_mb = %s\nfirst_bucket_cap_mb = %s\ntimeout_s = 60\n[hook]\nname = %s\nwrapper = %s\n%s' \
            "$DDPH_TEST_PLUGIN_DIR" "$cap" "$cap" "$2" "$3" "$4" > "$job"
        mkdir -p "$OUT/$1-$cap"
        # A step that fails on a loaded forgery ends that job (exit 3):
        # the next process goes on from the forgery after it.
        from=0 runs=0 rc=3 total=0
        while [ "$rc" -eq 3 ] && [ "$runs" -lt 400 ]; do
            out=$(timeout 600 "$B/tests/tools/state_forge" "$job" "$OUT/$1-$cap" "$from" </dev/null 2>&1)
            rc=$?
            runs=$((runs + 1))
            n=$(printf '%s\n' "$out" | sed -n 's/^\([0-9]*\) forged, .*/\1/p' | tail -1)
            total=$((total + ${n:-0}))
            from=$(printf '%s\n' "$out" | sed -n 's/.*RESUME \([0-9]*\)$/\1/p' | tail -1)
            [ -n "$from" ] || from=0
        done
        if [ "$rc" -eq 0 ]; then
            pass=$((pass + 1))
            echo "PASS: $1, bucket_cap_mb $cap: $total forged states, no crash ($((runs - 1)) loaded ones failed a step with a message, each ending its process)"
        else
            fail=$((fail + 1))
            echo "FAIL: $1, bucket_cap_mb $cap (exit $rc)"
            printf '%s\n' "$out" | tail -30 | sed 's/^/    /'
        fi
    done
}
PSGD='matrix_approximation_rank = 2\nstart_powerSGD_iter = 2\n'
BOTH='0.002 25'
run allreduce allreduce none '' "$BOTH"
run fp16 fp16 none '' 25
run bf16 bf16 none '' 25
run powersgd powersgd none "$(printf "[hook.powersgd]\n$PSGD")" "$BOTH"
run powersgd-fp16 powersgd fp16 "$(printf "[hook.powersgd]\n$PSGD")" 0.002
run batched_powersgd batched_powersgd none "$(printf "[hook.batched_powersgd]\n$PSGD")" "$BOTH"
run batched_powersgd-bf16 batched_powersgd bf16 "$(printf "[hook.batched_powersgd]\n$PSGD")" 0.002
run topk topk none '[hook.topk]
ratio = 0.05
' "$BOTH"
run int8 int8 none '' "$BOTH"
LOCALSGD="$B/tests/gpu/.libs/post_localsgd.so"
if [ -f "$LOCALSGD" ]; then
    run post_localsgd "$LOCALSGD" none '' 25
fi
echo "forged_state: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
