"""The launchers' environments: torchrun, cudakit run, Open MPI, Slurm; init_method strings."""
import pytest

from cudakit.distributed.env import expand_first_host, parse_init_method, read_env, tasks_on_node


def test_nothing_set_is_none():
    assert read_env({}) is None


def test_torchrun():
    e = read_env({"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
                  "MASTER_ADDR": "node0", "MASTER_PORT": "29400"})
    assert (e.rank, e.world_size, e.local_rank, e.local_world_size) == (5, 8, 1, 4)
    assert (e.master_addr, e.master_port, e.source, e.store_hosted) == ("node0", 29400, "torchrun", False)


def test_torchrun_one_node_defaults():
    e = read_env({"RANK": "1", "WORLD_SIZE": "2"})
    assert (e.local_rank, e.local_world_size, e.master_addr, e.master_port) == (1, 2, "127.0.0.1", None)


def test_torchrun_several_nodes_without_master_addr_leaves_it_unknown():
    e = read_env({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"})
    assert e.master_addr is None


def test_cudakit_run_store_address_wins_over_master_port():
    e = read_env({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "29501",
                  "CUDAKIT_STORE_ADDR": "h", "CUDAKIT_STORE_PORT": "29500"})
    assert (e.master_addr, e.master_port, e.store_hosted, e.source) == ("h", 29500, True, "cudakit run")


def test_openmpi():
    e = read_env({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                  "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_ADDR": "10.0.0.1"})
    assert (e.rank, e.world_size, e.local_rank, e.local_world_size) == (3, 4, 1, 2)
    assert (e.master_addr, e.master_port, e.source) == ("10.0.0.1", 29500, "openmpi")


def test_openmpi_one_node_needs_no_master():
    e = read_env({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
                  "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_PORT": "1234"})
    assert (e.master_addr, e.master_port) == ("127.0.0.1", 1234)


def test_slurm_nodes_tasks_and_port_from_the_job():
    e = read_env({"SLURM_PROCID": "5", "SLURM_NTASKS": "7", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
                  "SLURM_STEP_TASKS_PER_NODE": "2(x3),1", "SLURM_STEP_NODELIST": "gpu[007-010]",
                  "SLURM_JOB_ID": "123456"})
    assert (e.rank, e.world_size, e.local_rank, e.local_world_size) == (5, 7, 1, 2)
    assert (e.master_addr, e.master_port, e.source) == ("gpu007", 20000 + 123456 % 20000, "slurm")


def test_slurm_master_addr_overrides_the_node_list():
    e = read_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
                  "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_JOB_NODELIST": "a,b", "MASTER_ADDR": "x",
                  "MASTER_PORT": "4000"})
    assert (e.master_addr, e.master_port, e.local_world_size) == ("x", 4000, 2)


def test_torchrun_wins_over_slurm_and_openmpi():
    e = read_env({"RANK": "1", "WORLD_SIZE": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "1",
                  "OMPI_COMM_WORLD_RANK": "0"})
    assert (e.rank, e.source) == (1, "torchrun")


@pytest.mark.parametrize("env, match", [
    ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x'"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, "rank 2 is outside"),
    ({"RANK": "0", "WORLD_SIZE": "0"}, "world size must be >= 1"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "70000"}, "MASTER_PORT=70000"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "2"}, "local rank 3"),
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}, "OMPI_COMM_WORLD_LOCAL_RANK is not set"),
    ({"OMPI_COMM_WORLD_RANK": "0"}, "OMPI_COMM_WORLD_SIZE is not set"),   # (a partial launcher environment:
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, "SLURM_LOCALID is not set"),   # a KeyError before)
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_TASKS_PER_NODE": "two"}, "tasks per node"),
])
def test_malformed_environment_names_the_variable(env, match):
    with pytest.raises(ValueError, match=match):
        read_env(env)


def test_slurm_helpers():
    assert expand_first_host("node12") == "node12"
    assert expand_first_host("gpu[003-005,9],cpu1") == "gpu003"
    assert tasks_on_node("4", 0) == 4 and tasks_on_node("2(x3),1", 3) == 1
    with pytest.raises(ValueError, match="SLURM_NODEID=4"):
        tasks_on_node("2(x3),1", 4)


def test_parse_init_method():
    assert parse_init_method("env://") == ("env", None, None)
    assert parse_init_method("tcp://10.1.2.3:2345") == ("tcp", "10.1.2.3", 2345)
    assert parse_init_method("tcp://[::1]:80") == ("tcp", "::1", 80)
    for bad in ("file:///tmp/x", "tcp://host", "tcp://host:0", "tcp://h:99999", ""):
        with pytest.raises(ValueError, match="init_method"):
            parse_init_method(bad)
