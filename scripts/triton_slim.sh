#!/usr/bin/env bash
# Build .carry/triton<ver>-slim.tar.xz: the Triton wheel the `triton` extra pins, cut to what an
# NVIDIA GPU run needs, so that it fits the device tool's 64 MiB carry (the wheel is 286 MB).
# The GPU image has Triton 3.6 and no network; scripts/gpu_check.sh with TRITON_SLIM=<tarball>
# runs the Triton GPU tests and the launch-cost row with this one first on the path.
#   bash scripts/triton_slim.sh [version, default 3.9.0] [python version of the image, default 3.12]
# Removed: the AMD code generator (105 MB), CUPTI and the profiler (proton), the legacy ptxas
# (sm < 90; sm_90 uses ptxas-blackwell), instrumentation test libraries; libtriton.so is stripped
# of its debug info (500 -> 192 MB). Needs pip, unzip, strip, xz; takes about 5 minutes (xz -9).
set -eu
VER=${1:-3.9.0}
PYV=${2:-3.12}
REPO=$PWD
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  -d "$WORK" "triton==$VER"
unzip -q "$WORK"/triton-*.whl -d "$WORK/t"
cd "$WORK/t/triton"
rm -rf backends/amd/lib/libtriton_amd_codegen.so backends/nvidia/lib/cupti backends/nvidia/lib/cupti-blackwell \
  backends/nvidia/bin/ptxas _C/libproton.so instrumentation/*.so
strip --strip-unneeded _C/libtriton.so
cd "$WORK/t"
mkdir -p "$REPO/.carry"   # .carry/ is git-ignored through .git/info/exclude (see gpu_check.sh)
OUTF="$REPO/.carry/triton$(echo "$VER" | cut -d. -f1,2 | tr -d .)-slim.tar.xz"
tar -cf - triton triton-*.dist-info | xz -9 -T0 > "$OUTF"
ls -l "$OUTF"
