#!/bin/sh
# plan.sh: `ddphook plan`'s cost model on cases with known answers (no
# timing is asserted: the figures are the model's own arithmetic).
#  - NCCL's ring at latency 0 takes 2 (W-1)/W S/B, its tree on a small
#    sum 2 log2(H) latencies + 2 S/B;
#  - (within 1e-6) at latency 0 a ring allreduce of S bytes on W ranks at B bytes/s
#    takes 2 (W-1)/W S/B; MPICH's reduce-scatter + allgather the same, and
#    across 2 hosts x 2 ranks with free shared memory S/B (each host's
#    link carries what one rank would); a ring allgather (W-1) m/B; a
#    small allreduce log2(W) latencies;
#  - the allreduce hook on the gpt-example preset between 2 hosts: the
#    sum over the runtime's buckets by hand, S/B plus the step's closing
#    exchange;
#  - fp16 sends half the bytes and is predicted faster on a slow link;
#  - any hook is priced from its dry run: signsgd (shipped, unknown to
#    the model) and a hook given as a path to its .so; the dry run
#    records the collectives each hook issues (allreduce: one sum of each
#    bucket; signsgd: fewer bytes than fp16);
#  - the compute time is said: estimated from the model's FLOPs on the
#    device (the figure checked by hand), refused on --device cpu without
#    --compute; a lossy hook 1% faster is not recommended (ResNet-50 on
#    8 x 8 ranks, 100 Gbit/s, 0.2 s of compute);
#  - the PowerSGD paper's ResNet-18 row (1.30x a batch) and LSTM row
#    (SGD 300 ms a batch, rank 4 2.22x) within 25%;
#  - a GPU profile (`bench gpu --profile`, written by hand) gives the
#    arithmetic of the hooks it measured and the device's bandwidth; a
#    hostile or malformed one is refused at its line;
#  - bad arguments, shapes files and calibration files fail with clear
#    messages; a calibration file round-trips, read back without
#    measuring again, hook by hook with progress; a busy machine's
#    calibration is refused unless forced (then flagged); figures kept
#    from a busy machine or another CPU count are measured again; a
#    large model is measured on two samples.
set -u
B=${DDPH_TEST_BUILDDIR:?run through make check}
P=${DDPH_TEST_PLUGIN_DIR:?}
OUT="$B/tests/out/plan"
rm -rf "$OUT"
mkdir -p "$OUT"
cd "$OUT" || exit 1
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "PASS: $1"; }
no() { fail=$((fail + 1)); echo "FAIL: $1"; }
# near NAME GOT WANT: within 1e-6 relative (the free shared memory is
# 1000 TB/s).
near() {
    if awk -v g="$2" -v w="$3" 'BEGIN { d = g - w; if (d < 0) d = -d; exit !(d <= 1e-6 * w) }'; then
        ok "$1 ($2 s)"
    else
        no "$1: $2 s, want $3"
    fi
}
# expect NAME PATTERN COMMAND...: the command fails and prints PATTERN.
expect() {
    name=$1; pattern=$2; shift 2
    if out=$("$@" </dev/null 2>&1); then
        no "$name: accepted"; return
    fi
    if printf '%s\n' "$out" | grep -q -- "$pattern"; then
        ok "$name"
    else
        no "$name: no '$pattern' in:"; printf '%s\n' "$out" | sed 's/^/    /'
    fi
}
plan() { "$B/ddphook" plan "$@"; }
# seconds KIND:BYTES OPTIONS...: the model's time for one collective
# (MPICH's unless the options say --collectives nccl).
seconds() {
    what=$1; shift
    plan --collective "$what" --collectives mpich --efficiency 1 --intra-bandwidth 1000TB/s \
        --intra-latency 0 --csv "$OUT/c.csv" "$@" >/dev/null &&
        awk -F, 'NR == 2 { print $5 }' "$OUT/c.csv"
}
S=1048576 rate=125000000 # 1 Gbit/s in bytes
near "ring allreduce (f16), 4 hosts, latency 0" \
    "$(seconds allreduce-f16:$S --hosts 4 --link-bandwidth 1gbit --link-latency 0)" \
    "$(awk -v s=$S -v b=$rate 'BEGIN { printf "%.12g", 2 * 3 / 4 * s / b }')"
near "reduce-scatter + allgather, 8 hosts, latency 0" \
    "$(seconds allreduce:$S --hosts 8 --link-bandwidth 1gbit --link-latency 0)" \
    "$(awk -v s=$S -v b=$rate 'BEGIN { printf "%.12g", 2 * 7 / 8 * s / b }')"
near "reduce-scatter + allgather, 2 hosts x 2 ranks" \
    "$(seconds allreduce:$S --hosts 2 --ranks-per-host 2 --link-bandwidth 1gbit --link-latency 0)" \
    "$(awk -v s=$S -v b=$rate 'BEGIN { printf "%.12g", s / b }')"
near "ring allgather, 3 hosts, latency 0" \
    "$(seconds allgather:$S --hosts 3 --link-bandwidth 1gbit --link-latency 0)" \
    "$(awk -v s=$S -v b=$rate 'BEGIN { printf "%.12g", 2 * s / b }')"
near "recursive doubling, 1 KiB on 4 hosts, 10 us" \
    "$(seconds allreduce:1024 --hosts 4 --link-bandwidth 1gbit --link-latency 10us)" \
    "$(awk -v b=$rate 'BEGIN { printf "%.12g", 2 * (1e-5 + 1024 / b) }')"
near "NCCL ring, 4 hosts, latency 0" \
    "$(seconds allreduce:$S --hosts 4 --link-bandwidth 1gbit --link-latency 0 --collectives nccl)" \
    "$(awk -v s=$S -v b=$rate 'BEGIN { printf "%.12g", 2 * 3 / 4 * s / b }')"
near "NCCL tree, 1 KiB on 16 hosts, 10 us" \
    "$(seconds allreduce:1024 --hosts 16 --link-bandwidth 1gbit --link-latency 10us --collectives nccl)" \
    "$(awk -v b=$rate 'BEGIN { printf "%.12g", 2 * 4 * 1e-5 + 2 * 1024 / b }')"
near "ring allgather on one host over PCIe 4.0 (24 GB/s)" \
    "$(plan --collective allgather:$S --collectives mpich --hosts 1 --ranks-per-host 3 \
        --intra-bandwidth pcie4 --intra-latency 0 --csv "$OUT/c.csv" >/dev/null &&
        awk -F, 'NR == 2 { print $5 }' "$OUT/c.csv")" \
    "$(awk -v s=$S 'BEGIN { printf "%.12g", 2 * s / 24e9 }')"
if plan --collective allreduce:$S --hosts 1000 --ranks-per-host 8 >/dev/null; then
    ok "8000 ranks"
else
    no "8000 ranks"
fi

# The allreduce hook on gpt-example, 2 hosts, latency 0: every bucket
# is one reduce-scatter + allgather (2 steps of half the bucket), then
# the 64-byte closing exchange: (4 numel + 64) / B.
# A third-party hook: the template's signsgd under a path of its own.
cp "$P/signsgd.so" "$OUT/my_hook.so"
chmod go-w "$OUT" "$OUT/my_hook.so"
plan --model gpt-example --no-calibration --plugin-path "$P" \
    --hooks allreduce,fp16,signsgd,"$OUT/my_hook.so" --link-bandwidth 100mbit \
    --link-latency 0 --efficiency 1 --compute 0 --collectives mpich --csv "$OUT/gpt.csv" \
    >"$OUT/gpt.txt" 2>&1 || {
    no "plan on gpt-example:"; sed 's/^/    /' "$OUT/gpt.txt"; }
numel=$("$B/ddphook" bench shapes --model gpt-example |
    awk '{ e = 1; for (i = 2; i <= NF; i++) e *= $i; t += e } END { print t }')
near "allreduce hook on gpt-example, by hand" \
    "$(awk -F, '$1 == "allreduce" { print $6 }' "$OUT/gpt.csv")" \
    "$(awk -v n="$numel" 'BEGIN { printf "%.12g", (4 * n + 64) / 12500000 }')"
if awk -F, '$1 == "allreduce" { a = $6; as = $2 } $1 == "fp16" { f = $6; fs = $2 }
        END { exit !(f < a && fs * 2 == as) }' "$OUT/gpt.csv"; then
    ok "fp16: half the bytes, less time on 100 Mbit/s"
else
    no "fp16 against allreduce:"; sed 's/^/    /' "$OUT/gpt.csv"
fi
# signsgd (the dry run sees what it issues: under fp16's bytes) and the
# same hook as a path: the same row.
if awk -F, '$1 == "fp16" { f = $2 } $1 == "signsgd" { s = $2; st = $6 }
        $1 ~ /my_hook.so$/ { p = $2; pt = $6 }
        END { exit !(s > 0 && s < f && p == s && pt == st) }' "$OUT/gpt.csv"; then
    ok "signsgd and a hook given as a path are priced"
else
    no "signsgd / path hook:"; sed 's/^/    /' "$OUT/gpt.csv" "$OUT/gpt.txt"
fi

# The compute time: gpt-example's estimate by hand (3 x forward FLOPs x
# 8 sequences on an H100 at 35% of 989 TFLOP/s) and said so.
plan --model gpt-example --no-calibration --plugin-path "$P" --hooks allreduce \
    --device h100 --link-bandwidth 100mbit >est.txt 2>&1
want=$(awk 'BEGIN { printf "%.4g", 3 * (2 * 834304 * 64 + 4 * 4 * 64 * 64 * 128) * 8 / (0.35 * 989e12) }')
if grep -q "step: compute $want s, estimated: .* H100 SXM at 35%" est.txt; then
    ok "compute estimated ($want s) and said so"
else
    no "compute estimate, want $want s:"; sed 's/^/    /' est.txt
fi
expect "no compute to estimate on the CPU" "give --compute" \
    plan --model gpt-example --no-calibration --plugin-path "$P" --device cpu
# ResNet-50, 8 x 8 ranks, 100 Gbit/s, 0.2 s of compute: batched PowerSGD
# is predicted about 1% faster, within the model's error: allreduce.
plan --model resnet50 --hosts 8 --ranks-per-host 8 --link-bandwidth 100gbit \
    --compute 0.2s --no-calibration --plugin-path "$P" \
    --hooks allreduce,batched_powersgd >margin.txt 2>&1
if grep -q "^recommended: allreduce.*batched_powersgd, is predicted 1.0[0-9]x.*own error" margin.txt; then
    ok "a 1% gain keeps allreduce"
else
    no "margin:"; sed 's/^/    /' margin.txt
fi

# A published row (docs/plan.md): the PowerSGD paper's ResNet-18 on
# CIFAR-10, 16 GPUs at 10 Gbit/s, rank 2: 1.30x a batch over SGD; plan
# within 25% of it with the stated inputs.
plan --model resnet18-cifar --hosts 16 --link-bandwidth 10gbit --device v100 \
    --f32 --rank 2 --no-calibration --plugin-path "$P" \
    --hooks allreduce,powersgd --csv r18.csv >r18.txt 2>&1
if awk -F, '$1 == "powersgd" { r = $7 } END { exit !(r >= 1.30 * 0.75 && r <= 1.30 * 1.25) }' r18.csv; then
    ok "PowerSGD paper's ResNet-18 row within 25% ($(awk -F, '$1 == "powersgd" { print $7 }' r18.csv)x, published 1.30x)"
else
    no "ResNet-18 published row:"; sed 's/^/    /' r18.txt r18.csv
fi

# The PowerSGD paper's LSTM on WikiText-2, 16 GPUs at 10 Gbit/s: SGD
# 300 ms a batch, rank-4 PowerSGD 134 ms (2.22x); the compute is the
# paper's rank-1 step (131 ms, 3 ms of it communication by plan's own
# count): plan's SGD step and rank-4 ratio within 25%.
plan --model lstm-wikitext2 --hosts 16 --link-bandwidth 10gbit --device v100 \
    --f32 --rank 4 --compute 0.131s --no-calibration --plugin-path "$P" \
    --hooks allreduce,powersgd --csv lstm.csv >lstm.txt 2>&1
if awk -F, '$1 == "allreduce" { a = $6 } $1 == "powersgd" { r = $7 }
        END { exit !(a >= 0.300 * 0.75 && a <= 0.300 * 1.25 && r >= 2.22 * 0.75 && r <= 2.22 * 1.25) }' lstm.csv; then
    ok "PowerSGD paper's LSTM row within 25% ($(awk -F, '$1 == "allreduce" { printf "SGD %.3f s", $6 } $1 == "powersgd" { printf ", %sx", $7 }' lstm.csv); published 0.300 s, 2.22x)"
else
    no "LSTM published row:"; sed 's/^/    /' lstm.txt lstm.csv
fi

# A GPU as `ddphook bench gpu --profile` measured it (written by hand:
# no GPU here): the hooks it measured at one rank take its figures, the
# sums its memory bandwidth; a profile of 4 GPUs of one host gives the
# rate between them.
cat >gpu.prof <<'PROF'
ddphook-gpu-profile 1
device TEST GPU 80GB
ranks 1 1
mib 64
copy 1.5e12
cast f32_to_f16 2.5e-12
cast f16_to_f32 2.5e-12
cast f32_to_bf16 2.5e-12
cast bf16_to_f32 2.5e-12
allreduce 7.5e11
hook allreduce 2e-12
hook fp16 3e-12
end 2
PROF
plan --model gpt-example --no-calibration --plugin-path "$P" --hooks allreduce,fp16,powersgd \
    --device-profile gpu.prof --link-bandwidth 1gbit --csv prof.csv >prof.txt 2>&1
if grep -q "as --device-profile gpu.prof measured it (TEST GPU 80GB, one rank) for allreduce, fp16$" prof.txt &&
        grep -q "on TEST GPU 80GB as measured (memory 1500 GB/s), A100 SXM 80GB's matrix rates" prof.txt &&
        grep -q "hook arithmetic of the others: taken as 0" prof.txt; then
    ok "a GPU profile's figures are used, and said so"
else
    no "GPU profile:"; sed 's/^/    /' prof.txt
fi
near "allreduce's arithmetic from the profile" \
    "$(awk -F, '$1 == "allreduce" { print $5 }' prof.csv)" \
    "$(awk -v n="$numel" 'BEGIN { printf "%.12g", 2e-12 * 4 * n }')"
near "fp16's arithmetic from the profile" \
    "$(awk -F, '$1 == "fp16" { print $5 }' prof.csv)" \
    "$(awk -v n="$numel" 'BEGIN { printf "%.12g", 3e-12 * 4 * n }')"
sed 's/^ranks 1 1$/ranks 4 4/; s/^allreduce .*/allreduce 2e11/' gpu.prof >four.prof
plan --model gpt-example --no-calibration --plugin-path "$P" --hooks allreduce \
    --device-profile four.prof --hosts 1 --ranks-per-host 4 >four.txt 2>&1
if grep -q "within a host 1600 Gbit/s" four.txt && grep -q "for none (its figures are from more than one rank" four.txt; then
    ok "a profile of 4 GPUs of a host: the rate between them, no hook figures"
else
    no "four-GPU profile:"; sed 's/^/    /' four.txt
fi
expect "a profile with --device cpu" "give a GPU --device" \
    plan --model gpt-example --no-calibration --plugin-path "$P" --device cpu --compute 1s --device-profile gpu.prof
sed 's/^copy .*/copy nan/' gpu.prof >nan.prof
expect "a NaN in a profile" "nan.prof:5: want: copy BYTES_PER_S" \
    plan --model gpt-example --no-calibration --plugin-path "$P" --device-profile nan.prof
sed '$d' gpu.prof >short.prof
expect "a truncated profile" "short.prof:13: no end line: truncated" \
    plan --model gpt-example --no-calibration --plugin-path "$P" --device-profile short.prof
expect "a CSV as a profile" "gpt.csv:1: not a GPU profile" \
    plan --model gpt-example --no-calibration --plugin-path "$P" --device-profile "$OUT/gpt.csv"
expect "a folder as a profile" "$OUT" \
    plan --model gpt-example --no-calibration --plugin-path "$P" --device-profile "$OUT"

# Arguments.
expect "a bad rate" "a rate like" plan --collective allreduce:1 --link-bandwidth 10parsecs
expect "no hosts" "whole number" plan --collective allreduce:1 --hosts 0
expect "a bad time" "a time like" plan --collective allreduce:1 --link-latency 5minutes
expect "an unknown hook" "hook 'sign' not found" plan --hooks allreduce,sign --no-calibration --plugin-path "$P"
expect "an unknown model" "unknown model 'gpt5'" plan --model gpt5 --no-calibration
expect "two models" "one of --model" plan --model mlp --shapes x --no-calibration
expect "a collective without bytes" "KIND:BYTES" plan --collective allreduce
expect "an unknown collective" "unknown kind 'scan'" plan --collective scan:10
expect "a bad option" "NAME.KEY=VALUE" plan --option ratio
expect "a dry run past 4096 ranks" "a dry run fakes at most 4096 ranks, not 8000" \
    plan --hosts 1000 --ranks-per-host 8 --hooks allreduce --no-calibration --plugin-path "$P"
expect "a topk ratio out of range" "hook 'topk'.*--option: .*ratio.*out of range" \
    plan --option topk.ratio=2 --no-calibration --plugin-path "$P"
printf 'a 10 20\nb 0\n' >bad.shapes
expect "a shapes file with a 0 dimension" "bad.shapes:2: '0' is not a dimension" \
    plan --shapes bad.shapes --no-calibration

# The calibration: measured once (two hooks on the small mlp preset),
# then read back; the second run measures nothing and predicts the same.
# --busy-load 1000: this shared test machine counts as idle.
idle="--busy-load 1000"
plan --model mlp --hooks allreduce,fp16 --plugin-path "$P" $idle \
    --calibration "$OUT/cal" --calibration-repeats 1 --csv first.csv \
    >first.txt 2>first.err
if grep -q 'calibration 1 of 2: allreduce' first.err && grep -q 'calibration took' first.err &&
        head -n 1 cal | grep -qx 'ddphook-plan-calibration 2' && tail -n 1 cal | grep -qx 'end 2'; then
    ok "calibration measured with progress and written"
else
    no "calibration:"; cat first.err cal 2>&1 | sed 's/^/    /'
fi
plan --model mlp --hooks allreduce,fp16 --plugin-path "$P" $idle \
    --calibration "$OUT/cal" --csv second.csv >second.txt 2>second.err
if ! grep -q 'calibrat' second.err && cmp -s first.csv second.csv; then
    ok "calibration read back, same prediction"
else
    no "calibration round trip:"; cat second.err first.csv second.csv | sed 's/^/    /'
fi
# A busy machine (--busy-load 0: any load is busy) is refused, nothing
# written; --calibrate-busy measures, and the figures are flagged.
expect "a busy machine's calibration refused" "this machine is busy.*--calibrate-busy" \
    plan --model mlp --hooks allreduce --plugin-path "$P" --busy-load 0 --calibration busy0.cal
if [ -e busy0.cal ]; then no "a refused calibration wrote its file"; else ok "a refused calibration writes nothing"; fi
plan --model mlp --hooks allreduce --plugin-path "$P" --busy-load 0 --calibrate-busy \
    --calibration busy0.cal --calibration-repeats 1 >forced.txt 2>&1
if grep -q "allreduce's arithmetic was measured on a busy machine (load average .*--calibrate-busy)" forced.txt; then
    ok "--calibrate-busy measures, flagged"
else
    no "--calibrate-busy:"; sed 's/^/    /' forced.txt
fi
# Figures kept from a busy machine or another CPU count are not reused:
# measured again, saying why.
cpus=$(getconf _NPROCESSORS_ONLN)
sed "s/^\(hook allreduce [0-9a-f]* [^ ]*\) .*/\1 999999 $cpus/; s/^\(hook fp16 [0-9a-f]* [^ ]*\) .*/\1 0.1 999/" cal >busy.cal
plan --model mlp --hooks allreduce,fp16 --plugin-path "$P" $idle --calibration-repeats 1 \
    --calibration busy.cal >busy.txt 2>&1
if grep -q "allreduce's figure in busy.cal was measured on a busy machine (load average 999999.0 on $cpus CPUs): measuring again" busy.txt &&
        grep -q "fp16's figure in busy.cal was measured with 999 CPUs, this machine has $cpus: measuring again" busy.txt &&
        grep -q 'calibration 2 of 2: fp16' busy.txt && ! grep -q ' 999999 \| 999$' busy.cal; then
    ok "figures kept under other conditions are measured again"
else
    no "stale calibration:"; sed 's/^/    /' busy.txt busy.cal
fi
# A model past the 16 MiB sample (64 MiB of f32): two samples, fitted.
printf 'w 4096 4096\nb 4096\n' >big.shapes
plan --shapes big.shapes --hooks allreduce --plugin-path "$P" $idle --calibration-repeats 1 \
    --calibration big.cal --compute 0 --collectives mpich --device cpu >big.txt 2>&1
if grep -q 'on two samples of the model' big.txt && grep -q '^hook allreduce [0-9a-f]* [0-9.e-]*[1-9]' big.cal; then
    ok "a large model is calibrated on samples"
else
    no "sampled calibration:"; sed 's/^/    /' big.txt big.cal
fi
head -n 3 cal >truncated.cal
expect "a truncated calibration file" "truncated" \
    plan --model mlp --calibration truncated.cal --plugin-path "$P"
sed 's/^\(hook [a-z0-9]* [0-9a-f]*\) .*/\1 nan/' cal >nan.cal
expect "a NaN in a calibration file" "nan.cal:[0-9]*: want: hook NAME KEY SECONDS" \
    plan --model mlp --calibration nan.cal --plugin-path "$P"
{ cat cal; echo 'rm -rf /'; } >extra.cal
expect "text after the end line" "extra.cal:[0-9]*: text after the end line" \
    plan --model mlp --calibration extra.cal --plugin-path "$P"
printf 'PK\003\004garbage\n' >zip.cal
expect "not a calibration file" "zip.cal:1: not a calibration file" \
    plan --model mlp --calibration zip.cal --plugin-path "$P"
sed 's/^end 2/end 5/' cal >count.cal
expect "a wrong count" "count.cal:[0-9]*: the end line counts 5" \
    plan --model mlp --calibration count.cal --plugin-path "$P"
mkfifo fifo.cal 2>/dev/null &&
    expect "a FIFO for a calibration file" "fifo.cal" \
        plan --model mlp --calibration fifo.cal --plugin-path "$P"

echo "plan: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
