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
# folder  world  hook  wrapper  rtol  atol  [hook options, k=v;k=v]
# PowerSGD runs read PyTorch's own random Q (q_init_dir) so that the
# compressed steps can be compared too.
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
powerSGD_r1 2 powersgd none 1e-4 1e-5 matrix_approximation_rank=1;start_powerSGD_iter=2
powerSGD_r1 4 powersgd none 1e-4 1e-5 matrix_approximation_rank=1;start_powerSGD_iter=2
powerSGD_r2 2 powersgd none 1e-4 1e-5 matrix_approximation_rank=2;start_powerSGD_iter=2
powerSGD_r2 4 powersgd none 1e-4 1e-5 matrix_approximation_rank=2;start_powerSGD_iter=2
powerSGD_r1_noEF_noWS 2 powersgd none 1e-4 1e-5 matrix_approximation_rank=1;start_powerSGD_iter=2;use_error_feedback=false;warm_start=false
powerSGD_r1_noEF_noWS 4 powersgd none 1e-4 1e-5 matrix_approximation_rank=1;start_powerSGD_iter=2;use_error_feedback=false;warm_start=false
batched_powerSGD_r1_2dfix 2 batched_powersgd none 1e-4 1e-5 matrix_approximation_rank=1;start_powerSGD_iter=2
batched_powerSGD_r1_2dfix 4 batched_powersgd none 1e-4 1e-5 matrix_approximation_rank=1;start_powerSGD_iter=2
batched_powerSGD_r2_2dfix 2 batched_powersgd none 1e-4 1e-5 matrix_approximation_rank=2;start_powerSGD_iter=2
batched_powerSGD_r2_2dfix 4 batched_powersgd none 1e-4 1e-5 matrix_approximation_rank=2;start_powerSGD_iter=2
'
echo "$cases" | while read -r folder w hook wrapper rtol atol opts; do
    [ -n "$folder" ] || continue
    [ -d "$V/ws$w/$folder" ] || { echo "FAIL: $V/ws$w/$folder missing"; echo x >> "$OUT/failed"; continue; }
    tag="$folder-ws$w-$hook-$wrapper"
    job="$OUT/$tag.ini"
    printf '[runtime]\nplugin_path = %s\nbucket_cap_mb = 0.0078125\nfirst_bucket_cap_mb = 0.0078125\ntimeout_s = 60\n[hook]\nname = %s\nwrapper = %s\n' \
        "$DDPH_TEST_PLUGIN_DIR" "$hook" "$wrapper" > "$job"
    if [ -n "${opts:-}" ]; then
        printf '[hook.%s]\n' "$hook" >> "$job"
        printf '%s\n' "$opts" | tr ';' '\n' | sed 's/=/ = /' >> "$job"
        [ -d "$V/ws$w/$folder/psgd" ] && printf 'q_init_dir = %s\n' "$V/ws$w/$folder/psgd" >> "$job"
    fi
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
