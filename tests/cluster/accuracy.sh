#!/bin/sh
# accuracy.sh: time to accuracy over a slow link, the number a user picks
# a hook by.  The Fashion-MNIST trainer (examples/train_mnist, the job
# files of examples/configs) on 2 simulated hosts x 1 rank
# (tests/cluster/cluster.sh) for each hook and link rate; per run, from the
# trainer's per-epoch CSV: training seconds until the test accuracy first
# reaches TARGET% (or "not reached" and the best), the accuracy after a
# budget of training seconds (the last epoch that ended within it), and
# the bytes each rank sent per step.  Prints one Markdown table.
#
#   sh tests/cluster/accuracy.sh [--hooks allreduce,fp16,bf16,powersgd,batched_powersgd,topk,int8]
#       [--rates 100mbit,1gbit] [--epochs 6] [--target 87] [--budget 60]
#       [--out DIR]
#
# Run from a build tree (./examples/train_mnist, plugins/.libs).  Needs
# root, as cluster.sh does (exit 77 otherwise), and the Fashion-MNIST
# files (apt-get install dataset-fashion-mnist).  Seconds are training
# time as the trainer counts it (evaluation excluded).
set -u
here=$(dirname "$(readlink -f "$0")")
hooks=allreduce,fp16,bf16,powersgd,batched_powersgd,topk,int8 rates=100mbit,1gbit
epochs=6 target=87 budget=60 out=tests/out/cluster-accuracy
while [ $# -gt 0 ]; do
    case $1 in
    --hooks) hooks=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --target) target=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "accuracy.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
trainer=$(readlink -f examples/train_mnist/train_mnist 2>/dev/null)
[ -x "$trainer" ] || { echo "accuracy.sh: run it from a build tree (examples/train_mnist/train_mnist)" >&2; exit 2; }
src=$(dirname "$here")/..
mkdir -p "$out"
out=$(readlink -f "$out")
plugins=$(readlink -f plugins/.libs)
echo "Fashion-MNIST, 2 hosts x 1 rank, $epochs epochs at most, global batch 128"
echo
echo "| link | hook | s to $target% | best accuracy | accuracy within ${budget} s | s per epoch | bytes sent per step |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
for rate in $(echo "$rates" | tr ',' ' '); do
    for hook in $(echo "$hooks" | tr ',' ' '); do
        job="$out/$hook.ini"
        printf '[runtime]\nplugin_path = %s\n' "$plugins" >"$job"
        cat "$src/examples/configs/$hook.ini" >>"$job" ||
            { echo "accuracy.sh: no examples/configs/$hook.ini" >&2; exit 2; }
        csv="$out/$hook-$rate.csv"
        rm -f "$csv"
        sh "$here/cluster.sh" --hosts 2 --ranks-per-host 1 --rate "$rate" -- \
            "$trainer" --config "$job" --epochs "$epochs" --csv "$csv" \
            >"$out/$hook-$rate.log" 2>&1
        rc=$?
        [ $rc -eq 77 ] && { tail -n 1 "$out/$hook-$rate.log"; exit 77; }
        if [ ! -s "$csv" ]; then
            echo "| $rate | $hook | (failed: see $out/$hook-$rate.log) | | | | |"
            continue
        fi
        awk -F, -v rate="$rate" -v hook="$hook" -v target="$target" -v budget="$budget" '
            NR == 1 { next }
            { t += $4; n++; bytes = $5
              if ($3 > best) best = $3
              if (reach == "" && $3 >= target) reach = sprintf("%.0f", t)
              if (t <= budget) within = $3 }
            END { printf "| %s | %s | %s | %.2f%% | %s | %.1f | %.0f |\n", rate, hook,
                      reach == "" ? "not reached" : reach, best,
                      within == "" ? "(no epoch ended)" : sprintf("%.2f%%", within),
                      t / n, bytes }' "$csv"
    done
done
