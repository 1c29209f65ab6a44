"""ZeroRedundancyOptimizer (optimizer state sharded across the ranks) on the cpu backend: three
ranks match one process's unsharded AdamW, and bad arguments raise before anything is written."""
import os

import numpy as np
import pytest

import cudakit
import cudakit.distributed as dist
from cudakit.errors import DTypeError, ShapeError
from test_distributed_cpu import free_port, launch

HERE = os.path.dirname(__file__)


@pytest.mark.parametrize("ranks", [2, 3])
def test_sharded_adamw_equals_unsharded_on_the_averaged_gradients(ranks):
    r = launch(ranks, os.path.join(HERE, "dist_worker_zero.py"), "cpu", 7)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [ln for ln in r.stdout.splitlines() if "ZERO-OK" in ln]
    assert len(lines) == ranks, r.stdout
    mine, total = (int(v) for v in lines[0].split("ZERO-OK ")[1].split()[:2])
    assert mine * ranks == total   # each rank steps 1/N of the (padded) elements


@pytest.fixture
def one_rank():
    dist.init_process_group("cpu", f"tcp://127.0.0.1:{free_port()}", world_size=1, rank=0, timeout=10)
    yield
    dist.destroy_process_group()


def test_params_become_bucket_views_and_bad_gradients_write_nothing(one_rank):
    p = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(4, np.float32)}
    zero = dist.ZeroRedundancyOptimizer(p, lambda shards: cudakit.SGD(shards, lr=0.5))
    views = zero.params
    assert set(views) == {"a", "b"} and views["a"].shape == (2, 3)
    np.testing.assert_array_equal(views["a"], p["a"])
    assert any(np.shares_memory(views["a"], f) for f in zero._flat)   # the model's arrays now live in the buckets
    before = {n: v.copy() for n, v in views.items()}
    with pytest.raises(ShapeError, match=r"grads\[1\]"):
        zero.step({"a": np.ones((2, 3), np.float32), "b": np.ones(5, np.float32)})
    for n in views:   # validate-then-write: nothing stepped, no gradient copied
        np.testing.assert_array_equal(views[n], before[n])
        assert not zero.grads[n].any()
    zero.step({"a": np.ones((2, 3), np.float32), "b": np.full(4, 2, np.float32)})
    np.testing.assert_allclose(zero.params["a"], p["a"] - 0.5)
    np.testing.assert_allclose(zero.params["b"], 0.0)
    zero.set_grad("b", np.ones(4, np.float32))
    with pytest.raises(ValueError, match="already given in this step"):
        zero.set_grad("b", np.ones(4, np.float32))
    with pytest.raises(ValueError, match="parameter must be"):
        zero.set_grad("c", np.ones(4, np.float32))
    with pytest.raises(ValueError, match=r"\['a'\] were not given this step"):   # a partial set: refused
        zero.step()
    np.testing.assert_allclose(zero.params["a"], p["a"] - 0.5)   # nothing stepped
    zero.grads["a"][...] = 2.0   # written in place, then marked
    zero.mark_ready("a")
    zero.set_grad("b", np.ones(4, np.float32))
    zero.step()
    np.testing.assert_allclose(zero.params["a"], p["a"] - 1.5)
    np.testing.assert_allclose(zero.params["b"], -0.5)
    with pytest.raises(ValueError, match="dict with the parameters' names"):
        zero.step({"a": np.ones((2, 3), np.float32)})
    with pytest.raises(ValueError, match="dict with the parameters' names"):
        zero.step([np.ones((2, 3), np.float32), np.ones(4, np.float32)])
    with pytest.raises(DTypeError):
        dist.ZeroRedundancyOptimizer([np.arange(3)], lambda s: cudakit.SGD(s, lr=0.1))
    with pytest.raises(TypeError):
        dist.ZeroRedundancyOptimizer([np.ones(3, np.float32)], None)
