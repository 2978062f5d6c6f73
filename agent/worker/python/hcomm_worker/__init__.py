"""hcomm's worker library for Python engines (vLLM-Ascend, MindIE, your own).

A thin ctypes layer over ``libhcomm_worker.so`` (the C ABI in
``agent/worker/include/hcomm_worker.h``): every call blocks the calling thread with a bound
and releases the GIL meanwhile, so a serving loop can prepare the next epoch on a thread
while the current one serves.

    w = Worker.open()                      # the Pod's socket, POD_NAME / POD_NAMESPACE
    w.prepare(timeout=300)                 # first epoch's communicator
    w.switch()
    ...                                    # serve; between batches:
    w.report_load(in_flight, queued)
    if w.pending_epoch() is not None: w.switch()

See agent/worker/README.md for the worked example.
"""

import ctypes
import json
import os
from pathlib import Path

__all__ = [
    "Worker",
    "WorkerError",
    "AgentError",
    "RefusedError",
    "TimeoutError_",
    "CommError",
    "HcclError",
    "EpochError",
    "load_library",
]

# Where the agent mounts the Pod's own socket (hcomm_crds::local_api::MOUNT_SOCKET).
DEFAULT_SOCKET = "/run/hcomm/agent.sock"


class WorkerError(Exception):
    """A failed call; ``code`` is the C ABI's code, the message the library's."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class AgentError(WorkerError):
    """The agent's socket is unreachable, closed, or answered off-protocol."""


class RefusedError(WorkerError):
    """The agent answered ok:false (for example: the member is not verified yet)."""


class TimeoutError_(WorkerError):
    """Nothing within the deadline (an answer, or a placement in a newer epoch)."""


class CommError(WorkerError):
    """The TCP communicator failed (init, a collective)."""


class HcclError(WorkerError):
    """The HCCL backend failed (runtime missing, init, switch)."""


class EpochError(WorkerError):
    """An epoch rule: stale epoch, nothing prepared, nothing serving."""


_ERRORS = {
    2: AgentError,
    3: RefusedError,
    4: TimeoutError_,
    5: CommError,
    6: HcclError,
    7: EpochError,
}
_BUFFER_TOO_SMALL = 8


def _candidates():
    env = os.environ.get("HCOMM_WORKER_LIB")
    if env:
        yield Path(env)
    here = Path(__file__).resolve().parent
    yield here / "libhcomm_worker.so"
    # A checkout: agent/worker/python/hcomm_worker -> <repo>/target/{release,debug}.
    repo = here.parents[3]
    target = Path(os.environ.get("CARGO_TARGET_DIR", repo / "target"))
    for profile in ("release", "debug"):
        yield target / profile / "libhcomm_worker.so"


def load_library(path=None):
    """Loads libhcomm_worker.so (``path``, else HCOMM_WORKER_LIB, next to the package, or a
    checkout's target directory) and declares the C signatures."""
    tried = []
    for p in [Path(path)] if path else _candidates():
        tried.append(str(p))
        if p.is_file():
            lib = ctypes.CDLL(str(p))
            break
    else:
        raise OSError("libhcomm_worker.so not found; tried " + ", ".join(tried))
    h = ctypes.c_void_p
    u32, u64, i64, sz = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int64, ctypes.c_size_t
    cstr = ctypes.c_char_p
    sigs = {
        "hcomm_worker_last_error": (cstr, []),
        "hcomm_worker_open": (ctypes.c_int, [cstr, cstr, cstr, u32, ctypes.POINTER(h)]),
        "hcomm_worker_close": (None, [h]),
        "hcomm_worker_assignment": (ctypes.c_int, [h, ctypes.c_char_p, sz, ctypes.POINTER(sz)]),
        "hcomm_worker_prepare": (ctypes.c_int, [h, u32, ctypes.POINTER(u64)]),
        "hcomm_worker_switch": (ctypes.c_int, [h, ctypes.POINTER(u64)]),
        "hcomm_worker_state": (ctypes.c_int, [h] + [ctypes.POINTER(i64)] * 4),
        "hcomm_worker_all_reduce_sum_f32": (ctypes.c_int, [h, ctypes.POINTER(ctypes.c_float), sz]),
        "hcomm_worker_report_load": (ctypes.c_int, [h, u64, u64]),
        "hcomm_worker_drain": (ctypes.c_int, [h]),
        "hcomm_worker_serving": (ctypes.c_int, [h]),
        "hcomm_worker_cannot_serve": (ctypes.c_int, [h, cstr]),
        "hcomm_worker_next_event": (ctypes.c_int, [h, u32, ctypes.c_char_p, sz, ctypes.POINTER(sz)]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


def _ms(seconds):
    return max(1, min(int(seconds * 1000), 2**32 - 1))


class Worker:
    """One engine process's link to its node agent and its communicators."""

    def __init__(self, lib, handle):
        self._lib = lib
        self._h = handle

    @classmethod
    def open(cls, socket=None, pod=None, namespace=None, timeout=2.0, library=None):
        """Opens the link. Defaults: HCOMM_AGENT_SOCKET or /run/hcomm/agent.sock, POD_NAME,
        POD_NAMESPACE (the downward API). ``timeout`` bounds each exchange with the agent."""
        lib = load_library(library)
        socket = socket or os.environ.get("HCOMM_AGENT_SOCKET", DEFAULT_SOCKET)
        pod = pod or os.environ.get("POD_NAME")
        if not pod:
            raise ValueError("no pod name (pass pod= or set POD_NAME)")
        namespace = namespace or os.environ.get("POD_NAMESPACE")
        out = ctypes.c_void_p()
        code = lib.hcomm_worker_open(
            socket.encode(),
            pod.encode(),
            namespace.encode() if namespace else None,
            _ms(timeout),
            ctypes.byref(out),
        )
        _check(lib, code)
        return cls(lib, out)

    def close(self):
        """Leaves the domain (destroys the communicators) and frees the handle."""
        if self._h:
            self._lib.hcomm_worker_close(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _call(self, name, *args):
        if not self._h:
            raise WorkerError(1, "the worker handle is closed")
        _check(self._lib, getattr(self._lib, "hcomm_worker_" + name)(self._h, *args))

    def _text(self, name, *args):
        size = 4096
        while True:
            buf = ctypes.create_string_buffer(size)
            needed = ctypes.c_size_t(0)
            if not self._h:
                raise WorkerError(1, "the worker handle is closed")
            code = getattr(self._lib, "hcomm_worker_" + name)(
                self._h, *args, buf, size, ctypes.byref(needed)
            )
            if code == _BUFFER_TOO_SMALL:
                size = needed.value
                continue
            _check(self._lib, code)
            return buf.value.decode() if needed.value else None

    def assignment(self):
        """The member's assignment (dict): group, rank, world, devices, processes, epoch,
        comm (this epoch's placement) ..."""
        return json.loads(self._text("assignment"))

    def prepare(self, timeout=300.0):
        """Waits for the agent to place this worker in a newer epoch and builds that
        epoch's communicator beside the serving one. Returns the prepared epoch."""
        epoch = ctypes.c_uint64()
        self._call("prepare", _ms(timeout), ctypes.byref(epoch))
        return epoch.value

    def switch(self):
        """The safe point: the prepared communicator serves, the old one is destroyed.
        Returns the serving epoch."""
        epoch = ctypes.c_uint64()
        self._call("switch", ctypes.byref(epoch))
        return epoch.value

    def state(self):
        """(serving epoch, prepared epoch, rank, world); None where there is none."""
        vals = [ctypes.c_int64() for _ in range(4)]
        self._call("state", *[ctypes.byref(v) for v in vals])
        return tuple(None if v.value < 0 else v.value for v in vals)

    def serving_epoch(self):
        return self.state()[0]

    def pending_epoch(self):
        return self.state()[1]

    def all_reduce_sum(self, values):
        """Sum all-reduce of a list of floats on the serving communicator (the TCP engine, or
        the HCCL communicator on backend hccl, staged through device memory);
        returns the reduced list."""
        arr = (ctypes.c_float * len(values))(*values)
        self._call("all_reduce_sum_f32", arr, len(values))
        return list(arr)

    def report_load(self, in_flight, queue_depth=0):
        """Requests in flight and queued; after drain() this is the drain's progress."""
        self._call("report_load", int(in_flight), int(queue_depth))

    def drain(self):
        """Drain me (SIGTERM, or a drain_requested event): take no new work from now on."""
        self._call("drain")

    def serving(self):
        """The weights are loaded and the engine takes traffic."""
        self._call("serving")

    def cannot_serve(self, reason):
        """What the engine needs before traffic failed for good: a member still joining
        is failed with ``reason`` and replaced."""
        self._call("cannot_serve", str(reason).encode())

    def next_event(self, timeout=1.0):
        """The next agent event (dict, e.g. {"event": "epoch_changed", "epoch": 3}), or
        None when none came within ``timeout`` seconds."""
        text = self._text("next_event", _ms(timeout))
        return json.loads(text) if text else None


def _check(lib, code):
    if code == 0:
        return
    message = (lib.hcomm_worker_last_error() or b"").decode(errors="replace")
    raise _ERRORS.get(code, WorkerError)(code, message)
