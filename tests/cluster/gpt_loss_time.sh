#!/bin/sh
# gpt_loss_time.sh: validation loss against training time for the GPT
# example (examples/train_gpt) with each hook, on 2 simulated hosts
# (tests/cluster/cluster.sh) at each link rate: what a hook buys on a
# network.  Per run, from the trainer's CSV (seconds since the start,
# validation included): the final validation loss,
# the seconds until the loss first reaches TARGET (allreduce's final loss
# at that rate times 1 + SLACK, so allreduce itself counts), and the
# bytes each rank sent per step (n/a for PyTorch).  Prints one Markdown
# table, writes
# OUT/loss-time.csv (rate, hook, step, seconds, val_loss) and, where
# gnuplot is installed (apt-get install gnuplot-nox),
# OUT/loss-time-RATE-LAYOUT.svg.
#
#   sudo sh tests/cluster/gpt_loss_time.sh [--hooks allreduce,fp16,...]
#       [--rates 100mbit,1gbit] [--layouts 2x1,2x2] [--steps 1000]
#       [--steps-for HOOK=N,...] [--slack 0.02] [--out DIR]
#       [--pytorch allreduce,fp16,powersgd]
#
# --steps-for gives a hook more steps (and so its own learning-rate
# schedule), e.g. as many as fit in allreduce's time: a compressing hook
# then shows how much sooner it reaches allreduce's loss.  --pytorch runs
# the same model under PyTorch DDP (gloo) with those of its hooks
# (tests/cluster/peers/gpt_ddp.py, from the C trainer's initial weights,
# on the same batches; rows "ddp:HOOK"; needs python3-torch).
#
# Run from a build tree (examples/train_gpt/train_gpt, plugins/.libs);
# the job files are examples/configs/gpt_HOOK.ini.  Needs root, as
# cluster.sh does (exit 77 otherwise).  Not part of make check (about a
# minute to ten a run, by hook and rate).
set -u
here=$(dirname "$(readlink -f "$0")")
hooks=allreduce,fp16,bf16,powersgd,batched_powersgd,topk,int8
rates=100mbit,1gbit layouts=2x1 steps=1000 slack=0.02 steps_for="" pytorch=""
out=tests/out/cluster-gpt
while [ $# -gt 0 ]; do
    case $1 in
    --hooks) hooks=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --layouts) layouts=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --steps-for) steps_for=$2; shift 2 ;;
    --slack) slack=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --pytorch) pytorch=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpt_loss_time.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
case ",$hooks," in
*,allreduce,*) ;;
*) echo "gpt_loss_time.sh: --hooks must include allreduce (the target)" >&2; exit 2 ;;
esac
trainer=$(readlink -f examples/train_gpt/train_gpt 2>/dev/null)
[ -x "$trainer" ] ||
    { echo "gpt_loss_time.sh: run it from a build tree (examples/train_gpt/train_gpt)" >&2; exit 2; }
src=$(dirname "$here")/..
mkdir -p "$out"
out=$(readlink -f "$out")
plugins=$(readlink -f plugins/.libs)
all="$out/loss-time.csv"
# report_run: the table row and the CSV lines of one run ($csv, $hook,
# $rate, $layout; the first run, allreduce's, sets $target).
report_run() {
    if [ ! -s "$csv" ]; then
        echo "| $rate | $layout | $hook | | (failed: see $out/$hook-$rate-$layout.log) | | | | |"
        return
    fi
    [ -n "$target" ] || target=$(awk -F, -v s="$slack" \
        'NR > 1 { l = $4 } END { printf "%.4f", l * (1 + s) }' "$csv")
    awk -F, -v r="$rate" -v lay="$layout" -v h="$hook" \
        'NR > 1 { print r "," lay "," h "," $1 "," $2 "," $4 }' "$csv" >>"$all"
    awk -F, -v rate="$rate" -v layout="$layout" -v hook="$hook" \
        -v target="$target" '
        NR == 1 { next }
        { step = $1; t = $2; loss = $4; bytes = $5
          if (reach == "" && loss <= target) reach = sprintf("%.0f", t) }
        END { printf "| %s | %s | %s | %d | %.4f | %s | %.4f | %.3f | %s |\n",
                  rate, layout, hook, step, loss,
                  reach == "" ? "not reached" : reach, target, t / step,
                  bytes == "" ? "n/a" : sprintf("%.0f", bytes / step) }' "$csv"
}

echo "rate,layout,hook,step,seconds,val_loss" >"$all"
echo "GPT on the fortunes text, $steps steps${steps_for:+ (and $steps_for)}, default model and batch"
echo
echo "| link | layout | hook | steps | final validation loss | s to target | target | s per step | bytes sent per step |"
echo "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for rate in $(echo "$rates" | tr ',' ' '); do
    for layout in $(echo "$layouts" | tr ',' ' '); do
        hosts=${layout%x*} rph=${layout#*x}
        target=""
        # allreduce first: its final loss sets the target.
        for hook in allreduce $(echo "$hooks" | tr ',' '\n' | grep -v '^allreduce$') \
            $(echo "$pytorch" | tr ',' '\n' | sed '/^$/d; s/^/ddp:/'); do
            csv="$out/$hook-$rate-$layout.csv"
            if [ "${hook#ddp:}" != "$hook" ]; then
                # PyTorch DDP from the allreduce run's initial weights.
                rm -f "$csv" "$out/rendezvous"
                sh "$here/cluster.sh" --hosts "$hosts" --ranks-per-host "$rph" \
                    --rate "$rate" -- /usr/bin/python3 "$here/peers/gpt_ddp.py" \
                    --init "$out/init-$rate-$layout.model" --hook "${hook#ddp:}" \
                    --steps "$steps" --csv "$csv" --rendezvous "$out/rendezvous" \
                    >"$out/$hook-$rate-$layout.log" 2>&1
            fi
            [ "${hook#ddp:}" = "$hook" ] || { report_run; continue; }
            job="$out/$hook.ini"
            printf '[runtime]\nplugin_path = %s\n' "$plugins" >"$job"
            cat "$src/examples/configs/gpt_$hook.ini" >>"$job" ||
                { echo "gpt_loss_time.sh: no examples/configs/gpt_$hook.ini" >&2; exit 2; }
            rm -f "$csv"
            n=$(echo "$steps_for" | tr ',' '\n' | sed -n "s/^$hook=//p")
            init=""
            [ "$hook" = allreduce ] && init="--save-init $out/init-$rate-$layout"
            # shellcheck disable=SC2086 # init is empty or two words
            sh "$here/cluster.sh" --hosts "$hosts" --ranks-per-host "$rph" \
                --rate "$rate" -- "$trainer" --config "$job" --steps "${n:-$steps}" \
                --csv "$csv" $init >"$out/$hook-$rate-$layout.log" 2>&1
            rc=$?
            [ $rc -eq 77 ] && { tail -n 1 "$out/$hook-$rate-$layout.log"; exit 77; }
            report_run
        done
        if command -v gnuplot >/dev/null 2>&1; then
            plot="plot"
            for hook in allreduce $(echo "$hooks" | tr ',' '\n' | grep -v '^allreduce$') \
                $(echo "$pytorch" | tr ',' '\n' | sed '/^$/d; s/^/ddp:/'); do
                dat="$out/.$(echo "$hook" | tr ':' '_').dat"
                grep "^$rate,$layout,$hook," "$all" | cut -d, -f5,6 >"$dat"
                style=lines
                [ "${hook#ddp:}" = "$hook" ] || style="lines dashtype 2"
                plot="$plot '$dat' using 1:2 with $style title '$hook',"
            done
            gnuplot -e "set terminal svg size 800,500 noenhanced; set output '$out/loss-time-$rate-$layout.svg'; set datafile separator ','; set xlabel 'training seconds'; set ylabel 'validation loss'; set title 'GPT, $layout at $rate'; ${plot%,}" 2>/dev/null
            rm -f "$out"/.*.dat
        fi
    done
done
