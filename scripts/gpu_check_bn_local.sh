#!/usr/bin/env bash
# One device call on the single-read batch-norm kernels' local form (channels-last rows that narrow
# blocks hold whole: a grid of one row chunk, no grid barrier; normalization.BN_LOCAL): the GPU
# tests of normalization, then benchmarks/sweeps/batch_norm.py --resident-ab --local-ab --cl on
# short, wide channels-last shapes, each pass against torch, a device copy, the three launches and
# the form without it (the grid barriers from 8 MiB of x, else the three launches) in its run.
#   bash scripts/gpu_check_bn_local.sh   # TEST_TIMEOUT, SWEEP_TIMEOUT (seconds), SKIP_TESTS, CASES
# Results: $OUT/batch_norm-local.json; logs in $OUT.
set -u
: "${CUDAKIT_CACHE_DIR:=/tmp/ck-bnl}"
. scripts/device_env.sh
. scripts/gpu_tests.sh tests/gpu/test_normalization_gpu.py
cases=${CASES:-32x2048x7x7,64x2048x7x7,32x1024x7x7,16x1024x14x14,32x512x7x7,2048x2048,32x256x56x56}
(cd benchmarks/sweeps && timeout ${SWEEP_TIMEOUT:-150} python3 batch_norm.py --tag local --resident-ab --local-ab --cl \
   --cases "$cases" --out "$OUT/batch_norm-local.json") > "$OUT/log-sweep-local.txt" 2>&1
grep -hE "Error|Traceback" "$OUT"/log-sweep*.txt | head -5
grep -h VARIANT "$OUT"/log-sweep*.txt | sort -k3,6 -k2,2 \
  | awk '{printf "%-8s %-15s %-4s %-8s %-12s ck %s torch %s x%s\n", $2, $3, $4, $5, $6, $8, $11, $15}'
date -u +"%H:%M:%SZ"
