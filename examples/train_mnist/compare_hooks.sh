#!/bin/sh
# compare_hooks.sh: trains the same model with the same seed once per job
# file and prints one table row per hook (the table in docs/performance.md).
#
#   examples/train_mnist/compare_hooks.sh [EPOCHS] [RANKS]
#
# Run from the build tree after `make install` (the job files use the
# installed plugin folder) and `make -C examples/post_localsgd`.
set -eu
epochs=${1:-10}
ranks=${2:-2}
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
trainer=${TRAINER:-./examples/train_mnist/train_mnist}
printf '| job | test accuracy (%%) | bytes sent per step | compression | s per epoch |\n'
printf '| --- | --- | --- | --- | --- |\n'
for job in allreduce fp16 bf16 powersgd batched_powersgd powersgd_fp16 topk int8 signsgd accumulate post_localsgd; do
    ini="$src/examples/configs/$job.ini"
    line=$(mpiexec -n "$ranks" "$trainer" --config "$ini" --epochs "$epochs" </dev/null | tail -n 1)
    # summary: 2 ranks, 10 epochs, loss L, test accuracy A%, S s per epoch, B of G gradient bytes ...
    acc=$(printf '%s' "$line" | sed -n 's/.*test accuracy \([0-9.]*\)%.*/\1/p')
    sec=$(printf '%s' "$line" | sed -n 's/.*, \([0-9.]*\) s per epoch.*/\1/p')
    sent=$(printf '%s' "$line" | sed -n 's/.*epoch, \([0-9]*\) of \([0-9]*\) gradient.*/\1/p')
    total=$(printf '%s' "$line" | sed -n 's/.*epoch, \([0-9]*\) of \([0-9]*\) gradient.*/\2/p')
    ratio=$(awk -v a="$total" -v b="$sent" 'BEGIN { printf "%.1fx", (b > 0 ? a / b : 0) }')
    printf '| %s | %s | %s | %s | %s |\n' "$job" "$acc" "$sent" "$ratio" "$sec"
done
