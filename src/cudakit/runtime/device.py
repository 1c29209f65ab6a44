"""Device discovery and selection: DeviceInfo, devices(), device(i), set_device(i)."""
from __future__ import annotations

import contextlib
import numbers
from dataclasses import asdict, dataclass

from ..errors import DeviceError
from . import _cupy


@dataclass(frozen=True)
class DeviceInfo:
    """Properties of one CUDA device, read from the runtime.

    Sizes are in bytes, clocks in kHz, bus width in bits; None where the runtime does not say.
    """
    index: int
    name: str
    compute_capability: tuple[int, int]
    total_memory: int
    multiprocessors: int
    l2_cache_size: int
    max_threads_per_block: int
    max_shared_memory_per_block: int
    max_shared_memory_per_block_optin: int
    warp_size: int
    memory_clock_khz: int | None
    memory_bus_width: int | None
    pci_bus_id: str | None
    uuid: str | None
    max_shared_memory_per_multiprocessor: int = 0   # 0: not reported
    reserved_shared_memory_per_block: int = 0       # what the system keeps per resident block

    @property
    def peak_memory_bandwidth(self) -> float | None:
        """Datasheet bandwidth in bytes/s (DDR: 2 transfers per clock); None when unknown."""
        if not self.memory_clock_khz or not self.memory_bus_width:
            return None
        return 2.0 * self.memory_clock_khz * 1e3 * self.memory_bus_width / 8

    def as_dict(self) -> dict:
        d = asdict(self)
        d["compute_capability"] = list(self.compute_capability)
        d["peak_memory_bandwidth"] = self.peak_memory_bandwidth
        return d


_info_cache: dict[int, DeviceInfo] = {}


def is_available() -> bool:
    """True when CuPy imports and at least one CUDA device is visible. Initialises CUDA."""
    return _cupy.probe()[0]


def unavailable_reason() -> str | None:
    """Why CUDA cannot be used, or None when it can."""
    ok, reason = _cupy.probe()
    return None if ok else reason


def device_count() -> int:
    """Number of visible CUDA devices (0 when CUDA is unusable)."""
    if not is_available():
        return 0
    return _cupy.cupy().cuda.runtime.getDeviceCount()


def _check_index(i: int | str) -> int:
    """The device index of `i`: an int, or a string "cuda:N" ("cuda": the current device), as
    PyTorch and Genesis-style code name devices; DeviceError naming the range otherwise."""
    if isinstance(i, str):
        name = i.strip().lower()
        if name == "cuda":
            return current_device()
        if name.startswith("cuda:") and name[5:].isdigit():
            i = int(name[5:])
    n = device_count()
    if isinstance(i, numbers.Integral) and not isinstance(i, bool):
        i = int(i)   # (NumPy's integers too, as the launch dimensions take them; numpy.bool_ is not Integral)
    if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < n:
        raise DeviceError(f"device index must be in [0, {n}) or 'cuda:N' (got {i!r})")
    return i


def get_device_info(i: int | None = None) -> DeviceInfo:
    """DeviceInfo of device `i` (default: the current device)."""
    if type(i) is int and i in _info_cache:   # (an index once checked stays valid: no runtime call)
        return _info_cache[i]
    cp = _cupy.cupy()
    i = current_device() if i is None else _check_index(i)
    if i not in _info_cache:
        rt = cp.cuda.runtime
        p = rt.getDeviceProperties(i)

        def attr(a):
            try:
                return int(rt.deviceGetAttribute(a, i))
            except Exception:
                return None
        name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
        try:
            pci = rt.deviceGetPCIBusId(i)
        except Exception:
            pci = None
        uuid = p.get("uuid")
        if not (isinstance(uuid, (bytes, bytearray)) and len(uuid) == 16):
            # CuPy reads the 16 UUID bytes as a C string: a zero byte cuts it short
            uuid = _driver_uuid(i)
        if isinstance(uuid, (bytes, bytearray)) and len(uuid) == 16:
            h = uuid.hex()
            uuid = f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
        _info_cache[i] = DeviceInfo(
            index=i, name=name, compute_capability=(int(p["major"]), int(p["minor"])),
            total_memory=int(p["totalGlobalMem"]), multiprocessors=int(p["multiProcessorCount"]),
            l2_cache_size=int(p.get("l2CacheSize", 0)),
            max_threads_per_block=int(p["maxThreadsPerBlock"]),
            max_shared_memory_per_block=int(p["sharedMemPerBlock"]),
            max_shared_memory_per_block_optin=int(p.get("sharedMemPerBlockOptin", p["sharedMemPerBlock"])),
            warp_size=int(p["warpSize"]),
            memory_clock_khz=p.get("memoryClockRate") or attr(36),   # cudaDevAttrMemoryClockRate
            memory_bus_width=p.get("memoryBusWidth") or attr(37),    # cudaDevAttrGlobalMemoryBusWidth
            pci_bus_id=pci, uuid=uuid if isinstance(uuid, str) else None,
            max_shared_memory_per_multiprocessor=int(p.get("sharedMemPerMultiprocessor") or attr(81) or 0),
            reserved_shared_memory_per_block=int(p.get("reservedSharedMemPerBlock") or attr(111) or 0))
    return _info_cache[i]


def devices() -> list[DeviceInfo]:
    """DeviceInfo for every visible device; [] when CUDA is unusable (see unavailable_reason())."""
    return [get_device_info(i) for i in range(device_count())]


def current_device() -> int:
    """Index of the current device of this thread."""
    return _cupy.cupy().cuda.runtime.getDevice()


def set_device(i: int) -> None:
    """Make device `i` current for this thread."""
    _cupy.cupy().cuda.Device(_check_index(i)).use()


@contextlib.contextmanager
def device(i: int):
    """`with cudakit.device(1): ...` runs the block with device 1 current, then restores."""
    cp = _cupy.cupy()
    with cp.cuda.Device(_check_index(i)):
        yield get_device_info(i)


def synchronize(i: int | None = None) -> None:
    """Wait for all work on device `i` (default: current) to finish; raises the error an op
    recorded on that device since the last check (runtime/device_errors.py).

    Without a usable GPU there is no queued device work: synchronize() returns at once (a device
    index `i` still raises DeviceError, as no device exists)."""
    if not is_available():
        if i is not None:
            _check_index(i)
        return
    from . import device_errors
    from .memory import _refuse_in_capture
    _refuse_in_capture("synchronize()")
    cp = _cupy.cupy()
    if i is None:
        cp.cuda.runtime.deviceSynchronize()
        device_errors.check_pending(cp.cuda.runtime.getDevice(), synchronized=True)
    else:
        with cp.cuda.Device(_check_index(i)):
            cp.cuda.runtime.deviceSynchronize()
        device_errors.check_pending(i, synchronized=True)


def _driver_uuid(i: int):
    """Device i's 16 UUID bytes from the driver (cuDeviceGetUuid), or None."""
    import ctypes
    try:
        lib = ctypes.CDLL("libcuda.so.1")  # the driver CuPy already loaded
        dev, buf = ctypes.c_int(), ctypes.create_string_buffer(16)
        if lib.cuDeviceGet(ctypes.byref(dev), ctypes.c_int(i)) != 0:
            return None
        get = getattr(lib, "cuDeviceGetUuid_v2", None) or lib.cuDeviceGetUuid
        return buf.raw if get(buf, dev) == 0 else None
    except (OSError, AttributeError):
        return None
