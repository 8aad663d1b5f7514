#!/bin/sh
# plan_check.sh: `ddphook plan` against measurement.  For each layout and
# link rate, `ddphook bench hooks` runs every hook on the model's
# gradient shapes on the simulated cluster (tests/cluster/cluster.sh),
# then `ddphook plan --device cpu --compute 0` predicts the same steps (bench's step is
# the communication and the hooks' arithmetic alone) for the same hosts,
# ranks and rate; one table sets them side by side with the error of
# each row, (predicted - measured) / measured.
#
# Two predictions per row: with the link as specified (its line rate,
# plan's default latency), and with the link as measured: the latency
# and payload rate that make plan's price of an allreduce of 16 KiB and
# of 4 MiB (one tensor each) on that layout match the allreduce hook's
# steps measured there on those two tensors, solved from the two.  The
# second is how plan is meant to be fed: the network as a benchmark of
# it reports, not as its label says.
#
#   sh tests/cluster/plan_check.sh [--model gpt-example]
#       [--layouts 2x1,2x2,4x1] [--rates 100mbit,1gbit] [--repeats R]
#       [--rounds N] [--burst BYTES] [--hooks LIST] [--out DIR]
#
# --rounds N (default 3) runs each measurement N times, each a job of
# its own: the table shows the median of the N medians and, beside it,
# the lowest and highest; the errors are against the median.  On a
# shared machine a step of a few milliseconds moves by tens of percent
# from one job to the next, so one round says little about such a row.
# --burst BYTES goes to cluster.sh: its default burst (what the link
# sends in 1 ms, at least 64 KiB) lets a smaller message through at once
# after a pause, which a real link does not (cluster.sh --help);
# --burst 3028 at 100 Mbit/s sends every message at the rate.
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
model=gpt-example layouts=2x1,2x2,4x1 rates=100mbit,1gbit repeats=5 rounds=3 burst=""
hooks=allreduce,fp16,bf16,powersgd,batched_powersgd,topk,int8
out=tests/out/plan-check
while [ $# -gt 0 ]; do
    case $1 in
    --model) model=$2; shift 2 ;;
    --layouts) layouts=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --burst) burst=$2; shift 2 ;;
    --hooks) hooks=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "plan_check.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
case $rounds in
'' | *[!0-9]* | 0) echo "plan_check.sh: --rounds takes a count of 1 or more" >&2; exit 2 ;;
esac
case $burst in
'') ;;
*[!0-9]*) echo "plan_check.sh: --burst takes a count of bytes" >&2; exit 2 ;;
*) [ "$burst" -ge 3028 ] || { echo "plan_check.sh: --burst is at least 3028 bytes (cluster.sh --help)" >&2; exit 2; } ;;
esac
[ -x ./ddphook ] || { echo "plan_check.sh: run it from a build tree (./ddphook)" >&2; exit 2; }
mkdir -p "$out"
bin=$(readlink -f ./ddphook)
plugins=$(readlink -f plugins/.libs)
cal=$(readlink -f "$out")/plan.cal
# The calibration, once, outside the cluster, with the bucket cap of
# every prediction below (the calibration's key: a prediction with
# another would measure again, between two cluster jobs).
"$bin" plan --model "$model" --hooks "$hooks" --device cpu --compute 0 --plugin-path "$plugins" \
    --bucket-cap-mb 25 --calibration "$cal" --calibration-repeats "$repeats" >/dev/null ||
    { echo "plan_check.sh: the calibration failed" >&2; exit 1; }
printf 'a 4096\n' >"$out/fit-small.shapes"
printf 'a 1024 1024\n' >"$out/fit-large.shapes"
# bench_run H R RATE NAME ARGS...: bench hooks on the cluster, --rounds
# times (NAME-rK.csv), into NAME.csv: each hook's median step of the
# rounds in bench's third column, the lowest and highest in two more.
bench_run() {
    bh=$1 br=$2 brate=$3 name=$4
    shift 4
    rm -f "$out/$name"-r*.csv
    k=1
    while [ $k -le "$rounds" ]; do
        sh "$here/cluster.sh" --hosts "$bh" --ranks-per-host "$br" --rate "$brate" \
            ${burst:+--burst "$burst"} -- \
            "$bin" bench hooks "$@" --repeats "$repeats" --bucket-cap-mb 25 \
            --plugin-path "$plugins" --csv "$(readlink -f "$out")/$name-r$k.csv" \
            >"$out/$name-r$k.log" 2>&1
        brc=$?
        [ $brc -eq 77 ] && { tail -n 1 "$out/$name-r$k.log"; exit 77; }
        [ $brc -eq 0 ] && [ -s "$out/$name-r$k.csv" ] || return 1
        k=$((k + 1))
    done
    awk -F, 'FNR == 1 { next }
        { n[$1]++; v[$1, n[$1]] = $3; bytes[$1] = $2; if (!($1 in seen)) { seen[$1] = 1; order[++h] = $1 } }
        END { print "hook,bytes_per_step,seconds_per_step,lowest,highest"
              for (i = 1; i <= h; i++) {
                  k = order[i]; c = n[k]
                  for (a = 1; a <= c; a++) for (b = a + 1; b <= c; b++)
                      if (v[k, b] < v[k, a]) { t = v[k, a]; v[k, a] = v[k, b]; v[k, b] = t }
                  med = c % 2 ? v[k, (c + 1) / 2] : (v[k, c / 2] + v[k, c / 2 + 1]) / 2
                  printf "%s,%s,%.9g,%.9g,%.9g\n", k, bytes[k], med, v[k, 1], v[k, c] } }' \
        "$out/$name"-r*.csv >"$out/$name.csv"
}
# model_terms KIND:BYTES H R: plan's latency count and seconds per byte/s
# for one collective ("L W": time = alpha L + W / bandwidth).
model_terms() {
    L=$("$bin" plan --collective "$1" --hosts "$2" --ranks-per-host "$3" --collectives mpich \
        --link-latency 1s --link-bandwidth 1e15B/s --efficiency 1 \
        --intra-latency 0 --csv "$out/terms.csv" >/dev/null &&
        awk -F, 'NR == 2 { print $5 }' "$out/terms.csv")
    W=$("$bin" plan --collective "$1" --hosts "$2" --ranks-per-host "$3" --collectives mpich \
        --link-latency 0 --link-bandwidth 1B/s --efficiency 1 \
        --intra-latency 0 --csv "$out/terms.csv" >/dev/null &&
        awk -F, 'NR == 2 { print $5 }' "$out/terms.csv")
    echo "$L $W"
}
echo "## ddphook plan against ddphook bench hooks: $model, 25 MiB buckets, compute 0"
echo
echo "$rounds rounds of bench hooks a row, each the median of $repeats steps; measured: the rounds' median (lowest-highest)${burst:+; tc burst $burst bytes}"
echo
echo "| layout | link | hook | measured s/step | predicted, nominal link | error | predicted, measured link | error |"
echo "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"
worst=0 worst_nominal=0 notes=""
for layout in $(echo "$layouts" | tr ',' ' '); do
    h=${layout%x*} r=${layout#*x}
    for rate in $(echo "$rates" | tr ',' ' '); do
        tag="$model-$layout-$rate"
        if ! bench_run "$h" "$r" "$rate" "$tag" --model "$model" --hooks "$hooks"; then
            echo "| $layout | $rate | (failed: see $out/$tag-r*.log) | | | | | |"
            continue
        fi
        # The link as measured: the allreduce hook on two sizes.
        if bench_run "$h" "$r" "$rate" "$tag-fit-small" --shapes "$out/fit-small.shapes" --hooks allreduce &&
            bench_run "$h" "$r" "$rate" "$tag-fit-large" --shapes "$out/fit-large.shapes" --hooks allreduce; then
            t1=$(awk -F, 'NR == 2 { print $3 }' "$out/$tag-fit-small.csv")
            t2=$(awk -F, 'NR == 2 { print $3 }' "$out/$tag-fit-large.csv")
            fit=$(echo "$(model_terms allreduce:16384 "$h" "$r") $(model_terms allreduce:4194304 "$h" "$r") $t1 $t2" |
                awk '{ l1 = $1; w1 = $2; l2 = $3; w2 = $4; t1 = $5; t2 = $6;
                       a = (t1 * w2 - t2 * w1) / (l1 * w2 - l2 * w1); if (a < 0) a = 0;
                       inv = (t2 - a * l2) / w2; if (inv <= 0) inv = 1e-12;
                       printf "%.9g %.9g", a, 1 / inv }')
        else
            fit=""
        fi
        rm -f "$out/$tag-plan-fit.csv"
        "$bin" plan --model "$model" --hooks "$hooks" --device cpu --compute 0 --hosts "$h" \
            --ranks-per-host "$r" --link-bandwidth "$rate" --efficiency 0.956 \
            --bucket-cap-mb 25 --plugin-path "$plugins" --calibration "$cal" \
            --csv "$out/$tag-plan.csv" >"$out/$tag-plan.txt" 2>&1 ||
            { echo "| $layout | $rate | (plan failed: see $out/$tag-plan.txt) | | | | | |"; continue; }
        if [ -n "$fit" ]; then
            alpha=${fit% *} bw=${fit#* }
            notes="$notes$layout $rate: link as measured: latency $(awk -v a="$alpha" 'BEGIN { printf "%.3g ms", a * 1e3 }'), payload $(awk -v b="$bw" 'BEGIN { printf "%.1f Mbit/s", b * 8 / 1e6 }')
"
            "$bin" plan --model "$model" --hooks "$hooks" --device cpu --compute 0 --hosts "$h" \
                --ranks-per-host "$r" --link-bandwidth "${bw}B/s" --efficiency 1 \
                --link-latency "${alpha}s" --bucket-cap-mb 25 --plugin-path "$plugins" \
                --calibration "$cal" --csv "$out/$tag-plan-fit.csv" \
                >"$out/$tag-plan-fit.txt" 2>&1 || rm -f "$out/$tag-plan-fit.csv"
        fi
        [ -s "$out/$tag-plan-fit.csv" ] || printf 'hook\n' >"$out/$tag-plan-fit.csv"
        rows=$(awk -F, -v layout="$layout" -v rate="$rate" '
            FILENAME ~ /-fit.csv$/ { if (FNR > 1) fitted[$1] = $6; next }
            FILENAME ~ /-plan.csv$/ { if (FNR > 1) nominal[$1] = $6; next }
            FNR > 1 && ($1 in nominal) {
                m = $3; p = nominal[$1]; e = (p - m) / m * 100;
                f = ($1 in fitted) ? sprintf("%.4f | %+.1f%%", fitted[$1], (fitted[$1] - m) / m * 100) : "- | -";
                printf "| %s | %s | %s | %.4f (%.4f-%.4f) | %.4f | %+.1f%% | %s |\n", layout, rate, $1, m, $4, $5, p, e, f }' \
            "$out/$tag-plan-fit.csv" "$out/$tag-plan.csv" "$out/$tag.csv")
        echo "$rows"
        wn=$(echo "$rows" | awk -F'|' '{ e = $7; gsub(/[ %+]/, "", e); e += 0; if (e < 0) e = -e; if (e > w) w = e } END { print w + 0 }')
        w=$(echo "$rows" | awk -F'|' '{ e = $9; gsub(/[ %+]/, "", e); if (e == "-") next; e += 0; if (e < 0) e = -e; if (e > w) w = e } END { print w + 0 }')
        worst=$(awk -v a="$worst" -v b="$w" 'BEGIN { print (b > a ? b : a) }')
        worst_nominal=$(awk -v a="$worst_nominal" -v b="$wn" 'BEGIN { print (b > a ? b : a) }')
    done
done
echo
printf '%s' "$notes"
echo "largest error: ${worst_nominal}% with the nominal link, ${worst}% with the link as measured"
