"""Issue 25's nvmath-python question, measured (GPU machine; the wheel carried in .carry/wheels):
host time per call of nvmath-python's stateful Matmul (execute, and reset_operands + execute for
new inputs) and of its function form, next to cudakit.matmul, on the host-time row's shape
(64x128 @ 128x128 float32), back-to-back; and whether an execute captures into a CUDA graph.
Prints NVMATH-PROBE lines. `python3 scripts/nvmath_probe.py`."""
import cupy as cp

import cudakit
from cudakit.bench.timing import host_time_per_call


def us(fn, n=2000):
    return host_time_per_call(fn, n, 5, cp.cuda.runtime.deviceSynchronize)["median_ms"] * 1e3


a = cp.random.rand(64, 128, dtype=cp.float32)
b = cp.random.rand(128, 128, dtype=cp.float32)
a2, b2 = a.copy(), b.copy()
print(f"NVMATH-PROBE cudakit.matmul {us(lambda: cudakit.matmul(a, b)):.1f} us/call")
try:
    import nvmath
    from nvmath.linalg.advanced import Matmul, matmul
    print(f"NVMATH-PROBE nvmath {nvmath.__version__}")
    mm = Matmul(a, b)
    mm.plan()
    r = mm.execute()
    print(f"NVMATH-PROBE stateful result matches a @ b: {bool(cp.allclose(r, a @ b, rtol=1e-4, atol=1e-4))}")
    print(f"NVMATH-PROBE Matmul.execute {us(mm.execute):.1f} us/call (same operands)")

    def fresh():
        mm.reset_operands(a=a2, b=b2)
        return mm.execute()
    print(f"NVMATH-PROBE reset_operands + execute {us(fresh):.1f} us/call (new operands each call)")
    print(f"NVMATH-PROBE nvmath.linalg.advanced.matmul {us(lambda: matmul(a, b), 200):.1f} us/call (function form)")
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        mm.execute(stream=s)
        s.synchronize()
        try:
            s.begin_capture()
            out = mm.execute(stream=s)
            g = s.end_capture()
            g.launch(s)
            s.synchronize()
            print(f"NVMATH-PROBE capture: ok, replay matches: {bool(cp.allclose(out, a @ b, rtol=1e-4, atol=1e-4))}")
        except Exception as e:  # noqa: BLE001 -- reported
            try:
                s.end_capture()
            except Exception:  # noqa: BLE001
                pass
            print(f"NVMATH-PROBE capture: failed: {type(e).__name__}: {e}")
    mm.free()
except Exception as e:  # noqa: BLE001 -- the probe reports what stops nvmath here
    print(f"NVMATH-PROBE nvmath unusable: {type(e).__name__}: {str(e)[:300]}")
