"""Run CUDA C++ kernels of cudakit on the CPU: the source compiled as host C++ (g++) with the CUDA
keywords defined away and blockIdx / threadIdx as globals, so that a driver written for the test can
call the kernel once per thread of its launch grid. For kernels without shared memory, warp
intrinsics or PTX on the path tested (float32 and float64 instantiations): it checks their index
arithmetic and bounds without a GPU."""
import ctypes
import shutil
import subprocess

import pytest

SHIM = r"""
#include <algorithm>
#include <cmath>
#include <cstring>
using std::max;
using std::min;
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// shared memory and barriers for launches of one thread a block (a block's phases then run in
// order); the driver defines the extern __shared__ array at namespace scope
#define __shared__
static inline void __syncthreads() {}
struct ck_dim3 { unsigned x, y, z; };
struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
static ck_dim3 blockIdx, threadIdx, blockDim, gridDim;
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline double __longlong_as_double(unsigned long long i) { double d; std::memcpy(&d, &i, 8); return d; }
static inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
// CK_EMULATE(grid x, grid y, block x, call): the call once per thread of the grid, in order
#define CK_EMULATE(GX, GY, BX, CALL)                                                  \
  for (unsigned by = 0; by < (GY); ++by)                                              \
    for (unsigned bx = 0; bx < (GX); ++bx)                                            \
      for (unsigned t = 0; t < (BX); ++t) {                                           \
        blockIdx = {bx, by, 0}; threadIdx = {t, 0, 0};                                \
        blockDim = {(BX), 1, 1}; gridDim = {(GX), (GY), 1};                           \
        CALL;                                                                         \
      }
"""


def build(source: str, driver: str, tmp_path) -> ctypes.CDLL:
    """The kernel source (its 16-bit PTX conversions commented out: host code cannot run them) and
    an extern "C" driver, compiled into a shared library; skips where g++ is missing."""
    gxx = shutil.which("g++")
    if not gxx:
        pytest.skip("g++ is not on the PATH")
    src = tmp_path / "emulated.cpp"
    src.write_text(SHIM + source.replace('asm("', '// asm("') + driver)
    lib = tmp_path / "emulated.so"
    r = subprocess.run([gxx, "-O1", "-std=c++17", "-shared", "-fPIC", "-w", "-o", str(lib), str(src)],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr[-4000:]
    return ctypes.CDLL(str(lib))
