#!/bin/sh
# abi.sh: a hook built for ABI 1.4 and never rebuilt still reads the right
# buckets from this host.  tests/fake_plugins/layout_1_4.so is built
# against release 0.5.1's headers (tests/abi_1_4/): its on_layout indexes
# ddph_layout.buckets with 1.4's sizeof(ddph_bucket), and every on_bucket
# call must be the bucket announced at its index (it fails the step
# otherwise).  Several buckets, 2 ranks, a few steps of the minimal
# trainer; the hook's own report must count them.
set -u
if [ -z "${MPIEXEC:-}" ] || ! command -v "$MPIEXEC" >/dev/null 2>&1; then
    echo "SKIP: mpiexec not found (apt-get install mpich)"
    exit 77
fi
B=${DDPH_TEST_BUILDDIR:?run through make check}
OUT="$B/tests/out/abi"
mkdir -p "$OUT"
printf '[runtime]\nbucket_cap_mb = 0.01\nfirst_bucket_cap_mb = 0.001\n[hook]\nname = %s\n' \
    "$DDPH_TEST_FAKE_DIR/layout_1_4.so" > "$OUT/layout_1_4.ini"
out=$(timeout 120 "$MPIEXEC" -n 2 "$B/examples/minimal_trainer" \
    "$OUT/layout_1_4.ini" </dev/null 2>&1)
rc=$?
# "layout_1_4: N buckets read ...; M on_bucket calls matched them", twice.
report=$(printf '%s\n' "$out" | grep 'layout_1_4: [0-9]* buckets read')
nb=$(printf '%s\n' "$report" | sed -n 's/.*layout_1_4: \([0-9]*\) buckets read.*/\1/p' | head -n 1)
calls=$(printf '%s\n' "$report" | sed -n 's/.*; \([0-9]*\) on_bucket calls matched.*/\1/p' | head -n 1)
if [ $rc -eq 0 ] && [ "$(printf '%s\n' "$report" | grep -c .)" -eq 2 ] &&
    [ "${nb:-0}" -ge 3 ] && [ "${calls:-0}" -ge "$nb" ]; then
    echo "PASS: a hook built for ABI 1.4 read $nb buckets from the layout and matched $calls on_bucket calls on each of 2 ranks"
    exit 0
fi
echo "FAIL: the hook built for ABI 1.4 (exit $rc):"
printf '%s\n' "$out" | sed 's/^/    /'
exit 1
