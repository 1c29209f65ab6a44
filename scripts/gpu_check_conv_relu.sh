#!/usr/bin/env bash
# One device call: conv2d's activation="relu" (cuDNN's fused graph, its convolution then relu, the
# own kernels' fused store), the path reports (paths.last_paths, cudakit info's paths kept) and
# float64 / grouped-query attention: the GPU tests of conv, cuDNN, dispatch plans and graphs (whole
# files) and attention's float64, grouped and varlen ones, then `cudakit bench` of the conv2d_relu rows
# beside the plain conv2d rows against torch, then `cudakit info` in a new process.
#   bash scripts/gpu_check_conv_relu.sh     # TEST_TIMEOUT, BENCH_TIMEOUT (seconds), DTYPES, SKIP_TESTS
set -u
: "${CUDAKIT_CACHE_DIR:=/tmp/ck-relu}"
. scripts/device_env.sh
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout ${TEST_TIMEOUT:-330} python3 -m pytest -q -n 8 -m cuda -p no:cacheprovider -rfEs \
    tests/gpu/test_conv_gpu.py tests/gpu/test_cudnn_gpu.py tests/gpu/test_dispatch_gpu.py tests/gpu/test_graphs_gpu.py \
    > "$OUT/tests.log" 2>&1
  timeout ${TEST_TIMEOUT:-200} python3 -m pytest -q -n 8 -m cuda -p no:cacheprovider -rfEs \
    tests/gpu/test_attention_gpu.py -k "float64 or grouped or varlen or last_paths" > "$OUT/tests-attention.log" 2>&1
  for f in "$OUT"/tests*.log; do grep -E "^(FAILED|ERROR|SKIPPED)" "$f" | head -20; tail -1 "$f"; done
fi
timeout ${BENCH_TIMEOUT:-120} python3 -m cudakit bench --out "$OUT/bench" \
  --ops conv2d,conv2d_backward,conv2d_nhwc,conv2d_nhwc_backward,conv2d_relu,conv2d_relu_backward,conv2d_relu_nhwc,conv2d_relu_nhwc_backward \
  --dtype ${DTYPES:-bfloat16} > "$OUT/bench.log" 2>&1
grep -E "^conv2d" "$OUT/bench.log"
python3 -m cudakit info 2>&1 | grep -E "^path" | head -20
date -u +"%H:%M:%SZ"
