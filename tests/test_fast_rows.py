"""backends.softmax_api.last_axis_rows: which arrays the CUDA backend's unchecked fast calls
(softmax, layernorm, rmsnorm) take, tested with a stand-in array type (no GPU needed)."""
import numpy as np

from cudakit.backends.softmax_api import last_axis_rows


class Arr:
    """The attributes last_axis_rows reads of a CuPy array, over a NumPy array."""

    def __init__(self, a, device=0, contiguous=True):
        self.a, self._c_contiguous = a, contiguous
        self.ndim, self.shape, self.size, self.dtype = a.ndim, a.shape, a.size, a.dtype
        self.data = type("Mem", (), {"device_id": device})()

    def reshape(self, *shape):
        return Arr(self.a.reshape(*shape), self.data.device_id)


def test_rows_of_the_last_axis_or_none():
    x = Arr(np.zeros((2, 3, 8), np.float32))
    r = last_axis_rows(x, Arr, 0)
    assert r.shape == (6, 8)
    two = Arr(np.zeros((4, 8), np.float32))
    assert last_axis_rows(two, Arr, 0) is two                     # 2-D: itself
    assert last_axis_rows(Arr(np.zeros(8, np.float32)), Arr, 0).shape == (1, 8)
    assert last_axis_rows(x, Arr, 1) is None                       # another device
    assert last_axis_rows(Arr(np.zeros((4, 8), np.float32), contiguous=False), Arr, 0) is None
    assert last_axis_rows(Arr(np.zeros((4, 0), np.float32)), Arr, 0) is None   # no columns
    assert last_axis_rows(Arr(np.zeros((), np.float32)), Arr, 0) is None       # 0-d
    assert last_axis_rows(Arr(np.zeros((4, 8), np.int32)), Arr, 0) is None     # not a float dtype
    assert last_axis_rows(np.zeros((4, 8), np.float32), Arr, 0) is None        # not the array type
