# torch_python.sh, sourced by the PyTorch tests (pytorch.sh, torchrun.sh):
# PY is a Python 3 with torch ($PYTHON, else Debian's /usr/bin/python3),
# or the test skips (77); and their shared checks.
PY=
for p in "${PYTHON:-}" /usr/bin/python3; do
    if [ -n "$p" ] && "$p" -c 'import torch.distributed' 2>/dev/null; then
        PY=$p
        break
    fi
done
if [ -z "$PY" ]; then
    echo "SKIP: no Python 3 with torch (${PYTHON:-python3}, /usr/bin/python3; apt-get install python3-torch)"
    exit 77
fi

# resumed_same DIR R: rank R's parameters of the runs resumed with the
# hook's state (resume, resume-resaved) equal the uninterrupted run's
# (full), byte for byte, and the run resumed without it
# (resume-without-state) does not.
resumed_same() {
    f="$1/full.rank$2.f32"
    [ -s "$f" ] && cmp -s "$f" "$1/resume.rank$2.f32" &&
        cmp -s "$f" "$1/resume-resaved.rank$2.f32" &&
        ! cmp -s "$f" "$1/resume-without-state.rank$2.f32"
}

# resumed_checks DIR: tests/python/ddp_resume.py's four phases (full,
# resume, resume-resaved, resume-without-state) wrote DIR; the caller's
# ok/ko get one verdict per rank (0, 1) for the resumed parameters and
# one for the save written at close.
resumed_checks() {
    res=$1
    for r in 0 1; do
        if resumed_same "$res" $r; then
            ok "rank $r: resumed with the hook's state (saved after rank 0's lone gloo collective; saved again after loading) = uninterrupted, byte for byte (and not without it)"
        else
            ko "rank $r: resumed parameters differ from the uninterrupted run's, or equal them without the hook's state"
        fi
        if [ -s "$res/full-last.hooks.rank$r" ]; then
            ok "rank $r: a save no step follows is written when the job closes"
        else
            ko "rank $r: $res/full-last.hooks.rank$r not written at close"
        fi
    done
}

# torch_backend_env: the torch backend's tests (torchrun.sh,
# torchrun_examples.sh) skip (77) where it was not built, else find the
# bridge, the library and the backend's folder in the build tree.
torch_backend_env() {
    if [ ! -f "$B/runtime/backends/torch/.libs/torch.so" ] ||
        ! ls "$B"/python/ddphook/_torch_backend*.so >/dev/null 2>&1; then
        echo "SKIP: this ddphook has no torch backend (configure found no libtorch-dev or pybind11-dev)"
        exit 77
    fi
    PYTHONPATH="$S/python${PYTHONPATH:+:$PYTHONPATH}"
    DDPHOOK_LIBRARY="$B/.libs/libddphook.so"
    DDPH_BACKEND_DIR="$B/runtime/backends/torch/.libs"
    export PYTHONPATH DDPHOOK_LIBRARY DDPH_BACKEND_DIR
}
