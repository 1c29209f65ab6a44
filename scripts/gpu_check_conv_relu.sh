#!/usr/bin/env bash
# One device call: conv2d's activation="relu" (cuDNN's fused graph, its convolution then relu, the
# own kernels' fused store), the path reports (paths.last_paths, cudakit info's paths kept) and
# varlen attention past 65535 sequence-heads: their GPU tests, then `cudakit bench` of the conv2d_relu
# rows beside the plain conv2d rows against torch, then `cudakit info` in a new process.
#   bash scripts/gpu_check_conv_relu.sh     # TEST_TIMEOUT, BENCH_TIMEOUT (seconds), DTYPES
set -u
: "${CUDAKIT_CACHE_DIR:=/tmp/ck-relu}"
. scripts/device_env.sh
timeout ${TEST_TIMEOUT:-300} python3 -m pytest -q -n 8 -m cuda -p no:cacheprovider -rfEs \
  tests/gpu/test_conv_gpu.py tests/gpu/test_cudnn_gpu.py tests/gpu/test_attention_gpu.py \
  -k "relu or last_paths or activation or paths_choose or varlen" > "$OUT/tests.log" 2>&1
grep -E "^(FAILED|ERROR|SKIPPED)" "$OUT/tests.log" | head -20; tail -1 "$OUT/tests.log"
timeout ${BENCH_TIMEOUT:-200} python3 -m cudakit bench --out "$OUT/bench" \
  --ops conv2d,conv2d_backward,conv2d_nhwc,conv2d_nhwc_backward,conv2d_relu,conv2d_relu_backward,conv2d_relu_nhwc,conv2d_relu_nhwc_backward \
  --dtype ${DTYPES:-bfloat16,float16,float32} > "$OUT/bench.log" 2>&1
grep -E "^conv2d" "$OUT/bench.log"
python3 -m cudakit info 2>&1 | grep -E "^path" | head -20
date -u +"%H:%M:%SZ"
