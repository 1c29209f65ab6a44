"""The seed documents' code blocks, run with only their import lines changed.

tests/compat/seeds/ holds verbatim copies of the five seed documents (test_seed_copies checks them
against ../shared/seeds/ where that exists). A test takes a block by its index among the
document's fenced blocks, rewrites its import lines through the test module's IMPORTS table (whole
lines, old -> new) and runs it; every other line runs as written.
"""
from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).parent
SEEDS = HERE / "seeds"
SHARED = HERE.parents[2] / "shared" / "seeds"   # the originals, beside the repository in the workspace
# a seed project's module: no import of one may survive the rewrite
SEED_MODULES = re.compile(r"^\s*(from|import)\s+(frontend|pydotcompute|genesis|neural_arch|compiler)\b")
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def blocks(doc: str) -> list[tuple[str, str]]:
    """(language, code) of every fenced block of seeds/<doc>.md, in order."""
    return _FENCE.findall((SEEDS / f"{doc}.md").read_text(encoding="utf-8"))


def rewrite_imports(code: str, imports: dict[str, str]) -> str:
    """`code` with each import line found in `imports` replaced (indentation kept); asserts that
    only import lines changed and that none of a seed's modules is still imported."""
    out = []
    for line in code.splitlines():
        stripped = line.strip()
        if stripped in imports:
            assert stripped.startswith(("import ", "from ")), f"not an import line: {stripped!r}"
            line = line[:len(line) - len(line.lstrip())] + imports[stripped]
        assert not SEED_MODULES.match(line), f"unmapped seed import: {line!r}"
        out.append(line)
    return "\n".join(out) + "\n"


def example(doc: str, index: int, imports: dict[str, str], lang: str = "python") -> str:
    """Block `index` of `doc` with its imports rewritten."""
    got_lang, code = blocks(doc)[index]
    assert got_lang == lang, (doc, index, got_lang)
    return rewrite_imports(code, imports)


def compiled(code: str, filename: str):
    """`code` compiled under `filename`, its lines registered with linecache so that inspect finds
    the source of what it defines (Triton's @jit reads its function's source)."""
    import linecache
    linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
    return compile(code, filename, "exec")


def run(doc: str, indices, imports: dict[str, str], ns: dict | None = None) -> dict:
    """Run blocks `indices` of `doc` in order in one namespace (the document's examples build on
    each other, like cells of a notebook); returns the namespace."""
    ns = {"__name__": f"seed_example_{doc}"} if ns is None else ns
    for i in ([indices] if isinstance(indices, int) else indices):
        exec(compiled(example(doc, i, imports), f"<{doc} block {i}>"), ns)
    return ns


def signatures(code: str) -> dict[str, list[tuple[str, str | None]]]:
    """{qualified function name: [(parameter, default source or None), ...]} of every def in
    `code` (Python source, or the seeds' API listings whose defs have no body)."""
    try:
        tree = ast.parse(textwrap.dedent(code))
    except SyntaxError:   # an API listing: signatures without bodies
        return _listing_signatures(code)
    out = {}

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.FunctionDef):
                a = child.args
                params = a.posonlyargs + a.args
                defaults = [None] * (len(params) - len(a.defaults)) + [ast.unparse(d) for d in a.defaults]
                sig = list(zip((p.arg for p in params), defaults))
                sig += [(p.arg, None if d is None else ast.unparse(d)) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
                if a.vararg:
                    sig.append(("*" + a.vararg.arg, None))
                out[prefix + child.name] = sig
    visit(tree, "")
    return out


def _listing_signatures(code: str) -> dict:
    out, cls = {}, ""
    for line in code.splitlines():
        m = re.match(r"\s*class (\w+)", line)
        if m:
            cls = m.group(1) + "."
            continue
        m = re.match(r"\s*def (\w+)\((.*)", line)
        if m:
            name, rest = m.groups()
            out[cls + name] = [rest]
        elif cls and out and line.strip() and not line.strip().startswith(("#", "```")):
            out[list(out)[-1]].append(line.strip())   # a signature continued on the next line
    parsed = {}
    for name, parts in out.items():
        text = " ".join(parts)
        text = text[:text.rindex(")")] if ")" in text else text
        src = f"def f({text}): pass"
        parsed[name] = signatures(src)["f"]
    return parsed


def assert_signature(fn, documented: list[tuple[str, str | None]], where: str) -> None:
    """`fn` takes the documented parameters, in order, with the documented defaults (by value;
    the facade may add keyword-only parameters after them)."""
    import inspect
    params = [p for p in inspect.signature(fn).parameters.values()]
    names = [("*" + p.name) if p.kind is p.VAR_POSITIONAL else p.name for p in params]
    want = [n for n, _ in documented]
    if want and want[0] in ("self", "cls") and (not names or names[0] != want[0]):
        want, documented = want[1:], documented[1:]
    assert names[:len(want)] == want, f"{where}: parameters {names} != documented {want}"
    for (n, d), p in zip(documented, params):
        if d is None:
            assert p.default is inspect.Parameter.empty or n.startswith("*"), f"{where}: {n} has a default"
        else:
            assert p.default is not inspect.Parameter.empty, f"{where}: {n} lacks its default {d}"
            assert _same_default(p.default, d), f"{where}: {n} defaults to {p.default!r}, documented {d}"
    extra = params[len(want):]
    assert all(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) or p.default is not inspect.Parameter.empty
               for p in extra), f"{where}: extra required parameters {[p.name for p in extra]}"


def _same_default(value, source: str) -> bool:
    import numpy as np
    try:
        want = eval(source, {"np": np})
    except NameError:   # an enum member named by its bare name (FLOAT32)
        return getattr(value, "name", None) == source.split(".")[-1]
    return value == want or getattr(value, "name", None) == source.split(".")[-1]


def compare_with_shared(doc: str) -> None:
    """The copy in seeds/ is byte-identical to the workspace's original (skipped where absent)."""
    originals = sorted(SHARED.glob(f"{doc[:3]}_*.txt")) if SHARED.is_dir() else []
    if not originals:
        pytest.skip(f"the original seed documents are not beside the repository ({SHARED})")
    assert (SEEDS / f"{doc}.md").read_bytes() == originals[0].read_bytes()


COMPAT_DOC = HERE.parents[1] / "docs" / "compat.md"


def assert_in_compat_doc(doc: str, names) -> None:
    """Every name appears (in backticks, as itself or after a dot) in docs/compat.md's section of
    the seed: the mapping table leaves none out."""
    text = COMPAT_DOC.read_text(encoding="utf-8")
    start = text.index(f"## {doc[:3]} ")
    end = text.find("\n## ", start + 1)
    section = text[start:end if end > 0 else None]
    missing = sorted({n for n in names if not re.search(r"`[^`]*\b" + re.escape(n) + r"\b[^`]*`", section)})
    assert not missing, f"docs/compat.md section {doc[:3]} does not name {missing}"


def called_names(doc: str, pattern: str) -> set[str]:
    """The names the document's python blocks reach through `pattern` (a regex with one group),
    e.g. r"genesis\\.cuda\\.(\\w+)"."""
    return {m for lang, code in blocks(doc) if lang == "python" for m in re.findall(pattern, code)}
