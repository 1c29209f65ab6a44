"""`cudakit bench`: run the registered cases, print a table, write JSON and PNG plots."""
from __future__ import annotations

import argparse
import datetime
import importlib
import json
import numbers
import os
import pkgutil
import platform
import sys
from pathlib import Path

from .case import Env
from . import plots, roof, timing

PROVIDERS = ("cudakit", "torch", "cupy", "numpy", "triton")


def add_arguments(p) -> None:
    p.add_argument("--ops", default="", help="comma-separated op names to run (default: all)")
    p.add_argument("--dtype", default="", help="comma-separated dtypes (default: float32,bfloat16)")
    p.add_argument("--quick", action="store_true", help="small sizes and few runs")
    p.add_argument("--compare", default="torch,cupy,numpy", help="providers to compare with cudakit")
    p.add_argument("--out", default="bench-out", help="directory for results.json and the PNG plots")
    p.add_argument("--cpu", action="store_true", help="benchmark the CPU backend even when a GPU is present")
    p.add_argument("--reps", type=_int_at_least(1), default=None,
                   help="timed runs of each provider (default: 30 on a GPU, over 3 interleaved rounds; 10 on the CPU; "
                        "6 / 3 with --quick)")
    p.add_argument("--check", action="store_true",
                   help="also compare each op with cudakit's CPU backend run on float64 copies of the inputs (on "
                        "inputs like the benchmark's, at most 2^22 elements; on a CPU run that is the same code in "
                        "float64, not an independent reference); exit status 1 when one is over its dtype's tolerance")
    p.add_argument("--cpu-baseline", action="store_true",
                   help="GPU runs: also time each checked op against cudakit's CPU backend (NumPy) on the same inputs "
                        "(at most 2^22 elements an input); an 'x cpu' column")
    p.add_argument("--l2", choices=("cold", "warm"), default="cold",
                   help="GPU timing: each timed call behind a write that flushes the L2 cache (cold, the default, "
                        "as triton.testing.do_bench) or behind an untimed call of its own (warm: inputs that fit "
                        "the L2 cache are timed from it)")
    p.add_argument("--warmup", type=_int_at_least(0), default=None,
                   help="untimed runs of each provider before the timed ones (default: 5 on a GPU, 1 on the CPU; 2 "
                        "on a GPU with --quick)")


def _int_at_least(lo: int):
    """An argparse type: an int >= lo, else the error names the limit and the value."""
    def parse(v: str) -> int:
        try:
            n = int(v)
        except ValueError:   # (argparse's own message would name this function: "invalid parse value")
            raise argparse.ArgumentTypeError(f"must be an integer >= {lo} (got {v!r})") from None
        if n < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo} (got {n})")
        return n
    return parse


def discover() -> dict:
    """{family module name: module} for every module in cudakit.bench.cases."""
    from . import cases as pkg
    return {m.name: importlib.import_module(f"{pkg.__name__}.{m.name}")
            for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_")}


DTYPES = ("float16", "bfloat16", "float32", "float64")


def validate(dtypes, compare, ops=(), reps=None, warmup=None, l2="cold") -> None:
    """Raise ArgumentError (a ValueError) or ArgumentTypeError naming an unknown dtype or
    comparison provider, names not given as a sequence of strings, or reps, warmup or l2 out of
    the CLI's range (before anything is created or measured)."""
    from cudakit.errors import ArgumentError, ArgumentTypeError
    for arg, v in (("ops", ops), ("dtypes", dtypes), ("compare", compare)):
        if isinstance(v, (str, bytes)) or not isinstance(v, (tuple, list, set, frozenset)) or \
                not all(isinstance(x, str) for x in v):   # (a string was taken as its characters)
            raise ArgumentTypeError(f"{arg} must be a sequence of names (got {v!r})")
    for arg, v, least in (("reps", reps, 1), ("warmup", warmup, 0)):
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise ArgumentTypeError(f"{arg} must be an int or None (got {type(v).__name__} {v!r})")
        if v < least:
            raise ArgumentError(f"{arg} must be >= {least} (got {v})")
    if l2 not in ("cold", "warm"):
        raise ArgumentError(f"l2 must be 'cold' or 'warm' (got {l2!r})")
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        raise ArgumentError(f"unknown dtype(s) {', '.join(bad)}; cudakit's ops take {', '.join(DTYPES)}")
    bad = [c for c in compare if c not in PROVIDERS[1:]]
    if bad:
        raise ArgumentError(f"unknown --compare provider(s) {', '.join(bad)}; known: {', '.join(PROVIDERS[1:])}")


def select_cases(env: Env, ops) -> list:
    """The cases of `env` for ops (empty: all); ArgumentError naming unknown ops and the known."""
    from cudakit.errors import ArgumentError
    env.ops = tuple(ops)
    cases = [c for m in discover().values() for c in m.cases(env)]
    known = sorted({c.op for c in cases})
    unknown = [o for o in ops if o not in known]
    if unknown:
        raise ArgumentError(f"unknown op(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [c for c in cases if c.op in set(ops)] if ops else cases


def make_env(quick: bool, force_cpu: bool, dtypes: tuple, compare: set) -> Env:
    """The run's environment: the GPU when one is usable, unless force_cpu or CUDAKIT_BACKEND=cpu;
    CUDAKIT_BACKEND=cuda without a usable GPU raises BackendUnavailableError (as get_backend)."""
    from cudakit.config import settings
    from cudakit.errors import BackendUnavailableError
    from cudakit.runtime import _cupy
    chosen = settings().backend
    ok, why = _cupy.probe()
    if chosen == "cuda" and not ok and not force_cpu:
        raise BackendUnavailableError(f"CUDAKIT_BACKEND=cuda but the CUDA backend is unavailable: {why}")
    gpu = not force_cpu and chosen != "cpu" and ok
    torch = None
    if gpu and compare & {"torch", "triton"}:
        try:
            import torch as _t
            torch = _t if _t.cuda.is_available() else None
        except ImportError:
            torch = None
    if gpu:
        import cupy as xp
    else:
        import numpy as xp
    return Env(gpu=gpu, quick=quick, xp=xp, torch=torch, dtypes=dtypes)


def run_case(case, env: Env, compare: set, reps: int | None = None, warmup: int | None = None,
             l2: str = "cold") -> dict:
    """{provider: timing summary} of one case; a provider other than cudakit that raises is left
    out with a line on stderr. Providers' rounds are interleaved, so drift hits all alike. reps,
    warmup: timed and untimed runs (None: the defaults of the mode; host-mode cases time calls in
    thousands and take neither)."""
    if case.skip:
        return {}
    provs = {name: fn for name, fn in case.setup().items()
             if name == "cudakit" or name in compare | {"triton"}}
    if case.skip:   # setup found that it cannot run (and said why)
        return {}
    if case.mode == "host":
        sync = (lambda: env.xp.cuda.get_current_stream().synchronize()) if env.gpu else None
        res, errors = timing.host_time_interleaved(provs, calls=300 if env.quick else 3000, sync=sync)
    elif env.gpu:
        res, errors = timing.time_gpu_interleaved(provs, warmup=(2 if env.quick else 5) if warmup is None else warmup,
                                                  reps=reps or (6 if env.quick else 30), rounds=2 if env.quick else 3,
                                                  cold=l2 == "cold")
    else:
        import numpy as np
        res, errors = {}, {}
        for name, fn in provs.items():
            try:   # NumPy's float32 normals include exact zeros: div's x / 0 = inf is no news here
                with np.errstate(divide="ignore", invalid="ignore"):
                    res[name] = timing.time_cpu(fn, warmup=1 if warmup is None else warmup,
                                                reps=reps or (3 if env.quick else 10))
            except Exception as e:  # noqa: BLE001 -- a provider without this dtype or op
                errors[name] = e
    del provs
    for name, e in errors.items():
        if name == "cudakit":
            raise e
        print(f"  {name} skipped for {case.label}: {type(e).__name__}: {str(e)[:120]}", file=sys.stderr)
    if env.gpu:
        env.xp.get_default_memory_pool().free_all_blocks()
    return res


def device_record(env: Env) -> dict:
    if env.gpu:
        import cudakit
        d = cudakit.get_device_info()
        return {"kind": "gpu", **d.as_dict()}
    return {"kind": "cpu", "name": platform.processor() or platform.machine(), "cores": os.cpu_count()}


def tuned_shapes(env: Env) -> int | None:
    """How many elementwise (op, dtype) kernel shapes `cudakit tune` stored for this GPU (0: the
    shipped ones ran); None on the CPU backend."""
    if not env.gpu:
        return None
    from ..kernels import ew_shapes
    return len(ew_shapes.shapes(env.xp.cuda.runtime.getDevice()))


def versions(env: Env) -> dict:
    from cudakit.cli import _version
    import cudakit
    v = {"cudakit": cudakit.__version__, "python": platform.python_version(), "numpy": _version("numpy")}
    for mod, dist in (("cupy", "cupy-cuda13x"), ("torch", "torch"), ("triton", "triton")):
        v[mod] = _version(dist) or _version(mod)
    return v


def run(ops=(), dtypes=("float32", "bfloat16"), quick: bool = False, compare=("torch", "cupy", "numpy"),
        cpu: bool = False, reps: int | None = None, warmup: int | None = None, check: bool = False,
        cpu_baseline: bool = False, progress: bool = True, log=None, command: str | None = None,
        l2: str = "cold") -> dict:
    """Run the benchmark cases in this process and return the record `cudakit bench` writes to
    results.json: {"date", "command", "device", "versions", "copy_bandwidth_gbs", "matmul_peak_tflops",
    "roof_gbs", "roof_tflops" (roof.py; None on the CPU), "not_compared" ({provider: why} for each
    `compare` provider no row measured), ..., "rows": [one dict per case: op, shape, dtype, providers'
    timings, gbs, x_torch, of_copy_bw / of_peak (fractions of the roofs), ... and "check" /
    "cpu_baseline" when asked]}. The arguments are the CLI's (`cudakit bench --help`), as
    Python values: ops and dtypes as sequences of names (ops empty: all). log(line) receives the
    device line; progress shows a bar on stderr when stderr is a terminal. Bad arguments raise
    before anything is measured (validate); unknown ops ArgumentError (a ValueError) naming the
    known ones.
    format_table(record) renders it as the CLI prints it.
    """
    validate(dtypes, compare, ops, reps, warmup, l2)
    compare = set(compare)
    env = make_env(quick, cpu, tuple(dict.fromkeys(dtypes)) or ("float32", "bfloat16"), compare)
    cases = select_cases(env, ops)
    copy_bytes = (1 << 30) if env.gpu and not env.quick else (1 << 26) if env.gpu else (1 << 26 if not quick else 1 << 24)
    copy_bw = timing.copy_bandwidth(env.gpu, copy_bytes)
    peak, peak_dtype = timing.matmul_peak(env.gpu, 4096 if env.quick else 8192)
    if log is not None:
        log(f"device: {device_record(env)['name']} ({'GPU' if env.gpu else 'CPU backend'}); "
            f"measured copy bandwidth {copy_bw / 1e9:.0f} GB/s, matmul {peak / 1e12:.1f} TFLOP/s ({peak_dtype})")
    rows = []
    step = _progress(len(cases)) if progress and sys.stderr.isatty() else (lambda label: None)
    for case in cases:
        step(case.label)
        res = run_case(case, env, compare, reps, warmup, l2)
        rows.append(_row(case, res))
        if check and case.check is not None:
            rows[-1]["check"] = _check(case, env)
        if cpu_baseline and env.gpu and case.check is not None:
            from . import cpu_baseline as cpu_base
            rows[-1]["cpu_baseline"] = cpu_base.measure(case)
            env.xp.get_default_memory_pool().free_all_blocks()
    step(None)
    record = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "command": command or "cudakit.bench.run()", "device": device_record(env), "versions": versions(env),
              "copy_bandwidth_gbs": copy_bw / 1e9, "matmul_peak_tflops": peak / 1e12,
              "matmul_peak_dtype": peak_dtype, "quick": env.quick, "l2": l2 if env.gpu else None,
              "tuned_elementwise_shapes": tuned_shapes(env), "rows": rows}
    record["not_compared"] = not_compared(record, compare, env)
    return roof.apply(record)


def not_compared(record: dict, compare: set, env: Env) -> dict:
    """{provider: why} for each --compare provider that no row of the run measured."""
    import importlib.util
    seen = {p for r in record["rows"] for p in r["providers"]}
    out = {}
    for p in sorted(set(compare) - seen):
        if importlib.util.find_spec(p) is None:
            out[p] = f"{p} is not installed"
        elif p in ("torch", "cupy", "triton") and not env.gpu:
            out[p] = f"{p} is compared on GPU runs only (this run is on the CPU backend)"
        elif p == "torch" and env.torch is None:
            out[p] = "torch is installed but cannot use the GPU (torch.cuda.is_available() is False)"
        else:
            out[p] = f"none of the selected ops has a {p} version"
    return out


def main(args) -> int:
    from cudakit.errors import CudakitError
    split = lambda v: tuple(x.strip() for x in v.split(",") if x.strip())  # noqa: E731
    try:   # every argument and setting checked before --out is created
        validate(split(args.dtype), split(args.compare), split(args.ops), args.reps, args.warmup, args.l2)
        select_cases(make_env(args.quick, args.cpu, split(args.dtype) or ("float32", "bfloat16"), set()),
                     split(args.ops))
    except (ValueError, CudakitError) as e:
        print(f"cudakit bench: {e}", file=sys.stderr)
        return 2
    out_dir = Path(args.out)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        print(f"cudakit bench: cannot write to --out {out_dir.resolve()}: {e.strerror or e}", file=sys.stderr)
        return 2
    try:
        record = run(split(args.ops), split(args.dtype), args.quick, split(args.compare), args.cpu, args.reps,
                     args.warmup, args.check, args.cpu_baseline, log=lambda line: print(line, flush=True),
                     command="cudakit bench " + " ".join(sys.argv[2:] if sys.argv[1:2] == ["bench"] else sys.argv[1:]),
                     l2=args.l2)
    except (ValueError, CudakitError) as e:
        print(f"cudakit bench: {e}", file=sys.stderr)
        return 2
    rows = record["rows"]
    for p, why in record["not_compared"].items():
        print(f"cudakit bench: --compare {p}: not measured: {why}", file=sys.stderr)
    if args.cpu_baseline and record["device"]["kind"] == "cpu":
        print("cudakit bench: --cpu-baseline compares the GPU with the CPU backend; this run is on the CPU backend, "
              "so it was skipped", file=sys.stderr)
    (out_dir / "results.json").write_text(json.dumps(record, indent=1))
    written = plots.write_all(rows, record["roof_gbs"], record["device"]["name"], out_dir)
    print(format_table(record))
    have_mpl = plots.available()
    print(f"wrote {out_dir / 'results.json'}" + (f" and {len(written)} plots" if written else
                                                 " (no plots: install the bench extra for matplotlib)" if not have_mpl
                                                 else " (no plots: no row has data to plot)"))
    if args.check:
        checked = [r for r in rows if "check" in r]
        failed = [f"{r['op']} {'x'.join(map(str, r['shape']))} {r['dtype']}" for r in checked if not r["check"]["ok"]]
        print(f"accuracy: {len(checked)} of {len(rows)} cases checked against cudakit's CPU backend in float64, "
              f"{len(failed)} over tolerance" + (": " + ", ".join(failed) if failed else ""))
        return 1 if failed else 0
    return 0


def _check(case, env: Env) -> dict:
    """accuracy.check(case); an exception is a failed check that names it."""
    from . import accuracy
    try:
        return accuracy.check(case)
    except Exception as e:  # noqa: BLE001 -- reported in the row and the summary, not raised
        return {"max_error": None, "tolerance": None, "ok": False, "error": f"{type(e).__name__}: {e}"[:300]}
    finally:
        if env.gpu:
            env.xp.get_default_memory_pool().free_all_blocks()


def _row(case, res) -> dict:
    row = {"op": case.op, "family": case.family, "shape": list(case.shape), "dtype": case.dtype,
           "mode": case.mode, "sweep": case.sweep, "nbytes": case.nbytes, "flops": case.flops, "note": case.note, "providers": res}
    if case.skip:
        row["skipped"] = case.skip
    if case.info:
        row["info"] = case.info
    ck = res.get("cudakit")
    if ck:
        t = ck["median_ms"] * 1e-3
        row["gbs"] = case.nbytes / t / 1e9
        row["tflops"] = case.flops / t / 1e12 if case.flops else None
        for p in PROVIDERS[1:]:
            if p in res:
                # > 1: cudakit is faster
                row[f"x_{p}"] = res[p]["median_ms"] / ck["median_ms"]
    return row


def format_table(record: dict) -> str:
    checked = any("check" in r for r in record["rows"])
    roofed = any(r.get("of_peak") or r.get("of_copy_bw") for r in record["rows"])
    shape = lambda r: "x".join(map(str, r["shape"]))  # noqa: E731
    wo = max([22] + [len(r["op"]) for r in record["rows"]])      # columns as wide as the longest name
    ws = max([14] + [len(shape(r)) for r in record["rows"]])
    hdr = (f"{'op':<{wo}} {'shape':<{ws}} {'dtype':<9} {'time':>10} {'GB/s':>8} {'TFLOP/s':>8}"
           + (f" {'%roof':>6}" if roofed else "") + f" {'x torch':>8} {'x cupy':>7} {'x numpy':>8} {'x triton':>8}")
    hdr += f" {'max err':>12}" if checked else ""
    cpu = any("cpu_baseline" in r for r in record["rows"])
    hdr += f" {'x cpu':>8}" if cpu else ""
    lines = [hdr, "-" * len(hdr)]
    for r in record["rows"]:
        ck = r["providers"].get("cudakit")
        if r.get("skipped"):
            lines.append(f"{r['op']:<{wo}} {shape(r):<{ws}} {r['dtype']:<9} skipped: {r['skipped']}")
            continue
        if not ck:
            continue
        unit = "us/call" if r["mode"] == "host" else "ms"
        tval = ck["median_ms"] * (1e3 if r["mode"] == "host" else 1)
        f = lambda k: f"{r[k]:.2f}" if r.get(k) else "-"  # noqa: E731
        frac = r.get("of_peak") or r.get("of_copy_bw")
        pct = f"{100 * frac:.0f}%" if frac else "-"
        tflops = f"{r['tflops']:.1f}" if r.get("tflops") else "-"
        lines.append(f"{r['op']:<{wo}} {shape(r):<{ws}} {r['dtype']:<9} "
                     f"{tval:>7.3f}{'us' if unit == 'us/call' else 'ms':>3} {r['gbs'] if r['mode'] == 'device' else 0:>8.0f} "
                     f"{tflops:>8}" + (f" {pct:>6}" if roofed else "")
                     + f" {f('x_torch'):>8} {f('x_cupy'):>7} {f('x_numpy'):>8} {f('x_triton'):>8}"
                     + (f" {_check_cell(r.get('check')):>12}" if checked else "")
                     + (f" {_cpu_cell(r.get('cpu_baseline')):>8}" if cpu else ""))
    lines.append("x P = P's time / cudakit's time (> 1: cudakit faster)."
                 + (" %roof = GB/s over the run's copy roof (memory-bound ops) or TFLOP/s over its matmul roof (ops "
                    "with FLOPs); a roof is the measured copy or matmul rate, or the best rate any provider reached "
                    "in the run where that is higher." if roofed else
                    " No %roof: a CPU run has no single memory roof (caches)."
                    if record.get("device", {}).get("kind") == "cpu" else ""))
    if checked:
        lines.append("max err = max |cudakit - cudakit's CPU backend in float64| / max |that| (--check: the "
                     "same inputs as float64 copies; on a CPU run, the code against itself in float64); ! = over "
                     "the dtype's tolerance, - = not checked.")
    if cpu:
        lines.append("x cpu = cudakit's CPU backend time / its GPU time, same inputs of at most 2^22 elements each "
                     "(--cpu-baseline).")
    for r in record["rows"]:
        if r.get("info"):
            lines.append(f"{r['op']} {shape(r)} {r['dtype']}: "
                         + "; ".join(f"{k} {v}" for k, v in r["info"].items()))
    return "\n".join(lines)


def _cpu_cell(c) -> str:
    return f"{c['x_cpu']:.0f}" if c and c.get("x_cpu") else "-"


def _check_cell(c) -> str:
    if c is None:
        return "-"
    if c.get("max_error") is None:
        return "error!"
    return f"{c['max_error']:.1e}" + ("" if c["ok"] else "!")


def _progress(total: int):
    try:
        from tqdm import tqdm
        bar = tqdm(total=total, unit="case", file=sys.stderr, leave=False)
    except ImportError:
        bar = None
    state = {"i": 0}

    def step(label):
        if label is None:
            if bar:
                bar.close()
            return
        if bar:
            if state["i"]:
                bar.update(1)
            bar.set_description(label)
        else:
            print(f"[{state['i'] + 1}/{total}] {label}", file=sys.stderr, flush=True)
        state["i"] += 1
    return step
