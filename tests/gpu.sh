#!/bin/sh
# gpu.sh: the nccl backend's tests (tests/gpu/test_gpu): every shipped
# hook's GPU result, and post-local-SGD's parameter averaging, against the
# CPU backend's on the same gradients; and tests/gpu/test_device_ops, every
# CUDA device operation against its CPU twin.  They skip (77),
# saying why, on a machine without a CUDA device or a build without the
# nccl backend.  One rank per GPU: NCCL refuses two ranks on one device.
set -u
B=${DDPH_TEST_BUILDDIR:?run through make check}
LSGD="$B/tests/gpu/.libs/post_localsgd.so"
out=$("$B/tests/gpu/test_gpu" "$DDPH_TEST_PLUGIN_DIR" "$LSGD" 2>&1)
rc=$?
printf '%s\n' "$out"
[ $rc -eq 77 ] && exit 77
[ $rc -ne 0 ] && exit $rc
# Every CUDA device operation against its CPU twin (built with the backend).
skipped=""
if [ -x "$B/tests/gpu/test_device_ops" ]; then
    "$B/tests/gpu/test_device_ops" || exit 1
else
    skipped="$skipped; tests/gpu/test_device_ops was not built"
fi
n=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "${n:-0}" -ge 2 ] && [ -n "${MPIEXEC:-}" ]; then
    "$MPIEXEC" -n 2 "$B/tests/gpu/test_gpu" "$DDPH_TEST_PLUGIN_DIR" "$LSGD" \
        </dev/null || exit 1
else
    skipped="$skipped; the 2-rank run needs 2 GPUs (found ${n:-0}) and mpiexec"
fi
# A part left out is a skip (77), never a silent pass.
[ -z "$skipped" ] && exit 0
echo "SKIP: ${skipped#; }"
exit 77
