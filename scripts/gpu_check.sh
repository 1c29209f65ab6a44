#!/usr/bin/env bash
# One device call: GPU test suite + benchmarks. Results under $OUT; a short table printed last.
#   bash scripts/gpu_check.sh [extra args for `cudakit bench`]
set -u
OUT=${OUT:-/tmp/cudakit-out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src:$PWD/tests" PYTHONUNBUFFERED=1 CUDAKIT_RESULTS=/tmp/cudakit-extra  # at most 8 files come back: extras go to the log
export CUDAKIT_CACHE_DIR=${CUDAKIT_CACHE_DIR:-/tmp/cudakit-cache}
. scripts/cudnn_env.sh   # the carried cudnn frontend, where there is one
LOG="$OUT/log.txt"
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id,uuid --format=csv
  python3 -m cudakit info
} 2>&1 | tee "$LOG"
python3 - <<'PY' 2>&1 | tee -a "$LOG" > "$OUT/sass.txt"
# SASS of the elementwise kernels: are the loads 16 bytes wide?
import glob, shutil, subprocess, tempfile, cudakit.kernels.elementwise as ew
from cudakit.runtime.compiler import compile_to_cubin
b, m = compile_to_cubin(ew.SOURCE, name_expressions=[ew._expr("contig", "add", "float32", 4), ew._expr("contig", "add", "bfloat16", 8), ew._expr("contig", "relu", "float32", 4)], arch="sm_90")
p = tempfile.mktemp(suffix=".cubin"); open(p, "wb").write(b)
tool = shutil.which("cuobjdump") or (glob.glob("/usr/local/cuda*/bin/cuobjdump") + ["cuobjdump"])[0]
s = subprocess.run([tool, "-sass", p], capture_output=True, text=True).stdout
print("\n".join(l for l in s.splitlines() if "Function" in l or "LDG" in l or "STG" in l))
PY
# TESTS: test paths to run (default: the whole GPU suite; TESTS=none skips them); VARIANTS:
# benchmarks/sweeps/<name>.py sweeps to run, with VARIANT_ARGS as their arguments (ew_variants: case labels,
# e.g. "div_scalar gelu_erf_backward"). On an H100 (2026-11-23) the suite took 317 s without
# test_attention_gpu.py and that file 141 s (Triton compiles), more than 250 s since head_dim is a
# compile-time constant of the attention kernels (one compile per head_dim): run it on its own,
# TESTS=tests/gpu/test_attention_gpu.py, and the rest with TESTS="tests/gpu
# --ignore=tests/gpu/test_attention_gpu.py". With the matmul, attention and conv
# cases the benchmark is longer than the 240 s it took before: tests and benchmark no longer fit one
# 600 s device call. Run BENCH=none ... for the tests and TESTS=none ... for the benchmark.
# TEST_K: a pytest -k expression (its own variable: TESTS is split on spaces, quotes and all)
[ "${TESTS:-}" = none ] || timeout ${TEST_TIMEOUT:-540} python3 -m pytest -q -rs -m "cuda or multi_gpu" ${TESTS:-tests} ${TEST_K:+-k "$TEST_K"} -s -p no:cacheprovider 2>&1 | tee -a "$LOG" | tail -25
# CPU tests that need CuPy (skipped in CI, which has none): CuPy's object layout as the native path reads it
timeout 60 python3 -m pytest -q tests/test_cupy_layout.py -p no:cacheprovider 2>&1 | tee -a "$LOG" | tail -1 | sed 's/^/CUPY-LAYOUT /'
# SELFTEST=1 (or =sanitize): `cudakit selftest` (every kernel family, dtype and variant against the CPU
# backend), or `cudakit selftest --quick --sanitize` under compute-sanitizer's four tools
if [ "${SELFTEST:-0}" = 1 ]; then timeout ${SELFTEST_TIMEOUT:-500} python3 -m cudakit selftest 2>&1 | tee -a "$LOG" | tail -30 | sed 's/^/SELFTEST /'; fi
if [ "${SELFTEST:-0}" = sanitize ]; then timeout ${SELFTEST_TIMEOUT:-570} python3 -m cudakit selftest --quick --sanitize 2>&1 | tee -a "$LOG" | tail -40 | sed 's/^/SANITIZE /'; fi
# TUNE=1: `cudakit tune` first (the elementwise kernels' shapes measured on this GPU, kept per GPU UUID)
if [ "${TUNE:-0}" = 1 ]; then timeout ${TUNE_TIMEOUT:-200} python3 -m cudakit tune 2>&1 | tee -a "$LOG" | sed 's/^/TUNE /' | tail -50; fi
# the plots stay on the device (at most 8 files come back): results.json and the speedup plot return
[ "${BENCH:-}" = none ] || timeout ${BENCH_TIMEOUT:-420} python3 -m cudakit bench --out /tmp/cudakit-bench "$@" 2>>"$LOG" | tee -a "$LOG" | tail -45
cp /tmp/cudakit-bench/results.json /tmp/cudakit-bench/speedup_vs_torch.png "$OUT/" 2>/dev/null
for v in ${VARIANTS:-}; do timeout ${VARIANT_TIMEOUT:-120} python3 "benchmarks/sweeps/$v.py" ${VARIANT_ARGS:-} 2>&1 | tee -a "$LOG" | grep VARIANT; done
timeout ${PROBE_TIMEOUT:-90} python3 scripts/overhead_probe.py 2>&1 | tee -a "$LOG" | grep OVERHEAD
# PLAN_PROBE=1: every cuDNN plan of a few signatures timed batched and one call behind an L2 flush
# (its own cache directory: it builds graphs under signatures it then restricts, whose plan choices
# would otherwise be kept on disk for later benchmarks of the same signatures)
if [ "${PLAN_PROBE:-0}" = 1 ]; then CUDAKIT_CACHE_DIR=$(mktemp -d) timeout ${PLAN_PROBE_TIMEOUT:-120} python3 scripts/cudnn_plan_probe.py ${PLAN_PROBE_ARGS:-} 2>&1 | tee -a "$LOG" | grep -E "PLAN-PROBE|Error"; fi
# which path (cuDNN or cudakit's kernels) each benchmarked signature chose, and their host time per call
timeout ${CUDNN_PROBE_TIMEOUT:-90} python3 scripts/cudnn_probe.py 2>&1 | tee -a "$LOG" | grep -E "CUDNN-PROBE|Error"
# TRITON_SLIM: a carried tarball of another Triton (the image has 3.6; the extra pins >= 3.8), built
# by scripts/triton_slim.sh into .carry/ (git-ignored: `echo /.carry/ >> .git/info/exclude`; pass
# carry=[".carry"] to the device call): its GPU tests and launch-cost row run with it first on the
# path (results-<tarball name>.json)
if [ -n "${TRITON_SLIM:-}" ] && [ -f "$TRITON_SLIM" ]; then
  T=/tmp/triton-alt; rm -rf $T; mkdir -p $T && tar -xJf "$TRITON_SLIM" -C $T
  ( export PYTHONPATH="$T:$PYTHONPATH" CUDAKIT_CACHE_DIR=/tmp/cudakit-cache-alt
    python3 -c "import triton, sys; print('ALT triton', triton.__version__, triton.__file__)" 2>&1 | tee -a "$LOG"
    timeout ${TRITON_TEST_TIMEOUT:-150} python3 -m pytest -q -rs -m cuda tests/gpu/test_triton_gpu.py -s -p no:cacheprovider 2>&1 | tee -a "$LOG" | grep -E "TRITON-CACHE|passed|failed|rror" | tail -12 | sed 's/^/ALT /'
    timeout 90 python3 -m cudakit bench --out /tmp/cudakit-bench-alt --ops triton_launch_overhead 2>>"$LOG" | tee -a "$LOG" | tail -8 | sed 's/^/ALT /'
    cp /tmp/cudakit-bench-alt/results.json "$OUT/results-$(basename "$TRITON_SLIM" .tar.xz).json" 2>/dev/null )
fi
# VARLEN=1: attention_varlen against torch's fastest way (scripts/varlen_bench.py, issue 27's varlen line)
if [ "${VARLEN:-0}" = 1 ]; then
  timeout ${VARLEN_TIMEOUT:-240} python3 scripts/varlen_bench.py --out "$OUT/varlen.json" 2>&1 | tee -a "$LOG" | grep -E "VARLEN|Error"
fi
# HOST_BREAKDOWN=1 (or row names): where each host_time row's microseconds go (scripts/host_breakdown.py)
if [ -n "${HOST_BREAKDOWN:-}" ]; then
  rows=""; [ "$HOST_BREAKDOWN" = 1 ] || rows="$HOST_BREAKDOWN"
  timeout ${BREAKDOWN_TIMEOUT:-200} python3 scripts/host_breakdown.py $rows 2>&1 | tee -a "$LOG" > "$OUT/breakdown.txt"
  grep -E "BREAKDOWN-TABLE|Error" "$OUT/breakdown.txt"
fi
# STEP_HOST=1 (or a preset): where an eager GPT step's host time goes (scripts/step_host_profile.py)
if [ -n "${STEP_HOST:-}" ]; then
  preset=""; [ "$STEP_HOST" = 1 ] || preset="$STEP_HOST"
  timeout ${STEP_HOST_TIMEOUT:-200} python3 scripts/step_host_profile.py $preset 2>&1 | tee -a "$LOG" | grep -E "STEP-HOST|Error" | head -90
fi
