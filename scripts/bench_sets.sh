#!/usr/bin/env bash
# Several `cudakit bench` runs in one device call, each its own ops and dtypes and its own results
# file: $OUT/results-<name>.json (after scripts/gpu_check.sh's environment: PYTHONPATH, the carried
# cuDNN frontend). Arguments: name=ops=dtypes triples, e.g.
#   bash scripts/bench_sets.sh "attention=attention,attention_backward=bfloat16,float16" "r50=conv2d_r50=bfloat16"
# A short table of each run is printed (its last lines); BENCH_TIMEOUT bounds each run.
set -u
OUT=${OUT:-/tmp/cudakit-out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src:$PWD/tests" PYTHONUNBUFFERED=1 CUDAKIT_RESULTS=/tmp/cudakit-extra
export CUDAKIT_CACHE_DIR=${CUDAKIT_CACHE_DIR:-/tmp/cudakit-cache}
. scripts/cudnn_env.sh
for set in "$@"; do
  IFS='=' read -r name ops dtypes <<< "$set"
  timeout ${BENCH_TIMEOUT:-300} python3 -m cudakit bench --out "/tmp/bench-$name" --ops "$ops" --dtype "$dtypes" \
    2>>"$OUT/log-bench.txt" | tee -a "$OUT/log-bench.txt" | tail -${TAIL:-12} | sed "s/^/[$name] /"
  cp "/tmp/bench-$name/results.json" "$OUT/results-$name.json" 2>/dev/null
done
