#!/usr/bin/env bash
# One device call on grouped and depthwise conv2d with cuDNN among their candidate paths: the GPU
# tests of grouped convolutions (cuDNN forced, and cudakit's own kernels), then the sweep
# benchmarks/sweeps/conv_grouped_paths.py (public calls, own kernels and torch in one timing), then
# `cudakit bench` of the grouped and depthwise cases. A short table last.
#   bash scripts/gpu_check_conv_grouped.sh     # TEST_TIMEOUT, SWEEP_TIMEOUT, BENCH_TIMEOUT (seconds)
# Results: $OUT/grouped.json (the sweep), $OUT/results-grouped.json (the bench); logs in $OUT.
set -u
: "${CUDAKIT_CACHE_DIR:=/tmp/ck-grouped}"
. scripts/device_env.sh
timeout ${TEST_TIMEOUT:-200} python3 -m pytest -q -n 8 -m cuda tests/gpu/test_cudnn_gpu.py tests/gpu/test_conv_gpu.py tests/gpu/test_reduction_gpu.py \
  -k "${TEST_K:-grouped or group or depthwise or conv2d_cudnn or conv2d_plans or channel_sum or conv2d_channels_last}" -p no:cacheprovider -rfE > "$OUT/tests.log" 2>&1
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20; tail -1 "$OUT/tests.log"
(cd benchmarks/sweeps && timeout ${SWEEP_TIMEOUT:-240} python3 conv_grouped_paths.py --out "$OUT/grouped.json") \
  > "$OUT/log-sweep.txt" 2>&1
grep VARIANT "$OUT/log-sweep.txt"; grep -E "Error|Traceback" "$OUT/log-sweep.txt" | head -5
BENCH_TIMEOUT=${BENCH_TIMEOUT:-120} TAIL=12 bash scripts/bench_sets.sh \
  "grouped=conv2d_grouped,conv2d_grouped_backward,conv2d_depthwise,conv2d_depthwise_backward=bfloat16,float32" 2>&1 | grep -v WARNING
date -u +"%H:%M:%SZ"
