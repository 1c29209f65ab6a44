"""A key-value store over TCP, with timeouts: how the ranks find each other.

One process serves it (rank 0, or the node-0 launcher of `cudakit run`); every rank connects a
client. Ranks exchange small values through it: NCCL's unique id, the shapes of the debug check,
the arrays of the CPU backend. It also sees which ranks are alive: a client that said hello(rank)
and whose connection closes without bye() (the process died) is recorded under
"__failed__/<rank>", which the other ranks' watchdogs read.

Wire format (both ways): a frame is a big-endian u32 count of parts, then each part as a u64
length and its bytes. A request's first part names the operation; a reply's first part is
b"ok", b"timeout" or b"error".
"""
from __future__ import annotations

import logging
import socket
import struct
import threading
import time

from ..errors import ArgumentError, DistributedError

log = logging.getLogger(__name__)

FAILED_PREFIX = "__failed__/"   # "__failed__/<rank>" -> why that rank is gone (text)
LEFT_PREFIX = "__left__/"       # "__left__/<rank>" -> the rank said bye (destroy_process_group)
_MAX_PART = 1 << 34             # 16 GiB: a longer part means a corrupt frame, not a value
_BLOCK_SLICE = 0.5              # seconds a blocking request waits on the server before asking abort()


def _send_frame(sock: socket.socket, parts: list[bytes]) -> None:
    out = [struct.pack("!I", len(parts))]
    for p in parts:
        out.append(struct.pack("!Q", len(p)))
        out.append(p)
    sock.sendall(b"".join(out))


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("connection closed by the peer")
        buf += chunk
    return bytes(buf)


def _recv_frame(sock: socket.socket) -> list[bytes]:
    (count,) = struct.unpack("!I", _recv_exact(sock, 4))
    parts = []
    for _ in range(count):
        (n,) = struct.unpack("!Q", _recv_exact(sock, 8))
        if n > _MAX_PART:
            raise ConnectionError(f"corrupt frame: a part of {n} bytes")
        parts.append(_recv_exact(sock, n))
    return parts


class StoreServer:
    """Serves the store on (host, port) from daemon threads until close().

    host: the address to bind ("127.0.0.1" or "::1" for one machine, "" or "0.0.0.0" for every IPv4
    interface, "::" for every interface over IPv6);
    port 0 picks a free port (read .port). Raises DistributedError when the port cannot be bound.
    one_job: the store of one init_process_group (rank 0's), which a rank that left (bye) may not
    join again: its hello then belongs to the port's next job, whose store comes up once this one
    closed (a launcher's store, which outlives the jobs it serves, takes them all).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, one_job: bool = False):
        self._data: dict[str, bytes] = {}
        self._one_job = one_job   # (a rank that left may not join again: see _handle's hello)
        self._cond = threading.Condition()
        self._clients: dict[int, str | None] = {}   # id(connection) -> hello label
        self._closed = False
        self._closing = False   # (the job is ending: a rank's hello is refused, see closing())
        family = socket.AF_INET6 if ":" in host else socket.AF_INET   # ("::1", "::": an IPv6 address)
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6 and host == "::":   # every interface: IPv4 clients too, where the OS lets
            try:
                self._sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            except OSError:
                pass
        try:
            self._sock.bind((host, port))
        except OSError as e:
            self._sock.close()
            raise DistributedError(f"cannot serve the store on {host or '0.0.0.0'}:{port}: {e} "
                                   "(is another job using the port? pick another MASTER_PORT)",
                                   op="store serve") from None
        self._sock.listen(256)
        self.host, self.port = host, self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._accept_loop, name="cudakit-store", daemon=True)
        self._thread.start()

    # -- serving --
    def _accept_loop(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError as e:
                if self._closed:
                    return
                # (out of file descriptors, say: the connection waits in the backlog; returning here
                # left every later client unanswered, blaming a store that was still up)
                log.warning("the store's accept failed (%s: %s); retrying", type(e).__name__, e)
                time.sleep(0.1)
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._serve, args=(conn,), name="cudakit-store-conn", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        key = id(conn)
        with self._cond:
            self._clients[key] = None
        clean = False
        try:
            while True:
                try:
                    req = _recv_frame(conn)
                except (ConnectionError, OSError):
                    return
                if not req:
                    return
                op = req[0].decode()
                if op == "bye":
                    clean = True
                    with self._cond:
                        label = self._clients.get(key)
                        if label is not None:
                            self._data[LEFT_PREFIX + label] = b"1"
                            self._cond.notify_all()
                    _send_frame(conn, [b"ok"])
                    continue
                try:
                    reply = self._handle(key, op, req[1:])
                except Exception as e:   # a malformed request answers an error, the server goes on
                    reply = [b"error", f"{type(e).__name__}: {e}".encode()]
                try:
                    _send_frame(conn, reply)
                except OSError:
                    return
        finally:
            conn.close()
            with self._cond:
                label = self._clients.pop(key, None)
                if label is not None and not clean and not self._closed:
                    self._data.setdefault(FAILED_PREFIX + label, b"its connection to the store closed without "
                                          b"destroy_process_group (the process exited or was killed)")
                    log.info("store: rank %s disconnected without bye", label)
                self._cond.notify_all()

    def _handle(self, key: int, op: str, args: list[bytes]) -> list[bytes]:
        d, cond = self._data, self._cond
        with cond:
            if op == "set":
                d[args[0].decode()] = args[1]
                cond.notify_all()
                return [b"ok"]
            if op == "get":   # args: key, seconds to wait
                k, deadline = args[0].decode(), time.monotonic() + float(args[1])
                while k not in d:
                    left = deadline - time.monotonic()
                    if left <= 0 or self._closed:
                        return [b"timeout"]
                    cond.wait(left)
                return [b"ok", d[k]]
            if op == "add":
                k = args[0].decode()
                v = int(d.get(k, b"0")) + int(args[1])
                d[k] = str(v).encode()
                cond.notify_all()
                return [b"ok", d[k]]
            if op == "check":
                return [b"ok", b"1" if all(a.decode() in d for a in args) else b"0"]
            if op == "delete":
                n = sum(d.pop(a.decode(), None) is not None for a in args)
                return [b"ok", str(n).encode()]
            if op == "list":   # every (key, value) whose key starts with the prefix
                prefix = args[0].decode()
                out = [b"ok"]
                for k, v in d.items():
                    if k.startswith(prefix):
                        out += [k.encode(), v]
                return out
            if op == "hello":
                label = args[0].decode()
                # a rank joining the next job on this port before this store (one job's: rank 0's
                # init_process_group) closed: it left this job (bye), or the job is ending
                if self._closing or (self._one_job and LEFT_PREFIX + label in d):
                    return [b"closing"]
                self._clients[key] = label
                d.pop(FAILED_PREFIX + label, None)
                d.pop(LEFT_PREFIX + label, None)
                return [b"ok"]
            if op == "ping":
                return [b"ok"]
        return [b"error", f"unknown store operation {op!r}".encode()]

    # -- owner side --
    def labelled_clients(self) -> list[str]:
        """The hello labels (ranks) of the clients connected now."""
        with self._cond:
            return [v for v in self._clients.values() if v is not None]

    def closing(self) -> None:
        """The job is ending: from now on a hello (a rank joining) is answered "closing", so that a
        rank that left and joins the next job on the same port (init_process_group again) does not
        register with this store while it waits for the others to leave; its client connects
        again until the next job's store is up (StoreClient.hello)."""
        with self._cond:
            self._closing = True

    def wait_for_clients_to_leave(self, timeout: float, ignore: str | None = None) -> bool:
        """Wait until no labelled client but `ignore` is connected, at most `timeout` s; True when none is."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while any(v is not None and v != ignore for v in self._clients.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def set_local(self, key: str, value: bytes) -> None:
        """Set a key from the serving process itself (no socket)."""
        with self._cond:
            self._data[key] = value
            self._cond.notify_all()

    def close(self) -> None:
        """Stop accepting and wake every blocked request (they answer "timeout")."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()


class StoreClient:
    """A connection to a StoreServer; thread-safe. Requests go one at a time over the main
    connection, but for blocking ones (get waiting for a key), which each thread sends over a
    connection of its own: a thread waiting for a key must not hold the others' requests back (two
    groups' worker threads waiting on one connection stalled each other a wait slice, 0.5 s, per
    collective, each waiting for a key the other's peer could only set after its own wait).

    Connects within `timeout` seconds, retrying while the server is not up yet; raises
    DistributedError naming host and port when it cannot. `rank` only labels error messages.
    """

    def __init__(self, host: str, port: int, timeout: float = 600.0, rank: int | None = None):
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise ArgumentError(f"store port must be an int in [1, 65535] (got {port!r})")
        if not timeout > 0:
            raise ArgumentError(f"store timeout must be > 0 seconds (got {timeout!r})")
        self.host, self.port, self.timeout, self.rank = host, port, float(timeout), rank
        self._lock = threading.Lock()
        self._sock = self._connect()
        self._local = threading.local()   # .sock: this thread's connection for blocking requests
        self._extra: dict = {}            # those connections -> their thread, closed by close() (and
        # each once its thread has ended: a group's worker thread ends with the group)

    def _connect(self) -> socket.socket:
        deadline = time.monotonic() + self.timeout
        delay, last = 0.01, None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DistributedError(
                    f"could not reach the store at {self.host}:{self.port} within {self.timeout:g} s "
                    f"(last error: {last}); is rank 0 (or the node-0 launcher) running, and are "
                    "MASTER_ADDR/MASTER_PORT right?", rank=self.rank, op="store connect")
            try:
                s = socket.create_connection((self.host, self.port), timeout=min(left, 5.0))
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.settimeout(None)
                return s
            except OSError as e:
                last = f"{type(e).__name__}: {e}"
            time.sleep(min(delay, max(deadline - time.monotonic(), 0)))
            delay = min(delay * 2, 0.5)

    def _request(self, parts: list[bytes], what: str, wait: float = 0.0) -> list[bytes]:
        if wait > 0:
            reply = self._blocking_request(parts, what, wait)
        else:
            with self._lock:
                if self._sock is None:
                    raise self._closed_error(what)
                try:
                    self._sock.settimeout(30.0)
                    _send_frame(self._sock, parts)
                    reply = _recv_frame(self._sock)
                except (OSError, ConnectionError) as e:
                    self._drop()
                    raise self._lost_error(e, what) from None
        if reply[0] == b"error":
            raise DistributedError(f"the store refused the request: {reply[1].decode()}", rank=self.rank, op=what)
        return reply

    def _blocking_request(self, parts: list[bytes], what: str, wait: float) -> list[bytes]:
        """A request the server answers after up to `wait` s, over this thread's own connection."""
        s = getattr(self._local, "sock", None)
        if s is None:
            if self._sock is None:
                raise self._closed_error(what)
            s = self._connect()
            with self._lock:
                if self._sock is None:   # (closed meanwhile)
                    s.close()
                    raise self._closed_error(what)
                for old, t in list(self._extra.items()):   # (threads gone: each group destroyed left one)
                    if not t.is_alive():
                        del self._extra[old]
                        old.close()
                self._extra[s] = threading.current_thread()
            self._local.sock = s
        try:
            s.settimeout(wait + 30.0)   # the server answers after `wait`
            _send_frame(s, parts)
            return _recv_frame(s)
        except (OSError, ConnectionError) as e:
            self._local.sock = None
            with self._lock:
                self._extra.pop(s, None)
            s.close()
            if self._sock is None:
                raise self._closed_error(what) from None
            raise self._lost_error(e, what) from None

    def _closed_error(self, what: str) -> DistributedError:
        return DistributedError(f"the connection to the store at {self.host}:{self.port} is closed",
                                rank=self.rank, op=what)

    def _lost_error(self, e: Exception, what: str) -> DistributedError:
        return DistributedError(f"lost the store at {self.host}:{self.port} ({type(e).__name__}: {e}); "
                                "the process serving it (rank 0 or the node-0 launcher) is gone",
                                rank=self.rank, op=what)

    def _drop(self) -> None:
        try:
            self._sock.close()
        finally:
            self._sock = None
            for s in list(self._extra):   # (a thread blocked on one gets an OSError: the store is closed)
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self._extra.clear()

    # -- operations --
    def set(self, key: str, value: bytes) -> None:
        """Store `value` (bytes) under `key`, replacing what was there."""
        self._request([b"set", key.encode(), bytes(value)], "store.set")

    def get(self, key: str, timeout: float | None = None, abort=None) -> bytes:
        """The value under `key`, waiting until some process sets it, at most `timeout` s (default:
        the client's). `abort()` is called every half second while waiting; an exception it raises
        ends the wait. Raises DistributedError naming the key after the timeout."""
        total = self.timeout if timeout is None else float(timeout)
        deadline = time.monotonic() + total
        while True:
            left = deadline - time.monotonic()
            step = max(0.0, min(left, _BLOCK_SLICE if abort is not None else left))
            reply = self._request([b"get", key.encode(), repr(step).encode()], "store.get", step)
            if reply[0] == b"ok":
                return reply[1]
            if abort is not None:
                abort()
            if time.monotonic() >= deadline:
                raise DistributedError(f"key {key!r} was not set within {total:g} s (store at "
                                       f"{self.host}:{self.port}); a rank is late, hung or gone",
                                       rank=self.rank, op="store.get")

    def add(self, key: str, delta: int = 1) -> int:
        """Add `delta` to the integer under `key` (0 when unset); returns the new value."""
        return int(self._request([b"add", key.encode(), str(int(delta)).encode()], "store.add")[1])

    def check(self, *keys: str) -> bool:
        """Whether every key is set now (no waiting)."""
        return self._request([b"check", *(k.encode() for k in keys)], "store.check")[1] == b"1"

    def delete(self, *keys: str) -> int:
        """Remove the keys; returns how many existed."""
        return int(self._request([b"delete", *(k.encode() for k in keys)], "store.delete")[1])

    def list(self, prefix: str) -> dict[str, bytes]:
        """{key: value} of every key starting with `prefix`."""
        r = self._request([b"list", prefix.encode()], "store.list")[1:]
        return {r[i].decode(): r[i + 1] for i in range(0, len(r), 2)}

    def hello(self, label: str) -> None:
        """Register this connection as `label` (a rank): if it closes without bye(), the server
        records "__failed__/<label>". A store whose job is ending (StoreServer.closing: the port's
        previous job, still waiting for its ranks to leave) refuses it: this connects again, within
        the timeout, until the next job's store answers."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                if self._request([b"hello", label.encode()], "store.hello")[0] != b"closing":
                    return
                why = f"the store at {self.host}:{self.port} is closing (the job that served it ended)"
            except DistributedError as e:   # (the closing store went away mid-request: connect again)
                if self._sock is not None:
                    raise
                why = str(e)
            if time.monotonic() > deadline:
                raise DistributedError(f"{why}, and no other store came up within {self.timeout:g} s",
                                       rank=self.rank, op="store.hello")
            time.sleep(0.05)
            s = self._connect()
            with self._lock:
                old, self._sock = self._sock, s
            if old is not None:
                old.close()

    def bye(self) -> None:
        """Say this labelled connection is ending on purpose (destroy_process_group)."""
        self._request([b"bye"], "store.bye")

    def ping(self) -> None:
        """One round trip to the server (DistributedError when it is gone)."""
        self._request([b"ping"], "store.ping")

    def close(self) -> None:
        """Close the connection (without bye(): a labelled connection counts as lost)."""
        with self._lock:
            if self._sock is not None:
                self._drop()

    @property
    def closed(self) -> bool:
        """Whether the connection is closed (close(), or lost)."""
        return self._sock is None


def exchange(store: StoreClient, prefix: str, me: int, size: int, payload: bytes, timeout: float,
             abort=None) -> list[bytes]:
    """All-to-all of one value per participant through the store: participant `me` of `size`
    publishes `payload` under `prefix` and gets every participant's, in participant order. The
    last participant to finish deletes the keys. Every participant must use the same prefix
    (e.g. group id and sequence number), once."""
    store.set(f"{prefix}/{me}", payload)
    out = [payload if r == me else store.get(f"{prefix}/{r}", timeout, abort) for r in range(size)]
    if store.add(f"{prefix}/n", 1) == size:
        store.delete(*[f"{prefix}/{r}" for r in range(size)], f"{prefix}/n")
    return out
