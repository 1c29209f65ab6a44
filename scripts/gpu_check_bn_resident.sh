#!/usr/bin/env bash
# One device call on batch norm's single-read training forward and backward (ck_bn_resident,
# ck_bn_bwd_resident: x, and dy, kept in shared memory, two grid barriers): the GPU tests of
# normalization, softmax and cross-entropy (which share the pack helpers), reductions, traced
# plans, graphs and the examples (the CNN uses them), then benchmarks/sweeps/batch_norm.py
# --resident-ab, plain and --fused (each pass also as the three launches, interleaved), against
# torch and a device copy in the run, then `cudakit bench` of the CNN training steps (NCHW and
# channels-last) against torch.
#   bash scripts/gpu_check_bn_resident.sh   # TEST_TIMEOUT, SWEEP_TIMEOUT, BENCH_TIMEOUT (seconds),
#                                           # SKIP_TESTS, SKIP_FUSED, SKIP_BENCH, CASES (NxCxHxW,...)
# Results: $OUT/batch_norm.json, $OUT/batch_norm-fused.json, $OUT/results-train-cnn.json; logs in $OUT.
set -u
: "${CUDAKIT_CACHE_DIR:=/tmp/ck-bnr}"
. scripts/device_env.sh
. scripts/gpu_tests.sh tests/gpu/test_normalization_gpu.py tests/gpu/test_softmax_gpu.py tests/gpu/test_reduction_gpu.py \
  tests/gpu/test_dispatch_gpu.py tests/gpu/test_graphs_gpu.py tests/gpu/test_examples_gpu.py
for kind in plain fused; do
  [ "$kind" = fused ] && [ -n "${SKIP_FUSED:-}" ] && continue
  flag=$([ "$kind" = fused ] && echo --fused)
  (cd benchmarks/sweeps && timeout ${SWEEP_TIMEOUT:-250} python3 batch_norm.py --resident-ab $flag --tag resident \
     ${CASES:+--cases $CASES} --out "$OUT/batch_norm${flag:+-fused}.json") > "$OUT/log-sweep-$kind.txt" 2>&1
done
grep -hE "Error|Traceback" "$OUT"/log-sweep*.txt | head -5
grep -h VARIANT "$OUT"/log-sweep*.txt | sort -k3,5 -k2,2 \
  | awk '{printf "%-18s %-4s %-8s %-16s ck %s torch %s x%s\n", $3, $4, $5, $6, $8, $11, $15}'
[ -n "${SKIP_BENCH:-}" ] || BENCH_TIMEOUT=${BENCH_TIMEOUT:-240} TAIL=${TAIL:-16} bash scripts/bench_sets.sh \
  "train-cnn=train_cnn,train_cnn_nhwc,train_cnn_graph_vs_torch_graph,train_cnn_nhwc_graph_vs_torch_graph=bfloat16,float32"
date -u +"%H:%M:%SZ"
