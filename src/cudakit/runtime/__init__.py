"""The CUDA runtime layer, on CuPy. Nothing here touches CUDA until a function is called."""
