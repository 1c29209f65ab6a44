"""Triton kernels used by the tests (in a file, so Triton can read their source)."""
import triton
import triton.language as tl


@triton.jit
def vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=m).to(tl.float32)
    tl.store(out_ptr + offs, (x + y).to(out_ptr.dtype.element_ty), mask=m)


@triton.jit
def row_softmax(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=m, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * stride + cols, (e / tl.sum(e, axis=0)).to(out_ptr.dtype.element_ty), mask=m)


@triton.jit
def scale_inplace(x_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) * factor, mask=m)


@triton.jit
def noop(x_ptr):
    pass


@triton.jit
def big_smem(x_ptr, BLOCK: tl.constexpr):
    # a BLOCK x BLOCK float32 tile that must live in shared memory for the transpose-reduction
    offs = tl.arange(0, BLOCK)
    t = tl.load(x_ptr + offs[:, None] * BLOCK + offs[None, :])
    tl.store(x_ptr + offs, tl.sum(tl.trans(t), axis=1))
