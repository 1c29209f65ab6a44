#!/usr/bin/env bash
# One device call on pooling: the pooling GPU tests (NCHW and channels-last, traced plans, graphs),
# then benchmarks/sweeps/pooling.py on this tree (and pooling_passes.py: the two-pass max backward's
# launches alone) and, where $OLD_SRC names an older tree's src
# directory, on that one too (its own kernel cache), each against torch and a device copy in its run.
#   bash scripts/gpu_check_pooling.sh        # TEST_TIMEOUT, SWEEP_TIMEOUT (seconds), OLD_SRC, PLANES_AB,
#                                            # TWO_PASS_AB (also pooling.py --two-pass --nchw), SKIP_PASSES
# Results: $OUT/pooling.json (this tree), $OUT/pooling-before.json; logs in $OUT.
set -u
: "${CUDAKIT_CACHE_DIR:=/tmp/ck-pool}"
. scripts/device_env.sh
TEST_TIMEOUT=${TEST_TIMEOUT:-200} . scripts/gpu_tests.sh tests/gpu/test_conv_gpu.py tests/gpu/test_dispatch_gpu.py \
  tests/gpu/test_graphs_gpu.py -k "pool or traced_plans_equal"
(cd benchmarks/sweeps && timeout ${SWEEP_TIMEOUT:-200} python3 pooling.py --tag after --out "$OUT/pooling.json") \
  > "$OUT/log-sweep.txt" 2>&1
[ -n "${SKIP_PASSES:-}" ] || (cd benchmarks/sweeps && timeout 120 python3 pooling_passes.py --out "$OUT/pooling-passes.json") \
  > "$OUT/log-passes.txt" 2>&1
if [ -n "${TWO_PASS_AB:-}" ]; then   # the NCHW cases with the overlapping max backward in two launches
  (cd benchmarks/sweeps && timeout ${SWEEP_TIMEOUT:-200} python3 pooling.py --tag two-pass --two-pass --nchw \
     --out "$OUT/pooling-two-pass.json") > "$OUT/log-sweep-two-pass.txt" 2>&1
fi
for p in ${PLANES_AB:-}; do   # e.g. PLANES_AB="1 4": the NCHW cases with every kernel at that many planes a thread
  (cd benchmarks/sweeps && timeout ${SWEEP_TIMEOUT:-200} python3 pooling.py --tag "p$p" --planes all=$p --nchw \
     --out "$OUT/pooling-p$p.json") > "$OUT/log-sweep-p$p.txt" 2>&1
done
if [ -n "${OLD_SRC:-}" ]; then
  (cd benchmarks/sweeps && PYTHONPATH="$OLD_SRC:$PYTHONPATH" CUDAKIT_CACHE_DIR=/tmp/ck-pool-old \
     timeout ${SWEEP_TIMEOUT:-200} python3 pooling.py --tag before --out "$OUT/pooling-before.json") \
    > "$OUT/log-sweep-before.txt" 2>&1
fi
grep -hE "Error|Traceback" "$OUT"/log-sweep*.txt "$OUT/log-passes.txt" 2>/dev/null | head -5
grep VARIANT "$OUT/log-passes.txt" 2>/dev/null | cut -c9-
grep -h VARIANT "$OUT"/log-sweep*.txt | sort -k3,7 -k2,2 \
  | awk '{printf "%-6s %-8s %-15s %-4s %-8s %s ck %s torch %s x%s %s GB/s copy %s out %s\n", $2, $3, $4, $5, $6, $7, $9, $12, $16, $17, $20, $22}'
date -u +"%H:%M:%SZ"
