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
python3 - "$OUT" <<'PY'
import json, sys
def rows(name):
    try:
        d = json.load(open(f"{sys.argv[1]}/results-{name}.json"))
    except OSError:
        return {}
    return {(r["op"], "x".join(map(str, r["shape"]))): r for r in d["rows"]}
a, b = rows("train-nopdl"), rows("train-pdl")
print(f"{'case':<52} {'ms no PDL':>10} {'ms PDL':>10} {'x torch no PDL':>15} {'x torch PDL':>12}")
for key in sorted(set(a) | set(b)):
    ra, rb = a.get(key), b.get(key)
    ms = lambda r: f"{r['providers']['cudakit']['median_ms']:.4f}" if r else "-"
    xt = lambda r: f"{r['x_torch']:.3f}" if r and r.get("x_torch") else "-"
    print(f"{' '.join(key):<52} {ms(ra):>10} {ms(rb):>10} {xt(ra):>15} {xt(rb):>12}")
PY
date -u +"%H:%M:%SZ"
