"""Two `cudakit bench` runs' rows side by side: cudakit's time a call and the ratio to torch of each
row (op and shape) in $OUT/results-<a>.json and $OUT/results-<b>.json (scripts/bench_sets.sh).
    python3 scripts/side_by_side.py OUT a b [ms|us]
Used by gpu_check_pdl.sh (train steps, ms) and gpu_check_host.sh (host time, us)."""
import json
import sys


def rows(out: str, name: str) -> dict:
    try:
        with open(f"{out}/results-{name}.json") as f:
            d = json.load(f)
    except OSError:
        return {}
    return {(r["op"], "x".join(map(str, r["shape"]))): r for r in d["rows"]}


def main(out: str, a: str, b: str, unit: str = "ms") -> None:
    ra, rb = rows(out, a), rows(out, b)
    scale = 1e3 if unit == "us" else 1.0
    t = lambda r: f"{r['providers']['cudakit']['median_ms'] * scale:.4f}" if r else "-"   # noqa: E731
    x = lambda r: f"{r['x_torch']:.3f}" if r and r.get("x_torch") else "-"               # noqa: E731
    print(f"{'row':<52} {unit + ' ' + a:>16} {unit + ' ' + b:>16} {'x torch ' + a:>18} {'x torch ' + b:>18}")
    for key in sorted(set(ra) | set(rb)):
        print(f"{' '.join(key):<52} {t(ra.get(key)):>16} {t(rb.get(key)):>16} {x(ra.get(key)):>18} "
              f"{x(rb.get(key)):>18}")


if __name__ == "__main__":
    main(*sys.argv[1:])
