#!/bin/sh
# vectors.sh: replays the reference traces (PyTorch 1.13.1's own hooks on 2
# and 4 ranks, ../shared/reference/vectors) through `ddphook replay` and
# compares the outputs within the tolerances of the vectors' README.
set -u
V=${REFERENCE_VECTORS:?run through make check}
if [ ! -f "$V/ws2/inputs/trace.ini" ]; then
    echo "SKIP: reference vectors not found at $V (configure --with-reference-vectors=DIR)"
    exit 77
fi
if [ -z "${MPIEXEC:-}" ] || ! command -v "$MPIEXEC" >/dev/null 2>&1; then
    echo "SKIP: mpiexec not found (apt-get install mpich)"
    exit 77
fi
B=${DDPH_TEST_BUILDDIR:?}
OUT="$B/tests/out/vectors"
mkdir -p "$OUT"
rm -f "$OUT/failed" "$OUT/passed"
pass=0
fail=0
# case  folder  world  hook  wrapper  rtol  atol
cases='
none      2 allreduce none 1e-5 0
none      4 allreduce none 1e-5 0
allreduce 2 allreduce none 1e-5 0
allreduce 4 allreduce none 1e-5 0
fp16      2 fp16      none 0 0
fp16      4 fp16      none 0 2e-3
bf16_emul 2 bf16      none 0 0
bf16_emul 4 bf16      none 0 1.6e-2
fp16      2 allreduce fp16 0 0
fp16      4 allreduce fp16 0 2e-3
bf16_emul 2 allreduce bf16 0 0
bf16_emul 4 allreduce bf16 0 1.6e-2
'
echo "$cases" | while read -r folder w hook wrapper rtol atol; do
    [ -n "$folder" ] || continue
    [ -d "$V/ws$w/$folder" ] || { echo "FAIL: $V/ws$w/$folder missing"; echo x >> "$OUT/failed"; continue; }
    tag="$folder-ws$w-$hook-$wrapper"
    job="$OUT/$tag.ini"
    printf '[runtime]\nplugin_path = %s\nbucket_cap_mb = 0.0078125\nfirst_bucket_cap_mb = 0.0078125\ntimeout_s = 60\n[hook]\nname = %s\nwrapper = %s\n' \
        "$DDPH_TEST_PLUGIN_DIR" "$hook" "$wrapper" > "$job"
    rm -rf "$OUT/$tag"
    if ! timeout 120 "$MPIEXEC" -n "$w" "$B/ddphook" replay --job "$job" \
            --trace "$V/ws$w/inputs" --out "$OUT/$tag" \
            </dev/null >/dev/null; then
        echo "FAIL: replay of $folder on $w ranks"
        echo x >> "$OUT/failed"
        continue
    fi
    if res=$("$B/tests/tools/compare_f32" "$V/ws$w/$folder" "$OUT/$tag" "$w" 6 "$rtol" "$atol" 2>&1); then
        echo "PASS: $folder ws$w (hook $hook, wrapper $wrapper): $res"
        echo x >> "$OUT/passed"
    else
        echo "FAIL: $folder ws$w (hook $hook, wrapper $wrapper): $res"
        echo x >> "$OUT/failed"
    fi
done
# Every case must have run and passed: a case that silently did not run
# is a failure.
npass=$(cat "$OUT/passed" 2>/dev/null | wc -l)
ntotal=$(echo "$cases" | grep -c .)
rm -f "$OUT/failed" "$OUT/passed"
echo "$npass passed, $((ntotal - npass)) failed"
[ "$npass" -eq "$ntotal" ]
