#!/bin/sh
# run.sh: the check to run on a machine with a GPU (the `device` tool):
# builds ddphook with the nccl backend for the GPU present, runs the GPU
# tests, and writes a short report to ${OUT:-.}/gpu-report.txt.
# Must finish well under 5 minutes on one GPU.
set -u
cd "$(dirname "$0")/../.."
report=${OUT:-.}/gpu-report.txt
{
    echo "== $(date -u) on $(hostname)"
    nvidia-smi -L 2>&1
    nvcc --version 2>&1 | tail -n 1
} > "$report"
if [ ! -x ./configure ]; then ./autogen.sh >/dev/null 2>&1 || exit 1; fi
mkdir -p _gpu && cd _gpu
../configure --with-cuda=/usr/local/cuda >/dev/null 2>>"$report" || { cat "$report"; exit 1; }
make -j"$(nproc)" >/dev/null 2>>"$report" || { cat "$report"; exit 1; }
make -j"$(nproc)" tests/gpu/test_gpu >/dev/null 2>>"$report"
echo "== tests/gpu/test_gpu (1 rank)" >> "$report"
./tests/gpu/test_gpu "$PWD/plugins/.libs" >> "$report" 2>&1
echo "exit $?" >> "$report"
cat "$report"
