import json
import os
import re
import subprocess
import sys

import pytest


def run(*args, env=None):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "cudakit", *args], capture_output=True, text=True, env=e)


def test_info_text_and_json(tmp_path):
    r = run("info", env={"CUDAKIT_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert "cudakit" in r.stdout and "backend:" in r.stdout and "kernel cache" in r.stdout
    j = json.loads(run("info", "--json").stdout)
    assert {"cudakit", "devices", "backend", "cuda_usable"} <= set(j)
    if not j["cuda_usable"]:
        assert "no GPU found" in r.stdout and "backend: cpu" in r.stdout


def test_info_names_the_settings_that_pick_paths(tmp_path):
    """`cudakit info` names the float32 precision, attention's dropout stream (cuDNN's by default),
    the cuDNN setting, dispatch plans, autotuning, the float16-parts forward, programmatic
    dependent launch and the single-read batch norm, as set in the environment."""
    env = {"CUDAKIT_CACHE_DIR": str(tmp_path), "CUDAKIT_ATTENTION_DROPOUT": "cudakit", "CUDAKIT_AUTOTUNE": "0",
           "CUDAKIT_ATTENTION_F16_PARTS": "0", "CUDAKIT_PDL": "0", "CUDAKIT_BN_SINGLE_READ": "0"}
    r = run("info", env=env)
    assert r.returncode == 0, r.stderr
    assert "attention dropout stream cudakit" in r.stdout and "autotune off" in r.stdout, r.stdout
    assert "float32 attention on float16 parts off" in r.stdout, r.stdout
    assert "programmatic dependent launch off" in r.stdout and "single-read batch norm off" in r.stdout, r.stdout
    e = {k: v for k, v in os.environ.items()
         if k not in ("CUDAKIT_ATTENTION_DROPOUT", "CUDAKIT_FLOAT32_PRECISION", "CUDAKIT_ATTENTION_F16_PARTS",
                      "CUDAKIT_PDL", "CUDAKIT_BN_SINGLE_READ")}
    j = json.loads(subprocess.run([sys.executable, "-m", "cudakit", "info", "--json"], capture_output=True,
                                  text=True, env=dict(e, CUDAKIT_CACHE_DIR=str(tmp_path))).stdout)
    assert j["settings"]["attention_dropout"] == "cudnn" and j["settings"]["float32_precision"] == "tf32x3"
    assert j["settings"]["attention_f16_parts"] is True and j["settings"]["pdl"] is True
    assert j["settings"]["bn_single_read"] is True


def test_cache_info_and_clear(tmp_path):
    (tmp_path / ".cudakit-cache").write_text("")
    (tmp_path / "nvrtc").mkdir()
    (tmp_path / "nvrtc" / "x.bin").write_bytes(b"123")
    env = {"CUDAKIT_CACHE_DIR": str(tmp_path)}
    assert json.loads(run("cache", "info", "--json", env=env).stdout)["entries"] == 1
    r = run("cache", "clear", env=env)
    assert "removed 1 files" in r.stdout
    assert not (tmp_path / "nvrtc").exists()


def test_clear_kernel_cache_from_python(tmp_path, monkeypatch):
    import cudakit
    from cudakit import config
    (tmp_path / ".cudakit-cache").write_text("")
    (tmp_path / "nvrtc").mkdir()
    (tmp_path / "nvrtc" / "x.bin").write_bytes(b"123")
    (tmp_path / "tune").mkdir()
    (tmp_path / "tune" / "t.json").write_text("{}")
    monkeypatch.setenv("CUDAKIT_CACHE_DIR", str(tmp_path))
    config.reload()
    try:
        assert cudakit.clear_kernel_cache() == 1
        assert not (tmp_path / "nvrtc").exists() and (tmp_path / "tune" / "t.json").exists()
    finally:
        monkeypatch.delenv("CUDAKIT_CACHE_DIR")
        config.reload()


def test_cache_warm_without_a_gpu_says_so(tmp_path):
    j = json.loads(run("info", "--json").stdout)
    if j["cuda_usable"]:
        pytest.skip("a GPU is usable: tests/gpu/test_runtime_gpu.py runs `cache warm`")
    r = run("cache", "warm", env={"CUDAKIT_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 2 and "no usable CUDA GPU" in r.stderr and "nothing to compile" in r.stderr


def test_bench_bad_input(tmp_path):
    r = run("bench", "--quick", "--ops", "nosuchop", "--out", str(tmp_path))
    assert r.returncode == 2 and "unknown op" in r.stderr and "relu" in r.stderr
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = run("bench", "--quick", "--out", str(blocker / "sub"))
    assert r.returncode == 2 and str(blocker / "sub") in r.stderr


@pytest.mark.slow
def test_bench_quick_cpu(tmp_path):
    r = run("bench", "--quick", "--cpu", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "relu" in r.stdout and "x numpy" in r.stdout
    rec = json.loads((tmp_path / "results.json").read_text())
    assert rec["device"]["kind"] == "cpu" and rec["rows"] and rec["copy_bandwidth_gbs"] > 0
    assert "%roof" not in r.stdout.splitlines()[1]                      # no roof on the CPU: no column
    assert not any(row.get("of_copy_bw") or row.get("of_peak") for row in rec["rows"])
    assert "[1/" not in r.stderr and "case/s" not in r.stderr        # stderr is a pipe: no progress bar
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert "speedup_elementwise.png" in pngs and "elementwise_sizes_vs_size.png" in pngs
    for name in pngs:    # a plot only for a family with data to plot
        fam = re.sub(r"^speedup_|(_\d+)?\.png$|_vs_size\.png$", "", name)
        fam_rows = [row for row in rec["rows"] if row["family"] == fam]
        assert fam_rows and any(row.get("x_numpy") or row.get("sweep") for row in fam_rows), name


def test_report_regenerates_markdown(tmp_path):
    res = tmp_path / "results"
    res.mkdir()
    rec = {"date": "2026-11-22T03:00:00+00:00", "command": "cudakit bench", "quick": False,
           "device": {"kind": "gpu", "name": "Test GPU"}, "versions": {"cudakit": "0.1.0"},
           "copy_bandwidth_gbs": 1.0,
           "rows": [{"op": "add", "family": "elementwise", "shape": [8], "dtype": "float32", "mode": "device",
                     "nbytes": 450000, "flops": 0, "note": "", "gbs": 900.0, "of_copy_bw": 0.9, "x_torch": 1.25,
                     "providers": {"cudakit": {"median_ms": 0.5}, "torch": {"median_ms": 0.625}}}]}
    (res / "test-gpu.json").write_text(json.dumps(rec))
    out = tmp_path / "B.md"
    r = run("report", "--results", str(res), "--output", str(out))
    assert r.returncode == 0, r.stderr
    md = out.read_text()
    assert "## Test GPU" in md and "|1.25|" in md and "|90%|" in md and "| 2026-11-22 |" in md
    assert "![speedup_elementwise](plots/test-gpu/speedup_elementwise.png)" in md   # plots/ beside --results
    assert (tmp_path / "plots" / "test-gpu" / "speedup_elementwise.png").is_file()
    assert "| - | `cudakit bench` |" in md                            # an older file: shapes not recorded
    for tuned, said in ((0, "as shipped"), (44, "44 tuned (`cudakit tune`)")):
        (res / "test-gpu.json").write_text(json.dumps({**rec, "tuned_elementwise_shapes": tuned}))
        assert run("report", "--results", str(res), "--output", str(out), "--no-plots").returncode == 0
        assert f"| {said} | `cudakit bench` |" in out.read_text()


def test_verbose_flag_before_or_after_the_command():
    for args in (("info", "-v"), ("-v", "info"), ("info", "--verbose")):
        r = run(*args)
        assert r.returncode == 0 and "INFO cudakit" in r.stderr, (args, r.stderr)
    assert "INFO cudakit" not in run("info").stderr


def test_bench_reps_warmup_and_tflops(tmp_path):
    r = run("bench", "--quick", "--cpu", "--ops", "matmul", "--dtype", "float32", "--reps", "2", "--warmup", "0",
            "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "TFLOP/s" in r.stdout
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert rows and all(p["runs"] == 2 for row in rows for p in row["providers"].values())
    assert all(row["tflops"] > 0 for row in rows)
    r = run("bench", "--reps", "0", "--out", str(tmp_path))
    assert r.returncode == 2 and "--reps: must be >= 1 (got 0)" in r.stderr
    r = run("bench", "--warmup", "x", "--out", str(tmp_path))
    assert r.returncode == 2 and "--warmup: must be an integer >= 0 (got 'x')" in r.stderr


def test_bench_check_records_errors_against_float64(tmp_path):
    r = run("bench", "--quick", "--cpu", "--check", "--ops", "gelu_backward,softmax,sum,argmax_axis0,mul_scalar",
            "--dtype", "float32,bfloat16", "--reps", "1", "--warmup", "0", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "max err" in r.stdout and "0 over tolerance" in r.stdout
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert len(rows) == 14 and all(row["check"]["ok"] for row in rows)
    bf = [row["check"] for row in rows if row["dtype"] == "bfloat16" and row["op"] != "argmax_axis0"]
    assert bf and all(0 < c["max_error"] <= c["tolerance"] == 2.0 ** -6 for c in bf)   # rounded to bfloat16, not exact
    assert [row["check"]["max_error"] for row in rows if row["op"] == "argmax_axis0"] == [0.0, 0.0]


def test_accuracy_flags_wrong_results_nan_and_exceptions():
    import numpy as np
    from cudakit.bench import accuracy
    from cudakit.bench.case import Case
    from cudakit.bench.runner import _check, format_table

    def case(fn, *args):
        return Case("op", "f", (3,), "float32", 12, dict, check=lambda: (fn, args))
    x = np.array([1.0, -2.0, 4.0], np.float32)
    good = accuracy.check(case(lambda a: a * 3, x))
    assert good["ok"] and good["max_error"] == 0 and good["tolerance"] == 1e-5 and good["elements"] == 3
    off = accuracy.check(case(lambda a: a + (1e-3 if a.dtype == np.float32 else 0), x))   # wrong in float32 only
    assert not off["ok"] and abs(off["max_error"] - 2.5e-4) < 1e-7   # 1e-3 in float32, over max |x| = 4
    assert accuracy.error(np.array([np.nan, 1.0]), np.array([np.nan, 1.0])) == 0.0
    assert accuracy.error(np.array([np.nan, 1.0]), np.array([0.0, 1.0])) == float("inf")
    assert accuracy.error(np.array([np.inf]), np.array([-np.inf])) == float("inf")
    assert accuracy.error(np.array([1, 2, 3, 4]), np.array([1, 2, 0, 4])) == 0.25
    assert accuracy.error(np.zeros(2), np.zeros(3)) == float("inf")
    two = accuracy.check(case(lambda a: (a.sum(), np.argmax(a) + (a.dtype == np.float32)), x))  # 2nd output wrong
    assert not two["ok"] and two["tolerance"] == 0.0 and two["max_error"] == 1.0
    boom = _check(case(lambda a: 1 / 0, x), types_env())
    assert not boom["ok"] and boom["error"].startswith("ZeroDivisionError")
    row = {"op": "op", "shape": [3], "dtype": "float32", "mode": "device", "gbs": 1.0, "check": boom,
           "providers": {"cudakit": {"median_ms": 1.0}}}
    assert "error!" in format_table({"rows": [row, {**row, "check": off}]}) and "2.5e-04!" in format_table(
        {"rows": [{**row, "check": off}]})


def types_env():
    from types import SimpleNamespace
    return SimpleNamespace(gpu=False)


def test_table_shows_the_cpu_baseline_column_when_measured():
    from cudakit.bench.runner import format_table
    row = {"op": "gelu", "shape": [8], "dtype": "bfloat16", "mode": "device", "gbs": 1.0,
           "providers": {"cudakit": {"median_ms": 1.0}}}
    assert "x cpu" not in format_table({"rows": [row]})
    table = format_table({"rows": [{**row, "cpu_baseline": {"x_cpu": 412.3}}, row]})
    assert "x cpu" in table and " 412" in table and "--cpu-baseline" in table


def test_bench_from_python():
    import cudakit.bench
    lines = []
    rec = cudakit.bench.run(ops=["relu", "softmax"], dtypes=["float32"], quick=True, cpu=True, reps=1, warmup=0,
                            check=True, progress=False, log=lines.append)
    assert rec["device"]["kind"] == "cpu" and rec["command"] == "cudakit.bench.run()"
    assert {r["op"] for r in rec["rows"]} == {"relu", "softmax"} and all(r["check"]["ok"] for r in rec["rows"])
    assert lines and lines[0].startswith("device: ") and "max err" in cudakit.bench.format_table(rec)
    with pytest.raises(ValueError, match="unknown op.*nosuch; known: "):
        cudakit.bench.run(ops=["nosuch"], quick=True, cpu=True, progress=False)


def test_an_unwritable_output_path_is_one_line_and_exit_2(tmp_path):
    """A path a command cannot write (a missing folder, a folder) is one error line naming the
    command and the path, exit status 2, not a traceback (found by a probing helper)."""
    results = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "results")
    for out in (str(tmp_path / "missing" / "x.md"), str(tmp_path)):
        r = run("report", "--results", results, "--output", out, "--docs", "", "--no-plots")
        assert r.returncode == 2, (r.returncode, r.stderr[-500:])
        assert "Traceback" not in r.stderr and r.stderr.strip().splitlines()[-1].startswith("cudakit report: error:")


def test_compile_writes_ptx_beside_each_source_or_into_a_folder(tmp_path):
    """`cudakit compile` (compile_ptx from the command line, as seed 000's compile_kernels.sh): PTX
    beside the source, or under -o; a compile error gives the compiler's log and status 1; two
    sources of one name into one folder, a bad --arch and no --arch without a GPU give status 2."""
    import shutil

    import cudakit
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on the PATH")
    a = tmp_path / "a.cu"
    a.write_text('extern "C" __global__ void add1(float* x) { x[threadIdx.x] += 1.0f; }\n')
    r = run("compile", str(a), "--arch", "sm_90", "--compiler", "nvcc", "-X=-lineinfo")
    assert r.returncode == 0, r.stderr
    assert ".entry add1" in (tmp_path / "a.ptx").read_text() and "a.ptx" in r.stdout
    sub = tmp_path / "sub"
    (sub / "x").mkdir(parents=True)
    b = sub / "b.cu"
    b.write_text('extern "C" __global__ void twice(float* x) { x[0] *= 2.0f; }\n')
    out = tmp_path / "ptx"
    out.mkdir()
    r = run("compile", str(a), str(b), "-o", str(out), "--arch", "sm_90", "--compiler", "nvcc")
    assert r.returncode == 0, r.stderr
    assert ".entry twice" in (out / "b.ptx").read_text() and (out / "a.ptx").exists()
    (sub / "x" / "a.cu").write_text(a.read_text())
    r = run("compile", str(a), str(sub / "x" / "a.cu"), "-o", str(out), "--arch", "sm_90", "--compiler", "nvcc")
    assert r.returncode == 2 and "same name" in r.stderr
    bad = tmp_path / "bad.cu"
    bad.write_text('extern "C" __global__ void bad(float* x) { x[0] = y; }\n')
    r = run("compile", str(bad), "--arch", "sm_90", "--compiler", "nvcc")
    assert r.returncode == 1 and '"y" is undefined' in r.stderr and not (tmp_path / "bad.ptx").exists()
    r = run("compile", str(a), "--arch", "sm90", "--compiler", "nvcc")
    assert r.returncode == 2 and "sm_90" in r.stderr
    if not cudakit.is_available():
        r = run("compile", str(a), "--compiler", "nvcc")
        assert r.returncode == 2 and "--arch" in r.stderr
