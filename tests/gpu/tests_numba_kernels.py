"""Numba kernels defined in a file (so Numba's disk cache can hold them)."""
from numba import cuda


def axpy(a, x, y):
    i = cuda.grid(1)
    if i < x.shape[0]:
        y[i] = a * x[i] + y[i]
