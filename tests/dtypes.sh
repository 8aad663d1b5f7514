#!/bin/sh
# dtypes.sh: gradients of every dtype through `ddphook replay` (trace.ini's
# dtype), against the same trace with f32 gradients, on 2 ranks.  The
# bucket caps scale with the element size so that both runs get the same
# bucket layout (PowerSGD's results depend on it).
#  - exact: a half-precision hook (fp16, bf16, powersgd under the fp16
#    wrapper) on gradients already in its half type gives what it gives on
#    f32 gradients, bit for bit (its first cast rounds them the same way);
#    allreduce on f64 gradients gives the f32 result (on 2 ranks both sums
#    round once);
#  - within the dtype's precision: allreduce (also accumulating over two
#    steps), powersgd and batched_powersgd on f16 and bf16 gradients;
#  - refused, saying why: powersgd on f64 gradients.
set -u
B=${DDPH_TEST_BUILDDIR:?run through make check}
if [ -z "${MPIEXEC:-}" ] || ! command -v "$MPIEXEC" >/dev/null 2>&1; then
    echo "SKIP: mpiexec not found (apt-get install mpich)"
    exit 77
fi
OUT="$B/tests/out/dtypes"
rm -rf "$OUT"
mkdir -p "$OUT"
"$B/tests/tools/make_trace" "$OUT/f32" 2 6 7 conv=16,8,3,3 conv_b=16 \
    fc=64,32 fc_b=64 head=10,64 head_b=10 tiny=3,5 || exit 1
for d in f16 bf16 f64; do
    mkdir -p "$OUT/$d"
    cp "$OUT"/f32/*.f32 "$OUT/$d/"
    sed "s/^dtype = f32/dtype = $d/" "$OUT/f32/trace.ini" > "$OUT/$d/trace.ini"
done
pass=0
fail=0
# replay TAG DTYPE HOOK WRAPPER [INI LINES...]: a 2-rank replay into
# $OUT/TAG-DTYPE, the bucket cap 8 KiB of f32 scaled to DTYPE's size; the
# lines go after [runtime]'s keys.
# (Shell functions share their variables: replay's are r_*.)
replay() {
    r_tag=$1 r_dt=$2 r_hook=$3 r_wrapper=$4
    shift 4
    case $r_dt in f16|bf16) cap=0.00390625 ;; f64) cap=0.015625 ;; *) cap=0.0078125 ;; esac
    job="$OUT/$r_tag-$r_dt.ini"
    {
        printf '[runtime]\nplugin_path = %s\ntimeout_s = 60\n' "$DDPH_TEST_PLUGIN_DIR"
        printf 'bucket_cap_mb = %s\nfirst_bucket_cap_mb = %s\n' "$cap" "$cap"
        for line in "$@"; do printf '%s\n' "$line"; done
        printf '[hook]\nname = %s\nwrapper = %s\n' "$r_hook" "$r_wrapper"
        case $r_hook in *powersgd)
            printf '[hook.%s]\nmatrix_approximation_rank = 2\nstart_powerSGD_iter = 2\n' "$r_hook" ;;
        esac
    } > "$job"
    timeout 120 "$MPIEXEC" -n 2 "$B/ddphook" replay --job "$job" \
        --trace "$OUT/$r_dt" --out "$OUT/$r_tag-$r_dt" </dev/null > "$OUT/$r_tag-$r_dt.log" 2>&1
}
# check TAG DTYPE ATOL HOOK WRAPPER [INI LINES...]: DTYPE against f32.
check() {
    tag=$1 dt=$2 atol=$3
    shift 3
    if ! replay "$tag" f32 "$@" || ! replay "$tag" "$dt" "$@"; then
        fail=$((fail + 1))
        echo "FAIL: $tag on $dt gradients: replay failed:"
        sed 's/^/    /' "$OUT/$tag-$dt.log" "$OUT/$tag-f32.log"
        return
    fi
    if ! grep -q "($dt gradients)" "$OUT/$tag-$dt.log"; then
        fail=$((fail + 1))
        echo "FAIL: $tag: the replay did not use $dt gradients:"
        sed 's/^/    /' "$OUT/$tag-$dt.log"
    elif res=$("$B/tests/tools/compare_f32" "$OUT/$tag-f32" "$OUT/$tag-$dt" 2 6 0 "$atol" 2>&1); then
        pass=$((pass + 1))
        echo "PASS: $tag on $dt gradients vs f32 (atol $atol): $res"
    else
        fail=$((fail + 1))
        echo "FAIL: $tag on $dt gradients vs f32 (atol $atol): $res"
    fi
}
check fp16 f16 0 fp16 none
check bf16 bf16 0 bf16 none
check powersgd-fp16-wrapper f16 0 powersgd fp16
check allreduce f64 0 allreduce none
check allreduce f16 1e-3 allreduce none
check allreduce bf16 8e-3 allreduce none
check accumulate2 f16 2e-3 allreduce none "[accumulate]" "steps = 2"
check powersgd f16 1e-2 powersgd none
check powersgd bf16 5e-2 powersgd none
check batched_powersgd f16 1e-2 batched_powersgd none
check batched_powersgd bf16 5e-2 batched_powersgd none
if replay powersgd-refused f64 powersgd none; then
    fail=$((fail + 1))
    echo "FAIL: powersgd on f64 gradients was accepted"
elif grep -q "f64 buckets are not supported" "$OUT/powersgd-refused-f64.log"; then
    pass=$((pass + 1))
    echo "PASS: powersgd on f64 gradients is refused: $(grep -m1 'not supported' "$OUT/powersgd-refused-f64.log")"
else
    fail=$((fail + 1))
    echo "FAIL: powersgd on f64 gradients: no reason given:"
    sed 's/^/    /' "$OUT/powersgd-refused-f64.log"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -eq 12 ]
