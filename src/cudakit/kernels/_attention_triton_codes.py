"""The attention kernels' device error codes (runtime/device_errors.py), importable without Triton."""
ERR_KEY_LENGTHS = 10   # a key length outside [0, Lk]: fields (batch, value, Lk)
