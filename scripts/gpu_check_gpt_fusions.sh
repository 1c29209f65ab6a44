#!/usr/bin/env bash
# One device call on the transformer-block fusions (layernorm/rmsnorm_backward's residual_grad,
# linear_backward's gelu_pre through cuBLASLt's DGELU, linear's residual as cuBLASLt's C operand,
# ck_norm_colsum's parallel column sums): the GPU tests of normalization, linalg, traced plans, graphs and the examples, then
# benchmarks/sweeps/gpt_backward_fusions.py (fused vs unfused vs torch in one run), the per-kernel
# profile of the GPT step (scripts/step_profile.py) and `cudakit bench` of the GPT training steps
# against torch in one run.
#   bash scripts/gpu_check_gpt_fusions.sh   # TEST_TIMEOUT, SWEEP_TIMEOUT, BENCH_TIMEOUT (seconds), OPS, DTYPES, SKIP_TESTS
# Results: $OUT/gpt-fusions.json, $OUT/results-train-gpt.json; logs in $OUT.
set -u
: "${CUDAKIT_CACHE_DIR:=/tmp/ck-gptf}"
. scripts/device_env.sh
. scripts/gpu_tests.sh tests/gpu/test_normalization_gpu.py tests/gpu/test_linalg_gpu.py tests/gpu/test_dispatch_gpu.py \
  tests/gpu/test_graphs_gpu.py tests/gpu/test_examples_gpu.py
(cd benchmarks/sweeps && timeout ${SWEEP_TIMEOUT:-150} python3 gpt_backward_fusions.py --out "$OUT/gpt-fusions.json") \
  > "$OUT/log-sweep.txt" 2>&1
grep -hE "Error|Traceback" "$OUT/log-sweep.txt" | head -5
grep -h VARIANT "$OUT/log-sweep.txt" | cut -c9-
timeout 120 python3 scripts/step_profile.py gpt-issue bfloat16 > "$OUT/profile.txt" 2>&1
grep -E "STEP-PROFILE cudakit" "$OUT/profile.txt" | head -24
OPS=${OPS:-train_gpt,train_gpt_graph_vs_torch_graph}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-240} TAIL=${TAIL:-12} bash scripts/bench_sets.sh "train-gpt=$OPS=${DTYPES:-bfloat16}"
grep -hE "Error|Traceback" "$OUT/log-bench.txt" | head -5
date -u +"%H:%M:%SZ"
