#!/usr/bin/env bash
# One device call on batch norm: its GPU tests (kernels, channels-last views through the backend,
# traced plans), then benchmarks/sweeps/batch_norm.py on this tree and, where $OLD_SRC names an
# older tree's src directory, on that one too (its own kernel cache), each against torch and a
# device copy in its run.
#   bash scripts/gpu_check_batch_norm.sh     # TEST_TIMEOUT, SWEEP_TIMEOUT (seconds), OLD_SRC
# Results: $OUT/batch_norm.json (this tree), $OUT/batch_norm-before.json; logs in $OUT.
set -u
: "${CUDAKIT_CACHE_DIR:=/tmp/ck-bn}"
. scripts/device_env.sh
timeout ${TEST_TIMEOUT:-200} python3 -m pytest -q -n 8 -m cuda tests/gpu/test_normalization_gpu.py \
  tests/gpu/test_dispatch_gpu.py -k "batch_norm or traced_plans_equal" -p no:cacheprovider -rfE > "$OUT/tests.log" 2>&1
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20; tail -1 "$OUT/tests.log"
(cd benchmarks/sweeps && timeout ${SWEEP_TIMEOUT:-150} python3 batch_norm.py --tag after --out "$OUT/batch_norm.json") \
  > "$OUT/log-sweep.txt" 2>&1
if [ -n "${OLD_SRC:-}" ]; then
  (cd benchmarks/sweeps && PYTHONPATH="$OLD_SRC:$PYTHONPATH" CUDAKIT_CACHE_DIR=/tmp/ck-bn-old \
     timeout ${SWEEP_TIMEOUT:-150} python3 batch_norm.py --tag before --out "$OUT/batch_norm-before.json") \
    > "$OUT/log-sweep-before.txt" 2>&1
fi
grep -hE "Error|Traceback" "$OUT"/log-sweep*.txt | head -5
grep -h VARIANT "$OUT"/log-sweep*.txt | sort -k3,5 -k2,2 \
  | awk '{printf "%-6s %-18s %-4s %-8s %s ck %s torch %s x%s %s GB/s copy %s out %s err %s %s\n", $2, $3, $4, $5, $6, $8, $11, $15, $16, $19, $21, $23, $24}'
date -u +"%H:%M:%SZ"
