"""The TCP store: values, blocking gets with timeouts, liveness, unreachable stores (loopback only)."""
import socket
import threading
import time

import pytest

from cudakit.distributed.store import FAILED_PREFIX, LEFT_PREFIX, StoreClient, StoreServer, exchange
from cudakit.errors import DistributedError


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server():
    s = StoreServer("127.0.0.1", 0)
    yield s
    s.close()


def test_set_get_add_check_delete_list(server):
    c = StoreClient("127.0.0.1", server.port, timeout=5)
    payload = bytes(range(256)) * 1000   # binary, larger than one recv
    c.set("a", payload)
    assert c.get("a") == payload
    c.set("a", b"")   # replacing, and an empty value
    assert c.get("a") == b""
    assert c.add("n", 2) == 2 and c.add("n", -5) == -3
    assert c.check("a", "n") and not c.check("a", "missing")
    c.set("p/x", b"1")
    c.set("p/y", b"2")
    assert c.list("p/") == {"p/x": b"1", "p/y": b"2"}
    assert c.delete("p/x", "nope") == 1 and c.list("p/") == {"p/y": b"2"}
    c.close()
    assert c.closed
    with pytest.raises(DistributedError, match="closed"):
        c.get("a")


def test_get_waits_for_a_later_set(server):
    c1 = StoreClient("127.0.0.1", server.port, timeout=5)
    c2 = StoreClient("127.0.0.1", server.port, timeout=5)
    threading.Timer(0.3, lambda: c2.set("late", b"v")).start()
    t = time.monotonic()
    assert c1.get("late") == b"v"
    assert 0.2 < time.monotonic() - t < 3


def test_get_timeout_names_key_and_time(server):
    c = StoreClient("127.0.0.1", server.port, timeout=5, rank=3)
    t = time.monotonic()
    with pytest.raises(DistributedError, match=r"rank 3: store.get: key 'never' was not set within 0.4 s") as e:
        c.get("never", timeout=0.4)
    assert 0.35 < time.monotonic() - t < 3
    assert e.value.rank == 3 and e.value.op == "store.get"


def test_get_abort_hook_ends_the_wait(server):
    c = StoreClient("127.0.0.1", server.port, timeout=30)
    calls = []

    def abort():
        calls.append(1)
        if len(calls) == 2:
            raise DistributedError("peer gone")
    t = time.monotonic()
    with pytest.raises(DistributedError, match="peer gone"):
        c.get("never", abort=abort)
    assert time.monotonic() - t < 5


def test_unreachable_store_names_host_and_port_after_the_timeout():
    port = free_port()   # nothing listens there
    t = time.monotonic()
    with pytest.raises(DistributedError, match=rf"could not reach the store at 127.0.0.1:{port} within 1 s"):
        StoreClient("127.0.0.1", port, timeout=1.0)
    assert 0.9 < time.monotonic() - t < 5


def test_client_connects_to_a_server_that_starts_later():
    port = free_port()
    box = []
    threading.Timer(0.4, lambda: box.append(StoreServer("127.0.0.1", port))).start()
    c = StoreClient("127.0.0.1", port, timeout=10)
    c.set("k", b"v")
    assert c.get("k") == b"v"
    box[0].close()


def test_lost_server_is_an_error_naming_it(server):
    c = StoreClient("127.0.0.1", server.port, timeout=5)
    c.ping()
    server.close()
    time.sleep(0.1)
    with pytest.raises(DistributedError, match=rf"127.0.0.1:{server.port}"):
        for _ in range(3):   # the first request may still reach the closing socket
            c.get("x", timeout=0.2)


def test_bind_failure_is_an_error_naming_the_port(server):
    with pytest.raises(DistributedError, match=rf":{server.port}"):
        StoreServer("127.0.0.1", server.port)


def test_bad_client_arguments():
    with pytest.raises(ValueError, match="port"):
        StoreClient("127.0.0.1", 0)
    with pytest.raises(ValueError, match="timeout"):
        StoreClient("127.0.0.1", 1234, timeout=0)


def test_liveness_hello_without_bye_is_recorded_as_failed(server):
    watcher = StoreClient("127.0.0.1", server.port, timeout=5)
    a = StoreClient("127.0.0.1", server.port, timeout=5)
    b = StoreClient("127.0.0.1", server.port, timeout=5)
    a.hello("1")
    b.hello("2")
    assert sorted(server.labelled_clients()) == ["1", "2"]
    a.close()             # as a killed process: no bye
    b.bye()
    b.close()
    deadline = time.monotonic() + 5
    while not watcher.check(FAILED_PREFIX + "1") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert b"without destroy_process_group" in watcher.get(FAILED_PREFIX + "1")
    assert not watcher.check(FAILED_PREFIX + "2") and watcher.check(LEFT_PREFIX + "2")
    assert server.wait_for_clients_to_leave(2.0)
    c = StoreClient("127.0.0.1", server.port, timeout=5)
    c.hello("1")   # a rank that joins again is no longer failed
    assert not watcher.check(FAILED_PREFIX + "1")


def test_wait_for_clients_to_leave_times_out(server):
    c = StoreClient("127.0.0.1", server.port, timeout=5)
    c.hello("0")
    t = time.monotonic()
    assert not server.wait_for_clients_to_leave(0.3)
    assert time.monotonic() - t >= 0.25
    assert server.wait_for_clients_to_leave(0.1, ignore="0")


def test_exchange_between_threads_and_cleanup(server):
    n = 4
    clients = [StoreClient("127.0.0.1", server.port, timeout=5) for _ in range(n)]
    out = [None] * n

    def part(i):
        out[i] = exchange(clients[i], "x/1", i, n, f"v{i}".encode(), 5)
    ts = [threading.Thread(target=part, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert all(o == [b"v0", b"v1", b"v2", b"v3"] for o in out)
    assert clients[0].list("x/") == {}   # the last one deleted every key


def test_a_thread_waiting_for_a_key_does_not_hold_back_another_threads_requests(server):
    """One client, two threads: while one waits for a key, the other sets, gets and adds over the
    same client, and sets the first one's key (it waited on the connection all requests shared, so
    this deadlocked until its timeout)."""
    c = StoreClient(server.host, server.port, timeout=20)
    got = {}
    waiter = threading.Thread(target=lambda: got.setdefault("a", c.get("a", timeout=20)))
    waiter.start()
    c.set("b", b"2")
    assert c.get("b", timeout=5) == b"2" and c.add("n", 3) == 3
    c.set("a", b"1")
    waiter.join(timeout=20)
    assert not waiter.is_alive() and got == {"a": b"1"}
    c.close()
    assert c.closed
    with pytest.raises(DistributedError, match="is closed"):
        c.get("a", timeout=1)
