#!/usr/bin/env bash
# One device call on attention with a bias: the attention GPU tests with a bias (strided-key views
# among them, which the kernels read by element, where contiguous keys take BIAS_K1), then the float32
# bias sweep (benchmarks/sweeps/attention_f32_bias.py) and the kernels of the small host-time calls
# (attention_host_kernels.py).
#   bash scripts/gpu_check_bias.sh      # TEST_TIMEOUT, SWEEP_TIMEOUT (seconds)
# Results: $OUT/f32-bias.json, $OUT/kernels.json; logs $OUT/tests.log, $OUT/log-sweeps.txt.
set -u
: "${CUDAKIT_CACHE_DIR:=/tmp/ck-bias}"
. scripts/device_env.sh
timeout ${TEST_TIMEOUT:-150} python3 -m pytest -q -n 14 -m cuda tests/gpu/test_attention_gpu.py -k bias \
  -p no:cacheprovider -rfE > "$OUT/tests.log" 2>&1
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20; tail -1 "$OUT/tests.log"
(cd benchmarks/sweeps && timeout ${SWEEP_TIMEOUT:-200} python3 attention_f32_bias.py --out "$OUT/f32-bias.json" \
   && timeout 60 python3 attention_host_kernels.py --out "$OUT/kernels.json") > "$OUT/log-sweeps.txt" 2>&1
grep -E "^VARIANT|^    " "$OUT/log-sweeps.txt"; grep -E "Error|Traceback" "$OUT/log-sweeps.txt" | head -5
date -u +"%H:%M:%SZ"
