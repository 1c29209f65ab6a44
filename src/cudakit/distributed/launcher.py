"""`cudakit run`: start the ranks of one node, prefix their output, stop them all when one dies.

    cudakit run --nproc-per-node N [--nnodes M --node-rank R --master-addr A --master-port P] script.py args...
    cudakit run --nproc-per-node N -m package.module args...

Each rank is a child process with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, GROUP_RANK/NODE_RANK, MASTER_ADDR, MASTER_PORT) and the store's address
(CUDAKIT_STORE_ADDR, CUDAKIT_STORE_PORT). The launcher of node 0 serves the store on A:P; the
launchers of the other nodes connect to it first (an unreachable store is an error naming A:P
after --store-timeout). MASTER_PORT is P + 1, free for a rendezvous of the script's own.

Every line a rank writes goes to the launcher's stdout or stderr prefixed with "[rank<r>]: ".
When a rank exits non-zero (or by a signal) the launcher records its exit in the store, where
the other ranks' watchdogs read it (their collectives raise DistributedError naming that rank),
and every launcher gives its ranks --grace seconds to exit, then SIGTERM, then after 5 s SIGKILL.
The exit status is that of the first failed rank (128 + the signal for a signal), 0 when every
rank exited 0.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from ..errors import ArgumentError, DistributedError
from .store import FAILED_PREFIX, StoreClient, StoreServer

EXIT_PREFIX = "__exit__/"   # "__exit__/<rank>" -> "<code>" for every rank that exited, written by its launcher
KILL_AFTER_TERM_S = 5.0
OUTPUT_DRAIN_S = 5.0   # the longest the launcher waits, after its ranks exit, for their last output


def add_arguments(p) -> None:
    """The options of `cudakit run` on an argparse parser."""
    import argparse
    p.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=1, dest="nproc_per_node",
                   help="ranks (processes) on this node, one GPU each (default 1)")
    p.add_argument("--nnodes", type=int, default=1, help="nodes in the job (default 1)")
    p.add_argument("--node-rank", "--node_rank", type=int, default=0, dest="node_rank",
                   help="this node's index in [0, nnodes) (default 0)")
    p.add_argument("--master-addr", "--master_addr", default="127.0.0.1", dest="master_addr",
                   help="host of node 0, where the store runs (default 127.0.0.1)")
    p.add_argument("--master-port", "--master_port", type=int, default=29500, dest="master_port",
                   help="the store's port on node 0 (default 29500; 0: a free port, one node only)")
    p.add_argument("--grace", type=float, default=15.0,
                   help="seconds the other ranks get to exit on their own after one failed, before SIGTERM")
    p.add_argument("--store-timeout", type=float, default=300.0, dest="store_timeout",
                   help="seconds a node > 0 tries to reach the store (default 300)")
    p.add_argument("--no-prefix", action="store_true", dest="no_prefix", help="pass the ranks' output through as is")
    p.add_argument("-m", "--module", action="store_true", help="run `script` as a module (python -m)")
    p.add_argument("script", help="the Python script (or module with -m) every rank runs")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments")


def _describe(code: int) -> str:
    if code < 0:
        try:
            return f"signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _check(args) -> None:
    n, m, r = args.nproc_per_node, args.nnodes, args.node_rank
    if n < 1:
        raise ArgumentError(f"--nproc-per-node must be >= 1 (got {n})")
    if m < 1:
        raise ArgumentError(f"--nnodes must be >= 1 (got {m})")
    if not 0 <= r < m:
        raise ArgumentError(f"--node-rank must be in [0, {m}) (got {r})")
    if not 0 <= args.master_port < 65535 or (args.master_port == 0 and m > 1):
        raise ArgumentError(f"--master-port must be in [1, 65534] (0 only on one node) (got {args.master_port})")
    if not args.grace >= 0:
        raise ArgumentError(f"--grace must be >= 0 seconds (got {args.grace})")
    if not args.store_timeout > 0:
        raise ArgumentError(f"--store-timeout must be > 0 seconds (got {args.store_timeout})")
    if not args.module and not os.path.exists(args.script):
        raise ArgumentError(f"script {args.script!r} does not exist")


class _Prefixer(threading.Thread):
    """Copies a child's pipe to `sink` line by line, each line prefixed."""

    def __init__(self, pipe, sink, prefix: bytes, lock: threading.Lock):
        super().__init__(daemon=True, name="cudakit-run-output")
        self.pipe, self.sink, self.prefix, self.lock = pipe, sink, prefix, lock

    def run(self) -> None:
        for line in iter(self.pipe.readline, b""):
            with self.lock:
                self.sink.write(self.prefix + line if self.prefix else line)
                self.sink.flush()
        self.pipe.close()


class Launcher:
    """One node's ranks. `report(text)` receives the launcher's own messages (the CLI prints them)."""

    def __init__(self, args, report):
        _check(args)
        self.args, self.report = args, report
        self.procs: dict[int, subprocess.Popen] = {}
        self.codes: dict[int, int] = {}
        self.server: StoreServer | None = None
        self.store: StoreClient | None = None
        self._signal: int | None = None
        self._prefixers: list[_Prefixer] = []

    def _open_store(self) -> None:
        a = self.args
        if a.node_rank == 0:
            loop = a.master_addr in ("127.0.0.1", "localhost", "::1") and a.nnodes == 1
            self.server = StoreServer("127.0.0.1" if loop else "", a.master_port)
            self.port = self.server.port
            self.store = StoreClient("127.0.0.1", self.port, a.store_timeout)
        else:
            self.port = a.master_port
            self.store = StoreClient(a.master_addr, self.port, a.store_timeout)

    def _spawn(self) -> None:
        a = self.args
        n, world = a.nproc_per_node, a.nproc_per_node * a.nnodes
        cmd = [sys.executable, "-u"] + (["-m", a.script] if a.module else [a.script]) + list(a.script_args)
        lock = threading.Lock()
        for local in range(n):
            rank = a.node_rank * n + local
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local),
                       LOCAL_WORLD_SIZE=str(n), GROUP_RANK=str(a.node_rank), NODE_RANK=str(a.node_rank),
                       MASTER_ADDR=a.master_addr, MASTER_PORT=str(self.port + 1),
                       CUDAKIT_STORE_ADDR=a.master_addr, CUDAKIT_STORE_PORT=str(self.port), PYTHONUNBUFFERED="1")
            pipe = None if a.no_prefix else subprocess.PIPE
            p = subprocess.Popen(cmd, env=env, stdout=pipe, stderr=pipe, start_new_session=True)
            self.procs[rank] = p
            if pipe is not None:
                tag = f"[rank{rank}]: ".encode()
                for src, sink in ((p.stdout, sys.stdout.buffer), (p.stderr, sys.stderr.buffer)):
                    t = _Prefixer(src, sink, tag, lock)
                    t.start()
                    self._prefixers.append(t)

    def _kill(self, sig: int) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass

    def _on_signal(self, signum, frame) -> None:
        self._signal = signum

    def run(self) -> int:
        """Start the ranks and wait for them; returns the exit status (see the module)."""
        self._open_store()
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self._spawn()
            return self._monitor()
        finally:
            self._kill(signal.SIGKILL)
            for p in self.procs.values():
                p.wait()
            self._drain_output()
            for s, h in old.items():
                signal.signal(s, h)
            self._close()

    def _drain_output(self) -> None:
        """Wait for the prefixing threads to copy what the ranks wrote last: the threads are
        daemons, so a launcher that returned as its ranks exited lost lines still in the pipes (a
        rank's only line, now and then). A pipe a rank's own child still holds open ends the wait
        after OUTPUT_DRAIN_S."""
        deadline = time.monotonic() + OUTPUT_DRAIN_S
        for t in self._prefixers:
            t.join(max(0.0, deadline - time.monotonic()))

    def _close(self) -> None:
        if self.store is not None:
            self.store.close()
        if self.server is not None:   # ranks of other nodes may still need the store
            self.server.wait_for_clients_to_leave(self.args.grace + KILL_AFTER_TERM_S)
            self.server.close()

    def _monitor(self) -> int:
        a = self.args
        first: tuple[int, int] | None = None   # (rank, exit status) of the first failure seen
        failed_at = termed_at = None
        next_poll = 0.0
        while any(p.poll() is None for p in self.procs.values()):
            now = time.monotonic()
            for rank, p in self.procs.items():
                code = p.poll()
                if code is None or rank in self.codes:
                    continue
                self.codes[rank] = code
                self._record(rank, code)
                if code != 0 and first is None:
                    first, failed_at = (rank, code), now
                    self.report(f"cudakit run: rank {rank} failed ({_describe(code)}); the other ranks get "
                                f"{a.grace:g} s to exit before SIGTERM")
            if self._signal is not None and termed_at is None:
                self.report(f"cudakit run: got {signal.Signals(self._signal).name}; stopping the ranks")
                first = first or (-1, 128 + self._signal)
                self._kill(signal.SIGTERM)
                termed_at = now
            if first is None and a.nnodes > 1 and now >= next_poll:   # a rank of another node failed
                next_poll = now + 1.0
                first = self._remote_failure()
                if first is not None:
                    failed_at = now
                    self.report(f"cudakit run: rank {first[0]} on another node failed ({_describe(first[1])}); "
                                f"the ranks of node {a.node_rank} get {a.grace:g} s to exit before SIGTERM")
            if failed_at is not None and termed_at is None and now - failed_at > a.grace:
                self.report("cudakit run: sending SIGTERM to the ranks still running")
                self._kill(signal.SIGTERM)
                termed_at = now
            if termed_at is not None and now - termed_at > KILL_AFTER_TERM_S:
                self._kill(signal.SIGKILL)
            time.sleep(0.05)
        for rank, p in self.procs.items():   # exits in the last poll interval
            if rank not in self.codes:
                self.codes[rank] = p.returncode
                self._record(rank, p.returncode)
                if p.returncode != 0 and first is None:
                    first = (rank, p.returncode)
        if first is None:
            return 0
        code = first[1]
        return 128 - code if code < 0 else (code or 1)

    def _record(self, rank: int, code: int) -> None:
        try:
            self.store.set(EXIT_PREFIX + str(rank), str(code).encode())
            if code != 0:
                self.store.set(FAILED_PREFIX + str(rank), f"it exited with {_describe(code)}, reported by the "
                               f"launcher of node {self.args.node_rank}".encode())
        except DistributedError as e:
            self.report(f"cudakit run: could not record rank {rank}'s exit in the store: {e}")

    def _remote_failure(self):
        try:
            exits = self.store.list(EXIT_PREFIX)
        except DistributedError as e:   # node 0's launcher is gone: its ranks with it
            self.report(f"cudakit run: {e}")
            return (-1, 1)
        for key, v in sorted(exits.items()):
            rank, code = int(key[len(EXIT_PREFIX):]), int(v)
            if rank not in self.procs and code != 0:
                return rank, code
        return None


def main(args, report) -> int:
    """Run `cudakit run` with parsed `args`; returns the exit status. Bad arguments and an
    unreachable store are reported and return 2 and 1."""
    try:
        return Launcher(args, report).run()
    except ValueError as e:
        report(f"cudakit run: {e}")
        return 2
    except DistributedError as e:
        report(f"cudakit run: {e}")
        return 1
