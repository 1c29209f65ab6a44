#!/usr/bin/env bash
# One device call on batch norm's fused epilogue (residual=, activation="relu", and the backward's
# relu mask) and sum/mean_backward's like=: the GPU tests of batch norm, reductions, traced plans,
# graphs and the examples (whose CNN uses both), then benchmarks/sweeps/batch_norm.py --fused and
# the plain sweep, each against torch and a device copy in its run, then `cudakit bench` of the CNN
# training step (NCHW and channels-last) against torch in one run.
#   bash scripts/gpu_check_bn_fused.sh     # TEST_TIMEOUT, SWEEP_TIMEOUT, BENCH_TIMEOUT (seconds), OPS, DTYPES
# Results: $OUT/batch_norm-fused.json, $OUT/batch_norm.json, $OUT/results-train-cl.json; logs in $OUT.
set -u
: "${CUDAKIT_CACHE_DIR:=/tmp/ck-bnf}"
. scripts/device_env.sh
timeout ${TEST_TIMEOUT:-240} python3 -m pytest -q -n 8 -m cuda tests/gpu/test_normalization_gpu.py \
  tests/gpu/test_reduction_gpu.py tests/gpu/test_dispatch_gpu.py tests/gpu/test_graphs_gpu.py tests/gpu/test_examples_gpu.py \
  -p no:cacheprovider -rfE > "$OUT/tests.log" 2>&1
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20; tail -1 "$OUT/tests.log"
(cd benchmarks/sweeps && timeout ${SWEEP_TIMEOUT:-150} python3 batch_norm.py --fused --tag fused \
   --out "$OUT/batch_norm-fused.json") > "$OUT/log-sweep-fused.txt" 2>&1
(cd benchmarks/sweeps && timeout ${SWEEP_TIMEOUT:-150} python3 batch_norm.py --tag after --out "$OUT/batch_norm.json") \
  > "$OUT/log-sweep.txt" 2>&1
grep -hE "Error|Traceback" "$OUT"/log-sweep*.txt | head -5
grep -h VARIANT "$OUT"/log-sweep*.txt | sort -k3,5 -k2,2 \
  | awk '{printf "%-6s %-18s %-4s %-8s %-8s ck %s torch %s x%s %s GB/s copy %s\n", $2, $3, $4, $5, $6, $8, $11, $15, $16, $19}'
OPS=${OPS:-train_cnn,train_cnn_nhwc,train_cnn_graph_vs_torch_graph,train_cnn_nhwc_graph_vs_torch_graph}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-240} TAIL=${TAIL:-20} bash scripts/bench_sets.sh "train-cl=$OPS=${DTYPES:-bfloat16,float32}"
grep -hE "Error|Traceback" "$OUT/log-bench.txt" | head -5
date -u +"%H:%M:%SZ"
