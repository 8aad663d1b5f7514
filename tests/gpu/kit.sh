#!/bin/sh
# kit.sh: packs, on a machine with ddphook's build dependencies but no
# GPU, everything tests/gpu/run.sh needs on a GPU machine that has only
# the NVIDIA driver and the CUDA 13 libraries (the `device` machines are
# such: no MPICH, OpenBLAS, inih or autotools, and no network to fetch
# them).  It builds the tree's current files, with the nccl backend, for
# one GPU architecture, and writes ddphook-gpu-kit.tar.gz in the top
# folder (about 30 MB): the real binaries (ddphook, test_gpu,
# test_device_ops, gpu_trainer, nccl_probe),
# libddphook, the plugins, post_localsgd.so, and every shared library they
# load that is neither CUDA's nor the C and C++ runtime's (MPICH and UCX,
# OpenBLAS, LAPACKE, zlib, ...; NCCL with KIT_NCCL=yes).  run.sh there finds the CUDA libraries
# (in /usr/local/cuda, the linker cache, or a Python environment's
# nvidia-* packages).
#
#   sh tests/gpu/kit.sh                         here (GPU_ARCH=90: Hopper)
#   CUDA_DIR=/usr/local/cuda-12.8 sh tests/gpu/kit.sh
#                                               with another CUDA (12 or 13)
#   KIT_NCCL=yes sh tests/gpu/kit.sh            with NCCL's library, for a
#                                               machine that has none
#   sh tests/gpu/run.sh --kit ddphook-gpu-kit.tar.gz     there
set -eu
cd "$(dirname "$0")/../.."
top=$PWD
arch=${GPU_ARCH:-90}
cuda=${CUDA_DIR:-/usr/local/cuda}
cuda_version=$("$cuda/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
# The oldest driver that runs what this CUDA builds (NVIDIA's release
# notes): CUDA 13.x 580, CUDA 12.x 525.
case $cuda_version in
13*) min_driver=580 ;;
12*) min_driver=525 ;;
*) echo "kit: CUDA ${cuda_version:-unknown} in $cuda: 12 or 13 is needed" >&2; exit 1 ;;
esac
work=$top/_gpukit
kit=$work/ddphook-gpu-kit
rm -rf "$work"
mkdir -p "$work/src" "$kit/bin" "$kit/lib" "$kit/plugins"

# The tree as it is now, committed or not, built apart from any build
# in place (a tree configured in place cannot host another build).
git rev-parse --git-dir >/dev/null 2>&1 ||
    { echo "kit: run it in a git checkout (it builds the files git lists)" >&2; exit 1; }
git ls-files -co --exclude-standard | tar -cf - -T - | tar -xf - -C "$work/src"
cd "$work/src"
# The architectures a release ships (configure's default) and GPU_ARCH.
archs="80 90"
case " $archs " in *" $arch "*) ;; *) archs="$archs $arch" ;; esac
echo "kit: building for sm $archs in $work/src (log: $work/build.log)"
{
    ./autogen.sh &&
    ./configure --with-cuda="$cuda" \
        --with-cuda-arch="$archs" NVCCFLAGS= &&
    make -j"$(nproc)" &&
    make -j"$(nproc)" tests/gpu/test_gpu tests/gpu/test_device_ops \
        tests/gpu/nccl_probe tests/gpu/post_localsgd.la tests/gpu/qsgd.la
} >"$work/build.log" 2>&1 || { tail -n 30 "$work/build.log"; exit 1; }
grep -q '^#define HAVE_NCCL 1' build-config.h ||
    { echo "kit: configure did not enable the nccl backend" >&2; exit 1; }

# libtool leaves the uninstalled programs' real executables in .libs/.
cp ddphook ddphook-bench-gpu tests/gpu/.libs/test_gpu tests/gpu/test_device_ops \
    tests/gpu/nccl_probe examples/.libs/gpu_trainer "$kit/bin/"
# MPICH's launcher, for the 2-rank runs on a machine with 2 GPUs and no
# MPICH of its own (run.sh puts the kit's bin/ first on PATH).
cp -L "$(command -v mpiexec)" "$kit/bin/mpiexec"
cp -L "$(command -v hydra_pmi_proxy)" "$kit/bin/hydra_pmi_proxy"
cp -L .libs/libddphook.so.1 tests/gpu/.libs/post_localsgd.so \
    tests/gpu/.libs/qsgd.so "$kit/lib/"
cp -L plugins/.libs/*.so "$kit/plugins/"
# The GPU backend module, found through DDPH_BACKEND_DIR (run.sh sets it).
mkdir -p "$kit/backends"
cp -L runtime/backends/nccl/.libs/nccl.so "$kit/backends/"

# Every library they load, except CUDA's and those any Linux has.  NCCL
# is no part of the toolkit, and a machine with only the driver and the
# toolkit has none: KIT_NCCL=yes packs it too (about 200 MB more, which
# compresses hardly at all; the `device` machines have NCCL in their
# Python environment's nvidia-nccl-cu13, where run.sh finds it).
case ${KIT_NCCL:-no} in
yes) pack_nccl=libnccl.so ;;
no) pack_nccl=none ;;
*) echo "kit: KIT_NCCL is yes or no, not $KIT_NCCL" >&2; exit 1 ;;
esac
system_lib='/(ld-linux[^/]*|linux-vdso[^/]*|lib(c|m|dl|pthread|rt|gcc_s|stdc\+\+)\.so\.[0-9]+)$'
needed() { LD_LIBRARY_PATH=$kit/lib ldd "$kit"/bin/* "$kit"/lib/*.so* "$kit"/plugins/*.so "$kit"/backends/*.so; }
needed | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
while read -r soname path; do
    case $soname:$path in
    "$pack_nccl"*) ;;
    *:/usr/local/cuda*|*:"$cuda"/*|*:"$kit"/*) continue ;;
    esac
    printf '%s\n' "$path" | grep -Eq "$system_lib" && continue
    cp -L "$path" "$kit/lib/$soname"
done
missing=$(needed | grep 'not found' | sort -u || true)
[ -z "$missing" ] || { echo "kit: unresolved libraries:" >&2; echo "$missing" >&2; exit 1; }

# The newest C library symbol version any of it uses: the GPU machine's
# glibc must be at least that.
glibc=$(for f in "$kit"/bin/* "$kit"/lib/* "$kit"/plugins/* "$kit"/backends/*; do
            objdump -T "$f" | grep -o 'GLIBC_2\.[0-9]*'
        done | sort -t. -k2,2n -u | tail -n 1)
{
    echo "ddphook GPU kit"
    echo "source: $(git -C "$top" describe --always --dirty 2>/dev/null || echo unknown)"
    echo "built: $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -m), CUDA $cuda_version, sm $archs"
    echo "needs: NVIDIA driver >= $min_driver, CUDA ${cuda_version%%.*}'s libraries, glibc >= ${glibc#GLIBC_}"
    [ -f "$kit/lib/libnccl.so.2" ] && echo "carries: NCCL" ||
        echo "carries no NCCL: the machine needs libnccl.so.2 (or a kit made with KIT_NCCL=yes)"
} >"$kit/MANIFEST"
tar -czf "$top/ddphook-gpu-kit.tar.gz" -C "$work" ddphook-gpu-kit
echo "kit: $top/ddphook-gpu-kit.tar.gz ($(du -k "$top/ddphook-gpu-kit.tar.gz" | cut -f1) KiB)"
