"""BENCHMARKS.md and `cudakit report`: size, families, run selection, other formats; roofs and plots."""
import io
import json
import math
import struct
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from cudakit.bench import plots, report, roof, runner

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def test_docs_results_page_is_current():
    """docs/guide/results.md is what `cudakit report` generates from benchmarks/results/ now."""
    assert (ROOT / "docs" / "guide" / "results.md").read_text() == report.render_docs(RESULTS), \
        "docs/guide/results.md is out of date: run `cudakit report`"


def test_benchmarks_md_is_small_current_and_has_every_family():
    md = (ROOT / "BENCHMARKS.md").read_text()
    assert len(md.encode()) <= 60 * 1024
    newest, older = report.select(RESULTS)
    assert not older, f"runs that are not rendered belong in history/: {[p.name for p in older]}"
    families = set()
    for path in list(RESULTS.glob("*.json")) + list((RESULTS / "history").glob("*.json")):
        families |= {r["family"] for r in json.loads(path.read_text())["rows"]}
    models = {}
    for (model, kind), (path, rec) in newest.items():
        models.setdefault(model, []).append((kind, path, rec))
    in_summary = set()
    for model, runs in models.items():
        rows = report.summary_rows(runs)
        assert report.summary_table(rows) in md, f"BENCHMARKS.md is out of date for {model}: run `cudakit report`"
        in_summary |= {r["family"] for r in rows}
        for r in rows:
            assert (r.get("of_copy_bw") or 0) <= 1 + 1e-9 and (r.get("of_peak") or 0) <= 1 + 1e-9, r
    assert families <= in_summary, families - in_summary
    for link in [ln.split("](", 1)[1][:-1] for ln in md.splitlines() if ln.startswith("![")]:
        assert (ROOT / link).is_file(), link
    for sub in ("multi-gpu", "host-time"):
        for path in (RESULTS / sub).glob("*.json"):
            assert f"### {sub}/{path.name}" in md


def _rec(date, name="Test GPU", quick=False, rows=None, **kw):
    rows = rows if rows is not None else [_row("add", 0.5, 0.625)]
    return {"date": date, "command": "cudakit bench", "quick": quick, "device": {"kind": "gpu", "name": name},
            "versions": {}, "copy_bandwidth_gbs": 1000.0, "matmul_peak_tflops": 100.0, "rows": rows, **kw}


def _row(op, ms, torch_ms=None, family="elementwise", nbytes=10**9, flops=0, shape=(8,), sweep=False):
    prov = {"cudakit": {"median_ms": ms}}
    r = {"op": op, "family": family, "shape": list(shape), "dtype": "float32", "mode": "device", "sweep": sweep,
         "nbytes": nbytes, "flops": flops, "providers": prov, "gbs": nbytes / ms / 1e6}
    if torch_ms:
        prov["torch"] = {"median_ms": torch_ms}
        r["x_torch"] = torch_ms / ms
    return r


def test_report_renders_the_newest_full_run_of_each_kind_and_other_formats(tmp_path, capsys):
    res = tmp_path / "results"
    (res / "history").mkdir(parents=True)
    (res / "multi-gpu").mkdir()
    def w(path, obj):
        path.write_text(json.dumps(obj))
    w(res / "test-gpu-ew.json", _rec("2026-11-20T00:00:00+00:00", rows=[_row("add", 0.5, 0.75)]))      # 1.50
    w(res / "test-gpu-ew-2.json", _rec("2026-11-21T00:00:00+00:00", rows=[_row("add", 0.5, 0.625)]))    # 1.25
    w(res / "test-gpu-ew-3.json", _rec("2026-11-22T00:00:00+00:00", quick=True, rows=[_row("add", 1, 1.7)]))
    w(res / "test-gpu.json", _rec("2026-11-19T00:00:00+00:00", rows=[   # kind "all": a row beating the memcpy
        _row("mul", 0.5, 0.6, nbytes=10**9, shape=(4,)), _row("gelu", 0.25, 0.3, family="activations")]))
    w(res / "history" / "test-gpu-ew-0.json", _rec("2026-11-01T00:00:00+00:00", rows=[_row("add", 1, 9.99)]))
    w(res / "multi-gpu" / "x2-allreduce.json", {
        "what": "all_reduce bus bandwidth", "device": "2 x Test GPU", "date": "2026-11-26", "command": "ar.sh",
        "ranks": 2, "cudakit": [{"bytes": 8, "busbw_gbs": 1.5}, {"bytes": 16, "busbw_gbs": 2.5}],
        "torch": [{"bytes": 8, "busbw_gbs": 1.25}, {"bytes": 16, "busbw_gbs": 2.75}]})
    (res / "notes.json").write_text("{not json")
    newest, older = report.select(res)
    assert {k: p.name for k, (p, _) in newest.items()} == {("Test GPU", "ew"): "test-gpu-ew-2.json",
                                                          ("Test GPU", "all"): "test-gpu.json"}
    assert sorted(p.name for p in older) == ["test-gpu-ew-3.json", "test-gpu-ew.json"]
    skipped = []
    md = report.render(res, skipped, tmp_path / "plots", tmp_path)
    assert [p.name for p, _ in skipped] == ["notes.json"]
    assert "|add|8|float32|0.5 ms|1.25|100%|ew|" in md
    assert "1.50" not in md and "1.70" not in md and "9.99" not in md         # older, quick and history runs
    assert "|activations|gelu|8|float32|0.25 ms|1.20|100%|all|" in md   # the roof is the best rate
    assert "|mul|4|float32|0.5 ms|1.20|50%|all|" in md
    assert md.index("|activations|") < md.index("|elementwise|")          # grouped by family,
    assert md.count("|elementwise|") == 1                                  # each named on its first row
    assert "### multi-gpu/x2-allreduce.json" in md and "- device: 2 x Test GPU" in md and "`ar.sh`" in md
    assert "| bytes | cudakit busbw_gbs | torch busbw_gbs |" in md and "| 16 | 2.5 | 2.75 |" in md
    assert "![speedup_elementwise](plots/test-gpu/speedup_elementwise.png)" in md
    args = SimpleNamespace(results=str(res), output=str(tmp_path / "B.md"), plots=None, no_plots=True, archive=True)
    assert report.main(args) == 0
    assert sorted(p.name for p in (res / "history").glob("*.json")) == [
        "test-gpu-ew-0.json", "test-gpu-ew-3.json", "test-gpu-ew.json"]
    assert report.select(res)[1] == [] and "moved 2 earlier runs" in capsys.readouterr().out


def test_roof_holds_every_row_under_100_percent_and_cpu_runs_have_none():
    rec = _rec("d", rows=[_row("a", 0.5), _row("b", 2.0), _row("mm", 1.0, nbytes=10, flops=2 * 10**11)])
    roof.apply(rec)
    assert rec["roof_gbs"] == 2000.0 and rec["rows"][0]["of_copy_bw"] == 1.0 and rec["rows"][1]["of_copy_bw"] == 0.25
    assert rec["roof_tflops"] == 200.0 and rec["rows"][2]["of_peak"] == 1.0
    rec = _rec("d", rows=[_row("a", 2.0)], matmul_peak_tflops=math.nan)
    assert roof.roofs(rec) == (1000.0, None)
    cpu = _rec("d", rows=[_row("a", 0.5, 1.0)])
    cpu["device"] = {"kind": "cpu", "name": "x86_64"}
    roof.apply(cpu)
    assert cpu["roof_gbs"] is None and cpu["rows"][0]["of_copy_bw"] is None
    table = runner.format_table(cpu)
    assert "%roof" not in table.splitlines()[0] and "No %roof" in table
    assert "%roof" in runner.format_table(roof.apply(_rec("d"))).splitlines()[0]


def _png_size(path: Path) -> tuple:
    w, h = struct.unpack(">II", path.read_bytes()[16:24])
    return w, h


def test_plots_have_at_most_40_bars_and_none_without_data(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [_row(f"op{i}", 1.0, 1.0 + i / 10) for i in range(95)]
    rows += [_row("lonely", 1.0, family="nocompare")]                         # no ratio: no plot
    rows += [_row("add", 1.0, 1.1, family="sizes", sweep=True, nbytes=2**20)]  # one size: no plot
    written = plots.write_all(rows, 1000.0, "Test GPU", tmp_path)
    assert sorted(p.name for p in written) == ["speedup_elementwise_1.png", "speedup_elementwise_2.png",
                                               "speedup_elementwise_3.png"]
    w, h = _png_size(tmp_path / "speedup_elementwise_1.png")
    assert w == 900 and h <= 1400                                                  # 40 bars, 9 pt labels at 100 DPI
    assert _png_size(tmp_path / "speedup_elementwise_3.png")[1] < h                # the 15 left over
    rows.append(_row("add", 0.5, 0.6, family="sizes", sweep=True, nbytes=2**24))
    assert [p.name for p in plots.size_plots(rows, 1000.0, "Test GPU", tmp_path)] == ["sizes_vs_size.png"]
    assert plots.write_all([], None, "Test GPU", tmp_path / "empty") == []


class _Tty(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("stream, shown", [(io.StringIO(), False), (_Tty(), True)])
def test_progress_only_on_a_terminal(monkeypatch, stream, shown):
    monkeypatch.setattr(sys, "stderr", stream)
    calls = []
    monkeypatch.setattr(runner, "_progress", lambda n: (lambda label: calls.append(label)))
    runner.run(ops=["relu"], dtypes=["float32"], quick=True, cpu=True, reps=1, warmup=0, compare=("numpy",))
    assert bool(calls) is shown


def test_compare_names_a_provider_that_was_not_measured(tmp_path):
    rec = runner.run(ops=["relu"], dtypes=["float32"], quick=True, cpu=True, reps=1, warmup=0,
                     compare=("torch", "numpy"), progress=False)
    assert "torch" in rec["not_compared"] and "numpy" not in rec["not_compared"]
    assert "not installed" in rec["not_compared"]["torch"] or "GPU runs only" in rec["not_compared"]["torch"]
    import subprocess
    r = subprocess.run([sys.executable, "-m", "cudakit", "bench", "--quick", "--cpu", "--ops", "relu", "--dtype",
                        "float32", "--reps", "1", "--warmup", "0", "--compare", "torch,numpy", "--out", str(tmp_path)],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert "--compare torch: not measured: torch" in r.stderr and "--compare numpy" not in r.stderr


def test_report_checks_where_it_writes_before_moving_or_drawing(tmp_path, capsys):
    """A missing folder for --output (or an explicit --docs) left the plots written and the report
    not, and --docs in a missing folder was skipped silently."""
    res = tmp_path / "benchmarks" / "results"
    res.mkdir(parents=True)
    (res / "test-gpu-ew.json").write_text(json.dumps(_rec("2026-01-02")))
    for out, docs, what in ((tmp_path / "nodir" / "B.md", None, "--output"),
                            (tmp_path / "B.md", str(tmp_path / "nodir" / "r.md"), "--docs")):
        args = SimpleNamespace(results=str(res), output=str(out), plots=None, no_plots=False, archive=True, docs=docs)
        assert report.main(args) == 2
        assert f"cudakit report: error: {what}" in capsys.readouterr().err
    assert not (tmp_path / "benchmarks" / "plots").exists() and not (tmp_path / "B.md").exists()
