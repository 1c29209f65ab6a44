# Sourced by scripts/gpu_check.sh, gpu_check_distributed.sh and device_env.sh: the `cudnn` extra's frontend, carried
# as a wheel in .carry/wheels (git-ignored; pass carry=[".carry"]). The image has cuDNN's runtime
# (torch's nvidia-cudnn-cu13), not the frontend: installed into a private directory, with the
# runtime's lib directory on LD_LIBRARY_PATH. CUDAKIT_CUDNN=0 runs without it.
for whl in .carry/wheels/nvidia_cudnn_frontend-*-cp3*.whl; do
  [ -f "$whl" ] || continue
  python3 -m pip install -q --no-deps --no-index --target /tmp/cudakit-site "$whl" 2>&1 | tail -2 && export PYTHONPATH="/tmp/cudakit-site:$PYTHONPATH"
done
CUDNN_LIB=$(python3 -c "import nvidia.cudnn as m, os; print(os.path.join(list(m.__path__)[0], 'lib'))" 2>/dev/null) \
  && export LD_LIBRARY_PATH="$CUDNN_LIB:${LD_LIBRARY_PATH:-}"
