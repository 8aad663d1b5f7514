#!/bin/sh
# torchrun_examples.sh: examples/pytorch/train_ddp.py trains with every CPU
# job file of examples/configs under an env:// launch (torchrun's
# variables, no mpiexec: the job runs over the torch backend).  Each file
# runs 3 steps on 2 ranks; a run passes when both ranks exit 0 and rank 0
# printed 3 finite losses.  gpu_powersgd.ini (CUDA tensors) and
# two_models.ini (two models; train_ddp.py has one) are not CPU jobs of
# this program, as its --help says.  post_localsgd.ini names the hook by a
# path next to examples/; the run uses the copy make check builds.
# Skips (77) as torchrun.sh does.
set -u
B=${DDPH_TEST_BUILDDIR:?run through make check}
S=${DDPH_TEST_SRCDIR:?run through make check}
. "$S/tests/torch_python.sh"
torch_backend_env
TEXT=/usr/share/games/fortunes
if [ ! -e "$TEXT" ]; then
    echo "SKIP: no training text at $TEXT (apt-get install fortunes)"
    exit 77
fi
OUT="$B/tests/out/torchrun_examples"
rm -rf "$OUT"
mkdir -p "$OUT"
LAUNCH="$PY $S/tests/python/env_launch.py"
LOCALSGD="$B/tests/gpu/.libs/post_localsgd.so"
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "PASS: $*"; }
ko() { fail=$((fail + 1)); echo "FAIL: $*"; }

for cfg in "$S"/examples/configs/*.ini; do
    name=$(basename "$cfg" .ini)
    case $name in gpu_powersgd | two_models) continue ;; esac
    job=$cfg
    if [ "$name" = post_localsgd ]; then
        job="$OUT/post_localsgd.ini"
        sed "s|^name = .*post_localsgd.so|name = $LOCALSGD|" "$cfg" >"$job"
    fi
    log="$OUT/$name.log"
    timeout 200 $LAUNCH -n 2 --timeout 180 "$S/examples/pytorch/train_ddp.py" \
        --config "$job" --plugin-path "$DDPH_TEST_PLUGIN_DIR" --text "$TEXT" \
        --steps 3 --every 1 >"$log" 2>&1
    rc=$?
    # "[rank 0] step    3  loss 5.1981  ..." with a finite loss
    losses=$(sed -n 's/^\[rank 0\] step *[0-9]*  loss \([0-9][0-9.]*\) .*/\1/p' "$log" | wc -l)
    if [ "$rc" -eq 0 ] && [ "$losses" -eq 3 ]; then
        ok "$name.ini: 3 steps on 2 ranks over the torch backend (last: $(grep '^\[rank 0\] step' "$log" | tail -1 | sed 's/^\[rank 0\] //; s/  */ /g'))"
    else
        ko "$name.ini: exit $rc, $losses of 3 finite losses (see $log)"
        tail -5 "$log"
    fi
done
echo "torchrun_examples.sh: $pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
