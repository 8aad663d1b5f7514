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
pass=0
fail=0
# case  folder  world  hook  wrapper  rtol  atol
cases='
none      2 allreduce none 1e-5 0
none      4 allreduce none 1e-5 0
allreduce 2 allreduce none 1e-5 0
allreduce 4 allreduce none 1e-5 0
'
echo "$cases" | while read -r folder w hook wrapper rtol atol; do
    [ -n "$folder" ] || continue
    [ -d "$V/ws$w/$folder" ] || { echo "FAIL: $V/ws$w/$folder missing"; echo x >> "$OUT/failed"; continue; }
    job="$OUT/$folder-ws$w.ini"
    printf '[runtime]\nplugin_path = %s\nbucket_cap_mb = 0.0078125\nfirst_bucket_cap_mb = 0.0078125\ntimeout_s = 60\n[hook]\nname = %s\nwrapper = %s\n' \
        "$DDPH_TEST_PLUGIN_DIR" "$hook" "$wrapper" > "$job"
    rm -rf "$OUT/$folder-ws$w"
    if ! timeout 120 "$MPIEXEC" -n "$w" "$B/ddphook" replay --job "$job" \
            --trace "$V/ws$w/inputs" --out "$OUT/$folder-ws$w" >/dev/null; then
        echo "FAIL: replay of $folder on $w ranks"
        echo x >> "$OUT/failed"
        continue
    fi
    if res=$("$B/tests/tools/compare_f32" "$V/ws$w/$folder" "$OUT/$folder-ws$w" "$w" 6 "$rtol" "$atol" 2>&1); then
        echo "PASS: $folder ws$w: $res"
    else
        echo "FAIL: $folder ws$w: $res"
        echo x >> "$OUT/failed"
    fi
done
nfail=$(cat "$OUT/failed" 2>/dev/null | wc -l)
rm -f "$OUT/failed"
ntotal=$(echo "$cases" | grep -c .)
echo "$((ntotal - nfail)) passed, $nfail failed"
[ "$nfail" -eq 0 ]
