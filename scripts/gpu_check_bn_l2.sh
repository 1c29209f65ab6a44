#!/usr/bin/env bash
# One device call on the order of batch norm's elementwise pass after the three launches' reduction
# (normalization.BN_APPLY_L2_ORDER: rows from the back of the reduction's row chunks, so the part of
# x and dy still in L2 is read again first): the GPU tests of normalization, graphs and the
# examples, then benchmarks/sweeps/batch_norm.py on the shapes that take the three launches (x past
# the on-chip size of the single-read kernels), with rows in L2 order and with --rows-in-order,
# each against torch and a device copy in its run.
#   bash scripts/gpu_check_bn_l2.sh   # TEST_TIMEOUT, SWEEP_TIMEOUT (seconds), SKIP_TESTS, CASES, FUSED=1
# Results: $OUT/batch_norm-l2.json, $OUT/batch_norm-in-order.json; logs in $OUT.
set -u
: "${CUDAKIT_CACHE_DIR:=/tmp/ck-bnl2}"
. scripts/device_env.sh
. scripts/gpu_tests.sh tests/gpu/test_normalization_gpu.py tests/gpu/test_graphs_gpu.py tests/gpu/test_examples_gpu.py
cases=${CASES:-32x64x112x112,32x256x56x56,32x512x28x28}
for tag in in-order l2; do
  flag=$([ "$tag" = in-order ] && echo --rows-in-order)
  (cd benchmarks/sweeps && timeout ${SWEEP_TIMEOUT:-150} python3 batch_norm.py --tag "$tag" $flag ${FUSED:+--fused} \
     --cases "$cases" --out "$OUT/batch_norm-$tag.json") > "$OUT/log-sweep-$tag.txt" 2>&1
done
grep -hE "Error|Traceback" "$OUT"/log-sweep*.txt | head -5
grep -h VARIANT "$OUT"/log-sweep*.txt | sort -k3,5 -k2,2 \
  | awk '{printf "%-9s %-18s %-4s %-8s %-10s ck %s torch %s x%s\n", $2, $3, $4, $5, $6, $8, $11, $15}'
date -u +"%H:%M:%SZ"
