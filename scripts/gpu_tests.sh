#!/usr/bin/env bash
# The GPU tests of the given files (pytest -m cuda, 8 workers) into $OUT/tests.log; prints the
# failures and the summary line. Sourced by the gpu_check_*.sh scripts after device_env.sh.
#   . scripts/gpu_tests.sh tests/gpu/test_a_gpu.py ...   # TEST_TIMEOUT (seconds), SKIP_TESTS
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout ${TEST_TIMEOUT:-300} python3 -m pytest -q -n 8 -m cuda "$@" -p no:cacheprovider -rfE > "$OUT/tests.log" 2>&1
  grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20; tail -1 "$OUT/tests.log"
fi
