"""The benchmark suite behind `cudakit bench`.

Each op family has a module in cudakit/bench/cases/ whose `cases(env)` returns Case objects with
their byte and FLOP formulas and one callable per provider (cudakit, torch, cupy, numpy); the
runner finds every module there, times each provider in the same run, and reports ratios against
the measured copy bandwidth and against the other providers.
"""
from .case import Case, Env

__all__ = ["Case", "Env"]
