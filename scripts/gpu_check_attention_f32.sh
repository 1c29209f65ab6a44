#!/usr/bin/env bash
# One device call on the float32 attention forward on float16 parts (offered by default),
# after scripts/gpu_check.sh's environment (the carried cuDNN frontend, a fresh cache):
#   bash scripts/gpu_check_attention_f32.sh parts   # its own GPU tests (each path forced), then every
#                                                   # candidate's time (CUDAKIT_AUTOTUNE_LOG) and the
#                                                   # public call against torch's float32 SDPA
#   bash scripts/gpu_check_attention_f32.sh all     # every other float32 attention GPU test
#   bash scripts/gpu_check_attention_f32.sh bwd     # forward and backward through the public calls
#                                                   # against torch (small grids by default)
#   bash scripts/gpu_check_attention_f32.sh pdl     # programmatic dependent launch: the attention GPU
#                                                   # tests of K (default: PDL's own, the float16 parts in
#                                                   # key parts, the materialised backward), the graph and
#                                                   # runtime tests, then the same paths with and without
#                                                   # it against torch (benchmarks/sweeps/attention_pdl.py)
#   K="pytest -k expression" bash scripts/gpu_check_attention_f32.sh sanitize
#                                                   # those attention GPU tests under compute-sanitizer
#                                                   # (memcheck), one process; its report to $OUT/sanitize.log
# SHAPES: BxHxLxD,... for `parts` (default: small grids at head dims 64..128 and issue 27's two shapes);
# rows go to $OUT/f16-shapes.json, whole logs to $OUT/tests.log and $OUT/sweep.log.
# Lines: TUNE <bh>x<lq>x<lk>x<d> <candidate> <ms>, VARIANT (the sweep's).
set -u
: "${CUDAKIT_CACHE_DIR:=/tmp/ck-f16}"
. scripts/device_env.sh
case "${1:-parts}" in
  parts)
    timeout ${TEST_TIMEOUT:-300} python3 -m pytest -q -n 8 -m cuda tests/gpu/test_attention_gpu.py -k f16_parts \
      -p no:cacheprovider -rfE > "$OUT/tests.log" 2>&1; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20
    tail -1 "$OUT/tests.log"
    date -u +"%H:%M:%SZ"
    CUDAKIT_AUTOTUNE_LOG=1 timeout ${SWEEP_TIMEOUT:-240} python3 benchmarks/sweeps/attention_f32_shapes.py --fwd-only \
      --out "$OUT/f16-shapes.json" \
      --shapes "${SHAPES:-1x16x512x128,8x8x256x128,1x16x256x80,2x8x256x96,4x8x512x64,4x16x4096x128,16x16x1024x64}" 2>&1 \
      | tee "$OUT/sweep.log" | grep -E "VARIANT|autotune path" \
      | sed -E "s/^autotune path attention \('fwd-key-parts', ([0-9]+), ([0-9]+), ([0-9]+), ([0-9]+),.*\): ([^ ]+) -> ([0-9.]+) ms.*/TUNE \1x\2x\3x\4 \5 \6/" \
      | cut -c1-200 ;;
  all)
    timeout ${TEST_TIMEOUT:-560} python3 -m pytest -q -n 8 -m cuda tests/gpu/test_attention_gpu.py \
      -k "float32 and not f16_parts" -p no:cacheprovider -rfE > "$OUT/tests.log" 2>&1
    grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20; tail -1 "$OUT/tests.log" ;;
  bwd)
    timeout ${SWEEP_TIMEOUT:-400} python3 benchmarks/sweeps/attention_f32_shapes.py --out "$OUT/f32-bwd-shapes.json" \
      --shapes "${SHAPES:-1x16x512x128,8x8x256x128,1x16x256x80,2x8x256x96,4x8x512x64,2x16x1024x128}" \
      > "$OUT/sweep.log" 2>&1; grep VARIANT "$OUT/sweep.log" | cut -c1-160 ;;
  pdl)
    timeout ${TEST_TIMEOUT:-240} python3 -m pytest -q -n 8 -m cuda tests/gpu/test_attention_gpu.py \
      -k "${K:-pdl or (f16_parts and one_stage) or materialized_backward}" -p no:cacheprovider -rfE \
      > "$OUT/tests.log" 2>&1
    grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20; tail -1 "$OUT/tests.log"
    timeout 150 python3 -m pytest -q -n 8 -m cuda tests/gpu/test_graphs_gpu.py tests/gpu/test_runtime_gpu.py \
      tests/gpu/test_triton_gpu.py -p no:cacheprovider -rfE > "$OUT/tests-runtime.log" 2>&1
    grep -E "^(FAILED|ERROR)" "$OUT/tests-runtime.log" | head -20; tail -1 "$OUT/tests-runtime.log"
    date -u +"%H:%M:%SZ"
    CUDAKIT_DISPATCH_PLANS=0 timeout ${SWEEP_TIMEOUT:-300} python3 benchmarks/sweeps/attention_pdl.py \
      --out "$OUT/pdl.json" --shapes "${SHAPES:-1x16x256x80,2x8x256x96,8x8x256x128,1x16x512x128}" \
      > "$OUT/sweep.log" 2>&1; grep VARIANT "$OUT/sweep.log" | cut -c1-170 ;;
  sanitize)
    SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    timeout ${TEST_TIMEOUT:-500} "$SAN" --tool memcheck --print-limit 20 python3 -m pytest -q -x -m cuda \
      tests/gpu/test_attention_gpu.py -k "${K:?K: a pytest -k expression}" -p no:cacheprovider > "$OUT/sanitize.log" 2>&1
    grep -E "^=+ (Invalid|ERROR SUMMARY)|^(FAILED|ERROR)" "$OUT/sanitize.log" | head -20; tail -1 "$OUT/sanitize.log" ;;
  *) echo "usage: $0 parts|all|bwd|pdl|sanitize" >&2; exit 2 ;;
esac
date -u +"%H:%M:%SZ"
