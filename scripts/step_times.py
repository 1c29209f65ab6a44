"""The distribution of an example's per-step times, from its "step i loss X time T ms" lines.

    python3 scripts/step_times.py LABEL LOG

Prints one line: the step count (after the first two), p10/p50/p90/max in ms, how many steps took
more than 1.5x the median, and the times of steps 2.. in order (is a slow median a slow tail, a
slow phase, or every step). Used by gpu_check_distributed.sh to tell run-to-run variance apart.
"""
import re
import statistics
import sys


def main() -> int:
    label, path = sys.argv[1], sys.argv[2]
    try:
        text = open(path).read()
    except OSError as e:
        print(f"{label}: no log ({e})")
        return 0
    ms = [float(t) for t in re.findall(r"step \d+ loss \S+ time ([0-9.]+) ms", text)][2:]
    if not ms:
        print(f"{label}: no step lines")
        return 0
    s = sorted(ms)
    q = lambda f: s[min(len(s) - 1, int(f * len(s)))]   # noqa: E731
    med = statistics.median(ms)
    slow = sum(t > 1.5 * med for t in ms)
    print(f"{label}: {len(ms)} steps p10 {q(0.1):.2f} p50 {med:.2f} p90 {q(0.9):.2f} max {s[-1]:.2f} ms; "
          f"{slow} over 1.5x median; in order: {' '.join(f'{t:.1f}' for t in ms)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
