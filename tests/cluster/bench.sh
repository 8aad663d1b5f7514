#!/bin/sh
# bench.sh: when each hook pays off.  `ddphook bench hooks` on 2 simulated
# hosts (tests/cluster/cluster.sh) for each model's gradient shapes, link
# rate and layout, with the raw-MPI baseline (a loop of blocking
# MPI_Allreduce over the same buckets) measured in the same run; then one
# table per model and layout: hook, bytes/step, s/step, ratio to raw,
# speed-up over the allreduce hook.  Where PyTorch is installed (Debian's
# python3-torch, 1.13), each hook of PyTorch DDP runs on the same link and
# layout right after (peers/pytorch_ddp.py, gloo, same shapes and bucket
# size), and a second table sets the two side by side; what PyTorch refuses
# or aborts on is listed with its message.  --no-pytorch skips it.
#
#   sh tests/cluster/bench.sh [--models gpt2-124m,resnet50]
#       [--rates 1gbit,10gbit,unlimited] [--layouts 2x1,2x2] [--repeats R]
#       [--hooks LIST] [--out DIR] [--no-pytorch]
#
# Run from a build tree (it uses ./ddphook and plugins/.libs).  Needs
# root, as cluster.sh does (exit 77 otherwise).  Writes DIR/*.csv (default
# tests/out/cluster-bench) and prints the tables in Markdown.
set -u
here=$(dirname "$(readlink -f "$0")")
models=gpt2-124m,resnet50 rates=1gbit,10gbit,unlimited layouts=2x1,2x2
repeats=5 hooks=allreduce,fp16,bf16,powersgd,batched_powersgd
out=tests/out/cluster-bench
pytorch=auto pytorch_limit=600
while [ $# -gt 0 ]; do
    case $1 in
    --models) models=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --layouts) layouts=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --hooks) hooks=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-pytorch) pytorch=no; shift ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[ -x ./ddphook ] || { echo "bench.sh: run it from a build tree (./ddphook)" >&2; exit 2; }
mkdir -p "$out"
bin=$(readlink -f ./ddphook)
plugins=$(readlink -f plugins/.libs)
if [ $pytorch = auto ]; then
    if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
        pytorch=yes
    else
        pytorch=no
        echo "note: PyTorch not found (apt-get install python3-torch): no PyTorch columns"
        echo
    fi
fi
# pytorch_table MODEL LAYOUT H R: PyTorch DDP's hooks on each rate, next to
# ddphook's figures of the same rate (from its CSV).
pytorch_table() {
    shapes="$out/$1.shapes"
    "$bin" bench shapes --model "$1" >"$shapes" || return
    echo "### $1, $3 hosts x $4 ranks: ddphook and PyTorch $( /usr/bin/python3 -c 'import torch; print(torch.__version__)') DDP (gloo) on the same link"
    echo
    echo "| link | hook | ddphook s/step | PyTorch s/step | PyTorch s communicating | ddphook faster by |"
    echo "| --- | --- | ---: | ---: | ---: | ---: |"
    for rate in $(echo "$rates" | tr ',' ' '); do
        csv="$out/$1-$2-$rate.csv"
        pcsv="$out/$1-$2-$rate-pytorch.csv"
        rm -f "$pcsv"
        for hook in $(echo "$hooks" | tr ',' ' '); do
            ours=$(awk -F, -v h="$hook" '$1 == h { printf "%.3f", $3 }' "$csv" 2>/dev/null)
            case $hook in  # the hooks PyTorch 1.13 ships
            allreduce | fp16 | bf16 | powersgd | batched_powersgd) ;;
            *) echo "| $rate | $hook | ${ours:--} | PyTorch 1.13 ships no such hook | | |"
               continue ;;
            esac
            log="$out/$1-$2-$rate-pytorch-$hook.log"
            # gloo's own timeout is 2 minutes (pytorch_ddp.py); this ends a
            # run that hangs anyway (SIGTERM: cluster.sh's trap cleans up).
            timeout "$pytorch_limit" sh "$here/cluster.sh" --hosts "$3" \
                --ranks-per-host "$4" --rate "$rate" -- \
                /usr/bin/python3 "$here/peers/pytorch_ddp.py" --shapes "$shapes" \
                --hook "$hook" --repeats "$repeats" --bucket-cap-mb 25 \
                --csv "$(readlink -f "$out")/$(basename "$pcsv")" >"$log" 2>&1
            if [ $? -eq 124 ]; then
                echo "| $rate | $hook | ${ours:--} | PyTorch hangs: not done after $pytorch_limit s (killed) | | |"
                continue
            fi
            theirs=$(awk -F, -v h="$hook" '$1 == h { print $2 "," $4 }' "$pcsv" 2>/dev/null)
            if [ -z "$theirs" ]; then
                why=$(grep -o 'failed: .*' "$log" | head -n 1 | cut -c1-120)
                # a C++ exception from gloo ends the process: its what()
                [ -n "$why" ] || why=$(sed -n 's/.*what(): *\[\(.*\)\] *\(.*\)/aborts: \1: \2/p' "$log" | head -n 1 | cut -c1-140)
                [ -n "$why" ] || why=$(grep -v '^cluster.sh' "$log" | grep -i 'error\|abort' | head -n 1 | cut -c1-120)
                echo "| $rate | $hook | ${ours:--} | PyTorch ${why:-failed: see $log} | | |"
                continue
            fi
            step=${theirs%,*} comm=${theirs#*,}
            echo "| $rate | $hook | ${ours:--} | $(printf '%.3f' "$step") | $(printf '%.3f' "$comm") | $(awk -v a="$step" -v b="${ours:-0}" 'BEGIN { if (b > 0) printf "%.2fx", a / b }') |"
        done
    done
    echo
}
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
        [ $pytorch = yes ] && pytorch_table "$model" "$layout" "$h" "$r"
    done
done
