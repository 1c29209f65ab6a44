"""`cudakit info | cache info | cache clear | cache warm | bench | tune | selftest | report | run`: the command
line. The only module that prints."""
from __future__ import annotations

import argparse
import json
import logging
import platform
import sys
import time


def _version(mod: str) -> str | None:
    try:
        from importlib.metadata import version
        return version(mod)
    except Exception:
        return None


def collect_info() -> dict:
    """Everything `cudakit info` reports, as a dict."""
    import numpy as np

    import cudakit
    from cudakit import config
    from cudakit.errors import CacheError, ConfigError
    from cudakit.runtime import _cupy, compiler

    try:
        config.settings()
        config_error = None
    except ConfigError as e:   # shown, and the rest of the report still made
        config_error = str(e)
    try:
        cache = compiler.cache_info() if config_error is None else {"path": None, "error": "see config_error"}
    except CacheError as e:
        cache = {"path": str(config.settings().cache_dir), "error": str(e)}
    ok, reason = _cupy.probe()
    info = {
        "cudakit": cudakit.__version__, "python": platform.python_version(),
        "platform": platform.platform(), "numpy": np.__version__,
        "ml_dtypes": _version("ml_dtypes"), "cupy": _version("cupy-cuda13x") or _version("cupy-cuda12x") or _version("cupy"),
        "triton": _version("triton"), "numba_cuda": _version("numba-cuda"), "torch": _version("torch"),
        "cuda_usable": ok, "reason": reason, "backend": None, "backend_reason": None,
        "cuda_driver": None, "cuda_runtime": None, "nvrtc": None, "devices": [],
        "cache": cache, "native_launcher": "not used (no GPU)", "config_error": config_error,
        "fallbacks": {},
    }
    try:
        be = cudakit.get_backend()
        info["backend"] = be.name
        info["backend_reason"] = reason if be.name == "cuda" or not ok else "CUDAKIT_BACKEND=cpu"
    except (cudakit.BackendUnavailableError, ConfigError) as e:
        info["backend"], info["backend_reason"] = "unavailable", str(e)
    if ok and config_error is None:
        cp = _cupy.cupy()
        info["cuda_driver"] = _fmt_cuda(cp.cuda.runtime.driverGetVersion())
        info["cuda_runtime"] = _fmt_cuda(cp.cuda.runtime.runtimeGetVersion())
        try:
            info["nvrtc"] = ".".join(map(str, compiler.nvrtc_version()))
        except Exception as e:
            info["nvrtc"] = f"unavailable ({e})"
        from .runtime import native
        native.launcher()  # builds it on first use (cached on disk)
        info["native_launcher"] = native.status()
        for d in cudakit.devices():
            dd = d.as_dict()
            with cudakit.device(d.index):
                dd["memory_free"], _ = cudakit.memory_info()
            from .kernels import ew_shapes
            dd["tuned_elementwise_shapes"] = len(ew_shapes.shapes(d.index))
            info["devices"].append(dd)
    info["settings"] = {}
    if config_error is None:   # the settings that pick paths (docs/guide/configuration.md)
        st = config.settings()
        info["settings"] = {"float32_precision": config.float32_precision(), "attention_dropout": st.attention_dropout,
                            "cudnn": st.cudnn, "dispatch_plans": st.dispatch_plans, "autotune": st.autotune,
                            "attention_f16_parts": st.attention_f16_parts, "pdl": st.pdl,
                            "bn_single_read": st.bn_single_read}
    from cudakit import fallbacks
    info["fallbacks"] = fallbacks.taken()
    info["cudnn"], info["paths"], info["paths_kept"] = None, {}, {}
    if config_error is None:
        from cudakit.kernels import cudnn, paths
        info["cudnn"] = cudnn.version() if cudnn.available() else f"not used: {cudnn.why_unavailable()}"
        info["paths"] = paths.last_paths()
        if ok:   # (the choices on disk are per GPU model: asked only with a usable GPU)
            try:
                info["paths_kept"] = paths.kept()
            except CacheError as e:
                info["paths_kept"] = {"error": str(e)}
    if ok and config_error is None:
        from cudakit.kernels import conv
        if not conv.available():   # what conv2d will do, before any call takes the path
            info["fallbacks"].setdefault("conv2d:triton", "conv2d runs as im2col + cuBLAS (R*S times the input's "
                                                          "memory): Triton is not installed")
    return info


def _fmt_cuda(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def _gib(n) -> str:
    return f"{n / 2**30:.1f} GiB"


def cmd_info(args) -> int:
    info = collect_info()
    if args.json:
        print(json.dumps(info, indent=2))
        return 1 if info["config_error"] else 0
    print(f"cudakit {info['cudakit']}  (Python {info['python']}, NumPy {info['numpy']})")
    if info["config_error"]:
        print(f"configuration error: {info['config_error']}")
    print("packages: " + ", ".join(f"{k} {info[k] or '-'}" for k in ("cupy", "triton", "numba_cuda", "torch")))
    if info["cuda_usable"]:
        print(f"CUDA: driver {info['cuda_driver']}, runtime {info['cuda_runtime']}, NVRTC {info['nvrtc']}")
    else:
        print(f"CUDA: no GPU found — {info['reason']}")
    print(f"backend: {info['backend']} ({info['backend_reason']})")
    for d in info["devices"]:
        cc = ".".join(map(str, d["compute_capability"]))
        bw = d["peak_memory_bandwidth"]
        print(f"  cuda:{d['index']}  {d['name']}  sm_{cc.replace('.', '')}  {d['multiprocessors']} SMs  "
              f"{_gib(d['total_memory'])} ({_gib(d['memory_free'])} free)  L2 {d['l2_cache_size'] / 2**20:.0f} MiB"
              + (f"  datasheet {bw / 1e12:.2f} TB/s" if bw else ""))
        tuned = d["tuned_elementwise_shapes"]
        print(f"          PCI {d['pci_bus_id']}  {d['uuid']}  elementwise shapes: "
              + (f"{tuned} tuned (cudakit tune)" if tuned else "as shipped"))
    c = info["cache"]
    if "error" in c:
        print(f"kernel cache: {c['path'] or '-'}: {c['error']}")
    else:
        print(f"kernel cache: {c['path']} ({c['entries']} files, {c['bytes'] / 2**20:.1f} MiB)")
    st = info["settings"]
    if st:
        on = {True: "on", False: "off"}
        print(f"settings: float32 precision {st['float32_precision']}, attention dropout stream "
              f"{st['attention_dropout']}, cuDNN {st['cudnn']}, dispatch plans {on[st['dispatch_plans']]}, "
              f"autotune {on[st['autotune']]}, float32 attention on float16 parts "
              f"{on[st['attention_f16_parts']]}, programmatic dependent launch {on[st['pdl']]}, "
              f"single-read batch norm {on[st['bn_single_read']]}")
    print(f"native launcher: {info['native_launcher']}")
    print(f"cuDNN: {info['cudnn'] or '-'}")
    for op, path in info["paths"].items():
        print(f"path {op}: {path}")
    for op, counts in info["paths_kept"].items():   # (this process's choices and those kept on disk)
        if op == "error":
            print(f"paths kept: unreadable ({counts})")
            continue
        print(f"paths kept for {op}: " + ", ".join(f"{p} {n} signature{'s' if n > 1 else ''}"
                                                   for p, n in sorted(counts.items())))
    for key, why in info["fallbacks"].items():
        print(f"fallback {key}: {why}")
    if not info["cuda_usable"]:
        print("The CPU backend (NumPy) runs every op; install a GPU build with: pip install 'cudakit[cuda13]'")
    return 1 if info["config_error"] else 0


def cmd_cache(args) -> int:
    from cudakit.errors import CacheError, ConfigError
    try:
        return _cache_cmd(args)
    except (CacheError, ConfigError) as e:
        print(f"cudakit cache {args.action}: {e}", file=sys.stderr)
        return 2


def _cache_cmd(args) -> int:
    from cudakit.runtime import compiler
    if args.action == "clear":
        n = compiler.cache_clear()
        print(f"removed {n} files from {compiler.cache_dir()}")
    elif args.action == "warm":
        return _cache_warm(args)
    else:
        c = compiler.cache_info()
        if args.json:
            print(json.dumps(c))
        else:
            print(f"{c['path']}: {c['entries']} files, {c['bytes'] / 2**20:.2f} MiB")
    return 0


def _cache_warm(args) -> int:
    from cudakit.kernels import warmup
    from cudakit.runtime import _cupy, compiler
    ok, why = _cupy.probe()
    if not ok:
        print(f"cudakit cache warm: no usable CUDA GPU ({why}); nothing to compile", file=sys.stderr)
        return 2
    split = lambda v: [x.strip() for x in v.split(",") if x.strip()] or None  # noqa: E731
    try:
        times = warmup.warm_up_kernels(split(args.families), split(args.dtype), "all" if args.all_devices else None)
    except ValueError as e:
        print(f"cudakit cache warm: {e}", file=sys.stderr)
        return 2
    for label, t in times.items():
        print(f"{label:<28} {t:8.2f} s")
    print(f"{len(times)} kernel families ready; the compiled kernels are in {compiler.cache_dir()}")
    return 0


def cmd_bench(args) -> int:
    from cudakit.bench import runner
    return runner.main(args)


def cmd_tune(args) -> int:
    from cudakit.kernels import elementwise as ew
    from cudakit.runtime import _cupy
    ok, why = _cupy.probe()
    if not ok:
        print(f"cudakit tune: no usable CUDA GPU ({why}); nothing to tune", file=sys.stderr)
        return 2
    from cudakit.bench.tune import tune_elementwise

    dev = _cupy.cupy().cuda.runtime.getDevice()

    def show(op, dtype, best, med):
        static = ew.contig_config(op, dtype, dev)   # what the GPU launched untuned (its model's table)
        vs = f"  {med[static] / med[best]:.3f}x the untuned {static}" if static in med else ""
        cap = f"cap={best[2]}" if best[2] else "uncapped"
        print(f"{op:<22} {dtype:<9} U={best[0]} threads={best[1]:<5} {cap:<8} {med[best]:.4f} ms{vs}", flush=True)
    ops = set(args.ops.split(",")) if args.ops else None
    _, path, _ = tune_elementwise(ops, tuple(args.dtype.split(",")), args.rounds, progress=show)
    print(f"wrote {path}")
    return 0


def cmd_selftest(args) -> int:
    from cudakit import selftest
    from cudakit.runtime import _cupy
    ok, why = _cupy.probe()
    if not ok:
        print(f"cudakit selftest: no usable CUDA GPU ({why}); nothing to test", file=sys.stderr)
        return 2
    fams = [f.strip() for f in args.families.split(",") if f.strip()] or None
    if args.sanitize:
        inner = (["--quick"] if args.quick else []) + (["--families", args.families] if fams else [])
        tools = [t.strip() for t in args.tools.split(",") if t.strip()]
        try:
            res = selftest.sanitize(inner, tools, log=lambda line: print(f"running: {line}", flush=True))
        except (ValueError, FileNotFoundError) as e:
            print(f"cudakit selftest --sanitize: {e}", file=sys.stderr)
            return 2
        for tool, r in res.items():
            n = "no summary (see below)" if r["errors"] is None else f"{r['errors']} errors"
            print(f"{tool:<10} {n:<24} {r['seconds']:8.1f} s  (exit status {r['returncode']})")
            if r["errors"] != 0:
                print(r["tail"])
        return 0 if all(r["errors"] == 0 for r in res.values()) else 1
    t0 = time.perf_counter()

    def show(r):
        if not r.ok or args.verbose:
            err = "raised" if r.error is None else f"{r.error:.2e}"
            print(f"{'ok  ' if r.ok else 'FAIL'} {r.case.family:<13} {r.case.label:<48} {err} (tol {r.tolerance:.1e})"
                  + (f" {r.message}" if r.message else ""), flush=True)
    results = selftest.run("cuda", "cpu", args.quick, fams, progress=show)
    bad = [r for r in results if not r.ok]
    fams_run = sorted({r.case.family for r in results})
    print(f"selftest: {len(results) - len(bad)} of {len(results)} calls match the CPU backend across "
          f"{len(fams_run)} families ({', '.join(fams_run)}) in {time.perf_counter() - t0:.1f} s")
    return 1 if bad else 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cudakit", description="cudakit: CUDA kernels for Python, with a NumPy fallback")
    verbose = {"action": "store_true", "help": "log at INFO (why a backend was chosen, compiles)"}
    p.add_argument("-v", "--verbose", **verbose)
    common = argparse.ArgumentParser(add_help=False)   # -v after the command too: `cudakit info -v`
    common.add_argument("-v", "--verbose", default=argparse.SUPPRESS, **verbose)
    sub = p.add_subparsers(dest="command")

    def add(name, **kw):
        return sub.add_parser(name, parents=[common], **kw)
    pi = add("info", help="versions, backend, devices, cache")
    pi.add_argument("--json", action="store_true")
    pi.set_defaults(fn=cmd_info)
    pc = add("cache", help="the compiled-kernel cache")
    pc.add_argument("action", choices=["info", "clear", "warm"], nargs="?", default="info",
                    help="warm: compile the CUDA C++ kernel families now (cudakit.warm_up_kernels)")
    pc.add_argument("--json", action="store_true")
    pc.add_argument("--families", default="", help="warm: comma-separated kernel families (default: all)")
    pc.add_argument("--dtype", default="", help="warm: dtypes of the per-dtype families (default: all)")
    pc.add_argument("--all-devices", action="store_true", help="warm: load on every visible GPU, not the current one")
    pc.set_defaults(fn=cmd_cache)
    pb = add("bench", help="benchmark ops against the copy bandwidth, torch, CuPy, NumPy")
    from cudakit.bench.runner import add_arguments
    add_arguments(pb)
    pb.set_defaults(fn=cmd_bench)
    pt = add("tune", help="measure the elementwise kernels' shapes on this GPU (kept per GPU)")
    pt.add_argument("--ops", default="", help="comma-separated bench labels (add,relu,gelu,...); default: all")
    pt.add_argument("--dtype", default="float32,bfloat16", help="comma-separated dtypes")
    pt.add_argument("--rounds", type=int, default=3, help="rounds over the candidate shapes (median)")
    pt.set_defaults(fn=cmd_tune)
    ps = add("selftest", help="a call of every kernel family, dtype and variant on the GPU, checked against "
                                         "the CPU backend; --sanitize: under compute-sanitizer's four tools")
    ps.add_argument("--sanitize", action="store_true", help="run the selftest under compute-sanitizer memcheck, "
                    "racecheck, synccheck and initcheck and report each tool's error count")
    ps.add_argument("--tools", default=",".join(("memcheck", "racecheck", "synccheck", "initcheck")),
                    help="--sanitize: comma-separated tools")
    ps.add_argument("--quick", action="store_true", help="smaller shapes (the same kernel variants)")
    ps.add_argument("--families", default="", help="comma-separated families (default: all)")
    ps.set_defaults(fn=cmd_selftest)
    pr = add("report", help="regenerate BENCHMARKS.md and its plots from benchmarks/results/")
    pr.add_argument("--results", default="benchmarks/results")
    pr.add_argument("--output", default="BENCHMARKS.md")
    pr.add_argument("--docs", default=None,
                    help="the documentation site's generated results page (default: docs/guide/results.md beside "
                         "the results folder's benchmarks/, when that folder exists; '' for none)")
    pr.add_argument("--plots", default=None,
                    help="folder for the plots, one subfolder per GPU model (default: plots/ beside --results)")
    pr.add_argument("--no-plots", action="store_true", help="tables only")
    pr.add_argument("--archive", action="store_true",
                    help="move the runs that are not rendered (older of their kind, --quick) to <results>/history/")
    pr.set_defaults(fn=cmd_report)
    pk = add("compile", help="compile CUDA C++ files to PTX (cudakit.compile_ptx); without a GPU when --arch is given")
    pk.add_argument("sources", nargs="+", help=".cu files; kernels declared extern \"C\" keep their names")
    pk.add_argument("-o", "--output", default=None,
                    help="the .ptx file (one source) or a folder (default: each source's path with .ptx)")
    pk.add_argument("--arch", default=None, help="sm_90 or compute_90 (default: the current GPU's)")
    pk.add_argument("--compiler", choices=("nvrtc", "nvcc"), default="nvrtc",
                    help="nvrtc: the NVRTC library CuPy ships; nvcc: the CUDA toolkit's (CUDA_HOME/bin or the PATH)")
    pk.add_argument("-X", "--option", action="append", default=[], dest="options",
                    help="a compiler option, repeatable; one starting with - as -X=-lineinfo")
    pk.set_defaults(fn=cmd_compile)
    pn = add("run", help="launch a script on N ranks per node (torchrun's environment; cudakit.distributed)")
    from cudakit.distributed.launcher import add_arguments as add_run_arguments
    add_run_arguments(pn)
    pn.set_defaults(fn=cmd_run)
    return p


def _ptx_paths(sources: list, output) -> list:
    """Where `cudakit compile` writes each source's PTX: --output itself for one source that is not
    a folder, else <folder>/<stem>.ptx; without --output, the source's path with .ptx."""
    from pathlib import Path
    srcs = [Path(s) for s in sources]
    if output is None:
        return [s.with_suffix(".ptx") for s in srcs]
    out = Path(output)
    if len(srcs) == 1 and not out.is_dir():
        return [out]
    if len({s.stem for s in srcs}) < len(srcs):
        raise OSError(f"sources with the same name would write one {out}/<name>.ptx: "
                      f"{', '.join(sorted(str(s) for s in srcs))}")
    return [out / f"{s.stem}.ptx" for s in srcs]


def cmd_compile(args) -> int:
    from pathlib import Path

    from cudakit.errors import BackendUnavailableError, CompileError, CudakitError
    from cudakit.runtime.compiler import compile_ptx
    for src, dst in zip(args.sources, _ptx_paths(args.sources, args.output)):
        path = Path(src)
        try:
            compile_ptx(path.read_text(), path=dst, options=args.options, arch=args.arch, source_name=path.name,
                        compiler=args.compiler)
        except CompileError as e:
            print(f"cudakit compile: {src}: {e}", file=sys.stderr)
            return 1
        except (CudakitError, ValueError) as e:   # (BackendUnavailableError among them: the hint below)
            hint = " (here: --arch sm_90, say)" if isinstance(e, BackendUnavailableError) and args.arch is None else ""
            print(f"cudakit compile: {e}{hint}", file=sys.stderr)
            return 2
        print(f"{src} -> {dst}")
    return 0


def cmd_run(args) -> int:
    from cudakit.distributed import launcher
    return launcher.main(args, lambda msg: print(msg, file=sys.stderr, flush=True))


def cmd_report(args) -> int:
    from cudakit.bench import report
    return report.main(args)


def main(argv=None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not getattr(args, "fn", None):
        p.print_help()
        return 0
    try:
        return args.fn(args)
    except OSError as e:   # a path the command cannot read or write (--output in a missing folder): one line
        print(f"cudakit {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
