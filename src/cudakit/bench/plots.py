"""PNG plots of benchmark rows, shared by `cudakit bench` (one run) and `cudakit report`
(BENCHMARKS.md): speed-up bars per op family and throughput against size with the roofline.

Only rows with data are plotted and a plot with no data is not written. Bars are horizontal, at
most MAX_BARS a plot (a family with more rows gets numbered plots), so labels stay readable at
100% zoom.
"""
from __future__ import annotations

from pathlib import Path

MAX_BARS = 40
RATIO_KEYS = ("x_torch", "x_cupy", "x_numpy")   # the first one a family's rows carry is plotted
PROVIDERS = ("cudakit", "torch", "cupy", "numpy", "triton")
DPI = 100


def _pyplot():
    """matplotlib.pyplot on the Agg backend, or None when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def available() -> bool:
    """Whether matplotlib (the bench extra) is installed, so that plots can be written."""
    return _pyplot() is not None


def label(row: dict) -> str:
    """'op shape dtype' of a row, the bar's label."""
    return f"{row['op']} {'x'.join(map(str, row['shape']))} {row['dtype']}"


def _save(fig, path: Path, plt) -> Path:
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return path


def speedup_plots(rows: list, device: str, out_dir: Path) -> list[Path]:
    """One horizontal bar plot of cudakit's speed-up per op family (speedup_<family>.png, or
    speedup_<family>_<k>.png for families of more than MAX_BARS rows) against the first of
    torch, CuPy, NumPy that the family's rows were compared with; size-sweep rows are left out
    (see size_plots). Returns the paths written (none without matplotlib or data)."""
    plt = _pyplot()
    if plt is None:
        return []
    paths = []
    for fam in sorted({r["family"] for r in rows if not r.get("sweep")}):
        fr = [r for r in rows if r["family"] == fam and not r.get("sweep")]
        key = next((k for k in RATIO_KEYS if any(r.get(k) for r in fr)), None)
        if key is None:
            continue
        fr = [r for r in fr if r.get(key)]
        chunks = [fr[i:i + MAX_BARS] for i in range(0, len(fr), MAX_BARS)]
        for k, chunk in enumerate(chunks, 1):
            name = f"speedup_{fam}" + (f"_{k}" if len(chunks) > 1 else "") + ".png"
            paths.append(_bars(plt, chunk, key, f"{fam}" + (f" ({k}/{len(chunks)})" if len(chunks) > 1 else "")
                               + f" — {device}", out_dir / name))
    return paths


def _bars(plt, rows: list, key: str, title: str, path: Path) -> Path:
    vals = [r[key] for r in rows]
    fig, ax = plt.subplots(figsize=(9, 1.4 + 0.28 * len(rows)))
    ys = range(len(rows))[::-1]          # first row on top
    ax.barh(list(ys), vals, color=["tab:green" if v >= 1 else "tab:red" for v in vals], height=0.7)
    ax.axvline(1.0, color="k", lw=1)
    if max(vals) / min(vals) > 30:
        ax.set_xscale("log")
    ax.set_yticks(list(ys))
    ax.set_yticklabels([label(r) for r in rows], fontsize=9)
    for y, v in zip(ys, vals):
        ax.text(v, y, f" {v:.2f}" if v >= 0.1 else f" {v:.2g}", va="center", fontsize=8)
    ax.set_xlim(right=max(vals) * (3 if ax.get_xscale() == "log" else 1.15))
    ax.set_xlabel(f"speed-up: {key[2:]} time / cudakit time (> 1: cudakit faster)", fontsize=9)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return _save(fig, path, plt)


def size_plots(rows: list, roof_gbs, device: str, out_dir: Path) -> list[Path]:
    """Throughput (GB/s) against bytes moved per call, one line per provider, op and dtype, for
    each family of size-sweep rows with at least two sizes (<family>_vs_size.png); the roof (GB/s)
    is drawn when there is one (None on CPU runs). Returns the paths written."""
    plt = _pyplot()
    if plt is None:
        return []
    paths = []
    for fam in sorted({r["family"] for r in rows if r.get("sweep")}):
        fr = [r for r in rows if r["family"] == fam and r.get("sweep") and r.get("nbytes")
              and r.get("mode", "device") == "device"]
        if len({r["nbytes"] for r in fr}) < 2:
            continue
        fig, ax = plt.subplots(figsize=(9, 5.5))
        for op, dtype in sorted({(r["op"], r["dtype"]) for r in fr}):
            pts = sorted(((r["nbytes"], r) for r in fr if (r["op"], r["dtype"]) == (op, dtype)), key=lambda t: t[0])
            for p in PROVIDERS:
                xy = [(nb, nb / (r["providers"][p]["median_ms"] * 1e-3) / 1e9) for nb, r in pts
                      if r["providers"].get(p, {}).get("median_ms")]
                if len(xy) > 1:
                    ax.plot(*zip(*xy), marker="o", ms=4, label=f"{p} {op} {dtype}",
                            ls="-" if p == "cudakit" else "--")
        if roof_gbs:
            ax.axhline(roof_gbs, color="k", lw=1.5, label=f"roof {roof_gbs:.0f} GB/s")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bytes moved per call (read + written)", fontsize=9)
        ax.set_ylabel("GB/s", fontsize=9)
        ax.set_title(f"{fam}: throughput against size — {device}" + ("" if roof_gbs else " (no roof: CPU run)"),
                     fontsize=10)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
        fig.tight_layout()
        paths.append(_save(fig, out_dir / f"{fam}_vs_size.png", plt))
    return paths


def write_all(rows: list, roof_gbs, device: str, out_dir: Path) -> list[Path]:
    """speedup_plots and size_plots of rows (those with a cudakit time) into out_dir (created)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = [r for r in rows if "cudakit" in r.get("providers", {})]
    return speedup_plots(rows, device, out_dir) + size_plots(rows, roof_gbs, device, out_dir)
