#!/bin/sh
# bench.sh: when each hook pays off.  `ddphook bench hooks` on 2 simulated
# hosts (tests/cluster/cluster.sh) for each model's gradient shapes, link
# rate and layout, with the raw-MPI baseline (a loop of blocking
# MPI_Allreduce over the same buckets) measured in the same run; then one
# table per model and layout: hook, bytes/step, s/step, ratio to raw,
# speed-up over the allreduce hook.
#
#   sh tests/cluster/bench.sh [--models gpt2-124m,resnet50]
#       [--rates 1gbit,10gbit,unlimited] [--layouts 2x1,2x2] [--repeats R]
#       [--hooks LIST] [--out DIR]
#
# Run from a build tree (it uses ./ddphook and plugins/.libs).  Needs
# root, as cluster.sh does (exit 77 otherwise).  Writes DIR/*.csv (default
# tests/out/cluster-bench) and prints the tables in Markdown.
set -u
here=$(dirname "$(readlink -f "$0")")
models=gpt2-124m,resnet50 rates=1gbit,10gbit,unlimited layouts=2x1,2x2
repeats=5 hooks=allreduce,fp16,bf16,powersgd,batched_powersgd
out=tests/out/cluster-bench
while [ $# -gt 0 ]; do
    case $1 in
    --models) models=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --layouts) layouts=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --hooks) hooks=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[ -x ./ddphook ] || { echo "bench.sh: run it from a build tree (./ddphook)" >&2; exit 2; }
mkdir -p "$out"
bin=$(readlink -f ./ddphook)
plugins=$(readlink -f plugins/.libs)
for model in $(echo "$models" | tr ',' ' '); do
    for layout in $(echo "$layouts" | tr ',' ' '); do
        h=${layout%x*} r=${layout#*x}
        echo "## $model, $h hosts x $r ranks, 25 MiB buckets"
        echo
        echo "| link | hook | bytes/step | s/step | x raw MPI (same buckets) | speed-up over allreduce |"
        echo "| --- | --- | ---: | ---: | ---: | ---: |"
        for rate in $(echo "$rates" | tr ',' ' '); do
            csv="$out/$model-$layout-$rate.csv"
            sh "$here/cluster.sh" --hosts "$h" --ranks-per-host "$r" --rate "$rate" -- \
                "$bin" bench hooks --model "$model" --hooks "$hooks" \
                --repeats "$repeats" --bucket-cap-mb 25 --plugin-path "$plugins" \
                --csv "$csv" >"$out/$model-$layout-$rate.log" 2>&1
            rc=$?
            [ $rc -eq 77 ] && { tail -n 1 "$out/$model-$layout-$rate.log"; exit 77; }
            if [ $rc -ne 0 ] || [ ! -s "$csv" ]; then
                echo "| $rate | (failed: see $out/$model-$layout-$rate.log) | | | | |"
                continue
            fi
            raw=$(awk -F, 'NR == 2 { print $7 }' "$csv")
            ar=$(awk -F, '$1 == "allreduce" { print $3 }' "$csv")
            echo "| $rate | raw MPI_Allreduce | | $(printf '%.3f' "$raw") | 1.00 | |"
            awk -F, -v rate="$rate" -v ar="${ar:-0}" 'NR > 1 {
                up = ar > 0 ? sprintf("%.2fx", ar / $3) : "";
                printf "| %s | %s | %.0f | %.3f | %.2f | %s |\n", rate, $1, $2, $3, $5, up }' "$csv"
        done
        echo
    done
done
