#!/usr/bin/env bash
# One device call on reductions: the reduction, dispatch and layout GPU tests and the convolution
# ones that sum a bias gradient (cuDNN's path included), then the sweep
# benchmarks/sweeps/reduction_axes_copy.py (sums over axes that are not adjacent against torch).
#   bash scripts/gpu_check_reduction.sh      # TEST_TIMEOUT, SWEEP_TIMEOUT (seconds)
# Results: $OUT/reduction.json (the sweep); logs $OUT/tests.log, $OUT/log-sweep.txt.
set -u
: "${CUDAKIT_CACHE_DIR:=/tmp/ck-reduction}"
. scripts/device_env.sh
timeout ${TEST_TIMEOUT:-200} python3 -m pytest -q -n 12 -m cuda tests/gpu/test_reduction_gpu.py tests/gpu/test_dispatch_gpu.py \
  tests/gpu/test_layout_gpu.py tests/gpu/test_conv_gpu.py tests/gpu/test_cudnn_gpu.py -k "not attention" \
  -p no:cacheprovider -rfE > "$OUT/tests.log" 2>&1
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20; tail -1 "$OUT/tests.log"
(cd benchmarks/sweeps && timeout ${SWEEP_TIMEOUT:-90} python3 reduction_axes_copy.py --out "$OUT/reduction.json") \
  > "$OUT/log-sweep.txt" 2>&1
grep VARIANT "$OUT/log-sweep.txt"; grep -E "Error|Traceback" "$OUT/log-sweep.txt" | head -5
date -u +"%H:%M:%SZ"
