#!/bin/sh
# plan_check.sh: `ddphook plan` against measurement.  For each layout and
# link rate, `ddphook bench hooks` runs every hook on the model's
# gradient shapes on the simulated cluster (tests/cluster/cluster.sh),
# then `ddphook plan` predicts the same steps (compute 0: bench's step is
# the communication and the hooks' arithmetic alone) for the same hosts,
# ranks and rate; one table sets them side by side with the error of
# each row, (predicted - measured) / measured.
#
#   sh tests/cluster/plan_check.sh [--model gpt-example]
#       [--layouts 2x1,2x2,4x1] [--rates 100mbit,1gbit] [--repeats R]
#       [--hooks LIST] [--out DIR]
#
# Run from a build tree (./ddphook, plugins/.libs).  Needs root, as
# cluster.sh does (exit 77 otherwise).  The hooks' arithmetic is measured
# once at one rank, outside the cluster, and kept in
# DIR/plan.cal.  tc's token bucket counts each frame's bytes without
# the preamble, checksum and gap of a real Ethernet wire, so the links
# carry 1448 payload bytes of every 1514 (--efficiency 0.956), where a
# real one carries 1448 of 1538 (plan's default, 0.94).
set -u
here=$(dirname "$(readlink -f "$0")")
model=gpt-example layouts=2x1,2x2,4x1 rates=100mbit,1gbit repeats=5
hooks=allreduce,fp16,bf16,powersgd,batched_powersgd,topk,int8
out=tests/out/plan-check
while [ $# -gt 0 ]; do
    case $1 in
    --model) model=$2; shift 2 ;;
    --layouts) layouts=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --hooks) hooks=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "plan_check.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[ -x ./ddphook ] || { echo "plan_check.sh: run it from a build tree (./ddphook)" >&2; exit 2; }
mkdir -p "$out"
bin=$(readlink -f ./ddphook)
plugins=$(readlink -f plugins/.libs)
cal=$(readlink -f "$out")/plan.cal
# The calibration, once, outside the cluster.
"$bin" plan --model "$model" --hooks "$hooks" --plugin-path "$plugins" \
    --calibration "$cal" --calibration-repeats "$repeats" >/dev/null ||
    { echo "plan_check.sh: the calibration failed" >&2; exit 1; }
echo "## ddphook plan against ddphook bench hooks: $model, 25 MiB buckets, compute 0"
echo
echo "| layout | link | hook | measured s/step | predicted s/step | error |"
echo "| --- | --- | --- | ---: | ---: | ---: |"
worst=0
for layout in $(echo "$layouts" | tr ',' ' '); do
    h=${layout%x*} r=${layout#*x}
    for rate in $(echo "$rates" | tr ',' ' '); do
        csv="$out/$model-$layout-$rate.csv"
        pcsv="$out/$model-$layout-$rate-plan.csv"
        sh "$here/cluster.sh" --hosts "$h" --ranks-per-host "$r" --rate "$rate" -- \
            "$bin" bench hooks --model "$model" --hooks "$hooks" \
            --repeats "$repeats" --bucket-cap-mb 25 --plugin-path "$plugins" \
            --csv "$(readlink -f "$out")/$(basename "$csv")" \
            >"$out/$model-$layout-$rate.log" 2>&1
        rc=$?
        [ $rc -eq 77 ] && { tail -n 1 "$out/$model-$layout-$rate.log"; exit 77; }
        if [ $rc -ne 0 ] || [ ! -s "$csv" ]; then
            echo "| $layout | $rate | (failed: see $out/$model-$layout-$rate.log) | | | |"
            continue
        fi
        "$bin" plan --model "$model" --hooks "$hooks" --hosts "$h" \
            --ranks-per-host "$r" --link-bandwidth "$rate" --efficiency 0.956 \
            --bucket-cap-mb 25 --plugin-path "$plugins" --calibration "$cal" \
            --csv "$pcsv" >"$out/$model-$layout-$rate-plan.txt" 2>&1 ||
            { echo "| $layout | $rate | (plan failed: see $out/$model-$layout-$rate-plan.txt) | | | |"; continue; }
        rows=$(awk -F, -v layout="$layout" -v rate="$rate" '
            NR == FNR { if (FNR > 1) measured[$1] = $3; next }
            FNR > 1 && ($1 in measured) {
                m = measured[$1]; p = $6; e = (p - m) / m * 100;
                printf "| %s | %s | %s | %.4f | %.4f | %+.1f%% |\n", layout, rate, $1, m, p, e }' \
            "$csv" "$pcsv")
        echo "$rows"
        w=$(echo "$rows" | awk -F'|' '{ e = $7; gsub(/[ %+]/, "", e); if (e < 0) e = -e; if (e > w) w = e } END { print w + 0 }')
        worst=$(awk -v a="$worst" -v b="$w" 'BEGIN { print (b > a ? b : a) }')
    done
done
echo
echo "largest error: ${worst}%"
