"""The materialised float32 attention backward's kernels (_attention_f32_materialized.py) against
float64, on NumPy arrays in Triton's interpreter (no GPU):
    TRITON_INTERPRET=1 python benchmarks/sweeps/attention_f32_materialized_check.py
Prints each gradient's largest error over its largest magnitude; raises past 1e-5 (2026-11-27:
4.0e-7..9.7e-7 at head dims 64 and 128)."""
import math
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [here, os.path.join(here, "..", "..", "tests"), os.path.join(here, "..", "..", "src")]
import _attention_f32_materialized as mt
import numpy as np
from triton_numpy import Tensor as T

from cudakit.kernels import _attention_triton as kernels


def split(x, trans):
    """x's TF32 parts and remainders by the shipped tf32_split, in x's layout or transposed."""
    bh, L, d = x.shape
    shape = (bh, d, L) if trans else x.shape
    hi, lo = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
    kernels.tf32_split[(bh, L // 32)](T(x), T(hi), T(lo), L, C=d, BLOCK_L=32, BLOCK_C=d, TRANS=trans)
    return hi, lo


rng = np.random.default_rng(0)
for bh, L, d, bm, bn, bk in ((2, 64, 64, 32, 32, 16), (1, 64, 128, 32, 64, 32)):
    q, k, v, g = (rng.standard_normal((bh, L, d)).astype(np.float32) for _ in range(4))
    scale = d ** -0.5
    s = np.einsum("bid,bjd->bij", q.astype(np.float64), k.astype(np.float64)) * scale
    lse = np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1)) + s.max(-1)
    p = np.exp(s - lse[..., None]); o = p @ v
    dp = g.astype(np.float64) @ v.transpose(0, 2, 1).astype(np.float64)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    ref = {"dq": ds @ k * scale, "dk": ds.transpose(0, 2, 1) @ q * scale, "dv": p.transpose(0, 2, 1) @ g}
    delta = (o * g).sum(-1).astype(np.float32)
    lse32 = lse.astype(np.float32)
    kh, kl = split(k, False); vh, vl = split(v, False)
    kth, ktl = split(k, True); qth, qtl = split(q, True); doth, dotl = split(g, True)
    P = np.zeros((bh, L, L), np.float32); DS = np.zeros((bh, L, L), np.float32)
    mt.scores_split[(L // bm, L // bn, bh)](*map(T, (q, g, kh, kl, vh, vl, lse32, delta, P, DS)),
                                           scale * math.log2(math.e), L, D=d, BLOCK_M=bm, BLOCK_N=bn)
    print("P err", np.abs(P - p).max(), "dS err", np.abs(DS - ds).max() / np.abs(ds).max())
    dq, dk, dv = (np.zeros((bh, L, d), np.float32) for _ in range(3))
    mt.long_product_split[(L // bm, bh)](T(DS), T(kth), T(ktl), T(dq), scale, L, D=d, BLOCK_M=bm, BLOCK_K=bk, TRANS_A=False)
    mt.long_product_split[(L // bm, bh)](T(DS), T(qth), T(qtl), T(dk), scale, L, D=d, BLOCK_M=bm, BLOCK_K=bk, TRANS_A=True)
    mt.long_product_split[(L // bm, bh)](T(P), T(doth), T(dotl), T(dv), 1.0, L, D=d, BLOCK_M=bm, BLOCK_K=bk, TRANS_A=True)
    for n, got in (("dq", dq), ("dk", dk), ("dv", dv)):
        e = np.abs(got - ref[n]).max() / np.abs(ref[n]).max()
        print(bh, L, d, n, f"{e:.2e}")
        assert e < 1e-5, n
print("materialized ok")
