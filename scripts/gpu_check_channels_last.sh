#!/usr/bin/env bash
# One device call on channels-last networks: the GPU tests of what a channels-last CNN runs
# (elementwise results in their inputs' layout, batch norm, pooling and convolutions on
# channels-last views, traced plans, the examples), then `cudakit bench` of the CNN training step,
# NCHW and channels-last (train_cnn_nhwc*), each against torch in one run.
#   bash scripts/gpu_check_channels_last.sh     # TEST_TIMEOUT, BENCH_TIMEOUT (seconds), OPS, DTYPES
# Results: $OUT/results-train-cl.json; logs $OUT/tests.log, $OUT/log-bench.txt.
set -u
: "${CUDAKIT_CACHE_DIR:=/tmp/ck-cl}"
. scripts/device_env.sh
timeout ${TEST_TIMEOUT:-240} python3 -m pytest -q -n 8 -m cuda tests/gpu/test_elementwise_gpu.py \
  tests/gpu/test_normalization_gpu.py tests/gpu/test_dispatch_gpu.py tests/gpu/test_layout_gpu.py \
  tests/gpu/test_graphs_gpu.py tests/gpu/test_examples_gpu.py tests/gpu/test_conv_gpu.py -k "not attention" \
  -p no:cacheprovider -rfE > "$OUT/tests.log" 2>&1
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20; tail -1 "$OUT/tests.log"
OPS=${OPS:-train_cnn,train_cnn_nhwc,train_cnn_graph_vs_torch_graph,train_cnn_nhwc_graph_vs_torch_graph}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-300} TAIL=${TAIL:-20} bash scripts/bench_sets.sh "train-cl=$OPS=${DTYPES:-bfloat16,float32}"
grep -hE "Error|Traceback" "$OUT/log-bench.txt" | head -5
date -u +"%H:%M:%SZ"
