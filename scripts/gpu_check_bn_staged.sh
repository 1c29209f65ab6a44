#!/usr/bin/env bash
# One device call on batch norm's staged one-block-a-channel kernels (ck_bn_small / ck_bn_bwd_small
# STAGED: a channel's x, and dy, copied to shared memory once; normalization.BN_STAGED): the GPU
# tests of normalization and the examples, then benchmarks/sweeps/batch_norm.py --resident-ab on
# NCHW shapes past the on-chip size, plain and fused, each
# pass against torch, a device copy and the three launches in its run.
#   bash scripts/gpu_check_bn_staged.sh   # TEST_TIMEOUT, SWEEP_TIMEOUT (seconds), SKIP_TESTS, CASES, FUSED_CASES
# Results: $OUT/batch_norm-staged.json, $OUT/batch_norm-staged-fused.json; logs in $OUT.
set -u
: "${CUDAKIT_CACHE_DIR:=/tmp/ck-bns}"
. scripts/device_env.sh
. scripts/gpu_tests.sh tests/gpu/test_normalization_gpu.py tests/gpu/test_examples_gpu.py
cases=${CASES:-32x512x28x28,32x1024x14x14,32x256x56x56,32x192x28x28,64x256x28x28,16x512x28x28,32x384x28x28,48x256x28x28}
fused=${FUSED_CASES:-32x512x28x28}
(cd benchmarks/sweeps && timeout ${SWEEP_TIMEOUT:-150} python3 batch_norm.py --tag staged --resident-ab --nchw \
   --cases "$cases" --out "$OUT/batch_norm-staged.json") > "$OUT/log-sweep-staged.txt" 2>&1
(cd benchmarks/sweeps && timeout ${SWEEP_TIMEOUT:-150} python3 batch_norm.py --tag staged --resident-ab --nchw --fused \
   --cases "$fused" --out "$OUT/batch_norm-staged-fused.json") > "$OUT/log-sweep-staged-fused.txt" 2>&1
grep -hE "Error|Traceback" "$OUT"/log-sweep*.txt | head -5
grep -h VARIANT "$OUT"/log-sweep*.txt | sort -k3,6 -k2,2 \
  | awk '{printf "%-8s %-15s %-4s %-8s %-18s ck %s torch %s x%s\n", $2, $3, $4, $5, $6, $8, $11, $15}'
date -u +"%H:%M:%SZ"
