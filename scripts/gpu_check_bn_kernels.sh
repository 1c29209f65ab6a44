#!/usr/bin/env bash
# One device call: batch norm's kernels, cudakit's against torch's, one by one under ncu
# (scripts/bn_kernel_probe.py, at boost clocks, L2 kept between kernels as in a real step), then
# the table of each phase's kernels (scripts/bn_kernel_table.py).
#   CASES="32x2048x7x7:float32:cl ..." bash scripts/gpu_check_bn_kernels.sh
set -u
: "${CUDAKIT_CACHE_DIR:=/tmp/ck-bnk}"
. scripts/device_env.sh
cases=${CASES:-32x2048x7x7:float32:cl 32x128x28x28:float32:cl 32x64x112x112:float32:cl 32x512x28x28:float32:cl 32x1024x14x14:float32:cl}
timeout ${PROBE_TIMEOUT:-200} ncu --metrics gpu__time_duration.sum --csv --log-file "$OUT/ncu.csv" \
  --cache-control none --clock-control none python3 scripts/bn_kernel_probe.py $cases > "$OUT/probe.log" 2>&1
tail -3 "$OUT/probe.log"
python3 scripts/bn_kernel_table.py "$OUT/ncu.csv" "$OUT/probe.log" --json "$OUT/bn-kernels.json" | tee "$OUT/table.txt"
date -u +"%H:%M:%SZ"
