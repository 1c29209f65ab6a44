"""NumPy arrays as Triton's interpreter (TRITON_INTERPRET=1) sees torch tensors: it reads and writes
through data_ptr. Import after setting TRITON_INTERPRET=1; it teaches Triton the arrays' pointer
types (float32, float16, float64, int32, int64; the interpreter cannot take bfloat16 from NumPy)."""
import triton.runtime.jit as triton_jit

_TRITON_TYPES = {"float32": "*fp32", "float16": "*fp16", "float64": "*fp64", "int32": "*i32", "int64": "*i64"}


class _Storage:
    def __init__(self, arr):
        self.arr = arr

    def data_ptr(self):
        return self.arr.ctypes.data

    def cpu(self):
        return self

    def copy_(self, other):  # host and "device" are one buffer
        pass


class Tensor:
    """A NumPy array as the interpreter sees a torch tensor: it reads and writes through data_ptr."""

    def __init__(self, arr):
        self.arr = arr
        self.dtype = arr.dtype

    def data_ptr(self):
        return self.arr.ctypes.data

    def untyped_storage(self):
        return _Storage(self.arr)

    def storage_offset(self):
        return 0

    def size(self):
        return self.arr.shape

    def stride(self):
        return tuple(s // self.arr.itemsize for s in self.arr.strides)

    def new_empty(self, *args, **kwargs):
        return self

    def set_(self, *args):
        return self


_mangle = triton_jit.mangle_type
triton_jit.mangle_type = lambda arg, specialize=False: (
    _TRITON_TYPES[str(arg.dtype)] if isinstance(arg, Tensor) else _mangle(arg, specialize))
