"""The five seed documents' interfaces as thin facades over cudakit (docs/compat.md maps each name).

    cudakit.compat.flamingcamel   FlamingCamel's `frontend.backend` (seed 000)
    cudakit.compat.pydotcompute   pydotcompute's `pydotcompute.backends.cuda` (seed 001)
    cudakit.compat.genesis        Genesis's `genesis` / `genesis.cuda` (seed 002)
    cudakit.compat.neural_arch    neural_arch's `neural_arch.backends` (seed 003)
    cudakit.compat.neuralscript   NeuralScript's `compiler.backend.cuda_*` (seed 004)

Code written against one of them runs with its import lines changed to these modules. Each facade
maps the seed's calls onto cudakit's API and implements no op of its own; where a seed's design is
unsafe (raw pointers without bounds, printing from library code, silent fallback), the facade does
the safe thing and docs/compat.md records the difference. Importing this package imports none of
the facades (nor CuPy).
"""
