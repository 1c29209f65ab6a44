"""cudakit.distributed on two (or four) GPUs: NCCL collectives against NumPy, data parallel, the
overlap of all-reduce with the backward, faults, and two simulated nodes over sockets.

Each test launches ranks with `cudakit run` (the ranks are child processes; this process only
counts GPUs). Trace and logs go to $OUT when it is set (scripts/gpu_check_distributed.sh).
"""
import os
import re
import socket
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = [pytest.mark.cuda, pytest.mark.multi_gpu]
cp = pytest.importorskip("cupy")

HERE = os.path.dirname(os.path.dirname(__file__))   # tests/
CLI = [sys.executable, "-m", "cudakit", "run"]


@pytest.fixture(scope="module", autouse=True)
def _nccl():
    from cudakit.distributed import nccl
    try:
        nccl.nccl_module()
    except Exception as e:
        pytest.fail(f"NCCL is not usable through CuPy: {e}")


def ngpu():
    return min(cp.cuda.runtime.getDeviceCount(), 4)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(n, script, *args, env=None, extra=(), timeout=400):
    cmd = CLI + ["--nproc-per-node", str(n), "--master-port", str(free_port()), *extra, str(script), *map(str, args)]
    t = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ, **(env or {})))
    print(r.stdout[-3000:], r.stderr[-3000:])
    return r, time.monotonic() - t


def job(tmp_path, body):
    p = tmp_path / "job.py"
    p.write_text(textwrap.dedent(body))
    return p


def test_every_collective_matches_numpy_on_every_gpu():
    seed = int.from_bytes(os.urandom(4), "little")
    r, _ = launch(ngpu(), os.path.join(HERE, "dist_worker_collectives.py"), "nccl", seed)
    assert r.returncode == 0, f"seed {seed}"
    assert r.stdout.count("CHECKED") == ngpu()


@pytest.mark.parametrize("copy", ["copy", "nocopy"])
def test_data_parallel_grads_equal_one_gpu_on_the_combined_batch(copy):
    r, _ = launch(2, os.path.join(HERE, "dist_worker_data_parallel.py"), "nccl", 11, copy)
    assert r.returncode == 0 and r.stdout.count("DP-OK") == 2


def test_gradsync_buckets_by_copy_engines_equal_nccl():
    """Two ranks on one host: GradSync's buckets all-reduced by the copy engines
    (distributed/peer_allreduce.py) equal NCCL's all_reduce, every float dtype, odd sizes, avg and sum."""
    r, _ = launch(2, os.path.join(HERE, "dist_worker_peer.py"))
    assert r.returncode == 0 and r.stdout.count("PEER-OK copy engines") == 2, r.stdout + r.stderr


def test_all_reduce_overlaps_the_backward_in_the_trace():
    out = os.environ.get("OUT")
    trace = os.path.join(out, "dp_overlap_trace.json") if out else os.devnull
    r, _ = launch(2, os.path.join(HERE, "dist_worker_overlap.py"), trace)
    assert r.returncode == 0
    for line in (ln for ln in r.stdout.splitlines() if "OVERLAP" in ln):
        n, us, total = map(float, line.split("OVERLAP ")[1].split()[:3])
        assert total == 6 and n >= 1 and us > 0, line   # six buckets, some ran under backward kernels


def _assert_survivors_named_rank_1(r, survivors: int) -> None:
    """The job's workers' own lines ("SIGKILL" in the launcher's and the errors' text is no KILL
    line): rank 1 printed KILL, `survivors` ranks printed LOST with a DistributedError naming rank 1
    within 60 s of it, and none needed the launcher's SIGTERM."""
    killed = [float(m.group(1)) for m in re.finditer(r"^\[rank\d+\]: KILL ([0-9.]+)$", r.stdout, re.M)]
    lost = [ln for ln in r.stdout.splitlines() if re.match(r"^\[rank\d+\]: LOST [0-9.]+ ", ln)]
    assert killed and len(lost) == survivors, r.stdout + r.stderr
    for ln in lost:
        t = float(ln.split("LOST ")[1].split()[0])
        assert "rank 1 is gone" in ln and t - killed[0] < 60, ln
    assert "sending SIGTERM" not in r.stderr   # nobody needed the launcher's kill


def test_killed_rank_the_others_raise_naming_it_within_60_s(tmp_path):
    p = job(tmp_path, """
        import os, signal, time, cupy as cp, cudakit.distributed as dist
        from cudakit.errors import DistributedError
        dist.init_process_group("nccl", timeout=600)
        r = dist.get_rank()
        x = cp.ones(16 << 20, cp.float32)
        try:
            for step in range(100000):
                if r == 1 and step == 5:
                    print("KILL", time.time(), flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)
                dist.all_reduce(x)
                cp.cuda.get_current_stream().synchronize()
        except DistributedError as e:
            print("LOST", time.time(), e.lost_ranks, e, flush=True)
            raise SystemExit(3)
    """)
    r, _ = launch(ngpu(), p, extra=("--grace", "90"))   # the survivors must exit on their own
    _assert_survivors_named_rank_1(r, ngpu() - 1)


def test_killed_rank_during_copy_engine_buckets_the_other_raises_within_60_s(tmp_path):
    """The copy-engine all-reduce (two ranks on one host): a rank killed between steps leaves the
    other's communication stream waiting on its flags; the watchdog fails the group and releases
    them, so the survivor raises DistributedError naming the lost rank instead of hanging."""
    p = job(tmp_path, """
        import os, signal, time, cupy as cp, cudakit.distributed as dist
        from cudakit.errors import DistributedError
        dist.init_process_group("nccl", timeout=600)
        r = dist.get_rank()
        params = [cp.zeros(1 << 20, cp.float32) for _ in range(4)]
        sync = dist.GradSync(params, bucket_bytes=4 << 20, broadcast_from=None)
        assert sync.transport_note.startswith("copy engines"), sync.transport_note
        try:
            for step in range(100000):
                if r == 1 and step == 5:
                    print("KILL", time.time(), flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)
                for i in reversed(range(4)):
                    sync.set_grad(i, cp.ones(1 << 20, cp.float32))
                sync.wait()
                cp.cuda.get_current_stream().synchronize()
        except DistributedError as e:
            print("LOST", time.time(), e.lost_ranks, e, flush=True)
            raise SystemExit(3)
    """)
    r, _ = launch(2, p, extra=("--grace", "90"))
    _assert_survivors_named_rank_1(r, 1)


_GRAPH_SYNC = """
    import faulthandler, os, signal, sys, time, cupy as cp, cudakit, cudakit.distributed as dist
    from cudakit.errors import DistributedError
    faulthandler.dump_traceback_later(100, exit=True)   # a hang shows its stacks and fails the test
    dist.init_process_group("nccl", timeout=600)
    r, n = dist.get_rank(), dist.get_world_size()
    sizes = [1 << 20, 3, 70001, 1 << 18]
    params = [cp.zeros(k, cp.float32) for k in sizes]
    sync = dist.GradSync(params, bucket_bytes=2 << 20, tail_bucket_bytes=0, broadcast_from=None, peer=False)
    grads = [cp.zeros(k, cp.float32) for k in sizes]      # static inputs of the captured step
    out = [cp.zeros(k, cp.float32) for k in sizes]

    def step():   # the backward's set_grad calls, the optimizer-side wait, a copy out
        for i in reversed(range(len(sizes))):
            sync.set_grad(i, grads[i] * 1)
        for o, g in zip(out, sync.wait()):
            o[...] = g
    step()        # one eager step: plans and the first bucket order
    cp.cuda.get_current_stream().synchronize()
    g = cudakit.CUDAGraph()
    with g.capture():
        step()
"""


def test_gradsync_captured_in_a_cuda_graph_averages_every_replay(tmp_path):
    """GradSync's bucket copies and NCCL all-reduces recorded in a CUDA graph: each replay averages
    that replay's gradients over the ranks (fresh values every time, odd sizes), as eagerly."""
    p = job(tmp_path, _GRAPH_SYNC + """
    for rep in range(3):
        for i, k in enumerate(sizes):
            grads[i][...] = cp.arange(k, dtype=cp.float32) * (r + 1) + rep
        g.replay()
        cp.cuda.get_current_stream().synchronize()
        for i, k in enumerate(sizes):
            want = cp.arange(k, dtype=cp.float32) * (n + 1) / 2 + rep
            assert cp.allclose(out[i], want, rtol=1e-6), (rep, i, float(abs(out[i] - want).max()))
    print("GRAPH-DP-OK", flush=True)
    dist.destroy_process_group()
    """)
    r, _ = launch(2, p, timeout=200)
    assert r.returncode == 0 and r.stdout.count("GRAPH-DP-OK") == 2, r.stdout + r.stderr


def test_killed_rank_during_graph_replays_the_other_raises_within_60_s(tmp_path):
    """Captured all-reduces have no pending entry of their own: the watchdog tracks each replay, so
    a rank killed between replays leaves the other's replay failing with DistributedError naming
    it (the communicator aborted, the graph's NCCL kernels returned) instead of hanging."""
    p = job(tmp_path, _GRAPH_SYNC + """
    try:
        for rep in range(100000):
            if r == 1 and rep == 5:
                print("KILL", time.time(), flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            g.replay()
            cp.cuda.get_current_stream().synchronize()
    except DistributedError as e:
        print("LOST", time.time(), e.lost_ranks, e, flush=True)
        raise SystemExit(3)
    """)
    r, _ = launch(2, p, extra=("--grace", "90"), timeout=200)
    _assert_survivors_named_rank_1(r, 1)


def test_sharded_optimizer_equals_unsharded_adamw_on_the_gpus():
    """ZeroRedundancyOptimizer over NCCL (reduce_scatter, this rank's shard of AdamW, all_gather in
    place): every rank ends with one process's unsharded AdamW on the averaged gradients."""
    r, _ = launch(2, os.path.join(HERE, "dist_worker_zero.py"), "nccl", 11)
    assert r.returncode == 0 and r.stdout.count("ZERO-OK") == 2, r.stdout + r.stderr


def test_gpt_example_graphed_data_parallel_trains_like_eager():
    """examples/train_gpt.py --graph under the launcher: the whole data-parallel step captured
    (from step 1) prints the losses of the eager data-parallel run (tiny, float32, no dropout)."""
    script = os.path.join(HERE, "..", "examples", "train_gpt.py")
    args = ("--backend", "cuda", "--preset", "tiny", "--dropout", "0", "--steps", "8")
    runs = {}
    for mode in ((), ("--graph",)):
        r, _ = launch(2, script, *args, *mode)
        assert r.returncode == 0, r.stdout + r.stderr
        runs[mode] = re.findall(r"step \d+ loss ([0-9.]+)", r.stdout)
    assert len(runs[()]) == 8 and runs[()] == runs[("--graph",)], runs


def test_mismatched_shapes_with_debug_name_both(tmp_path):
    p = job(tmp_path, """
        import cupy as cp, cudakit.distributed as dist
        from cudakit.errors import DistributedError
        dist.init_process_group("nccl", timeout=60)
        r = dist.get_rank()
        try:
            dist.all_reduce(cp.ones((16, 32 + r), cp.float32))
        except DistributedError as e:
            print("ERR", e, flush=True)
        dist.destroy_process_group()
    """)
    r, _ = launch(2, p, env={"CUDAKIT_DISTRIBUTED_DEBUG": "1"})
    errs = [ln for ln in r.stdout.splitlines() if "ERR" in ln]
    assert r.returncode == 0 and len(errs) == 2, r.stdout
    assert all("float32 (16, 32)" in ln and "float32 (16, 33)" in ln for ln in errs)


def test_unreachable_store_names_host_and_port(tmp_path):
    port = free_port()
    p = job(tmp_path, f"""
        import cudakit.distributed as dist
        dist.init_process_group("nccl", "tcp://127.0.0.1:{port}", world_size=2, rank=1, timeout=2)
    """)
    r = subprocess.run([sys.executable, str(p)], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and f"could not reach the store at 127.0.0.1:{port} within 2 s" in r.stderr


def test_hung_collective_becomes_an_error_after_the_timeout(tmp_path):
    p = job(tmp_path, """
        import time, cupy as cp, cudakit.distributed as dist
        from cudakit.errors import DistributedError
        dist.init_process_group("nccl", timeout=3)
        x = cp.ones(1 << 20, cp.float32)
        dist.all_reduce(x)
        cp.cuda.get_current_stream().synchronize()
        if dist.get_rank() == 1:
            time.sleep(10)             # never joins the second all_reduce
        else:
            t = time.monotonic()
            try:
                dist.all_reduce(x, async_op=True).synchronize()
            except DistributedError as e:
                print(f"TIMEOUT {time.monotonic() - t:.1f}", e, flush=True)
    """)
    r, _ = launch(2, p)
    line = [ln for ln in r.stdout.splitlines() if "TIMEOUT" in ln]
    assert line and "within the timeout of 3 s" in line[0], r.stdout + r.stderr
    assert float(line[0].split("TIMEOUT ")[1].split()[0]) < 15


def test_profiler_records_nccl_collectives(tmp_path):
    p = job(tmp_path, """
        import cupy as cp, cudakit, cudakit.distributed as dist
        dist.init_process_group("nccl", timeout=60)
        x = cp.ones(64 << 20 >> 2, cp.float32)
        dist.all_reduce(x)
        with cudakit.profile() as prof:
            dist.all_reduce(x)
            dist.all_gather(cp.empty(x.size * dist.get_world_size(), cp.float32), x)
        d = [r.as_dict() for r in prof.records]
        # a rate was derived (its size, not a speed bar: tests running beside this one on the same
        # GPUs, sockets-only NCCL among them, took a 64 MiB all_reduce below 10 GB/s on an H200 pair)
        print("REC", [(r["name"], r["nbytes"], 0 < r["bus_gb_per_s"] < float("inf")) for r in d], flush=True)
        dist.destroy_process_group()
    """)
    r, _ = launch(2, p)
    assert r.returncode == 0
    assert "REC [('nccl:all_reduce', 67108864, True), ('nccl:all_gather', 134217728, True)]" in r.stdout


def _two_nodes(script, *args, timeout=400):
    port = free_port()
    env = dict(os.environ, NCCL_P2P_DISABLE="1", NCCL_SHM_DISABLE="1")
    procs = []
    for node in (0, 1):
        e = dict(env, CUDA_VISIBLE_DEVICES=str(node))
        procs.append(subprocess.Popen(CLI + ["--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1",
                                             "--master-port", str(port), str(script), *map(str, args)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e))
    outs = [p.communicate(timeout=timeout) for p in procs]
    for o, e in outs:
        print(o[-2000:], e[-2000:])
    return [p.returncode for p in procs], "".join(o for o, _ in outs)


def test_two_simulated_nodes_over_sockets():
    codes, out = _two_nodes(os.path.join(HERE, "dist_worker_collectives.py"), "nccl", 5)
    assert codes == [0, 0] and out.count("CHECKED") == 2
    codes, out = _two_nodes(os.path.join(HERE, "dist_worker_data_parallel.py"), "nccl", 11)
    assert codes == [0, 0] and out.count("DP-OK") == 2


def test_gpt_example_data_parallel_gradients_equal_the_combined_batch():
    """examples/train_gpt.py's data-parallel path on the GPUs: the synchronised gradients equal one
    process's on the ranks' batches combined (float32, within rounding)."""
    r, _ = launch(2, os.path.join(HERE, "dist_worker_gpt_dp.py"), "cuda")
    assert r.returncode == 0 and r.stdout.count("GPT-DP-OK") == 2, r.stdout + r.stderr
