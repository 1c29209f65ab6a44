"""Which step of a data-parallel rank's start makes a CUDA context on which GPU (a rank holding a
context on another rank's GPU costs that GPU memory and time-slices it).

    cudakit run --nproc-per-node 2 scripts/context_probe.py

Each rank runs the examples' start-up one phase at a time (import cudakit, the examples' Device,
init_process_group, a parameter broadcast, a GradSync) and after each prints the GPUs on which
nvidia-smi lists its process: lines "CTX-PROBE rank R after <phase>: <bus ids>".
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))


def where(rank: int, phase: str) -> None:
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_bus_id", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout
    mine = sorted(line.split(",")[1].strip() for line in out.splitlines() if line.split(",")[0].strip() == str(os.getpid()))
    print(f"CTX-PROBE rank {rank} after {phase}: {', '.join(mine) or 'none'}", flush=True)


def main() -> int:
    rank = int(os.environ.get("RANK", "0"))
    import cudakit  # noqa: F401 -- the phase measured: importing it
    where(rank, "import cudakit")
    import train_common as common
    device = common.Device("cuda")
    where(rank, "train_common.Device('cuda')")
    import cudakit.distributed as dist
    dist.init_process_group("nccl")
    where(rank, f"init_process_group (device {device.xp.cuda.runtime.getDevice()})")
    x = device.xp.ones(1 << 20, device.xp.float32)
    dist.broadcast_parameters([x])
    where(rank, "a broadcast")
    sync = dist.GradSync([x], broadcast_from=None)
    where(rank, f"GradSync ({sync.transport_note})")
    sync.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
