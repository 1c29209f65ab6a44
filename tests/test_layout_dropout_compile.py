"""The layout (cudakit.kernels.transpose) and dropout (cudakit.kernels.dropout) kernels: every
instantiation compiles (test_kernels_compile.py) and, with no GPU, their index arithmetic and
Philox are checked on the CPU: the thread bodies are __host__ __device__, so a host program built
by nvcc runs every thread of every block of the planned grid (the load phase of a tile for all
256 threads, then its store phase, as __syncthreads orders them) and the results are compared
with NumPy. Philox is checked against Random123's known-answer vectors and the NumPy version.
"""
import shutil
import subprocess

import numpy as np
import pytest
import test_kernels_compile as kc
from helpers import kernel_source

MODULES = ["cudakit.kernels.transpose", "cudakit.kernels.dropout"]


@pytest.mark.parametrize("modname", MODULES)
def test_kernels_do_not_spill_and_fit(modname, tmp_path):
    """ptxas: no spills, and the tile kernels' shared memory is at most 16 KB."""
    import importlib
    mod = importlib.import_module(modname)
    log = kc.nvcc_compile(mod, tmp_path, extra=("-Xptxas", "-v"))
    assert "bytes spill stores" in log
    for line in log.splitlines():
        if "spill" in line:
            assert " 0 bytes spill stores" in line and " 0 bytes spill loads" in line, line
        if "smem" in line and "Used" in line:
            smem = int(line.split("bytes smem")[0].split(",")[-1].strip()) if "bytes smem" in line else 0
            assert smem <= 16384, line


# ------------------------------------------------------------------------------------------
# CPU emulation of the kernels

HARNESS = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static std::vector<char> readf(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) { perror(path); exit(2); }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  std::vector<char> b(n);
  if (n && fread(b.data(), 1, n, f) != (size_t)n) exit(3);
  fclose(f);
  return b;
}
static void writef(const char* path, const void* p, size_t n) {
  FILE* f = fopen(path, "wb");
  fwrite(p, 1, n, f);
  fclose(f);
}

template <int C, typename I> void run_rows(const char* x, char* y, const ck_tr_rows_p& p) {
  typedef typename ck_tr_raw<C>::type W;
  for (long long t = 0; t < p.ntiles; ++t)
    for (int tid = 0; tid < 256; ++tid) ck_tr_rows_tile<C, I>((const W*)x, (W*)y, p, t, tid);
}
template <typename T, int C> void run_tile(const char* x, char* y, const ck_tr_tile_p& p) {
  typedef ck_tr_geom<T, C> G;
  std::vector<uint4> smem((G::TK * G::TA * sizeof(T) + 15) / 16);
  memset(smem.data(), 0xAB, smem.size() * 16);
  for (long long t = 0; t < p.ntiles; ++t) {
    for (int tid = 0; tid < 256; ++tid) ck_tr_tile_load<T, C>((const T*)x, (T*)smem.data(), p, t, tid);
    for (int tid = 0; tid < 256; ++tid) ck_tr_tile_store<T, C>((T*)y, (const T*)smem.data(), p, t, tid);
  }
}

template <typename T, typename I, bool STAGED, int G> void run_runs(const char* x, char* y, const ck_tr_runs_p& p) {
  std::vector<T> buf(256 * ck_tr_max_run<T>::N);
  for (long long t = 0; t < p.ntiles; ++t) {
    memset(buf.data(), 0xAB, buf.size() * sizeof(T));
    for (int tid = 0; tid < 256; ++tid) ck_tr_runs_load<T, I, STAGED, G>((const T*)x, (T*)y, buf.data(), p, t, tid);
    if (STAGED)
      for (int tid = 0; tid < 256; ++tid) ck_tr_runs_store<T, G>((T*)y, buf.data(), p, t, tid);
  }
}

int main(int argc, char** argv) {
  if (argc < 2) return 1;
  if (!strcmp(argv[1], "philox")) {   // philox c0 c1 c2 c3 k0 k1 (hex)
    unsigned int a[6], r[4];
    for (int i = 0; i < 6; ++i) a[i] = (unsigned int)strtoul(argv[2 + i], 0, 16);
    ck_philox4x32_10(a[0], a[1], a[2], a[3], a[4], a[5], r);
    printf("%08x %08x %08x %08x\n", r[0], r[1], r[2], r[3]);
    return 0;
  }
  if (!strcmp(argv[1], "words")) {    // words g_first ngroups k0 k1 out
    long long g0 = atoll(argv[2]), ng = atoll(argv[3]);
    unsigned int k0 = (unsigned int)strtoul(argv[4], 0, 10), k1 = (unsigned int)strtoul(argv[5], 0, 10);
    std::vector<unsigned int> w(4 * ng);
    for (long long g = 0; g < ng; ++g) {
      unsigned int r[4];
      ck_dropout_words(g0 + g, k0, k1, r);
      for (int j = 0; j < 4; ++j) w[4 * g + j] = r[j];
    }
    writef(argv[6], w.data(), w.size() * 4);
    return 0;
  }
  // rows|tile|runs itemsize chunk idx64 params x xoff ybytes y [staged group]
  const bool rows = !strcmp(argv[1], "rows"), runs = !strcmp(argv[1], "runs");
  const int e = atoi(argv[2]), c = atoi(argv[3]), i64 = atoi(argv[4]);
  std::vector<char> pb = readf(argv[5]), xb = readf(argv[6]);
  const long long xoff = atoll(argv[7]), yn = atoll(argv[8]);
  char *xa = 0, *ya = 0;
  if (posix_memalign((void**)&xa, 256, xb.size() + 16) || posix_memalign((void**)&ya, 256, yn + 16)) return 4;
  memcpy(xa, xb.data(), xb.size());
  memset(ya, 0xCD, yn + 16);   // (16 guard bytes past y, written back and checked)
  const char* x = xa + xoff;
  if (rows) {
    if (pb.size() != sizeof(ck_tr_rows_p)) return 5;
    ck_tr_rows_p p;
    memcpy(&p, pb.data(), sizeof p);
#define R(CC) if (c == CC) { if (i64) run_rows<CC, unsigned long long>(x, ya, p); else run_rows<CC, unsigned int>(x, ya, p); }
    R(1) R(2) R(4) R(8) R(16)
  } else if (runs) {
    if (pb.size() != sizeof(ck_tr_runs_p)) return 5;
    ck_tr_runs_p p;
    memcpy(&p, pb.data(), sizeof p);
    const bool staged = argc > 10 && !strcmp(argv[10], "true");
    const int group = argc > 11 ? atoi(argv[11]) : 1;
#define E(EE, TT, M, G) if (e == EE && staged == M && group == G) { if (i64) run_runs<TT, unsigned long long, M, G>(x, ya, p); else run_runs<TT, unsigned int, M, G>(x, ya, p); }
#define EM(EE, TT) E(EE, TT, false, 1) E(EE, TT, true, 1) E(EE, TT, false, 4) E(EE, TT, true, 4)
    EM(1, unsigned char) EM(2, unsigned short) EM(4, unsigned int) EM(8, unsigned long long)
  } else {
    if (pb.size() != sizeof(ck_tr_tile_p)) return 5;
    ck_tr_tile_p p;
    memcpy(&p, pb.data(), sizeof p);
#define T(EE, TT, CC) if (e == EE && c == CC) run_tile<TT, CC>(x, ya, p);
    T(1, unsigned char, 16) T(1, unsigned char, 8) T(1, unsigned char, 1)
    T(2, unsigned short, 16) T(2, unsigned short, 4) T(2, unsigned short, 2)
    T(4, unsigned int, 16) T(4, unsigned int, 4)
    T(8, unsigned long long, 16) T(8, unsigned long long, 8)
  }
  writef(argv[9], ya, yn + 16);
  return 0;
}
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    nvcc = shutil.which("nvcc")
    if not nvcc:
        pytest.skip("nvcc is not on the PATH")
    from cudakit.kernels import dropout, transpose
    d = tmp_path_factory.mktemp("harness")
    src = d / "h.cu"
    src.write_text(kernel_source(dropout) + kernel_source(transpose) + HARNESS)
    exe = d / "h"
    r = subprocess.run([nvcc, "-std=c++17", "-O1", "-arch=sm_90", "-o", str(exe), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    return exe, d


def _run(exe, *args):
    r = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0, (r.returncode, r.stderr)
    return r.stdout


KAT = [  # Random123 kat_vectors, philox4x32 10 rounds: counter, key, expected
    ("00000000 00000000 00000000 00000000", "00000000 00000000", "6627e8d5 e169c58d bc57ac4c 9b00dbd8"),
    ("ffffffff ffffffff ffffffff ffffffff", "ffffffff ffffffff", "408f276d 41c83b0e a20bc7c6 6d5451fd"),
    ("243f6a88 85a308d3 13198a2e 03707344", "a4093822 299f31d0", "d16cfe09 94fdcceb 5001e420 24126ea1"),
]


@pytest.mark.parametrize("ctr,key,want", KAT)
def test_kernel_philox_known_answers(harness, ctr, key, want):
    exe, _ = harness
    assert _run(exe, "philox", *ctr.split(), *key.split()).split() == want.split()


@pytest.mark.parametrize("seed", [0, 1, 0x123456789ABCDEF0, 2**64 - 1])
def test_kernel_words_match_numpy(harness, seed):
    from cudakit.backends import cpu_dropout
    exe, d = harness
    for g0 in (0, 2**32 - 3):   # counters past 2^32 groups use the high counter word
        ng = 1000
        out = d / "w.bin"
        _run(exe, "words", g0, ng, seed & 0xFFFFFFFF, seed >> 32, out)
        got = np.fromfile(out, np.uint32)
        if g0 == 0:
            want = cpu_dropout.random_words(4 * ng, seed)
        else:
            g = np.arange(g0, g0 + ng, dtype=np.uint64)
            z = np.zeros((), np.uint64)
            w = cpu_dropout.philox4x32((g & np.uint64(0xFFFFFFFF), g >> np.uint64(32), z, z),
                                       (seed & 0xFFFFFFFF, seed >> 32))
            want = np.stack(w, axis=1).reshape(-1)
        np.testing.assert_array_equal(got, want)


def _emulate(harness, xview, axes, xbase):
    """Run the planned kernel on the CPU for the view `xview` of the contiguous `xbase`."""
    from cudakit.kernels import transpose
    exe, d = harness
    e = xview.dtype.itemsize
    xoff = xview.__array_interface__["data"][0] - xbase.__array_interface__["data"][0]
    pl = transpose.plan(xview.shape, xview.strides, e, axes, xoff, 0)
    want = np.ascontiguousarray(np.transpose(xview, axes))
    if pl is None:
        assert want.size == 0
        return None
    assert pl != "copy"
    (d / "p.bin").write_bytes(pl.params.tobytes())
    (d / "x.bin").write_bytes(xbase.tobytes())
    targs = [a.strip() for a in pl.expr[pl.expr.index("<") + 1:-1].split(",")]   # rows <C, I>, tile <T, C>, runs <T, I, MODE>
    idx64 = int(pl.kind != "tile" and targs[1] == "unsigned long long")
    mode = targs[2:4] if pl.kind == "runs" else ["false", "1"]
    _run(exe, pl.kind, e, pl.chunk, idx64, d / "p.bin", d / "x.bin", xoff, want.nbytes, d / "y.bin", *mode)
    raw = np.fromfile(d / "y.bin", np.uint8)
    assert (raw[want.nbytes:] == 0xCD).all(), f"{pl} wrote past y"
    got = raw[:want.nbytes].view(want.dtype).reshape(want.shape)
    np.testing.assert_array_equal(got.view(f"u{e}"), want.view(f"u{e}"), err_msg=f"{pl} {xview.shape} {axes}")
    return pl


def _words(rng, shape, itemsize):
    return rng.integers(0, 2 ** (8 * itemsize) - 1, size=shape, dtype=np.uint64).astype(f"u{itemsize}")


CASES = [  # shape, axes: 2-D transposes with partial tiles, the attention reshuffle, batches
    ((37, 45), (1, 0)), ((64, 128), (1, 0)), ((300, 257), (1, 0)), ((1, 7), (1, 0)), ((129, 1), (1, 0)),
    ((4, 48, 3, 16), (0, 2, 1, 3)), ((2, 64, 4, 32), (0, 2, 1, 3)), ((3, 5, 7, 64), (0, 1, 3, 2)),
    ((6, 40, 72), (2, 0, 1)), ((6, 40, 72), (1, 2, 0)), ((5, 4, 3, 2), (3, 2, 1, 0)), ((8, 16, 24), (0, 1, 2)),
    ((2, 3, 4, 5, 6), (4, 1, 3, 0, 2)), ((0, 5), (1, 0)), ((7,), (0,)), ((), ()),
    ((48, 272), (1, 0)), ((272, 48), (1, 0)), ((16, 24, 40), (2, 1, 0)),   # partial tiles, wide chunks
]


@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
@pytest.mark.parametrize("shape,axes", CASES)
def test_emulated_permute_contiguous(harness, rng, itemsize, shape, axes):
    x = _words(rng, shape, itemsize)
    _emulate(harness, x, axes, x)


@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
def test_emulated_permute_plans_take_wide_chunks(harness, rng, itemsize):
    """Aligned shapes move 16-byte chunks through both kernels."""
    x = _words(rng, (2, 128, 256), itemsize)
    assert _emulate(harness, x, (0, 2, 1), x).expr.endswith(", 16>")          # tile
    y = _words(rng, (4, 16, 8, 32), itemsize)
    pl = _emulate(harness, y, (0, 2, 1, 3), y)
    assert pl.kind == "rows" and pl.chunk == 16


@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
def test_emulated_permute_strided_views(harness, rng, itemsize):
    base = _words(rng, (20, 36, 50), itemsize)
    views = [
        (base[:, ::2, 1:], (2, 0, 1)),            # strided, offset start (misaligned: narrow chunks)
        (base[::-1, :, ::-1], (1, 2, 0)),         # negative strides
        (base[3:17, 4:36, 8:40], (0, 2, 1)),      # a window
        (base[:, 5, :], (1, 0)),                  # a 2-D slice
        (base.transpose(2, 0, 1)[:, ::3], (1, 0, 2)),
        (base[:, :, ::5], (0, 1, 2)),             # identity of a strided view: scalar rows
    ]
    for v, axes in views:
        _emulate(harness, v, axes, base)
    bc = np.broadcast_to(base[0, :1, :], (6, 36, 50))   # zero strides
    _emulate(harness, bc, (2, 1, 0), base)


SHORT_DIM_CASES = [  # shape, axes, the short dim of the plane: a tile would be mostly empty
    ((5, 7, 9), (0, 2, 1), 7), ((5, 9, 7), (0, 2, 1), 7),                # weight taps to (K, R S, C), back
    ((4, 70, 3, 3), (0, 2, 3, 1), 9), ((3, 40, 2, 5), (0, 2, 3, 1), 10),
    ((2, 3, 17, 19), (0, 2, 3, 1), 3), ((2, 17, 19, 3), (0, 3, 1, 2), 3),  # 3-channel images, both ways
    ((1030, 2), (1, 0), 2), ((2, 1030), (1, 0), 2), ((3, 7, 300), (0, 2, 1), 7), ((3, 300, 16), (0, 2, 1), 16),
    ((2, 5, 3, 7, 2), (4, 1, 3, 0, 2), 2),                               # batch dims around the plane
    ((2, 3, 16, 19), (0, 2, 3, 1), 3), ((2, 16, 19, 3), (0, 3, 1, 2), 3),
]


@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
@pytest.mark.parametrize("shape,axes,short", SHORT_DIM_CASES)
def test_emulated_permute_short_dims_move_runs(harness, rng, itemsize, shape, axes, short):
    """ck_tr_runs up to max_run() words (half as many of 8 bytes), the tiles past it."""
    from cudakit.kernels import transpose
    x = _words(rng, shape, itemsize)
    pl = _emulate(harness, x, axes, x)
    assert (pl.kind == "runs") == (short <= transpose.max_run(itemsize)), pl


@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
def test_emulated_permute_runs_modes(harness, rng, itemsize, monkeypatch):
    """ck_tr_runs staged (y holds a block's runs as one run, a short k of STAGED_FROM words or
    more) and direct (a short x-fastest dim, a short k under STAGED_FROM, runs not adjacent in y,
    staging off), partial last blocks."""
    from cudakit.kernels import transpose
    def expr(shape, axes, base=None, view=None):
        base = _words(rng, shape, itemsize) if base is None else base
        return _emulate(harness, base if view is None else view, axes, base).expr
    assert expr((3, 7, 301), (0, 2, 1)).endswith(", true, 1>")        # staged (7 words), l odd
    base = _words(rng, (4, 7, 301), itemsize)
    assert expr(None, (0, 2, 1), base, base[::2, :, 1:]).endswith(", true, 1>")   # (a strided x)
    assert expr((3, 300, 7), (0, 2, 1)).endswith(", false, 1>")       # a short x-fastest dim
    assert ", false, " in expr((2, 5, 3, 7, 2), (4, 1, 3, 0, 2))            # (runs not adjacent in y)
    assert expr((3, 2, 300), (0, 2, 1)).endswith(", true, 4>")        # short runs (2 words), grouped
    assert expr((3, 300, 2), (0, 2, 1)).endswith(", false, 4>")
    assert expr((3, 2, 301), (0, 2, 1)).endswith(", true, 4>")        # (a partial group)
    assert expr((3, 4, 300), (0, 2, 1)).endswith(", false, 1>" if itemsize == 8 else ", true, 4>")
    monkeypatch.setattr(transpose, "STAGED", False)
    monkeypatch.setattr(transpose, "GROUPED", False)
    assert expr((3, 7, 300), (0, 2, 1)).endswith(", false, 1>")


def test_emulated_permute_short_dims_of_strided_views(harness, rng):
    """A weight's (K, C, R, S) view of (K, R, S, C) memory back to C-contiguous (an identity
    permute of a strided view), and a reversed slice."""
    base = _words(rng, (6, 3, 3, 130), 2)
    assert _emulate(harness, base.transpose(0, 3, 1, 2), (0, 1, 2, 3), base).kind == "runs"
    _emulate(harness, base[::-1, :, ::-1, 1:], (0, 3, 1, 2), base)


def test_plan_keeps_tiles_that_a_plane_fills():
    """The tile kernel stays wherever neither side of the plane is short (ck_tr_runs: at most
    MAX_RUN and under half the tile's side), and runs take the 64-bit index past 2^32 of them."""
    from cudakit.kernels import transpose
    for shape, axes in (((2, 128, 256), (0, 2, 1)), ((64, 64, 4096), (0, 2, 1)), ((16384, 16384), (1, 0)),
                        ((64, 24, 4096), (0, 2, 1)), ((64, 4096, 24), (0, 2, 1))):
        acc, st = 2, []
        for d in reversed(shape):
            st.insert(0, acc)
            acc *= d
        assert transpose.plan(shape, tuple(st), 2, axes).kind == "tile", shape
    pl = transpose.plan((2**15, 2**16 + 1, 2), (2 * (2**16 + 1), 2, 1), 1, (2, 0, 1))
    assert pl.kind == "runs" and "unsigned int," in pl.expr   # (2^31 + 2^15 runs of 2)
    pl = transpose.plan((2**16, 2**16 + 1, 2), (2 * (2**16 + 1), 2, 1), 1, (2, 0, 1))
    assert pl.kind == "runs" and "unsigned long long," in pl.expr


def test_emulated_rows_with_64bit_rows_index(harness, rng):
    """Plan choice only: 2^32 rows or more take the 64-bit row decomposition."""
    from cudakit.kernels import transpose
    pl = transpose.plan((2**16, 2**16 + 1, 4), (0, 0, 1), 1, (1, 0, 2))
    assert pl.kind == "rows" and "long long" in pl.expr


def test_plan_more_than_8_dims_copies():
    from cudakit.kernels import transpose
    shape = (2,) * 10
    strides = tuple(2 ** (9 - i) * 4 for i in range(10))
    assert transpose.plan(shape, strides, 4, tuple(range(9, -1, -1))) == "copy"


def test_run_limit_is_the_kernels():
    """transpose.py's cap on a run (max_run) is the kernel's CK_TR_MAX_RUN: a longer run would lose
    words past the kernel's register array, whatever MAX_RUN is set to."""
    import re
    from cudakit.kernels import transpose
    assert int(re.search(r"#define CK_TR_MAX_RUN (\d+)", transpose.SOURCE).group(1)) == transpose._KERNEL_MAX_RUN
    old = transpose.MAX_RUN
    try:
        transpose.MAX_RUN = 64
        assert transpose.max_run(2) == transpose._KERNEL_MAX_RUN and transpose.max_run(8) == transpose._KERNEL_MAX_RUN // 2
    finally:
        transpose.MAX_RUN = old


def test_tile_geometry_is_the_kernels():
    from cudakit.kernels import transpose
    for e in (1, 2, 4, 8):
        for c in transpose.tile_chunks(e):
            g = transpose.tile_geometry(e, c)
            assert g["TK"] * g["TA"] * e <= 16384 and g["N"] >= 1
            assert g["TK"] * g["W"] * g["NC"] % 256 == 0


def test_permute_plans_are_memoised_by_alignment(monkeypatch):
    """permute's plan is built once per (shape, strides, dtype size, axes, 16-byte alignment of the
    addresses): the same view at another aligned address reuses it, a shifted one gets its own."""
    from types import SimpleNamespace
    from cudakit.kernels import transpose as tr
    monkeypatch.setattr(tr, "_plans", {})

    def arr(ptr):
        return SimpleNamespace(shape=(64, 128), strides=(512, 4), data=SimpleNamespace(ptr=ptr))
    a = tr._cached_plan(arr(0x1000), arr(0x9000), 4, (1, 0))
    assert tr._cached_plan(arr(0x2000), arr(0x7000), 4, (1, 0)) is a
    b = tr._cached_plan(arr(0x1004), arr(0x9000), 4, (1, 0))
    assert b is not a and b.chunk < a.chunk and len(tr._plans) == 2
    fresh = tr.plan((64, 128), (512, 4), 4, (1, 0), 0x1000, 0x9000)
    assert (a.expr, a.grid, a.params.tobytes()) == (fresh.expr, fresh.grid, fresh.params.tobytes())
