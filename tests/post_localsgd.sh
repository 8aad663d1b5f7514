#!/bin/sh
# post_localsgd.sh: the third-party hook, built as a stranger would.
# Installs this build into a temporary root, builds examples/post_localsgd
# with its own Makefile against the installed SDK (pkg-config only, no path
# into the source tree), then: replays PyTorch's post-local-SGD vectors
# (when present) and checks the averaging schedule on 4 ranks with
# subgroups of 2.
set -u
if [ -z "${MPIEXEC:-}" ] || ! command -v "$MPIEXEC" >/dev/null 2>&1; then
    echo "SKIP: mpiexec not found (apt-get install mpich)"
    exit 77
fi
B=${DDPH_TEST_BUILDDIR:?run through make check}
S=${DDPH_TEST_SRCDIR:?}
OUT="$B/tests/out/post_localsgd"
rm -rf "$OUT"
mkdir -p "$OUT"
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "PASS: $1"; }
ko() { fail=$((fail + 1)); echo "FAIL: $1"; }

root="$OUT/root"
if ${MAKE:-make} -C "$B" install DESTDIR="$root" >"$OUT/install.log" 2>&1; then
    ok "make install DESTDIR=$root"
else
    ko "make install"; cat "$OUT/install.log"; exit 1
fi
pc=$(find "$root" -name ddphook.pc | head -n 1)
cp -R "$S/examples/post_localsgd" "$OUT/src"
chmod -R u+w "$OUT/src"
if PKG_CONFIG_PATH="$(dirname "$pc")" PKG_CONFIG_SYSROOT_DIR="$root" \
        ${MAKE:-make} -C "$OUT/src" >"$OUT/build.log" 2>&1; then
    ok "examples/post_localsgd built against the installed SDK"
else
    ko "building examples/post_localsgd"; cat "$OUT/build.log"; exit 1
fi
so="$OUT/src/post_localsgd.so"
# Every include path must come from the installed root, none from the tree.
for flag in $(grep -o -- '-I[^ ]*' "$OUT/build.log"); do
    case "$flag" in
    -I"$root"/*) ;;
    *) ko "the build used $flag, outside the installed SDK" ;;
    esac
done

V=${REFERENCE_VECTORS:-}
if [ -f "$V/ws2/inputs/trace.ini" ]; then
    for w in 2 4; do
        for case in post_localSGD:true post_localSGD_nosync:false; do
            folder=${case%%:*}
            job="$OUT/$folder-$w.ini"
            printf '[runtime]\nbucket_cap_mb = 0.0078125\nfirst_bucket_cap_mb = 0.0078125\ntimeout_s = 60\n[hook]\nname = %s\n[hook.post_localsgd]\nstart_localSGD_iter = 2\nsubgroup_size = 2\npost_local_gradient_allreduce = %s\n' \
                "$so" "${case#*:}" > "$job"
            if timeout 120 "$MPIEXEC" -n "$w" "$B/ddphook" replay --job "$job" \
                    --trace "$V/ws$w/inputs" --out "$OUT/$folder-$w" </dev/null >/dev/null &&
                res=$("$B/tests/tools/compare_f32" "$V/ws$w/$folder" "$OUT/$folder-$w" "$w" 6 1e-5 0); then
                ok "$folder ws$w: $res"
            else
                ko "$folder ws$w: ${res:-replay failed}"
            fi
        done
    done
else
    echo "note: reference vectors not found at '$V': vector replays not run"
fi

if out=$(DDPH_TEST_LOCALSGD="$so" timeout 120 "$MPIEXEC" -n 4 \
        "$B/tests/mpi/test_runtime" local-sgd </dev/null 2>&1); then
    ok "averaging schedule on 4 ranks, subgroups of 2 (periodic, hierarchical)"
else
    ko "averaging schedule"; printf '%s\n' "$out" | sed 's/^/    /'
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
