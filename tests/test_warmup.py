"""warm_up_kernels: argument checks and the family table (CPU); the compile and load run in
tests/gpu/test_runtime_gpu.py."""
import types

import pytest

import cudakit
from cudakit.kernels import warmup
from cudakit.kernels._common import FLOAT_DTYPE_NAMES, KernelFamily


def test_every_family_is_listed_with_its_instantiations():
    fams = warmup._families(warmup.FAMILIES, FLOAT_DTYPE_NAMES)
    assert len(fams) == len(warmup._SINGLE) + len(warmup._PER_DTYPE) * len(FLOAT_DTYPE_NAMES)
    assert "elementwise" in fams and "softmax[bfloat16]" in fams and "reduction[float64]" in fams
    for label, fam in fams.items():
        assert isinstance(fam, KernelFamily) and fam.names(), label
    only = warmup._families(["softmax", "dropout"], ["float32"])
    assert list(only) == ["softmax[float32]", "dropout"]


def test_bad_names_raise_listing_the_known_ones():
    with pytest.raises(ValueError, match="unknown kernel family 'attention'; known: elementwise"):
        cudakit.warm_up_kernels(["attention"])
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        cudakit.warm_up_kernels("softmax", dtypes="int8")


def test_loads_each_kernel_on_each_device_asked_for(monkeypatch):
    """The loop itself, with a stand-in device layer and family: each name expression is loaded
    on each device, inside that device's context."""
    from cudakit.runtime import _cupy, device
    current = []

    class Dev:
        def __init__(self, d):
            self.d = d

        def __enter__(self):
            current.append(self.d)

        def __exit__(self, *exc):
            current.pop()

    monkeypatch.setattr(device, "is_available", lambda: True)
    monkeypatch.setattr(device, "device_count", lambda: 2)
    monkeypatch.setattr(device, "current_device", lambda: 1)
    monkeypatch.setattr(_cupy, "cupy", lambda: types.SimpleNamespace(cuda=types.SimpleNamespace(Device=Dev)))
    loaded = []
    fam = KernelFamily("", ["a<1>", "b<2>"], "t.cu")
    monkeypatch.setattr(fam, "function", lambda d, e: loaded.append((d, current[-1], e)))
    monkeypatch.setattr(warmup, "_families", lambda names, dts: {"t": fam})
    assert list(warmup.warm_up_kernels()) == ["t"]
    assert loaded == [(1, 1, "a<1>"), (1, 1, "b<2>")]
    loaded.clear()
    warmup.warm_up_kernels(devices="all")
    assert loaded == [(0, 0, "a<1>"), (0, 0, "b<2>"), (1, 1, "a<1>"), (1, 1, "b<2>")]
    with pytest.raises(ValueError, match=r"devices must be in \[0, 2\) \(got \[2\]\)"):
        warmup.warm_up_kernels(devices=[0, 2])


def test_without_a_gpu_there_is_nothing_to_compile(monkeypatch):
    from cudakit.runtime import device
    monkeypatch.setattr(device, "is_available", lambda: False)
    monkeypatch.setattr(device, "unavailable_reason", lambda: "no GPU found")
    assert cudakit.warm_up_kernels() == {}


def test_a_family_compiles_the_group_of_the_kernel_asked_for(monkeypatch):
    """KernelFamily(group=...): the first kernel() of a group compiles that group's expressions in
    one call, once; an expression name_expressions() does not list compiles on its own."""
    from cudakit.runtime import compiler
    calls = []

    class Mod:
        def __init__(self, names):
            self.names = names

        def get_kernel(self, e):
            return (e, self.names)

    monkeypatch.setattr(compiler, "compile_module", lambda src, name_expressions, source_name, pdl=False: (
        calls.append(tuple(name_expressions)) or Mod(tuple(name_expressions))))
    fam = KernelFamily("", ["k<1, x>", "k<2, x>", "k<1, y>"], "t.cu", group=lambda e: e.split(",")[1].strip(" >"))
    assert fam.groups() == {"x": ["k<1, x>", "k<2, x>"], "y": ["k<1, y>"]}
    assert fam.kernel("k<2, x>") == ("k<2, x>", ("k<1, x>", "k<2, x>"))
    assert fam.kernel("k<1, x>")[1] == ("k<1, x>", "k<2, x>") and calls == [("k<1, x>", "k<2, x>")]
    fam.compile_group("x")
    assert len(calls) == 1
    assert fam.kernel("k<7, x>") == ("k<7, x>", ("k<7, x>",))       # unlisted: its own module
    assert fam.kernel("k<1, y>")[1] == ("k<1, y>",)
    assert calls == [("k<1, x>", "k<2, x>"), ("k<7, x>",), ("k<1, y>",)]
    whole = KernelFamily("", ["a", "b"], "w.cu")                     # no group: all at once
    whole.kernel("b")
    assert calls[-1] == ("a", "b") and list(whole.groups()) == [None]


def test_elementwise_groups_are_one_op_in_one_dtype():
    from cudakit.kernels import elementwise as ew
    groups = ew._family.groups()
    assert len(groups) == len({**ew.BINARY_OPS, **ew.UNARY_OPS}) * len(FLOAT_DTYPE_NAMES)
    # the default shape's U and the U of each model's shipped shape (TUNED_BY_MODEL: H100 U=1)
    us = sorted({ew.contig_config("add", "bfloat16")[0], 1})
    assert groups[("ck_bf16", "ck_add")] == [e for u in us for e in (ew._expr("contig", "add", "bfloat16", 8, u),
                                                                       ew._expr("contig", "add", "bfloat16", 1, u))] + [
        ew._expr("strided", "add", "bfloat16", None)] + [ew._expr(k, "add", "bfloat16", v)
                                                         for k in ("rowbc", "rowbc_first") for v in (8, 1)]
