# Sourced first by the gpu_check_*.sh scripts (not gpu_check.sh): makes $OUT (default /tmp/cudakit-out), puts the source
# tree and tests/ on PYTHONPATH, keeps compiled kernels in CUDAKIT_CACHE_DIR (each script sets its own
# default before sourcing), installs the carried cuDNN frontend (cudnn_env.sh), prints the date and the GPU.
OUT=${OUT:-/tmp/cudakit-out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src:$PWD/tests" PYTHONUNBUFFERED=1 CUDAKIT_CACHE_DIR=${CUDAKIT_CACHE_DIR:-/tmp/cudakit-cache}
. scripts/cudnn_env.sh >/dev/null 2>&1
date -u +"%Y-%m-%dT%H:%M:%SZ"; nvidia-smi --query-gpu=name --format=csv,noheader
