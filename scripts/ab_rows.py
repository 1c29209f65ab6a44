"""Two sweep files' rows side by side on (case, pass): x torch of each and the change of cudakit's
time (each file's rows carry their own torch time, taken in the same process).
    python3 scripts/ab_rows.py BEFORE.json AFTER.json"""
import json
import sys

a, b = (json.load(open(f))["rows"] for f in sys.argv[1:3])
after = {(r["case"], r["pass"]): r for r in b}
print(f"{'case':<16} {'pass':<14} {'before x':>9} {'after x':>8} {'cudakit before->after ms':>26}")
for r in a:
    s = after.get((r["case"], r["pass"]))
    if s:
        print(f"{r['case']:<16} {r['pass']:<14} {r['x_torch']:>9.3f} {s['x_torch']:>8.3f} "
              f"{r['cudakit_ms']:>12.4f} -> {s['cudakit_ms']:.4f}")
