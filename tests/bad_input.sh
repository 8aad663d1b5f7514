#!/bin/sh
# bad_input.sh: bad input gets a clear error and loses nothing.
#  - the fuzz regression inputs and the shipped configs replay without a
#    crash (tests/fuzz/fuzz_replay);
#  - job files: a 100 MB line, a 100 MB file of comments, a directory;
#  - gradient traces for `ddphook replay`: a truncated step file, a shape
#    that does not match trace.ini, an unknown dtype, a missing trace.ini,
#    a world-size mismatch: each a specific message.
set -u
B=${DDPH_TEST_BUILDDIR:?run through make check}
S=${DDPH_TEST_SRCDIR:?}
OUT="$B/tests/out/bad_input"
rm -rf "$OUT"
mkdir -p "$OUT"
pass=0
fail=0
# expect NAME PATTERN COMMAND...: the command fails and prints PATTERN.
expect() {
    name=$1; pattern=$2; shift 2
    if out=$("$@" </dev/null 2>&1); then
        fail=$((fail + 1)); echo "FAIL: $name: accepted"; return
    fi
    if printf '%s\n' "$out" | grep -q -- "$pattern"; then
        pass=$((pass + 1)); echo "PASS: $name"
    else
        fail=$((fail + 1)); echo "FAIL: $name: no '$pattern' in:"
        printf '%s\n' "$out" | sed 's/^/    /'
    fi
}
if out=$("$B/tests/fuzz/fuzz_replay" "$S"/tests/fuzz/regressions/* "$S"/examples/configs/*.ini 2>&1); then
    pass=$((pass + 1)); echo "PASS: $out"
else
    fail=$((fail + 1)); echo "FAIL: fuzz regressions: $out"
fi
# 100 MB on one line, then 100 MB of short comment lines.
{ printf '[runtime]\nplugin_path = '; head -c 104857600 /dev/zero | tr '\0' a; printf '\n'; } > "$OUT/long.ini"
expect "100 MB line" "long.ini:2: line longer than 198 characters" \
    "$B/ddphook" check "$OUT/long.ini"
{ printf '[runtime]\n'; yes '; a comment line of forty-odd characters...' | head -c 104857600; printf '\ntimeout_s = x\n'; } > "$OUT/big.ini"
lines=$(wc -l < "$OUT/big.ini")
expect "100 MB file" "big.ini:$((lines)): \[runtime\] timeout_s = 'x' is not a number" \
    "$B/ddphook" check "$OUT/big.ini"
rm -f "$OUT/long.ini" "$OUT/big.ini"
# 160,000 keys in one section: parsing is n log n (3.6 s here; it was
# quadratic: 173 s).  The limit leaves room for the sanitizer builds.
awk -v d="$DDPH_TEST_PLUGIN_DIR" 'BEGIN { print "[runtime]"; print "plugin_path = " d;
    print "[hook]"; print "name = allreduce"; print "[hook.allreduce]";
    for (i = 0; i < 160000; i++) printf "k%d = 1\n", i }' > "$OUT/many.ini"
expect "160,000 keys in one section, parsed within 120 s" \
    "many.ini:6: hook 'allreduce' has no option 'k0'" \
    timeout 120 "$B/ddphook" check "$OUT/many.ini"
rm -f "$OUT/many.ini"
# Typos in names: the exact message, with file:line and the nearest name.
P=$DDPH_TEST_PLUGIN_DIR
printf '[runtime]\nplugin_path = %s\n[hook]\nname = powersgd\n[hook.powersdg]\nmatrix_approximation_rank = 2\n' "$P" > "$OUT/section.ini"
expect "a misspelled [hook.NAME] section" \
    "^ddphook check: $OUT/section.ini:5: \[hook.powersdg\]: no hook 'powersdg' along plugin_path ($P); did you mean \[hook.powersgd\]?\$" \
    "$B/ddphook" check "$OUT/section.ini"
printf '[runtime]\nplugin_path = %s:%s/absent\n[hook]\nname = powersdg\n' "$P" "$OUT" > "$OUT/name.ini"
expect "a misspelled hook name" \
    "^ddphook check: $OUT/name.ini:4: hook 'powersdg' not found (did you mean 'powersgd'?); paths tried: $P/powersdg.so, $OUT/absent/powersdg.so (the folder does not exist) (\`ddphook plugins\` lists the hooks;" \
    "$B/ddphook" check "$OUT/name.ini"
# A key after a section's ']' (inih drops it) is refused as the runtime
# refuses it; a comment there and a UTF-8 byte-order mark are not.
printf '[runtime]\nplugin_path = %s\n[hook]\nname = topk\n[hook.topk] ratio = 0.5\n' "$P" > "$OUT/after.ini"
expect "a key after ']'" \
    "^ddphook check: $OUT/after.ini:5: text after ']' on the section line: put 'ratio = 0.5' on a line of its own\$" \
    "$B/ddphook" check "$OUT/after.ini"
printf '\357\273\277[runtime] ; saved by an editor that marks UTF-8\nplugin_path = %s\n[hook]\nname = allreduce\n' "$P" > "$OUT/bom.ini"
if out=$("$B/ddphook" check "$OUT/bom.ini" 2>&1 </dev/null); then
    pass=$((pass + 1)); echo "PASS: a byte-order mark and a comment after ']' are accepted"
else
    fail=$((fail + 1)); echo "FAIL: a byte-order mark, a comment after ']':"; printf '%s\n' "$out" | sed 's/^/    /'
fi
# backend = nccl is checked where the job file is checked.
if ! nvidia-smi -L 2>/dev/null | grep -q GPU; then
    printf '[runtime]\nbackend = nccl\nplugin_path = %s\n' "$P" > "$OUT/nccl.ini"
    expect "backend = nccl without a GPU" \
        "^ddphook check: $OUT/nccl.ini:2: \[runtime\] backend = nccl: \(no CUDA device on this machine\|the nccl backend is not available\)" \
        "$B/ddphook" check "$OUT/nccl.ini"
fi
# A backend the registry does not know, by name and with the known ones.
printf '[runtime]\nplugin_path = %s\nbackend = gloo\n' "$P" > "$OUT/gloo.ini"
expect "an unknown backend" \
    "^ddphook check: $OUT/gloo.ini:3: \[runtime\] backend = 'gloo' is not a backend this ddphook knows (auto, mpi, nccl" \
    "$B/ddphook" check "$OUT/gloo.ini"
expect "a folder as job file" "cannot open job file\|read error" "$B/ddphook" check "$OUT"
# Every refused hook option, in line order, then the verdict as the last
# line; and what only the hook's own create() refuses, with file:line.
printf '[runtime]\nplugin_path = %s\n[hook]\nname = powersgd\n[hook.powersgd]\nmin_compression_rate = x\nmatrix_aproximation_rank = 3\nstart_powerSGD_iter = 1\n' "$P" > "$OUT/opts.ini"
if out=$("$B/ddphook" check "$OUT/opts.ini" 2>&1 </dev/null); then
    fail=$((fail + 1)); echo "FAIL: check of two bad options: accepted"
elif [ "$(printf '%s\n' "$out" | grep -c "^ddphook check: $OUT/opts.ini:[0-9]*:")" -eq 2 ] &&
     printf '%s\n' "$out" | sed -n 1p | grep -q "opts.ini:6: \[hook.powersgd\] min_compression_rate (real): 'x' is not a number" &&
     printf '%s\n' "$out" | sed -n 2p | grep -q "opts.ini:7: hook 'powersgd' has no option 'matrix_aproximation_rank'; did you mean 'matrix_approximation_rank'?" &&
     printf '%s\n' "$out" | tail -1 | grep -q "^$OUT/opts.ini: 2 errors: the job would not start\$"; then
    pass=$((pass + 1)); echo "PASS: check lists every bad option in line order, then the verdict"
else
    fail=$((fail + 1)); echo "FAIL: check of two bad options:"; printf '%s\n' "$out" | sed 's/^/    /'
fi
# Every error of a file in one run, the plain INI errors, the hook's
# options and a [hook.NAME] typo together, in line order; the count is
# the number of errors printed.
printf '[runtime]\nplugin_path = %s\ntimout_s = 5\n[hook]\nname = powersgd\n[hook.powersgd]\nmatrix_aproximation_rank = 2\n[hook.topkk]\nratio = 0.1\n[runtime]\nbucket_cap_mb = x\n' "$P" > "$OUT/many_errors.ini"
out=$("$B/ddphook" check "$OUT/many_errors.ini" 2>&1 </dev/null)
lines=$(printf '%s\n' "$out" | sed -n "s|^ddphook check: $OUT/many_errors.ini:\([0-9]*\): .*|\1|p" | tr '\n' ' ')
if [ "$lines" = "3 7 8 11 " ] &&
   printf '%s\n' "$out" | tail -1 | grep -q "^$OUT/many_errors.ini: 4 errors: the job would not start\$"; then
    pass=$((pass + 1)); echo "PASS: check lists every error of a file (lines $lines) and counts 4"
else
    fail=$((fail + 1)); echo "FAIL: check of a file with 4 errors (lines: $lines)"; printf '%s\n' "$out" | sed 's/^/    /'
fi
# Continuation lines parse in linear time: plugin_path over 8,000 lines
# and a hook option over 40,000 (6 MB); each was 43 s and 126 s.
awk -v d="$P" 'BEGIN { print "[runtime]"; printf "plugin_path = %s:", d;
    for (i = 0; i < 8000; i++) printf "\n  /nonexistent/folder/number/%06d:", i; print "";
    print "[hook]"; print "name = powersgd"; print "[hook.powersgd]"; printf "matrix_approximation_rank = 1";
    for (i = 0; i < 40000; i++) printf "\n  %0150d", 0; print "" }' > "$OUT/continued.ini"
t0=$(date +%s.%N)
out=$(timeout 60 "$B/ddphook" check "$OUT/continued.ini" 2>&1 </dev/null)
t1=$(date +%s.%N)
took=$(echo "$t0 $t1" | awk '{printf "%.2f", $2 - $1}')
if printf '%s\n' "$out" | grep -q "continued.ini:8006: \[hook.powersgd\] matrix_approximation_rank (int): '10000" &&
   echo "$took" | awk '{exit !($1 < 5)}'; then
    pass=$((pass + 1)); echo "PASS: $(wc -c < "$OUT/continued.ini") bytes of continuation lines checked in $took s"
else
    fail=$((fail + 1)); echo "FAIL: continuation lines: $took s"; printf '%s\n' "$out" | tail -3 | sed 's/^/    /'
fi
rm -f "$OUT/continued.ini"
# check runs no code from a plugin another user could have written: as
# root, allow_insecure_plugins needs the operator's word; with it, the
# plugin's ELF is read, and it is not loaded.
if [ "$(id -u)" = 0 ]; then
    mkdir -p "$OUT/evil"
    cp "$DDPH_TEST_FAKE_DIR/attacker.so" "$OUT/evil/attacker.so"
    chown 65534 "$OUT/evil/attacker.so"
    printf '[runtime]\nallow_insecure_plugins = true\nplugin_path = %s\n[hook]\nname = %s\n' "$P" "$OUT/evil/attacker.so" > "$OUT/insecure.ini"
    expect "allow_insecure_plugins as root without the operator's word" \
        "insecure.ini:2: \[runtime\] allow_insecure_plugins = true is refused for a job run as root unless the operator agrees: set DDPHOOK_ALLOW_INSECURE_AS_ROOT=1" \
        "$B/ddphook" check "$OUT/insecure.ini"
    out=$(DDPHOOK_ALLOW_INSECURE_AS_ROOT=1 "$B/ddphook" check "$OUT/insecure.ini" 2>&1 </dev/null)
    if printf '%s\n' "$out" | grep -q "insecure.ini:5: hook plugin $OUT/evil/attacker.so is not loaded: another user owns or can write it" &&
       printf '%s\n' "$out" | tail -1 | grep -q ": OK\$"; then
        pass=$((pass + 1)); echo "PASS: check reads another user's plugin's ELF and does not load it"
    else
        fail=$((fail + 1)); echo "FAIL: check of another user's plugin"; printf '%s\n' "$out" | sed 's/^/    /'
    fi
else
    echo "SKIP: another user's plugin: chown needs root"
fi
printf '[runtime]\nplugin_path = %s\n[hook]\nname = powersgd\n[hook.powersgd]\nmatrix_approximation_rank = 2\nstart_powerSGD_iter = 1\n' "$P" > "$OUT/create.ini"
expect "check runs the hook's own create() (start_powerSGD_iter = 1)" \
    "^ddphook check: $OUT/create.ini:7: hook 'powersgd' (.*): create failed: start_powerSGD_iter = 1: it must be > 1" \
    "$B/ddphook" check "$OUT/create.ini"

if [ -n "${MPIEXEC:-}" ] && command -v "$MPIEXEC" >/dev/null 2>&1; then
    job="$OUT/job.ini"
    printf '[runtime]\nplugin_path = %s\ntimeout_s = 30\n' "$DDPH_TEST_PLUGIN_DIR" > "$job"
    "$B/tests/tools/make_trace" "$OUT/t" 2 2 1 w=4,3 b=4
    cp -R "$OUT/t" "$OUT/trunc"
    head -c 30 "$OUT/t/rank1.step1.f32" > "$OUT/trunc/rank1.step1.f32"
    expect "truncated step file" "rank1.step1.f32 has 30 bytes; trace.ini's parameters make 16 floats = 64 bytes" \
        "$MPIEXEC" -n 2 "$B/ddphook" replay --job "$job" --trace "$OUT/trunc" --out "$OUT/o1"
    cp -R "$OUT/t" "$OUT/shape"
    sed -i 's/shape = 4,3/shape = 4,4/' "$OUT/shape/trace.ini"
    expect "shape mismatch" "rank0.step0.f32 has 64 bytes; trace.ini's parameters make 20 floats = 80 bytes" \
        "$MPIEXEC" -n 2 "$B/ddphook" replay --job "$job" --trace "$OUT/shape" --out "$OUT/o2"
    # A hook named by a path that does not exist, with a section for the
    # hook that path was meant to be: ddph_open names the path's line and
    # why, not the section (which only follows from it).
    printf '[runtime]\nplugin_path = %s\n[hook]\nname = %s/absent/localsgd.so\n[hook.post_localsgd]\nperiod = 8\n' "$P" "$OUT" > "$OUT/path.ini"
    expect "a hook path that does not exist, with its section" \
        "error: $OUT/path.ini:4: hook plugin $OUT/absent/localsgd.so: No such file or directory" \
        "$MPIEXEC" -n 2 "$B/ddphook" replay --job "$OUT/path.ini" --trace "$OUT/t" --out "$OUT/o3"
    # --out never follows a planted link, nor writes into a folder
    # another user owns.
    mkdir -p "$OUT/victim_dir"
    ln -s "$OUT/victim_dir" "$OUT/planted_out"
    expect "replay --out a planted link" \
        "--out $OUT/planted_out is a symbolic link (refused" \
        "$MPIEXEC" -n 2 "$B/ddphook" replay --job "$job" --trace "$OUT/t" --out "$OUT/planted_out"
    if [ -n "$(ls "$OUT/victim_dir")" ]; then
        fail=$((fail + 1)); echo "FAIL: replay wrote into a planted link's target"
    fi
    if [ "$(id -u)" = 0 ]; then
        mkdir -p "$OUT/theirs"
        chown 65534 "$OUT/theirs"
        expect "replay --out a folder another user owns" \
            "--out $OUT/theirs is a folder another user owns (refused" \
            "$MPIEXEC" -n 2 "$B/ddphook" replay --job "$job" --trace "$OUT/t" --out "$OUT/theirs"
    fi
    cp -R "$OUT/t" "$OUT/badshape"
    sed -i 's/shape = 4,3/shape = 4,x/' "$OUT/badshape/trace.ini"
    expect "malformed shape" "shape = '4,x' is not a,b,... of non-negative integers" \
        "$MPIEXEC" -n 2 "$B/ddphook" replay --job "$job" --trace "$OUT/badshape" --out "$OUT/o3"
    cp -R "$OUT/t" "$OUT/baddtype"
    sed -i 's/dtype = f32/dtype = f8/' "$OUT/baddtype/trace.ini"
    expect "unknown dtype" "dtype = 'f8' is not one of f32, f16, bf16, f64 (line 4)" \
        "$MPIEXEC" -n 2 "$B/ddphook" replay --job "$job" --trace "$OUT/baddtype" --out "$OUT/o6"
    cp -R "$OUT/t" "$OUT/fifo"
    rm "$OUT/fifo/rank1.step1.f32"
    mkfifo "$OUT/fifo/rank1.step1.f32"
    expect "a FIFO as a step file" "rank1.step1.f32: not a regular file" \
        timeout 60 "$MPIEXEC" -n 2 "$B/ddphook" replay --job "$job" --trace "$OUT/fifo" --out "$OUT/o7"
    cp -R "$OUT/t" "$OUT/overflow"
    sed -i 's/shape = 4,3/shape = 4294967296,4294967296/' "$OUT/overflow/trace.ini"
    expect "a shape whose element count overflows" "shape = '4294967296,4294967296' is not a,b,... of non-negative integers whose product fits" \
        "$MPIEXEC" -n 2 "$B/ddphook" replay --job "$job" --trace "$OUT/overflow" --out "$OUT/o8"
    expect "missing trace.ini" "trace.ini: cannot open" \
        "$MPIEXEC" -n 2 "$B/ddphook" replay --job "$job" --trace "$OUT/nothing" --out "$OUT/o4"
    expect "world size mismatch" "the trace was captured on 2 ranks; this run has 1" \
        "$MPIEXEC" -n 1 "$B/ddphook" replay --job "$job" --trace "$OUT/t" --out "$OUT/o5"
    # A nonblocking collective on a buffer in the hook's own stack frame,
    # never waited for, is refused when it starts (it used to smash the
    # stack once the host waited for it).
    printf '[runtime]\nplugin_path = %s\ntimeout_s = 30\n[hook]\nname = %s\n' \
        "$DDPH_TEST_PLUGIN_DIR" "$DDPH_TEST_FAKE_DIR/stack_request.so" > "$OUT/stack.ini"
    expect "a nonblocking collective on the hook's stack" \
        "iallreduce: the send buffer 0x[0-9a-f]* is in the hook's own stack frame" \
        timeout 60 "$MPIEXEC" -n 2 "$B/ddphook" replay --job "$OUT/stack.ini" --trace "$OUT/t" --out "$OUT/o10"
    # Collective fingerprints: the last rank sums its bucket once more than
    # the others, or one element fewer; every rank reports it, naming the
    # rank and both collectives, and no step returns OK.  On 2 and 4 ranks,
    # with buckets large enough for the shared-memory sums.  Hydra must not
    # end the other ranks when the first one exits non-zero, before they
    # have reported (-disable-auto-cleanup, as in faults.sh; seen once in
    # a clean-clone CI: 2 reports of 4).
    "$B/tests/tools/make_trace" "$OUT/t4" 4 3 1 w=256,300 b=300
    "$B/tests/tools/make_trace" "$OUT/t2" 2 3 1 w=256,300 b=300
    for w in 2 4; do
        for fake in extra_last_rank count_last_rank; do
            printf '[runtime]\nplugin_path = %s\ntimeout_s = 30\n[hook]\nname = %s\n' \
                "$DDPH_TEST_PLUGIN_DIR" "$DDPH_TEST_FAKE_DIR/$fake.so" > "$OUT/$fake.ini"
            out=$(timeout 60 "$MPIEXEC" -disable-auto-cleanup -n "$w" "$B/ddphook" replay --job "$OUT/$fake.ini" \
                --trace "$OUT/t$w" --out "$OUT/o-$fake-$w" </dev/null 2>&1)
            rc=$?
            last=$((w - 1))
            # The extra collective meets the others' end-of-step record.
            want="the ranks' collectives differ \(group of $w ranks\): rank $last called allreduce\(f32, [0-9]*, sum\) as its collective #[0-9]* \(iteration [0-9]*, bucket [0-9]* of model 'model'(, from its byte [0-9]*)?\) where ranks? [0-9, ]* called (allreduce\(f32, [0-9]*, sum\)|the end of its step)"
            n=$(printf '%s\n' "$out" | grep -Ec "ddphook\[rank [0-9]*\]: error: .*$want")
            if [ "$rc" -ne 0 ] && [ "$n" -ge "$w" ]; then
                pass=$((pass + 1)); echo "PASS: $fake on $w ranks: every rank names rank $last and both collectives"
            else
                fail=$((fail + 1)); echo "FAIL: $fake on $w ranks (exit $rc, $n reports)"; printf '%s\n' "$out" | tail -20 | sed 's/^/    /'
            fi
        done
    done
    # Ranks whose jobs differ in a key that decides whether they take part
    # in a collective are refused at finalize, on every rank.
    printf '[runtime]\nplugin_path = %s\ntimeout_s = 30\ncheck_collectives = false\n' \
        "$DDPH_TEST_PLUGIN_DIR" > "$OUT/unchecked.ini"
    expect "check_collectives differing between ranks" \
        "rank 0 has 'check_collectives 1' where rank 1 has 'check_collectives 0'" \
        timeout 60 "$MPIEXEC" -n 1 "$B/ddphook" replay --job "$job" --trace "$OUT/t" --out "$OUT/o11" \
        : -n 1 "$B/ddphook" replay --job "$OUT/unchecked.ini" --trace "$OUT/t" --out "$OUT/o11"
    # A [model.X] section that names no model: the first step fails on
    # every rank, with file:line and the nearest model name.
    printf '[runtime]\nplugin_path = %s\ntimeout_s = 30\n[model.modle]\nhook = fp16\n' "$DDPH_TEST_PLUGIN_DIR" > "$OUT/typo.ini"
    out=$(timeout 60 "$MPIEXEC" -n 2 "$B/ddphook" replay --job "$OUT/typo.ini" --trace "$OUT/t" --out "$OUT/o9" </dev/null 2>&1)
    rc=$?
    want="step_begin: $OUT/typo.ini:4: \[model.modle\]: the trainer created no model 'modle' before its first step, so this section would never apply; did you mean \[model.model\]?"
    if [ "$rc" -ne 0 ] && [ "$(printf '%s\n' "$out" | grep -c "rank [01].*$want")" -ge 2 ]; then
        pass=$((pass + 1)); echo "PASS: a [model.X] typo fails the first step on every rank"
    else
        fail=$((fail + 1)); echo "FAIL: a [model.X] typo (exit $rc):"; printf '%s\n' "$out" | sed 's/^/    /'
    fi
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
