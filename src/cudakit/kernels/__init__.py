"""One module per op family: its CUDA C++ (or Triton) source, host wrapper, forward and backward."""
