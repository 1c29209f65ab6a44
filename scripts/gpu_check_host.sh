#!/usr/bin/env bash
# One device call on host time per call: every `_host` row of `cudakit bench` (bench/cases/host_time.py)
# twice, first with CUDAKIT_PDL=0 (cudakit's kernels launched without the programmatic-dependent-launch
# attribute) then at the default, each row against torch in its own run, a table of the two side by side;
# then the attention sweeps of host time with dropout (--parts: where the forward's plan spends it) and
# with a bias, both on cuDNN's graphs.
#   bash scripts/gpu_check_host.sh          # BENCH_TIMEOUT, SWEEP_TIMEOUT (seconds); SWEEPS=0 skips the sweeps
# Results: $OUT/results-host-nopdl.json, $OUT/results-host-pdl.json, $OUT/dropout-host.json,
# $OUT/bias-host.json; logs $OUT/log-bench.txt, $OUT/log-sweeps.txt.
set -u
: "${CUDAKIT_CACHE_DIR:=/tmp/ck-host}"
. scripts/device_env.sh
OPS=$(python3 - <<'PY'
from cudakit.bench.cases import host_time
print(",".join(sorted(f"{n}_host" for n in host_time._SPEC)))
PY
)
CUDAKIT_PDL=0 BENCH_TIMEOUT=${BENCH_TIMEOUT:-150} TAIL=0 bash scripts/bench_sets.sh "host-nopdl=$OPS=float32"
BENCH_TIMEOUT=${BENCH_TIMEOUT:-150} TAIL=0 bash scripts/bench_sets.sh "host-pdl=$OPS=float32"
if [ "${SWEEPS:-1}" != 0 ]; then
  (cd benchmarks/sweeps && timeout ${SWEEP_TIMEOUT:-90} python3 attention_dropout_host.py --parts \
     --out "$OUT/dropout-host.json" && timeout ${SWEEP_TIMEOUT:-90} python3 attention_bias_host.py \
     --out "$OUT/bias-host.json") > "$OUT/log-sweeps.txt" 2>&1
  grep VARIANT "$OUT/log-sweeps.txt"; grep -E "Error|Traceback" "$OUT/log-sweeps.txt" | head -5
fi
python3 scripts/side_by_side.py "$OUT" host-nopdl host-pdl us
date -u +"%H:%M:%SZ"
