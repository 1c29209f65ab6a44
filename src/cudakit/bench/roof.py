"""The roofline of one `cudakit bench` run: the rates that `%roof` divides by.

A GPU run measures a device-to-device copy (GB/s, bytes read + written) and a dense matmul
(TFLOP/s). A kernel can beat cudaMemcpy by a few per cent, so the roof is the higher of the
measured reference and the best rate any provider reached in the same run: a fraction of it is
never above 1. A CPU run has no single roof (caches of several sizes sit in front of memory), so
its rows carry no fraction and the table leaves the %roof column out.
"""
from __future__ import annotations

import math


def _rates(rows: list, key: str) -> list:
    """Every provider's achieved rate in rows: GB/s (key "nbytes") or TFLOP/s (key "flops")."""
    scale = 1e9 if key == "nbytes" else 1e12
    out = []
    for r in rows:
        if r.get("mode", "device") != "device" or not r.get(key):
            continue
        for p in r.get("providers", {}).values():
            ms = p.get("median_ms") if isinstance(p, dict) else None
            if ms and ms > 0:
                out.append(r[key] / (ms * 1e-3) / scale)
    return out


def roofs(record: dict) -> tuple:
    """(GB/s roof, TFLOP/s roof) of a run's record; None where the run has none (CPU runs, no
    measurement). Each is max(measured reference, best achieved rate in the run's rows)."""
    if record.get("device", {}).get("kind") == "cpu":
        return None, None
    out = []
    for ref, key in ((record.get("copy_bandwidth_gbs"), "nbytes"), (record.get("matmul_peak_tflops"), "flops")):
        ok = isinstance(ref, (int, float)) and ref > 0 and not math.isnan(ref)
        out.append(max([ref, *_rates(record["rows"], key)]) if ok else None)
    return tuple(out)


def apply(record: dict) -> dict:
    """Set every row's "of_copy_bw" (device rows) and "of_peak" (rows with FLOPs) to its
    cudakit rate over the run's roofs, None where there is no roof; record "roof_gbs" and
    "roof_tflops". Returns the record (changed in place)."""
    gbs, tflops = roofs(record)
    record["roof_gbs"], record["roof_tflops"] = gbs, tflops
    for r in record["rows"]:
        ck = r.get("providers", {}).get("cudakit")
        if not ck or not ck.get("median_ms"):
            continue
        t = ck["median_ms"] * 1e-3
        device = r.get("mode", "device") == "device"
        r["of_copy_bw"] = r["nbytes"] / t / 1e9 / gbs if gbs and device and r.get("nbytes") else None
        r["of_peak"] = r["flops"] / t / 1e12 / tflops if tflops and device and r.get("flops") else None
    return record
