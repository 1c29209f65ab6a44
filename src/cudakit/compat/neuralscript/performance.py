"""NeuralScript's performance tester (seed 004, `compiler.backend.test_cuda_performance`) on
cudakit's benchmark suite: run_comprehensive_benchmark() is cudakit.bench.run() with accuracy
checks against float64 references and NumPy as the CPU baseline; TestConfiguration's threshold
decides what passes."""
from __future__ import annotations

import json
import logging
import numbers
from dataclasses import dataclass
from pathlib import Path

from ...errors import BackendUnavailableError
from .._common import check_bool, check_int, report

log = logging.getLogger(__name__)

# NeuralScript's tested operations, as cudakit benchmark cases (the seed's results table: conv2d 3x3 too)
DEFAULT_OPERATIONS = ("add", "relu", "sigmoid", "matmul", "matrix_transpose", "sum", "conv2d", "max_pool2d",
                      "batch_norm")


@dataclass
class TestConfiguration:
    """How run_comprehensive_benchmark() runs.

    max_error_threshold  largest normwise error max|got - want| / max|want| against the float64
                         reference that passes (on top of cudakit's per-dtype tolerance)
    warmup_iterations    untimed calls before timing (>= 0)
    benchmark_iterations timed calls per case (>= 1)
    enable_plots         write cudakit's benchmark plots (PNG) to output_dir; needs matplotlib (the
                         bench extra): BackendUnavailableError at construction without it
    save_results         write results.json (cudakit bench's record plus the summary) to output_dir
    operations           cudakit benchmark ops to run (`cudakit bench --help` lists them)
    dtypes               their dtypes
    quick                cudakit bench's --quick sizes (False: the full sweep, minutes)
    output_dir           where plots and results go
    """
    __test__ = False   # not a pytest test class
    max_error_threshold: float = 1e-4
    warmup_iterations: int = 5
    benchmark_iterations: int = 20
    enable_plots: bool = False
    save_results: bool = False
    operations: tuple = DEFAULT_OPERATIONS
    dtypes: tuple = ("float32",)
    quick: bool = True
    output_dir: str = "cuda_performance_results"

    def __post_init__(self):
        t = self.max_error_threshold
        if isinstance(t, bool) or not isinstance(t, numbers.Real) or not t > 0:
            raise ValueError(f"max_error_threshold must be a number > 0 (got {t!r})")
        check_int(self.warmup_iterations, "warmup_iterations", 0)
        check_int(self.benchmark_iterations, "benchmark_iterations", 1)
        for name in ("enable_plots", "save_results", "quick"):
            check_bool(getattr(self, name), name)
        from ...bench import plots
        if self.enable_plots and not plots.available():   # (not an empty list of plots at the end)
            raise BackendUnavailableError("enable_plots=True needs matplotlib: pip install 'cudakit[bench]'")
        for name in ("operations", "dtypes"):   # (a string would be split into its characters)
            v = getattr(self, name)
            if isinstance(v, (str, bytes)) or not isinstance(v, (tuple, list)) or \
                    not all(isinstance(x, str) for x in v):
                raise TypeError(f"{name} must be a tuple or list of names (got {v!r})")
        self.operations, self.dtypes = tuple(self.operations), tuple(self.dtypes)


class CudaPerformanceTester:
    """Benchmarks and validates cudakit's ops (NeuralScript's CudaPerformanceTester)."""

    def __init__(self, config: TestConfiguration | None = None):
        if config is not None and not isinstance(config, TestConfiguration):
            raise TypeError(f"config must be a TestConfiguration (got {type(config).__name__})")
        self.config = config or TestConfiguration()

    def run_comprehensive_benchmark(self) -> dict:
        """Time and check every configured op: {"record" (cudakit.bench.run's), "tests" (per
        case: operation, shape, dtype, time_ms, numpy_ms, speedup_vs_numpy, max_error, passed),
        "passed", "failed", "device", "output_dir" (None unless files were written)}. ValueError
        naming an unknown op."""
        from ... import bench
        c = self.config
        record = bench.run(ops=c.operations, dtypes=c.dtypes, quick=c.quick, compare=("numpy",),
                           reps=c.benchmark_iterations, warmup=c.warmup_iterations, check=True, progress=False,
                           command="CudaPerformanceTester.run_comprehensive_benchmark()")
        tests = []
        for r in record["rows"]:
            ck, npy, chk = r["providers"].get("cudakit"), r["providers"].get("numpy"), r.get("check")
            if ck is None or r["dtype"] not in c.dtypes:   # a case may add rows of other dtypes
                continue
            err = chk.get("max_error") if chk else None
            ok = bool(chk and chk["ok"] and err is not None and err <= c.max_error_threshold) if chk else None
            tests.append({"operation": r["op"], "shape": tuple(r["shape"]), "dtype": r["dtype"],
                          "time_ms": ck["median_ms"], "numpy_ms": npy["median_ms"] if npy else None,
                          "speedup_vs_numpy": r.get("x_numpy"), "max_error": err, "passed": ok})
        summary = {"record": record, "tests": tests, "passed": sum(t["passed"] is True for t in tests),
                   "failed": sum(t["passed"] is False for t in tests), "device": record["device"],
                   "output_dir": None}
        if c.save_results or c.enable_plots:
            out = Path(c.output_dir)
            out.mkdir(parents=True, exist_ok=True)
            summary["output_dir"] = str(out)
            if c.save_results:
                (out / "results.json").write_text(json.dumps(
                    {k: v for k, v in summary.items() if k != "record"} | {"record": record}, indent=1, default=list))
            if c.enable_plots:
                from ...bench import plots
                summary["plots"] = [str(p) for p in plots.write_all(record["rows"], record.get("roof_gbs"),
                                                                    record["device"]["name"], out)]
        return summary

    def print_summary_report(self, summary: dict) -> str:
        """The summary as text (cudakit's benchmark table, then pass/fail per case), logged at INFO
        and returned (library code does not print)."""
        from ... import bench
        lines = [bench.format_table(summary["record"]), ""]
        for t in summary["tests"]:
            state = {True: "PASS", False: "FAIL", None: "not checked"}[t["passed"]]
            err = "-" if t["max_error"] is None else f"{t['max_error']:.2e}"
            lines.append(f"{state:<11} {t['operation']} {'x'.join(map(str, t['shape']))} {t['dtype']}: "
                         f"{t['time_ms']:.4f} ms, max error {err}")
        lines.append(f"{summary['passed']} passed, {summary['failed']} failed "
                     f"(threshold {self.config.max_error_threshold:g})")
        return report(log, "\n".join(lines))


__all__ = ["TestConfiguration", "CudaPerformanceTester", "DEFAULT_OPERATIONS"]
