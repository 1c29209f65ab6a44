"""The benchmark suite behind `cudakit bench`.

Each op family has a module in cudakit/bench/cases/ whose `cases(env)` returns Case objects with
their byte and FLOP formulas and one callable per provider (cudakit, torch, cupy, numpy); the
runner finds every module there, times each provider in the same run, and reports ratios against
the measured copy bandwidth and against the other providers. From Python:
`record = cudakit.bench.run(ops=["softmax"], check=True)`; `print(cudakit.bench.format_table(record))`.
"""
from .case import Case, Env


def run(*args, **kwargs) -> dict:
    """The benchmark from Python (runner.run): the record `cudakit bench` writes, without files."""
    from .runner import run as _run
    return _run(*args, **kwargs)


def format_table(record: dict) -> str:
    """A run's record as the table `cudakit bench` prints."""
    from .runner import format_table as _fmt
    return _fmt(record)


__all__ = ["Case", "Env", "format_table", "run"]
