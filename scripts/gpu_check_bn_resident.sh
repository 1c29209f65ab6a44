#!/usr/bin/env bash
# One device call on batch norm's single-read training forward (ck_bn_resident: x kept in shared
# memory, two grid barriers): the GPU tests of batch norm, traced plans, graphs and the examples
# (the CNN uses it), then benchmarks/sweeps/batch_norm.py --resident-ab (the forward also as the
# three launches, interleaved) and --fused, each against torch and a device copy in its run.
#   bash scripts/gpu_check_bn_resident.sh     # TEST_TIMEOUT, SWEEP_TIMEOUT (seconds), SKIP_TESTS, SKIP_FUSED,
#                                             # CASES (NxCxHxW,... of the sweep's)
# Results: $OUT/batch_norm.json, $OUT/batch_norm-fused.json; logs in $OUT.
set -u
: "${CUDAKIT_CACHE_DIR:=/tmp/ck-bnr}"
. scripts/device_env.sh
. scripts/gpu_tests.sh tests/gpu/test_normalization_gpu.py tests/gpu/test_dispatch_gpu.py tests/gpu/test_graphs_gpu.py \
  tests/gpu/test_examples_gpu.py
(cd benchmarks/sweeps && timeout ${SWEEP_TIMEOUT:-200} python3 batch_norm.py --resident-ab --tag resident ${CASES:+--cases $CASES} \
   --out "$OUT/batch_norm.json") > "$OUT/log-sweep.txt" 2>&1
[ -n "${SKIP_FUSED:-}" ] || (cd benchmarks/sweeps && timeout ${SWEEP_TIMEOUT:-200} python3 batch_norm.py --fused --tag resident ${CASES:+--cases $CASES} \
   --out "$OUT/batch_norm-fused.json") > "$OUT/log-sweep-fused.txt" 2>&1
grep -hE "Error|Traceback" "$OUT"/log-sweep*.txt | head -5
grep -h VARIANT "$OUT"/log-sweep*.txt | sort -k3,5 -k2,2 \
  | awk '{printf "%-6s %-18s %-4s %-8s %-11s ck %s torch %s x%s %s GB/s copy %s\n", $2, $3, $4, $5, $6, $8, $11, $15, $16, $19}'
date -u +"%H:%M:%SZ"
