"""Who am I and where is the store: the environment of torchrun, `cudakit run`, Open MPI and Slurm.

| what              | torchrun / cudakit run | Open MPI (mpirun)            | Slurm (srun)                        |
| ----------------- | ---------------------- | ---------------------------- | ----------------------------------- |
| rank              | RANK                   | OMPI_COMM_WORLD_RANK         | SLURM_PROCID                        |
| world size        | WORLD_SIZE             | OMPI_COMM_WORLD_SIZE         | SLURM_NTASKS                        |
| local rank        | LOCAL_RANK             | OMPI_COMM_WORLD_LOCAL_RANK   | SLURM_LOCALID                       |
| local world size  | LOCAL_WORLD_SIZE       | OMPI_COMM_WORLD_LOCAL_SIZE   | SLURM_STEP_TASKS_PER_NODE[NODEID]   |
| store host        | MASTER_ADDR            | MASTER_ADDR (mpirun -x)      | MASTER_ADDR, else the step's first  |
|                   |                        |                              | node (SLURM_STEP_NODELIST)          |
| store port        | MASTER_PORT            | MASTER_PORT, else 29500      | MASTER_PORT, else 20000 + job id %  |
|                   |                        |                              | 20000 (the same on every node)      |

torchrun's variables win when RANK and WORLD_SIZE are both set, then Open MPI's, then Slurm's.
On one node (local world size = world size) the store host defaults to 127.0.0.1.

`cudakit run` sets torchrun's variables and serves the store itself, at CUDAKIT_STORE_ADDR and
CUDAKIT_STORE_PORT (then the store is there and rank 0 does not serve one); it leaves
MASTER_PORT (its --master-port + 1) free for scripts that open a rendezvous of their own, such as
torch.distributed's.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..errors import ArgumentError

DEFAULT_PORT = 29500


@dataclass(frozen=True)
class LaunchEnv:
    """This process's place in the job. Ranks count from 0; port is a TCP port."""
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str | None
    master_port: int | None
    source: str               # "torchrun", "cudakit run", "openmpi" or "slurm"
    store_hosted: bool = False  # a launcher (cudakit run) serves the store: rank 0 only connects


def _int(env, name: str, source: str) -> int:
    raw = env.get(name)
    if raw is None or not raw.strip():   # (a launcher's environment with this one variable missing)
        raise ArgumentError(f"{name} is not set ({source} sets it with the others); the environment looks like "
                            f"a partial {source} one")
    try:
        return int(raw)
    except ValueError:
        raise ArgumentError(f"{name}={raw!r} ({source}) is not an integer") from None


def _opt_int(env, name: str, source: str) -> int | None:
    return _int(env, name, source) if env.get(name, "").strip() else None


def expand_first_host(nodelist: str) -> str:
    """The first host name of a Slurm node list: "gpu[003-005,9],cpu1" -> "gpu003"."""
    s = nodelist.strip()
    m = re.match(r"([^,\[]+)(\[([^\]]+)\])?", s)
    if not m or not m.group(1):
        raise ArgumentError(f"cannot read a host from the Slurm node list {nodelist!r}")
    if m.group(3) is None:
        return m.group(1)
    first = m.group(3).split(",")[0].split("-")[0]
    return m.group(1) + first


def tasks_on_node(tasks_per_node: str, node_id: int) -> int:
    """Slurm's "2(x3),1" (two tasks on each of three nodes, then one) -> the count on node `node_id`."""
    counts: list[int] = []
    for part in tasks_per_node.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m:
            raise ArgumentError(f"cannot read Slurm's tasks per node {tasks_per_node!r}")
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    if not 0 <= node_id < len(counts):
        raise ArgumentError(f"SLURM_NODEID={node_id} is outside the {len(counts)} nodes of {tasks_per_node!r}")
    return counts[node_id]


def _master(env, source: str, local_world: int, world: int, fallback_port: int | None) -> tuple[str | None, int | None]:
    addr = env.get("MASTER_ADDR", "").strip() or None
    port = _opt_int(env, "MASTER_PORT", source)
    if addr is None and local_world == world:
        addr = "127.0.0.1"
    return addr, port if port is not None else fallback_port


def read_env(environ=None) -> LaunchEnv | None:
    """The job's layout from the launcher's variables (see the module's table), or None when no
    launcher set them. Raises ValueError naming the variable when one is malformed."""
    env = os.environ if environ is None else environ
    hosted = bool(env.get("CUDAKIT_STORE_PORT", "").strip())
    if env.get("RANK", "").strip() and env.get("WORLD_SIZE", "").strip():
        src = "torchrun"
        rank, world = _int(env, "RANK", src), _int(env, "WORLD_SIZE", src)
        local = _opt_int(env, "LOCAL_RANK", src)
        local_world = _opt_int(env, "LOCAL_WORLD_SIZE", src)
        local = rank if local is None else local
        local_world = world if local_world is None else local_world
        if hosted:
            src = "cudakit run"
            addr, port = env.get("CUDAKIT_STORE_ADDR", "").strip() or "127.0.0.1", _int(env, "CUDAKIT_STORE_PORT", src)
        else:
            addr, port = _master(env, src, local_world, world, None)
        return _checked(LaunchEnv(rank, world, local, local_world, addr, port, src, hosted))
    if env.get("OMPI_COMM_WORLD_RANK", "").strip():
        src = "openmpi"
        rank, world = _int(env, "OMPI_COMM_WORLD_RANK", src), _int(env, "OMPI_COMM_WORLD_SIZE", src)
        local = _int(env, "OMPI_COMM_WORLD_LOCAL_RANK", src)
        local_world = _int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", src)
        addr, port = _master(env, src, local_world, world, DEFAULT_PORT)
        return _checked(LaunchEnv(rank, world, local, local_world, addr, port, src))
    if env.get("SLURM_PROCID", "").strip() and env.get("SLURM_NTASKS", "").strip():
        src = "slurm"
        rank, world = _int(env, "SLURM_PROCID", src), _int(env, "SLURM_NTASKS", src)
        local = _int(env, "SLURM_LOCALID", src)
        per_node = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
        node_id = _opt_int(env, "SLURM_NODEID", src) or 0
        local_world = tasks_on_node(per_node, node_id) if per_node else world
        job = _opt_int(env, "SLURM_JOB_ID", src)
        addr, port = _master(env, src, local_world, world, 20000 + job % 20000 if job is not None else DEFAULT_PORT)
        if addr is None:
            nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
            addr = expand_first_host(nodes) if nodes else None
        return _checked(LaunchEnv(rank, world, local, local_world, addr, port, src))
    return None


def _checked(e: LaunchEnv) -> LaunchEnv:
    if e.world_size < 1:
        raise ArgumentError(f"world size must be >= 1 (got {e.world_size} from {e.source}'s variables)")
    if not 0 <= e.rank < e.world_size:
        raise ArgumentError(f"rank {e.rank} is outside [0, {e.world_size}) ({e.source}'s variables)")
    if not 0 <= e.local_rank < max(e.local_world_size, 1):
        raise ArgumentError(f"local rank {e.local_rank} is outside [0, {e.local_world_size}) ({e.source}'s variables)")
    if e.master_port is not None and not 0 < e.master_port < 65536:
        raise ArgumentError(f"MASTER_PORT={e.master_port} is not a TCP port (1..65535)")
    return e


def parse_init_method(init_method: str) -> tuple[str, str | None, int | None]:
    """("env", None, None) for "env://"; ("tcp", host, port) for "tcp://host:port" (IPv6 in brackets).
    Raises ValueError naming the text otherwise."""
    if init_method == "env://":
        return "env", None, None
    m = re.fullmatch(r"tcp://(\[[^\]]+\]|[^:/\[\]]+):(\d+)/?", init_method or "")
    if not m:
        raise ArgumentError(f"init_method must be 'env://' or 'tcp://host:port' (got {init_method!r})")
    port = int(m.group(2))
    if not 0 < port < 65536:
        raise ArgumentError(f"init_method {init_method!r}: port {port} is not in 1..65535")
    return "tcp", m.group(1).strip("[]"), port
