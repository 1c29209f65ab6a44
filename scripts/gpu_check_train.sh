#!/usr/bin/env bash
# One device call on what the training examples run: the GPU tests of the elementwise ops, linalg,
# normalization, convolutions, optimizers, traced plans, graphs and the examples, then `cudakit bench`
# of every training step of the train family (GPT and CNN, NCHW and channels-last, eager and against
# torch's CUDA graph) against torch in one run, then scripts/step_profile.py of the CNN's
# channels-last float32 step and of the GPT's.
#   bash scripts/gpu_check_train.sh   # TEST_TIMEOUT, BENCH_TIMEOUT (seconds), OPS, DTYPES, SKIP_TESTS
# Results: $OUT/results-train.json; logs in $OUT.
set -u
: "${CUDAKIT_CACHE_DIR:=/tmp/ck-train}"
. scripts/device_env.sh
. scripts/gpu_tests.sh tests/gpu/test_elementwise_gpu.py tests/gpu/test_linalg_gpu.py \
  tests/gpu/test_normalization_gpu.py tests/gpu/test_conv_gpu.py tests/gpu/test_optim_gpu.py tests/gpu/test_dispatch_gpu.py \
  tests/gpu/test_graphs_gpu.py tests/gpu/test_examples_gpu.py
OPS=${OPS:-train_gpt,train_gpt_graph,train_gpt_graph_vs_torch_graph,train_cnn,train_cnn_graph_vs_torch_graph,train_cnn_nhwc,train_cnn_nhwc_graph_vs_torch_graph}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-360} TAIL=${TAIL:-24} bash scripts/bench_sets.sh "train=$OPS=${DTYPES:-bfloat16,float32}"
grep -hE "Error|Traceback" "$OUT/log-bench.txt" | head -5
timeout 120 python3 scripts/step_profile.py cnn-nhwc float32 > "$OUT/profile-cnn-nhwc-f32.txt" 2>&1
timeout 120 python3 scripts/step_profile.py gpt-issue bfloat16 > "$OUT/profile-gpt.txt" 2>&1
grep -h "total" "$OUT"/profile-*.txt
date -u +"%H:%M:%SZ"
