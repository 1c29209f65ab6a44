"""`cudakit run`: environment, prefixed output, exit statuses, failure handling, two simulated nodes."""
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

CLI = [sys.executable, "-m", "cudakit", "run"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def script(tmp_path, body, name="job.py"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return str(p)


def run(args, timeout=60):
    t = time.monotonic()
    r = subprocess.run(CLI + [str(a) for a in args], capture_output=True, text=True, timeout=timeout)
    return r, time.monotonic() - t


def test_environment_and_prefixed_output(tmp_path):
    p = script(tmp_path, """
        import os, sys
        keys = "RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE NODE_RANK MASTER_ADDR MASTER_PORT CUDAKIT_STORE_PORT"
        print(" ".join(os.environ[k] for k in keys.split()), sys.argv[1:])
        print("to stderr", file=sys.stderr)
    """)
    r, _ = run(["--nproc-per-node", 3, "--master-port", 0, p, "--lr", "0.1"])
    assert r.returncode == 0, r.stderr
    lines = sorted(r.stdout.splitlines())
    assert len(lines) == 3
    for i, ln in enumerate(lines):
        assert ln.startswith(f"[rank{i}]: {i} 3 {i} 3 0 127.0.0.1 "), ln
        master, store = ln.split()[7:9]
        assert int(master) == int(store) + 1 and ln.endswith("['--lr', '0.1']")
    assert sorted(r.stderr.splitlines()) == [f"[rank{i}]: to stderr" for i in range(3)]


def test_module_mode_and_no_prefix(tmp_path):
    # one write per line: without the prefix the ranks share the launcher's stdout, unsynchronised
    (tmp_path / "mymod.py").write_text("import os; os.write(1, f\"mod {os.environ['RANK']}\\n\".encode())\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run(CLI + ["--nproc-per-node", "2", "--master-port", "0", "--no-prefix", "-m", "mymod"],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0 and sorted(r.stdout.splitlines()) == ["mod 0", "mod 1"], r.stderr


def test_failing_rank_stops_the_others_and_sets_the_exit_status(tmp_path):
    p = script(tmp_path, """
        import os, sys, time
        if os.environ["RANK"] == "1":
            sys.exit(3)
        time.sleep(600)   # the others would run forever
    """)
    r, took = run(["--nproc-per-node", 3, "--master-port", 0, "--grace", 1, p])
    assert r.returncode == 3, r.stderr
    assert "rank 1 failed (exit code 3)" in r.stderr and "SIGTERM" in r.stderr
    assert took < 1 + 5 + 10


def test_rank_that_ignores_sigterm_is_killed(tmp_path):
    p = script(tmp_path, """
        import os, signal, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if os.environ["RANK"] == "0":
            time.sleep(0.5)
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(600)
    """)
    r, took = run(["--nproc-per-node", 2, "--master-port", 0, "--grace", 0.5, p])
    assert r.returncode == 128 + signal.SIGKILL, r.stderr
    assert "rank 0 failed (signal 9 (SIGKILL))" in r.stderr
    assert took < 0.5 + 5 + 10


def test_bad_arguments_exit_2(tmp_path):
    p = script(tmp_path, "pass\n")
    for args, msg in ((["--nproc-per-node", 0, p], "--nproc-per-node"),
                      (["--nnodes", 2, "--node-rank", 2, p], "--node-rank"),
                      (["--nnodes", 2, "--master-port", 0, p], "--master-port"),
                      ([str(tmp_path / "missing.py")], "does not exist")):
        r, _ = run(args)
        assert r.returncode == 2 and msg in r.stderr, (args, r.stderr)


def test_unreachable_store_of_node_0_names_host_and_port(tmp_path):
    p = script(tmp_path, "pass\n")
    port = free_port()
    r, took = run(["--nnodes", 2, "--node-rank", 1, "--master-port", port, "--store-timeout", 1, p])
    assert r.returncode == 1 and f"could not reach the store at 127.0.0.1:{port} within 1 s" in r.stderr, r.stderr
    assert took < 15


def _two_nodes(p, port, grace=15, timeout=90):
    procs = [subprocess.Popen(CLI + ["--nnodes", "2", "--node-rank", str(n), "--nproc-per-node", "2",
                                     "--master-port", str(port), "--grace", str(grace), p],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in (1, 0)]
    t = time.monotonic()
    outs = [pr.communicate(timeout=timeout) for pr in procs]
    return [pr.returncode for pr in procs], outs, time.monotonic() - t


def test_two_simulated_nodes_run_one_job(tmp_path):
    p = script(tmp_path, """
        import numpy as np, cudakit.distributed as dist
        dist.init_process_group("cpu", timeout=60)
        x = np.full(3, dist.get_rank() + 1.0)
        dist.all_reduce(x)
        print("SUM", dist.get_rank(), dist.get_world_size(), x.tolist())
        dist.destroy_process_group()
    """)
    codes, outs, _ = _two_nodes(p, free_port())
    assert codes == [0, 0], outs
    lines = sorted(ln for o, _ in outs for ln in o.splitlines() if "SUM" in ln)
    assert lines == [f"[rank{r}]: SUM {r} 4 [10.0, 10.0, 10.0]" for r in range(4)]


def test_failure_on_one_node_stops_the_other_node(tmp_path):
    p = script(tmp_path, """
        import os, sys, time
        if os.environ["RANK"] == "3":
            time.sleep(0.5)
            sys.exit(5)
        time.sleep(600)
    """)
    codes, outs, took = _two_nodes(p, free_port(), grace=1)
    assert codes[0] == 5, outs     # node 1 launched rank 3
    assert codes[1] != 0 and "rank 3 on another node failed (exit code 5)" in outs[1][1], outs
    assert took < 30


def test_sigterm_to_the_launcher_stops_the_ranks(tmp_path):
    p = script(tmp_path, """
        import time
        print("up", flush=True)
        time.sleep(600)
    """)
    pr = subprocess.Popen(CLI + ["--nproc-per-node", "2", "--master-port", "0", p], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    for _ in range(2):
        assert "up" in pr.stdout.readline()
    pr.send_signal(signal.SIGTERM)
    _, err = pr.communicate(timeout=30)
    assert pr.returncode == 128 + signal.SIGTERM and "SIGTERM" in err
