"""The CUDA C++ sources live in .cu / .cuh files beside the kernel modules (issue 30): no module
of cudakit/kernels/ holds a long CUDA source in a string, every file ships as package data, and
each module's SOURCE is its files' text concatenated, byte for byte (the compile caches key on it)."""
import ast
import fnmatch
import importlib
import pathlib
from importlib import resources

import pytest
from helpers import kernel_source

import cudakit.kernels

KERNELS_DIR = pathlib.Path(cudakit.kernels.__path__[0])
PYPROJECT = pathlib.Path(__file__).resolve().parents[1] / "pyproject.toml"
MAX_LINES = 40
SOURCE_MODULES = ["elementwise", "normalization", "reduction", "softmax", "cross_entropy", "transpose",
                  "dropout", "pooling", "optimizers"]


def _cuda_files():
    return sorted(p.name for p in KERNELS_DIR.iterdir() if p.suffix in (".cu", ".cuh"))


def _long_strings(tree):
    """(line, lines) of each string literal or f-string of `tree` spanning more than MAX_LINES lines,
    docstrings excepted."""
    skip = set()   # docstrings, and the pieces of f-strings (counted as their f-string)
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                skip.add(id(body[0].value))
    out = []
    for node in ast.walk(tree):
        is_str = isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))
        if is_str and id(node) not in skip and node.end_lineno - node.lineno + 1 > MAX_LINES:
            out.append((node.lineno, node.end_lineno - node.lineno + 1))
    return out


def test_long_string_finder_sees_sources_not_docstrings():
    body = "\n".join(f"// line {i}" for i in range(MAX_LINES + 5))
    doc = '"""' + "\n" * (MAX_LINES + 5) + '"""'
    tree = ast.parse(f'{doc}\nSOURCE = r"""\n{body}\n"""\ndef f(n):\n    {doc}\n    return f"""{{n}}\n{body}\n"""\n')
    assert [n for _, n in _long_strings(tree)] == [MAX_LINES + 7, MAX_LINES + 7]
    assert _long_strings(ast.parse(f'S = r"""\n{body[:200]}\n"""')) == []


@pytest.mark.parametrize("path", sorted(KERNELS_DIR.glob("*.py")), ids=lambda p: p.name)
def test_no_kernel_module_holds_a_long_cuda_source(path):
    long = _long_strings(ast.parse(path.read_text(encoding="utf-8")))
    assert not long, f"{path.name}: strings of more than {MAX_LINES} lines at (line, lines) {long}; " \
                     f"move the CUDA source to a .cu file beside the module"


def test_every_cuda_file_is_package_data():
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    files = _cuda_files()
    assert len(files) >= 12, files
    globs = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]["cudakit"]
    root = resources.files("cudakit.kernels")
    for name in files:
        assert any(fnmatch.fnmatch(f"kernels/{name}", g) for g in globs), (name, globs)
        assert root.joinpath(name).is_file(), name


@pytest.mark.parametrize("modname", SOURCE_MODULES)
def test_source_is_its_files(modname):
    mod = importlib.import_module(f"cudakit.kernels.{modname}")
    assert mod.SOURCE_FILES[-1] == f"{modname}.cu"
    assert kernel_source(mod) == mod.SOURCE and "__global__" in mod.SOURCE


def test_every_cuda_file_is_used():
    used = set()
    for modname in SOURCE_MODULES:
        used.update(importlib.import_module(f"cudakit.kernels.{modname}").SOURCE_FILES)
    assert used == set(_cuda_files())


def test_shared_pieces_come_from_their_files():
    from cudakit.kernels import _common, softmax
    assert _common.PREAMBLE == _common.cuda_file("_preamble.cuh") and "struct __align__(2) ck_half" in _common.PREAMBLE
    assert _common.PACK_HELPERS == _common.cuda_file("_pack_helpers.cuh")
    assert softmax.HELPERS == _common.PACK_HELPERS + _common.cuda_file("softmax_helpers.cuh")
    assert softmax.SOURCE.startswith(_common.cuda_file("_pdl.cuh") + _common.PREAMBLE + softmax.HELPERS)


def _kernel_bodies(text: str):
    """(name, the body's first statement) of each __global__ function of CUDA C++ text."""
    import re
    for m in re.finditer(r"__global__", text):
        i = text.index("(", m.end())
        if "__launch_bounds__" in text[m.end():i]:   # (its parenthesis first, then the name's)
            i = text.index("(", text.index(")", i) + 1)
        name = text[m.end():i].split()[-1]
        depth, k = 0, i
        while True:
            depth += {"(": 1, ")": -1}.get(text[k], 0)
            if depth == 0:
                break
            k += 1
        body = text[text.index("{", k) + 1:]
        yield name, body.lstrip().split("\n", 1)[0].strip()


@pytest.mark.parametrize("name", [n for n in _cuda_files() if n.endswith(".cu")])
def test_every_kernel_waits_for_the_previous_one_first(name):
    """Every kernel of the .cu files calls CK_PDL_WAIT() as its first statement, before it touches
    global memory: they are launched with programmatic dependent launch where the device takes it
    (runtime/pdl.py), so they may start before the kernel they read from has finished."""
    text = (KERNELS_DIR / name).read_text()
    kernels = list(_kernel_bodies(text))
    assert kernels and all(first == "CK_PDL_WAIT();" for _, first in kernels), \
        [k for k, first in kernels if first != "CK_PDL_WAIT();"]


@pytest.mark.parametrize("modname", SOURCE_MODULES)
def test_every_family_is_marked_for_pdl(modname):
    """Each kernel family's source waits in each kernel (the count check of KernelFamily.pdl), so
    its modules are marked for programmatic dependent launch; a source with a kernel that does not
    wait would not be."""
    from cudakit.kernels._common import KernelFamily
    mod = importlib.import_module(f"cudakit.kernels.{modname}")
    families = [mod._family] if hasattr(mod, "_family") else list(mod._families.values())
    assert families and all(f.pdl for f in families)
    assert not KernelFamily(mod.SOURCE + "\n__global__ void k(float* x) { x[0] = 0; }\n", [], "x.cu").pdl
