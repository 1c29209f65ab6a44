"""The attention sweeps' shared command line and cases: --cases a,b,... (else the sweep's own), --tag
name, and a case dtype:BxHxLxD[c] (a trailing c for causal) made into CuPy operands."""
DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}


def cases_and_tag(argv: list, default: list) -> tuple[list, str]:
    """(the cases after --cases, split at commas, else `default`; the name after --tag, else "")."""
    cases = argv[argv.index("--cases") + 1].split(",") if "--cases" in argv else default
    return cases, (argv[argv.index("--tag") + 1] if "--tag" in argv else "")


def shapes_arg(argv: list, default: list) -> list:
    """The (B, H, L, D) shapes after --shapes (BxHxLxD, split at commas), else `default`."""
    if "--shapes" not in argv:
        return default
    return [tuple(int(x) for x in s.split("x")) for s in argv[argv.index("--shapes") + 1].split(",")]


def attention_case(spec: str, n: int = 4):
    """(dtype name, causal, (B, H, L, D), n standard-normal (B, H, L, D) CuPy arrays of that dtype, drawn
    from a generator seeded 0) of a case dtype:BxHxLxD[c]."""
    import cupy as cp
    dt, dims = spec.split(":")
    causal = dims.endswith("c")
    shape = tuple(int(x) for x in dims.rstrip("c").split("x"))
    dtype = DTYPES[dt]
    rng = cp.random.default_rng(0)
    return dtype, causal, shape, [rng.standard_normal(shape, dtype=cp.float32).astype(dtype) for _ in range(n)]


def timed_row(label: str, spec: str, tag: str, fns: dict) -> dict:
    """A case's row: fns {name: call} timed by bench.timing (each call behind an L2 flush, interleaved,
    medians; a failed one printed as a VARIANT failed line), each name's median as name_ms, x_torch
    (torch_ms / cudakit_ms) and x_torch_fwd (the same of the *_fwd names) where both were timed, and
    the paths attention and attention_backward last ran (paths.last_paths); printed as a VARIANT
    line starting with `label`."""
    from cudakit.bench import timing
    from cudakit.kernels import paths
    res, err = timing.time_gpu_interleaved(fns, warmup=3, reps=12, rounds=3, cold=True)
    for name, e in err.items():
        print(f"VARIANT failed {spec} {name}: {type(e).__name__}: {str(e)[:150]}", flush=True)
    row = {"case": spec, **{f"{n}_ms": round(r["median_ms"], 4) for n, r in res.items()}, "form": tag}
    for side in ("", "_fwd"):
        if f"torch{side}_ms" in row and f"cudakit{side}_ms" in row:
            row[f"x_torch{side}"] = round(row[f"torch{side}_ms"] / row[f"cudakit{side}_ms"], 3)
    row["paths"] = {op: paths.last_paths().get(op) for op in ("attention", "attention_backward")}
    nan = float("nan")
    print(f"VARIANT {label} {tag:<4} {spec:<26} bwd: torch {row.get('torch_ms', nan):.4f} cudakit "
          f"{row.get('cudakit_ms', nan):.4f} ms x torch {row.get('x_torch', nan):.3f}  fwd: cudakit "
          f"{row.get('cudakit_fwd_ms', nan):.4f} ms x torch {row.get('x_torch_fwd', nan):.3f}  paths {row['paths']}",
          flush=True)
    return row
