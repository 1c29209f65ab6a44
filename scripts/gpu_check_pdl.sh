#!/usr/bin/env bash
# One device call on programmatic dependent launch of cudakit's own CUDA C++ kernels (each waits for
# the previous kernel first thing, CK_PDL_WAIT; marked for PDL launches by runtime/pdl.py): its GPU
# tests, then whole training steps (cudakit bench's train family, bfloat16) with CUDAKIT_PDL=0 and at
# the default, each against torch in its own run, and a table of the two side by side.
#   bash scripts/gpu_check_pdl.sh            # OPS: the train cases (default below); TEST_K: pytest -k
# Results: $OUT/results-train-nopdl.json, $OUT/results-train-pdl.json; logs $OUT/tests.log, log-bench.txt.
set -u
: "${CUDAKIT_CACHE_DIR:=/tmp/ck-pdl}"
. scripts/device_env.sh
timeout ${TEST_TIMEOUT:-300} python3 -m pytest -q -n 8 -m cuda tests/gpu/test_runtime_gpu.py tests/gpu/test_examples_gpu.py \
  tests/gpu/test_graphs_gpu.py -k "${TEST_K:-pdl or graph or example}" -p no:cacheprovider -rfE > "$OUT/tests.log" 2>&1
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20; tail -1 "$OUT/tests.log"
OPS=${OPS:-train_gpt,train_gpt_graph,train_gpt_graph_vs_torch_graph,train_cnn,train_cnn_graph,train_cnn_graph_vs_torch_graph}
CUDAKIT_PDL=0 BENCH_TIMEOUT=${BENCH_TIMEOUT:-240} TAIL=0 bash scripts/bench_sets.sh "train-nopdl=$OPS=bfloat16"
BENCH_TIMEOUT=${BENCH_TIMEOUT:-240} TAIL=0 bash scripts/bench_sets.sh "train-pdl=$OPS=bfloat16"
python3 scripts/side_by_side.py "$OUT" train-nopdl train-pdl ms
date -u +"%H:%M:%SZ"
