"""The sweeps' forward/backward rows against torch with a device copy as the bandwidth anchor
(pooling.py, batch_norm.py): each pass timed interleaved with torch and the copy (_medians), a row
per pass and a VARIANT line (the gpu_check scripts read its fields by position)."""
import cupy as cp
from _medians import medians


def device_copy(nbytes: int):
    """A device-to-device copy of nbytes on the current stream, as a callable (the anchor)."""
    src, dst = cp.empty(nbytes, cp.uint8), cp.empty(nbytes, cp.uint8)
    return lambda: cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, 3,
                                               cp.cuda.get_current_stream().ptr)


def time_passes(rows: list, tag: str, name: str, width: int, big: int, passes, extra: dict, tail: str) -> None:
    """passes: (pass name, cudakit's call, torch's call, bytes the pass moves); big: x's bytes (the
    copy's size; copy GB/s counts its read and write). Appends one row a pass to rows (extra: the
    case's own fields) and prints its VARIANT line, name padded to width, tail at its end."""
    copy = device_copy(big)
    for pas, ours, theirs, nbytes in passes:
        m = medians({"cudakit": ours, "torch": theirs, "copy": copy})
        if "cudakit" not in m or "torch" not in m:
            continue
        gbs = nbytes / m["cudakit"] / 1e6
        rows.append({"case": name, "pass": pas, "tree": tag, "cudakit_ms": round(m["cudakit"], 4),
                     "torch_ms": round(m["torch"], 4), "x_torch": round(m["torch"] / m["cudakit"], 3),
                     "cudakit_gbs": round(gbs), "copy_gbs": round(2 * big / m.get("copy", float("nan")) / 1e6),
                     **extra})
        print(f"VARIANT {tag} {name:<{width}} {pas} cudakit {m['cudakit']:8.4f} ms torch {m['torch']:8.4f} ms "
              f"x torch {m['torch'] / m['cudakit']:6.3f} {gbs:6.0f} GB/s (copy {2 * big / m['copy'] / 1e6:5.0f}) "
              f"{tail}", flush=True)
