"""Fork server ("zygote"): imports ``runtime.worker``'s modules once, then forks each actor process.

``python -m runtime.processes.fork_server --socket-fd N --reaper-pid P [--death-signal]`` is started by its client
(:mod:`runtime.processes.fork_client`: a driver's ``spawn``, or a host agent's ``launcher.agent.zygote_client``).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import io
import json
import logging
import os
import select
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any, NoReturn

from runtime.processes.fork_protocol import REQUEST_MAX_BYTES, SETUP_DEADLINE_S, STDIO_FDS, TITLE_ROOM, WORKER_MODULE
from runtime.processes.parent_death import die_with_parent

__all__ = ["REQUEST_MAX_BYTES", "SETUP_DEADLINE_S", "STDIO_FDS", "TITLE_ROOM", "WORKER_MODULE", "ForkServer", "main"]

log = logging.getLogger("runtime.processes.fork_server")

_PID = struct.Struct("q")
_CHECKED_MAX = 64  # sys.path checks remembered
# Variables read when the preloaded modules were imported: a worker asking for another value is not forked.
IMPORT_TIME_ENV = (
    "MILES_WAIT_SPIN_US",  # runtime.caller.wait_spin.WAIT_SPIN_S
    "MILES_SHM_DIR",  # transport.shared_memory.SHM_ROOT
    "PROMETHEUS_MULTIPROC_DIR",  # prometheus_client's value class
)
PRELOAD_ENV = "MILES_FORK_PRELOAD"
BLAS_THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")  # numpy's BLAS: one thread here
_RUNTIME_PYTHON_ENV = {"PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE"}  # applied per worker


def import_env_mismatch(env: dict[str, str], own: dict[str, str]) -> str | None:
    """Why a worker with ``env`` cannot be forked from a zygote whose environment was ``own`` (None: it can)."""
    names = {n for n in (*env, *own) if n.startswith("PYTHON") and n not in _RUNTIME_PYTHON_ENV}
    for name in sorted(names.union(IMPORT_TIME_ENV)):
        if env.get(name) != own.get(name):
            return f"{name}={env.get(name)!r} (the zygote has {own.get(name)!r})"
    for name in BLAS_THREAD_ENV:
        if env.get(name, "1") != "1":
            return f"{name}={env[name]!r} (numpy's BLAS in the zygote is single-threaded)"
    return None


def worker_sys_path(cwd: str, env: dict[str, str], base: list[str]) -> list[str]:
    """``sys.path`` of ``python -m`` run in ``cwd`` with ``env``: cwd, then PYTHONPATH (relative to cwd), then
    ``base`` (the interpreter's own entries: stdlib, site-packages, .pth files)."""
    extra = [os.path.normpath(os.path.join(cwd, p)) for p in env.get("PYTHONPATH", "").split(os.pathsep)]
    return [cwd, *(extra if env.get("PYTHONPATH") else []), *base]


def shadowed_module(path: list[str]) -> str | None:
    """The first loaded module that ``path`` would import from another file (None: every one resolves the same)."""
    saved = sys.path
    sys.path = path
    try:
        for name, module in list(sys.modules.items()):
            origin = getattr(getattr(module, "__spec__", None), "origin", None)
            # Skipped: submodules (found through their package), __main__ and aliases such as __mp_main__, and
            # modules not loaded from a file (built-in, frozen, or made up at run time, as torch does).
            if "." in name or name.startswith("__") or origin is None or not os.path.isfile(origin):
                continue
            spec = None
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                spec = find(name, None) if find else None
                if spec is not None:
                    break
            if spec is None or spec.origin != origin:
                return f"{name} would be imported from {spec.origin if spec else 'nowhere'}, not {origin}"
        return None
    finally:
        sys.path = saved


def _mtime_ns(folder: str) -> int:
    try:
        return os.stat(folder).st_mtime_ns
    except OSError:
        return -1


class ForkServer:
    """The fork server's state: its socket, the reaper's pid and the ``sys.path`` workers start from.

    Protocol, over a SOCK_SEQPACKET Unix socket: first one JSON message ``{"ready": true}`` (or ``{"error"}``) once
    the modules are imported, then, per request ``{"argv", "env", "cwd"}`` carrying the worker's stdin, stdout and
    stderr as SCM_RIGHTS descriptors, one reply ``{"pid": N}`` or ``{"error": why}`` (the client then runs the worker
    with ``subprocess.Popen`` instead). A request is refused when its ``sys.path`` would import one of the loaded
    modules from another file, or its environment changes what was read at import time (``IMPORT_TIME_ENV``,
    ``PYTHON*``). The server stays single-threaded: no threads, no event loop, no ZeroMQ context and, unless named
    in ``MILES_FORK_PRELOAD``, no torch and no user module exist before a fork."""

    def __init__(
        self, sock: socket.socket, reaper_pid: int, own_env: dict[str, str], *, death_signal: bool = True
    ) -> None:
        """``death_signal``: each worker gets SIGKILL when the reaper dies (else its own argv decides)."""
        self.sock = sock
        self.reaper_pid = reaper_pid
        self.death_signal = death_signal
        self.own_env = own_env
        pythonpath = own_env.get("PYTHONPATH")
        skip = 1 + (len(pythonpath.split(os.pathsep)) if pythonpath else 0)
        self.base_path = sys.path[skip:]  # what `python -m` adds after sys.path[0] and PYTHONPATH
        self._checked: dict[tuple[tuple[str, int], ...], str | None] = {}

    def serve(self) -> int:
        """Answer requests until the client closes the socket."""
        while True:
            try:
                data, fds, flags, _ = socket.recv_fds(self.sock, REQUEST_MAX_BYTES, STDIO_FDS)
            except OSError as exc:
                log.error("fork server: cannot read from its client: %s", exc)
                return 1
            if not data:
                return 0
            try:
                reply = self._answer(data, fds, truncated=bool(flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC)))
            finally:
                for fd in fds:
                    os.close(fd)
            self.sock.send(json.dumps(reply).encode())

    def _shadowed(self, path: list[str]) -> str | None:
        """:func:`shadowed_module`, remembered per ``path`` while none of its folders changes (an entry added,
        renamed or removed changes its folder's mtime): the check walks every loaded module (milliseconds)."""
        key = tuple((entry, _mtime_ns(entry)) for entry in path)
        if key not in self._checked:
            if len(self._checked) >= _CHECKED_MAX:
                self._checked.clear()
            self._checked[key] = shadowed_module(path)
        return self._checked[key]

    def _answer(self, data: bytes, fds: list[int], *, truncated: bool) -> dict[str, Any]:
        if truncated or len(fds) != STDIO_FDS:
            return {"error": f"a request is one JSON message under {REQUEST_MAX_BYTES} bytes with {STDIO_FDS} fds"}
        try:
            request = json.loads(data)
            argv, cwd = [str(a) for a in request["argv"]], str(request["cwd"])
            env = {str(k): str(v) for k, v in request["env"].items()}
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:  # e.g. nested 100000 deep
            return {"error": f"bad request: {type(exc).__name__}: {str(exc)[:200]}"}
        why = import_env_mismatch(env, self.own_env)
        path = worker_sys_path(cwd, env, self.base_path)
        why = why or self._shadowed(path)
        if why:
            return {"error": why}
        try:
            return {"pid": self._fork(argv, env, cwd, path, fds)}
        except OSError as exc:
            return {"error": f"fork failed: {exc}"}

    def _fork(self, argv: list[str], env: dict[str, str], cwd: str, path: list[str], fds: list[int]) -> int:
        """Double-fork a worker; returns its pid once it is the reaper's child (with its death signal set).

        The intermediate exits at once, so the worker is re-parented to the client process (the reaper, a child
        subreaper), which waits for it, gets its real exit status and kills its tree as it does for a Popen child."""
        status_r, status_w = os.pipe()
        intermediate = os.fork()
        if intermediate == 0:
            os.close(status_r)
            try:
                pid = os.fork()
                if pid == 0:
                    self._become_worker(argv, env, cwd, path, fds, status_w)
                os.write(status_w, _PID.pack(pid))
            finally:
                os._exit(0)
        os.close(status_w)
        try:
            os.waitpid(intermediate, 0)  # it only forks and writes 8 bytes
            return _read_setup(status_r)
        finally:
            os.close(status_r)

    def _become_worker(
        self, argv: list[str], env: dict[str, str], cwd: str, path: list[str], fds: list[int], status_w: int
    ) -> NoReturn:
        """In the worker: session, re-parenting, death signal, stdio, environment, then run the worker module."""
        try:
            os.setsid()
            _wait_reparented(self.reaper_pid)
            # PR_SET_PDEATHSIG(SIGKILL) only once the reaper is the parent: one set earlier would fire when the
            # intermediate exits. Without --death-signal the worker's own --parent-pid/--watch-pid decide its death.
            if self.death_signal and not die_with_parent(self.reaper_pid):
                raise OSError(f"the reaper {self.reaper_pid} died")
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            self.sock.detach()  # its number is closed just below; the object must not close a reused one later
            os.write(status_w, b"K")
            os.closerange(3, os.sysconf("SC_OPEN_MAX"))
            _take_over(argv, env, cwd, path)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                os.write(status_w, b"E" + repr(exc).encode()[:500])
            os._exit(127)
        os._exit(_run_worker())


def _read_setup(status_r: int) -> int:
    """The worker's pid (from the intermediate) and its setup status, within SETUP_DEADLINE_S."""
    deadline = time.monotonic() + SETUP_DEADLINE_S
    data = b""
    while len(data) < _PID.size + 1:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([status_r], [], [], left)[0]:
            break
        chunk = os.read(status_r, 4096)
        if not chunk:
            break
        data += chunk
    if len(data) < _PID.size:
        raise OSError("the intermediate process died before it forked the worker")
    (pid,) = _PID.unpack(data[: _PID.size])
    status = data[_PID.size :]
    if status != b"K":
        with contextlib.suppress(Exception):
            os.kill(pid, signal.SIGKILL)  # the reaper reaps it (it is its child by now, or soon)
        raise OSError(f"worker {pid} failed its setup: {status[1:].decode(errors='replace') or 'no answer in time'}")
    return pid


def _wait_reparented(reaper_pid: int) -> None:
    """Wait until the reaper is our parent (the intermediate has exited)."""
    deadline = time.monotonic() + SETUP_DEADLINE_S
    while os.getppid() != reaper_pid:
        if time.monotonic() > deadline:
            raise OSError(f"not re-parented to the reaper {reaper_pid} (parent {os.getppid()})")
        time.sleep(0.0002)


def _take_over(argv: list[str], env: dict[str, str], cwd: str, path: list[str]) -> None:
    """Become what ``argv`` would have started: environment, cwd, sys.path (as ``python -m`` would build it there),
    argv (also shown by ``ps``), stdio, logging, seeds; then ``runtime.worker`` runs as ``__main__``."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.path[:] = path
    sys.argv = ["-m", *argv[3:]]
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    _reopen_stdio(unbuffered=bool(env.get("PYTHONUNBUFFERED")))
    logging.root.handlers.clear()  # the worker's basicConfig must take effect, with its own pid
    logging.root.setLevel(logging.WARNING)
    log.handlers.clear()
    log.propagate = True
    if "numpy.random" in sys.modules:  # siblings must not share a random stream (random and call ids reseed at fork)
        sys.modules["numpy.random"].seed()
    _show_as(argv)


def _reopen_stdio(*, unbuffered: bool) -> None:
    """New sys.stdin/stdout/stderr on descriptors 0-2, buffered as a fresh interpreter would buffer them."""
    encoding = sys.stdout.encoding if sys.stdout is not None else "utf-8"
    sys.stdin = sys.__stdin__ = open(0, encoding=encoding, closefd=False)
    buffering = 0 if unbuffered else -1
    for fd, errors in ((1, "strict"), (2, "backslashreplace")):
        binary = open(fd, "wb", buffering=buffering, closefd=False)
        text = io.TextIOWrapper(binary, encoding=encoding, errors=errors, write_through=unbuffered or fd == 2)
        if fd == 1:
            sys.stdout = sys.__stdout__ = text
        else:
            sys.stderr = sys.__stderr__ = text


def _show_as(argv: list[str]) -> None:
    """Let ``ps``/``pgrep -f`` see the worker's argv: overwrite this process's argv area (as setproctitle does)."""
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (fields 48 and 49)
    except (OSError, IndexError, ValueError):
        return
    room = end - start
    if room > 1:
        title = b"\0".join(a.encode(errors="replace") for a in argv)[: room - 1]
        ctypes.memmove(start, title.ljust(room, b"\0"), room)


def _run_worker() -> int:
    """Run the worker module as ``__main__``; its exit code as the interpreter would make it."""
    import runpy
    import traceback

    try:
        runpy.run_module(WORKER_MODULE, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException:
        traceback.print_exc()
        code = 1
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return code


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(Exception):
        print(code, file=sys.stderr)
    return 1


def preload() -> str | None:
    """Import the worker's modules (not the worker module itself: runpy runs it fresh) and those named in
    ``MILES_FORK_PRELOAD``; None, or why not."""
    import importlib

    importlib.import_module(WORKER_MODULE)
    del sys.modules[WORKER_MODULE]
    delattr(sys.modules[WORKER_MODULE.rpartition(".")[0]], WORKER_MODULE.rpartition(".")[2])
    if threading.active_count() != 1:
        return f"importing {WORKER_MODULE} started threads: {[t.name for t in threading.enumerate()]}"
    for name in preload_modules(os.environ):
        try:
            importlib.import_module(name)
        except Exception as exc:  # a typo or a missing package: workers start with Popen and import it themselves
            return f"cannot import {name} ({PRELOAD_ENV}): {exc!r}"
        threads = _native_threads()
        if threads != 1:  # a fork would copy a process whose other threads vanish mid-work
            return f"importing {name} ({PRELOAD_ENV}) started {threads - 1} thread(s): leave it out of {PRELOAD_ENV}"
    gc.collect()
    gc.freeze()  # the collector of a worker then leaves these objects (and their shared pages) alone
    return None


def preload_modules(env: Mapping[str, str]) -> list[str]:
    """The modules named in ``MILES_FORK_PRELOAD`` (comma-separated): imported once by the fork server, so that
    every worker forked from it has them (``torch`` saves each worker seconds of CPU)."""
    return [name.strip() for name in env.get(PRELOAD_ENV, "").split(",") if name.strip()]


def _native_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m runtime.processes.fork_server`` (started by a
    :class:`runtime.processes.fork_client.ForkClient`)."""
    parser = argparse.ArgumentParser(prog="python -m runtime.processes.fork_server", description=__doc__)
    parser.add_argument("--socket-fd", type=int, required=True, help="the client's end of the request socket")
    parser.add_argument("--reaper-pid", type=int, required=True, help="workers are re-parented to this subreaper")
    parser.add_argument("--death-signal", action="store_true", help="workers get SIGKILL when the reaper dies")
    parser.add_argument("--title-room", default="", help="padding: room for a worker's argv in /proc/PID/cmdline")
    args = parser.parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"[fork server pid={os.getpid()}] %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.propagate = False
    sock = socket.socket(fileno=args.socket_fd)
    own_env = dict(os.environ)  # before numpy: its BLAS must not start threads we would fork without
    os.environ["OPENBLAS_NUM_THREADS"] = own_env["OPENBLAS_NUM_THREADS"] = "1"
    try:
        why = preload()
    except Exception as exc:
        why = f"cannot import {WORKER_MODULE}: {exc!r}"
    sock.send(json.dumps({"error": why} if why else {"ready": True, "pid": os.getpid()}).encode())
    if why:
        log.error("%s", why)
        return 1
    return ForkServer(sock, args.reaper_pid, own_env, death_signal=args.death_signal).serve()


if __name__ == "__main__":
    sys.exit(main())
