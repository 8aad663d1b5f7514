#!/bin/sh
# no_cuda.sh: a CPU trainer does not depend on CUDA.  libddphook.so links
# no CUDA library even in a build with the nccl backend (the backend is a
# module, loaded when a job asks for it); with /usr/local/cuda hidden (a
# private mount namespace, root only), a 2-rank CPU job still runs, and a
# job that asks for backend = nccl is refused with a message naming the
# module and the missing library.
set -u
B=${DDPH_TEST_BUILDDIR:?run through make check}
S=${DDPH_TEST_SRCDIR:?run through make check}
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "PASS: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; }

# In a build without the nccl backend nothing could link CUDA, so the
# checks below would pass whatever the code did: skip, saying so.
if [ ! -f "$DDPH_BACKEND_DIR/nccl.so" ]; then
    echo "SKIP: no GPU module in this build (configure found no CUDA/NCCL): nothing to keep CUDA out of"
    exit 77
fi
lib="$B/.libs/libddphook.so"
cuda_libs=$(ldd "$lib" | grep -E 'libcuda|libnccl|libcublas|libcusolver|libcusparse')
if [ -z "$cuda_libs" ]; then
    ok "ldd libddphook.so lists no CUDA library"
else
    bad "libddphook.so links CUDA: $cuda_libs"
fi
cli_libs=$(ldd "$B/ddphook" | grep -E 'libcuda|libnccl|libcublas|libcusolver')
[ -z "$cli_libs" ] && ok "ldd ddphook lists no CUDA library" ||
    bad "ddphook links CUDA: $cli_libs"

if [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null ||
    [ ! -d /usr/local/cuda ] || [ -z "${MPIEXEC:-}" ]; then
    echo "no_cuda.sh: $pass passed, $fail failed"
    [ $fail -eq 0 ] || exit 1
    # The ldd checks ran; the jobs with CUDA hidden did not: a partial skip.
    echo "SKIP: hiding /usr/local/cuda needs root, unshare, the folder and mpiexec"
    exit 77
fi
OUT=$(mktemp -d) || exit 1
trap 'rm -rf "$OUT"' EXIT
printf '[runtime]\nplugin_path = %s\n[hook]\nname = allreduce\n' \
    "$DDPH_TEST_PLUGIN_DIR" > "$OUT/cpu.ini"
printf '[runtime]\nbackend = nccl\nplugin_path = %s\n' \
    "$DDPH_TEST_PLUGIN_DIR" > "$OUT/nccl.ini"
# Everything below runs with an empty folder mounted over /usr/local/cuda.
hidden() {
    unshare -m sh -c 'mount -t tmpfs none /usr/local/cuda && exec "$@"' \
        hidden "$@"
}
if out=$(hidden timeout 60 "$MPIEXEC" -n 2 "$B/examples/minimal_trainer" \
    "$OUT/cpu.ini" 2>&1) && printf '%s\n' "$out" | grep -q "^minimal_trainer: 2 ranks"; then
    ok "a 2-rank CPU job runs with /usr/local/cuda hidden"
else
    bad "CPU job with /usr/local/cuda hidden: $out"
fi
out=$(hidden "$B/ddphook" check "$OUT/nccl.ini" 2>&1)
if printf '%s\n' "$out" | grep -q "backend = nccl: the nccl backend is not available .*cannot load the backend module $DDPH_BACKEND_DIR/nccl.so: lib[a-z]*\.so[.0-9]*: cannot open shared object file"; then
    ok "backend = nccl with CUDA hidden names the module and the missing library"
else
    bad "backend = nccl with CUDA hidden: $out"
fi
echo "no_cuda.sh: $pass passed, $fail failed"
[ $pass -eq 4 ] && [ $fail -eq 0 ]
