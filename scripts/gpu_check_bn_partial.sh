#!/usr/bin/env bash
# One device call on batch norm's single-read kernels with tiles of part of each block's rows
# (normalization.BN_RESIDENT_PARTIAL_FROM(_FORWARD): where x, and dy, do not fit on chip whole, the tiles hold the
# first rows of each block and the rest is read twice): the GPU tests of normalization, graphs and
# the examples, then benchmarks/sweeps/batch_norm.py on the shapes past the on-chip size, with the
# partial tiles and with --whole-tiles (the three launches there), each against torch and a device
# copy in its run.
#   bash scripts/gpu_check_bn_partial.sh   # TEST_TIMEOUT, SWEEP_TIMEOUT (seconds), SKIP_TESTS, CASES
# Results: $OUT/batch_norm-partial.json, $OUT/batch_norm-whole.json; logs in $OUT.
set -u
: "${CUDAKIT_CACHE_DIR:=/tmp/ck-bnp}"
. scripts/device_env.sh
. scripts/gpu_tests.sh tests/gpu/test_normalization_gpu.py tests/gpu/test_graphs_gpu.py tests/gpu/test_examples_gpu.py
cases=${CASES:-32x64x112x112,32x256x56x56,32x512x28x28,32x1024x14x14,8192x1024}
for tag in whole partial; do
  flag=$([ "$tag" = whole ] && echo --whole-tiles)
  (cd benchmarks/sweeps && timeout ${SWEEP_TIMEOUT:-150} python3 batch_norm.py --tag "$tag" $flag \
     --cases "$cases" --out "$OUT/batch_norm-$tag.json") > "$OUT/log-sweep-$tag.txt" 2>&1
done
grep -hE "Error|Traceback" "$OUT"/log-sweep*.txt | head -5
grep -h VARIANT "$OUT"/log-sweep*.txt | sort -k3,6 -k2,2 \
  | awk '{printf "%-8s %-15s %-4s %-8s %-4s ck %s torch %s x%s\n", $2, $3, $4, $5, $6, $8, $11, $15}'
date -u +"%H:%M:%SZ"
