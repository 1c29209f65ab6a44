"""Every algorithm cuBLASLt's heuristic offers for a few epilogue GEMMs of the GPT example (up to
16 each), timed one after another on the same operands (bench.timing.time_gpu: median of 30 calls after 5,
L2 warm), next to the one cudakit's plan takes (the heuristic's first): is there a faster one the
first pick misses? Prints lines starting ALGO.
    python scripts/cublaslt_algo_probe.py"""
import ctypes

import cupy as cp
import numpy as np

from cudakit.bench import timing
from cudakit.kernels import cublaslt as lt

N_ALGOS = 16


def _time(fn):
    return timing.time_gpu(fn, 5, 30)["median_ms"]


def _algos(bp):
    """(algo results, count) for bound plan bp's descriptor and layouts, workspace up to 32 MiB."""
    handle, desc, layouts, _, _, _, key = bp
    aligns = key[1][13]
    lib = lt._lib
    pref = ctypes.c_void_p()
    lt._check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "pref")
    lt._set(lib.cublasLtMatmulPreferenceSetAttribute, pref, lt._PREF_MAX_WORKSPACE, ctypes.c_uint64(lt._WORKSPACE))
    a_a, a_b, a_out, _ = aligns
    for attr, a in zip(lt._PREF_MIN_ALIGN, (a_b, a_a, a_out, a_out)):
        lt._set(lib.cublasLtMatmulPreferenceSetAttribute, pref, attr, ctypes.c_uint32(a))
    res = (lt._HeuristicResult * N_ALGOS)()
    count = ctypes.c_int(0)
    lt._check(lib.cublasLtMatmulAlgoGetHeuristic(handle, desc, *layouts, pref, N_ALGOS, res, ctypes.byref(count)),
              "heuristic")
    lib.cublasLtMatmulPreferenceDestroy(pref)
    return res, count.value


def probe(name, a, b, out, trans_a, trans_b, **epi):
    bp = lt.bound(a, b, out, trans_a, trans_b, epi.get("bias"), epi.get("gelu", False), epi.get("aux"),
                  epi.get("bgrad"), epi.get("dgelu"))
    if bp is None:
        print(f"ALGO {name}: no plan")
        return
    epi_ptr = epi.get("bias") if epi.get("bias") is not None else epi.get("bgrad")
    aux = epi.get("aux") if epi.get("aux") is not None else epi.get("dgelu")
    ptrs = (0 if epi_ptr is None else epi_ptr.data.ptr, 0 if aux is None else aux.data.ptr)

    def call(b_):
        return lambda: lt.run(b_, a.data.ptr, b.data.ptr, out.data.ptr, 0.0, *ptrs)
    first = _time(call(bp))
    res, n = _algos(bp)
    times = []
    for i in range(n):
        if res[i].state != 0:
            continue
        bpi = bp[:3] + (ctypes.addressof(res[i].algo), int(res[i].workspace_size)) + bp[5:]
        try:
            times.append((_time(call(bpi)), i, int(res[i].workspace_size), float(res[i].waves)))
        except Exception as e:  # noqa: BLE001 -- a probe: report and go on
            print(f"ALGO {name} algo {i} failed: {e}")
    if not times:
        print(f"ALGO {name}: plan's {first:.4f} ms; no other algorithm ran", flush=True)
        return
    times.sort()
    best = times[0]
    print(f"ALGO {name}: plan's {first:.4f} ms; {len(times)} algos, best {best[0]:.4f} ms (#{best[1]}, "
          f"ws {best[2]}) = {first / best[0]:.3f}x; all " + " ".join(f"#{i}:{t:.4f}" for t, i, _, _ in sorted(times, key=lambda x: x[1])),
          flush=True)


def main():
    import ml_dtypes
    rng = np.random.default_rng(0)
    for dtype in (np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)):
        mk = lambda *s: cp.asarray(rng.standard_normal(s, dtype=np.float32).astype(dtype))  # noqa: E731
        rows, d, h = 8192, 768, 3072
        g3, w2 = mk(1, rows, d), mk(1, d, h)          # fc2's grad_out and weight (out, in)
        pre, gx = mk(1, rows, h), cp.empty((1, rows, h), dtype)
        probe(f"dgrad fc2 {dtype.name}", g3, w2, gx, False, False)
        probe(f"dgrad fc2 DGELU {dtype.name}", g3, w2, gx, False, False, dgelu=pre)
        x3, w1, b1 = mk(1, rows, d), mk(1, h, d), mk(h)
        y, aux = cp.empty((1, rows, h), dtype), cp.empty((1, rows, h), dtype)
        probe(f"fwd fc GELU_AUX_BIAS {dtype.name}", x3, w1, y, False, True, bias=b1, gelu=True, aux=aux)
        gh, xh, gw = mk(1, rows, h), mk(1, rows, d), cp.empty((1, h, d), dtype)
        probe(f"wgrad fc {dtype.name}", gh, xh, gw, True, False)
        probe(f"wgrad fc BGRADB {dtype.name}", gh, xh, gw, True, False, bgrad=cp.empty((h,), dtype))


if __name__ == "__main__":
    main()
