"""Multi-GPU and multi-node: process groups, NCCL collectives on CuPy arrays, a launcher, data parallel.

    import cudakit.distributed as dist
    dist.init_process_group("nccl")          # under `cudakit run`, torchrun, mpirun or srun
    dist.all_reduce(x, op="sum")             # x: a CuPy array on this rank's GPU, in place
    work = dist.all_reduce(y, async_op=True); ...; work.wait()
    dist.destroy_process_group()

backend="cpu" runs the same collectives on NumPy arrays through the TCP store (tests, small
CPU jobs). Failures raise cudakit.DistributedError naming the rank, the op and the cause; the
watchdog turns a hung collective into that error after the group's timeout. See
docs/distributed.md.

Importing this package does no CUDA work and does not import CuPy.
"""
from __future__ import annotations

from ..errors import DistributedError
from .collectives import (
                          DTYPES,
                          REDUCE_OPS,
                          ReduceOp,
                          all_gather,
                          all_reduce,
                          all_reduce_coalesced,
                          barrier,
                          broadcast,
                          recv,
                          reduce,
                          reduce_scatter,
                          send,
)
from .data_parallel import GradSync, broadcast_parameters, plan_buckets
from .env import LaunchEnv, read_env
from .group import (
                          ProcessGroup,
                          default_group,
                          destroy_process_group,
                          get_backend,
                          get_local_rank,
                          get_rank,
                          get_world_size,
                          init_process_group,
                          is_initialized,
                          new_group,
)
from .store import StoreClient, StoreServer
from .work import Work
from .zero import ZeroRedundancyOptimizer

__all__ = ["DistributedError", "DTYPES", "REDUCE_OPS", "ReduceOp", "all_gather", "all_reduce",
           "all_reduce_coalesced", "barrier", "broadcast", "recv", "reduce", "reduce_scatter", "send",
           "GradSync", "broadcast_parameters", "plan_buckets", "LaunchEnv", "read_env", "ProcessGroup",
           "default_group", "destroy_process_group", "get_backend", "get_local_rank", "get_rank",
           "get_world_size", "init_process_group", "is_initialized", "new_group", "StoreClient", "StoreServer",
           "Work", "ZeroRedundancyOptimizer"]
