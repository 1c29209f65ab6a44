"""Programmatic dependent launch in cudakit's Triton kernels (runtime/triton.py, runtime/pdl.py):
the step each such kernel takes first, before it touches global memory."""
import triton
import triton.language as tl

try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:   # (a Triton without grid dependency control: runtime.triton.pdl_supported is then False)
    gdc_launch_dependents = gdc_wait = None


@triton.jit
def _pdl_start(PDL: tl.constexpr):
    """Each kernel's first step. PDL (compiled in where runtime.triton.pdl_supported: the launch
    then may overlap the previous kernel's tail, runtime/native.pdl_register): wait until the
    previous kernel in the stream has finished and its writes are visible, before this one touches
    global memory. The next kernel (which waits the same way before it reads what this one writes)
    may then launch as this one's programs exit (PDL True or 1), or at once (PDL 2, which ran short
    grids slower: not profiled, likely its programs placed on whichever SMs had room while this one
    still ran). On an H200 (2026-11-28 19:47-19:52 UTC, benchmarks/sweeps/
    attention_pdl.py, history/attention/nvidia-h200-attention-f32-pdl-modes.json; x torch's float32
    SDPA, as programs exit / at once / without PDL): the float16-parts forward at B2 H8 S256 D96
    1.564 / 1.472 / 1.388, the materialised backward there 2.450 / 2.073 / 2.209, at B8 H8 S256 D128
    1.538 / 1.516 / 1.491. Without PDL nothing is compiled (Triton's interpreter runs it so)."""
    if PDL:
        gdc_wait()
        if PDL == 2:
            gdc_launch_dependents()

