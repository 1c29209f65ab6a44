#!/usr/bin/env bash
# One device call: layout "blhd" read in place by the Triton kernels (every mask, qkv views, grouped
# k, v, launches past 65535 batch*heads) and everything the kernels' new geometry arguments touch:
# the whole attention GPU test file, the cuDNN and NeuralScript tests of packed sequences and kernel
# names, then the sweep benchmarks/sweeps/attention_blhd_in_place.py (in place against the
# transposing path and torch's SDPA on the same views, one run).
#   bash scripts/gpu_check_blhd.sh     # TEST_TIMEOUT, BENCH_TIMEOUT (seconds), CASES, SKIP_TESTS, SKIP_BENCH, TESTS_K,
#                                      # WORKERS, VARLEN_K (the cuDNN / NeuralScript selection)
set -u
: "${CUDAKIT_CACHE_DIR:=/tmp/ck-blhd}"
. scripts/device_env.sh
if [ -z "${SKIP_TESTS:-}" ]; then   # (-v: the failures named as they come, should the timeout stop the run)
  timeout ${TEST_TIMEOUT:-360} python3 -m pytest -v -n ${WORKERS:-12} -m cuda -p no:cacheprovider -rfEs --tb=short \
    tests/gpu/test_attention_gpu.py ${TESTS_K:+-k "$TESTS_K"} > "$OUT/tests-attention.log" 2>&1
  grep -E "\] (FAILED|ERROR)" "$OUT/tests-attention.log" | head -30
  timeout 150 python3 -m pytest -q -n 8 -m cuda -p no:cacheprovider -rfEs tests/gpu/test_cudnn_gpu.py \
    tests/compat/test_neuralscript.py -k "${VARLEN_K:-cu_seqlens or varlen or generated_matmul or performance_stats or dropout}" \
    > "$OUT/tests-varlen.log" 2>&1
  for f in "$OUT"/tests*.log; do grep -E "^(FAILED|ERROR|SKIPPED)" "$f" | head -20; tail -1 "$f"; done
fi
[ -n "${SKIP_BENCH:-}" ] || timeout ${BENCH_TIMEOUT:-150} python3 benchmarks/sweeps/attention_blhd_in_place.py ${CASES:+--cases "$CASES"} \
  --out "$OUT/blhd.json" > "$OUT/bench.log" 2>&1
[ -f "$OUT/bench.log" ] && { grep -E "^VARIANT" "$OUT/bench.log"; tail -3 "$OUT/bench.log" | grep -v "^VARIANT"; }
date -u +"%H:%M:%SZ"
