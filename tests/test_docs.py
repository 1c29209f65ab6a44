"""The README and the documentation site (docs/, mkdocs.yml) stay complete and consistent.

CPU only, no MkDocs needed: `.ci/run` builds the site itself with `mkdocs build --strict`."""
import re
from pathlib import Path

import numpy as np
import pytest

import cudakit

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
API_PAGES = sorted((DOCS / "api").glob("*.md"))
README_LIMIT = 10_000


def _api_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in API_PAGES)


def _target(name: str) -> str:
    """The dotted path mkdocstrings documents `cudakit.<name>` under (where the object is defined)."""
    lazy = cudakit._LAZY.get(name)
    if lazy is None:
        return f"cudakit.errors.{name}"
    mod, attr = lazy
    return f"cudakit.{mod}" + (f".{attr}" if attr else "")


def test_readme_at_most_10000_characters():
    n = len(README.read_text(encoding="utf-8"))
    assert n <= README_LIMIT, f"README.md has {n} characters, the limit is {README_LIMIT}: move detail into docs/"


def test_readme_keeps_the_two_setup_commands_and_ci_runs_the_test_command_first():
    text = README.read_text(encoding="utf-8")
    main = ('python3 -m venv .venv && .venv/bin/pip install -q -e ".[bench]" && .venv/bin/cudakit info && '
            '.venv/bin/cudakit bench --quick')
    tests = 'python3 -m venv .venv && .venv/bin/pip install -q -e ".[test,bench]" && .venv/bin/python -m pytest -q'
    assert main in text and tests in text
    ci = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    first = next(ln for ln in ci if "venv" in ln)
    assert first.strip() == tests, f".ci/run must run the README's test command first, got {first!r}"
    assert any("mkdocs build --strict" in ln for ln in ci)


def test_readme_relative_links_exist():
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert links, "README.md links into the docs"
    missing = [ln for ln in links if "://" not in ln and not (ROOT / ln).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_readme_cpu_quickstart_runs():
    text = README.read_text(encoding="utf-8")
    block = re.search(r"## Quickstart on the CPU.*?```python\n(.*?)```", text, re.DOTALL)
    assert block is not None, "README.md has a CPU quickstart"
    exec(compile(block.group(1), "README.md:cpu-quickstart", "exec"), {})  # noqa: S102 -- the README's own example


@pytest.mark.parametrize("name", [n for n in cudakit.__all__ if n != "__version__"])
def test_every_public_name_has_an_api_reference_entry(name):
    text = _api_text()
    assert f"### `cudakit.{name}`" in text, f"docs/api/ has no heading for cudakit.{name}"
    target = _target(name)
    assert re.search(rf"^::: {re.escape(target)}$", text, re.MULTILINE), \
        f"docs/api/ has no mkdocstrings entry '::: {target}' for cudakit.{name}"


def test_api_reference_documents_only_public_names():
    """No stale entries: each heading names a member of cudakit.__all__."""
    headings = re.findall(r"^### `cudakit\.([A-Za-z_0-9]+)`$", _api_text(), re.MULTILINE)
    stale = sorted(set(headings) - set(cudakit.__all__))
    assert not stale, f"docs/api/ documents names not in cudakit.__all__: {stale}"
    assert "__version__" in (DOCS / "api" / "index.md").read_text(encoding="utf-8")


def test_mkdocs_nav_lists_every_page():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    missing = [p for p in pages if not re.search(rf"(:\s*|-\s+){re.escape(p)}\s*$", nav, re.MULTILINE)]
    assert not missing, f"pages missing from mkdocs.yml's nav: {missing}"


def test_configuration_page_lists_every_cudakit_variable():
    used = set()
    for path in (ROOT / "src" / "cudakit").rglob("*.py"):
        used |= set(re.findall(r"\bCUDAKIT_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(encoding="utf-8")))
    assert "CUDAKIT_BACKEND" in used   # the scan finds them
    page = (DOCS / "guide" / "configuration.md").read_text(encoding="utf-8")
    missing = sorted(v for v in used if f"`{v}`" not in page)
    assert not missing, f"docs/guide/configuration.md does not document {missing}"


_SRC = 'extern "C" __global__ void k(float* x) { x[0] = 1.0f; }'
_NEEDS_GPU = {
    "get_backend('cuda')": lambda: cudakit.get_backend("cuda"),
    "to_device": lambda: cudakit.to_device(np.ones(3, np.float32)),
    "pinned_empty": lambda: cudakit.pinned_empty((3,)),
    "current_device": lambda: cudakit.current_device(),
    "set_device": lambda: cudakit.set_device(0),
    "device(i)": lambda: cudakit.device(0).__enter__(),
    "get_device_info": lambda: cudakit.get_device_info(),
    "compile": lambda: cudakit.compile(_SRC, "k"),
    "compile_module": lambda: cudakit.compile_module(_SRC),
    "compile_ptx": lambda: cudakit.compile_ptx(_SRC),
    "graph": lambda: cudakit.graph(lambda x: x, np.ones(3, np.float32)),
    "CUDAGraph": lambda: cudakit.CUDAGraph(),
    "memory.stats": lambda: cudakit.memory.stats(),
}


@pytest.mark.parametrize("call", sorted(_NEEDS_GPU))
def test_calls_documented_as_needing_a_gpu_say_so_without_one(call):
    if cudakit.is_available():
        pytest.skip("a GPU is usable here")
    assert call.split("(")[0] in README.read_text(encoding="utf-8")
    with pytest.raises(cudakit.BackendUnavailableError):
        _NEEDS_GPU[call]()


def test_calls_documented_as_working_without_a_gpu_do(tmp_path):
    if cudakit.is_available():
        pytest.skip("a GPU is usable here")
    ptx = tmp_path / "k.ptx"
    ptx.write_text(".version 8.0\n.target sm_90\n.address_size 64\n")
    assert cudakit.load_module(ptx) is not None   # (reads and checks the file; its kernels need a GPU)
    assert cudakit.warm_up_kernels() == {}
    assert cudakit.device_count() == 0 and cudakit.devices() == []
    assert cudakit.memory_info() == (0, 0)
    cudakit.empty_cache()
    cudakit.synchronize()
    cudakit.check()
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(cudakit.to_host(x), x)
    with cudakit.profile() as prof:
        cudakit.relu(x)
    assert prof.records == [] and prof.memory_events == []


# ---- quoted figures against the results files ---------------------------------------------------
# A ratio ("1.19x", "0.98-1.05x") or a time ("5.94 ms", "22.2 us") quoted in README.md or docs/ must
# be a value of a results file in the repository, rounded as quoted, and the paragraph quoting it
# must name that file (a path or a name pattern such as *-cudnn.json, matched under
# benchmarks/results/ and its history/): a figure can neither be made up nor outlive its run. A
# paragraph of figures that are not measurements (a model's parameters, an issue's reference
# values) says so with the comment <!-- not measured -->.
_FIGURE = re.compile(r"(?<![\w.^])(\d+(?:\.\d+)?)(?:\s*[-–]\s*(\d+(?:\.\d+)?))?\s*(x|ms|us|µs)(?![\w/])"
                     r"(?!\s*(?:H100|H200|A100|GPU))")   # "2x H100" names machines, not a ratio
_RESULTS_REF = re.compile(r"([\w*.-]*\.json)")
_NOT_MEASURED = "<!-- not measured -->"


def _result_files():
    return sorted((ROOT / "benchmarks" / "results").rglob("*.json"))


def _numbers(path: Path) -> dict:
    """{"x": the file's ratios (keys x_*), "t": its times in ms (keys *_ms; *_us and the host-time
    probe's per-call microseconds, converted)}."""
    import json
    out = {"x": [], "t": []}

    def walk(o, key=""):
        if isinstance(o, dict):
            for k, v in o.items():
                walk(v, str(k))
        elif isinstance(o, list):
            for v in o:
                walk(v, key)
        elif isinstance(o, (int, float)) and not isinstance(o, bool):
            if key.startswith("x_"):
                out["x"].append(float(o))
            elif key.endswith("_ms"):
                out["t"].append(float(o))
            elif key.endswith("_us") or key.startswith(("cudakit.", "torch.", "backend.")):
                out["t"].append(float(o) / 1000)
    walk(json.loads(path.read_text()))
    return out


def _referenced(paragraph: str, files) -> list:
    import fnmatch
    refs = []
    for name in _RESULTS_REF.findall(paragraph):
        name = name.split("/")[-1]
        pattern = name if "*" in name else "*" + name
        refs += [p for p in files if fnmatch.fnmatch(p.name, pattern)]
    return refs


def _figures(text: str):
    """(paragraph, number text, unit) of each quoted figure, paragraphs split at blank lines and
    list items."""
    for para in re.split(r"\n\s*\n|\n(?=- )", text):
        for m in _FIGURE.finditer(para):
            for n in m.group(1, 2):
                if n:
                    yield para, n, m.group(3)


def _matches(number: str, unit: str, numbers) -> bool:
    """number (as quoted, unit x, ms or us) is one of the ratios or times of numbers (a list of
    _numbers() results) rounded to the quoted decimals."""
    dec = len(number.split(".")[1]) if "." in number else 0
    x = float(number)
    if unit == "x":
        values, scale = [v for n in numbers for v in n["x"]], 1.0
    else:
        values, scale = [v for n in numbers for v in n["t"]], (1.0 if unit == "ms" else 1000.0)
    return any(abs(round(v * scale, dec) - x) < 1e-9 for v in values)


def test_quoted_figures_match_a_results_file():
    files = _result_files()
    cache: dict = {}
    problems = []
    # guide/results.md is generated from the results files themselves (test_bench_report checks it is current)
    pages = [ROOT / "README.md"] + sorted(p for p in DOCS.rglob("*.md") if p != DOCS / "guide" / "results.md")
    for page in pages:
        for para, number, unit in _figures(page.read_text()):
            if _NOT_MEASURED in para:
                continue
            refs = _referenced(para, files)
            where = f"{page.relative_to(ROOT)}: {number}{unit} in {para.strip()[:80]!r}"
            if not refs:
                problems.append(f"{where}: the paragraph names no results file")
                continue
            if not _matches(number, unit, [cache.setdefault(p, _numbers(p)) for p in refs]):
                problems.append(f"{where}: no value of {', '.join(p.name for p in refs)} rounds to it")
    assert not problems, "\n".join(problems)


def test_the_figure_check_catches_a_made_up_figure(tmp_path):
    files = _result_files()
    para = "attention 0.123456x torch (benchmarks/results/nvidia-h100-80gb-hbm3-cudnn.json)"
    (_, number, unit), = [f for f in _figures(para) if f[1] == "0.123456"]
    refs = _referenced(para, files)
    assert refs and not _matches(number, unit, [_numbers(p) for p in refs])
    row = next(r for r in __import__("json").loads(refs[0].read_text())["rows"] if r.get("x_torch"))
    assert _matches(f"{row['x_torch']:.2f}", "x", [_numbers(refs[0])])
    assert _matches(f"{row['providers']['cudakit']['median_ms']:.3f}", "ms", [_numbers(refs[0])])
    assert not _matches(f"{row['x_torch']:.2f}", "ms", [{"x": [row["x_torch"]], "t": []}])
