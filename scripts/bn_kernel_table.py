"""The kernels of each phase of scripts/bn_kernel_probe.py from ncu's CSV (--csv --log-file F, metric
gpu__time_duration.sum): per phase, each kernel's median time over the phase's repetitions and
their sum, with the phase names the probe printed; --json F also writes them as rows to F.
    python3 scripts/bn_kernel_table.py ncu.csv probe.log [--json out.json]"""
import csv
import re
import statistics
import sys


def main(csv_path: str, log_path: str, json_path: str | None = None) -> None:
    names = {}
    for line in open(log_path):
        m = re.match(r"PROBE-PHASE (\d+) (.*)", line.strip())
        if m:
            names[int(m.group(1))] = m.group(2)
    lines = [ln for ln in open(csv_path) if ln.startswith('"')]
    phase, reps = None, {}
    for row in csv.DictReader(lines):
        name = row["Kernel Name"]
        if name.startswith("probe_marker"):
            phase = int(row["Grid Size"].strip("()").split(",")[0]) - 1
            reps.setdefault(phase, []).append([])
            continue
        if phase is None or row["Metric Name"] != "gpu__time_duration.sum":
            continue
        scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}[row["Metric Unit"]]
        reps[phase][-1].append((name.split("(")[0][:60], float(row["Metric Value"].replace(",", "")) * scale))
    rows = []
    for phase in sorted(p for p in reps if p in names):
        runs = [r for r in reps[phase] if r]
        if not runs:
            continue
        total = statistics.median(sum(t for _, t in r) for r in runs)
        print(f"{names[phase]:<40} total {total:8.2f} us")
        kernels = []
        for j, (kname, _) in enumerate(runs[-1]):
            ts = [r[j][1] for r in runs if len(r) > j]
            kernels.append({"kernel": kname, "us": round(statistics.median(ts), 3)})
            print(f"    {kname:<60} {kernels[-1]['us']:8.2f} us")
        case, _, who = names[phase].rpartition(" ")
        spec, _, side = case.partition(" ")
        rows.append({"case": spec, "side": side, "pass": who, "total_us": round(total, 3), "kernels": kernels})
    if json_path:
        import json
        with open(json_path, "w") as f:
            json.dump({"what": "batch norm's kernels, cudakit's against torch's, each timed alone by ncu "
                               "(gpu__time_duration.sum, boost clocks, L2 kept between kernels; medians of 3)",
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], a[a.index("--json") + 1] if "--json" in a else None)
