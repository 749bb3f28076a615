"""The client side of a fork server (:mod:`runtime.processes.fork_server`): start it, ask it for workers, fall back
to ``Popen`` whenever it cannot serve."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import logging
import os
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from runtime.processes import fork_protocol as protocol
from runtime.processes.parent_death import die_with_parent_preexec

log = logging.getLogger(__name__)

READY_WAIT_S = 10.0  # how long a spawn waits for a starting fork server (the Popen way would import as long)
REPLY_WAIT_S = protocol.SETUP_DEADLINE_S + 3.0
PR_SET_CHILD_SUBREAPER = 36
_REPLY_MAX = 64 * 1024


def become_subreaper(on: bool = True) -> bool:
    """Make this process a child subreaper (Linux): orphans among its descendants are re-parented to it; ``on=False``
    makes it an ordinary parent again (orphans go to the nearest subreaper above it, or init)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class ForkedWorker:
    """A worker forked by the fork server and re-parented to us: pid, stdio pipes, ``wait``/``poll``.

    One thread reaps it with ``wait()``; ``wait(timeout)`` and ``poll`` read what that thread found.
    """

    def __init__(self, pid: int, stdin: IO[Any] | None, stdout: IO[Any], stderr: IO[Any] | None) -> None:
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None
        self._reaped = threading.Event()

    def wait(self, timeout: float | None = None) -> int:
        if timeout is not None:
            if not self._reaped.wait(timeout):
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            assert self.returncode is not None
            return self.returncode
        try:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        except ChildProcessError:  # reaped elsewhere: should not happen (a reaper reaps only pids nobody waits for)
            log.error("worker %d was reaped by someone else; its exit status is lost", self.pid)
            self.returncode = 255
        self._reaped.set()
        return self.returncode

    def poll(self) -> int | None:
        return self.returncode


def same_interpreter(argv0: str, env: dict[str, str], cwd: Path) -> bool:
    """Whether ``argv0`` (looked up as Popen would: the child's PATH, relative to cwd) is this interpreter: the
    same file once symlinks are resolved, and the same virtual environment (pyvenv.cfg) before they are."""
    if os.sep in argv0:
        found: str | None = os.path.join(cwd, argv0)
    else:
        found = shutil.which(argv0, path=env.get("PATH", os.defpath))
    if found is None:
        return False
    return _identity(found) == _identity(sys.executable)


def _identity(path: str) -> tuple[str, str | None]:
    here = os.path.dirname(os.path.abspath(path))
    venv = next((d for d in (here, os.path.dirname(here)) if os.path.isfile(os.path.join(d, "pyvenv.cfg"))), None)
    return os.path.realpath(path), venv


class ForkClient:
    """Starts the fork server, forwards spawn requests, restarts it once.

    The process that owns the client is the workers' reaper: it must be a child subreaper (:func:`become_subreaper`),
    so that a worker, double-forked by the fork server, is re-parented to it, and it waits for the worker as for a
    Popen child. Every wait on the fork server has a deadline; requests are serialised by a lock, so any thread may
    spawn."""

    def __init__(
        self,
        reaper_pid: int,
        *,
        ready_wait_s: float = READY_WAIT_S,
        enabled: bool = True,
        death_signal: bool = True,
        env: dict[str, str] | None = None,
    ) -> None:
        """``reaper_pid``: this process, a subreaper. ``death_signal``: workers get SIGKILL when it dies (else
        their own argv says what they die with). ``env``: the fork server's environment (default: ours)."""
        self.reaper_pid = reaper_pid
        self.ready_wait_s = ready_wait_s
        self.enabled = enabled
        self.death_signal = death_signal
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self.ready = False
        self.restarts_left = 1
        self.lock = threading.RLock()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self) -> None:
        """Start the fork server; it imports in the background and says when it is ready. Its death signal is
        tied to the calling thread: call from a long-lived one."""
        if not self.enabled:
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # One request is one datagram, which must fit the send buffer (the kernel may cap this at wmem_max:
        # a larger request then gets EMSGSIZE, and that worker uses Popen).
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, protocol.REQUEST_MAX_BYTES + _REPLY_MAX)
        argv = [sys.executable, "-m", protocol.SERVER_MODULE, "--socket-fd", str(theirs.fileno())]
        argv += ["--reaper-pid", str(self.reaper_pid), "--title-room", " " * protocol.TITLE_ROOM]
        argv += ["--death-signal"] if self.death_signal else []
        try:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env=self.env,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,  # a signal to its starter's process group is not for it
                preexec_fn=die_with_parent_preexec(self.reaper_pid),
            )
        except OSError as exc:
            log.warning("cannot start the fork server (%s); workers start with Popen", exc)
            self.enabled = False
            ours.close()
            return
        finally:
            theirs.close()
        self.sock, self.ready = ours, False

    def spawn(
        self, argv: list[str], env: dict[str, str], cwd: Path, *, stdin: bool, merge_stderr: bool = False,
        text: bool = False,
    ) -> ForkedWorker | None:  # fmt: skip
        """Fork a ``runtime.worker`` through the fork server, or None: the caller uses Popen (the reason is
        logged): another command or interpreter, the fork server disabled, not up within ``ready_wait_s``,
        refusing the request, or dead (restarted once, then off). Its stdout and stderr are pipes (``merge_stderr``:
        one pipe for both), stdin too if ``stdin``;
        ``text``: they are opened as line-buffered text."""
        if not self.enabled or argv[1:3] != ["-m", protocol.WORKER_MODULE] or not same_interpreter(argv[0], env, cwd):
            return None
        with self.lock:
            if not self._await_ready():
                return None
            pipes = [os.pipe() for _ in range(3)]  # child's ends: stdin read, stdout write, stderr write
            stdin_fd = pipes[0][0] if stdin else os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            child_fds = [stdin_fd, pipes[1][1], pipes[1][1] if merge_stderr else pipes[2][1]]
            try:
                pid = self._request({"argv": argv, "env": env, "cwd": str(cwd)}, child_fds)
            finally:
                for fd in {*child_fds, pipes[0][0], pipes[2][1]}:
                    os.close(fd)
        ours = {"stdin": pipes[0][1], "stdout": pipes[1][0], "stderr": pipes[2][0]}
        kept = (
            set() if pid is None else {"stdout", *(["stdin"] if stdin else []), *([] if merge_stderr else ["stderr"])}
        )
        for key, fd in ours.items():
            if key not in kept:
                os.close(fd)
        if pid is None:
            return None
        mode: dict[str, Any] = {"buffering": 1, "encoding": "utf-8"} if text else {}
        read, write = ("r", "w") if text else ("rb", "wb")
        return ForkedWorker(
            pid,
            open(ours["stdin"], write, **mode) if stdin else None,
            open(ours["stdout"], read, **mode),
            None if merge_stderr else open(ours["stderr"], read, **mode),
        )

    def close(self) -> None:
        """Stop the fork server (its workers are our children and are not affected)."""
        with self.lock:
            if self.sock is not None:
                self.sock.close()
                self.sock = None
            if self.process is not None:
                self.process.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(timeout=5.0)

    def await_ready(self) -> bool:
        """Wait (at most ``ready_wait_s``) for a starting fork server; whether it is ready."""
        with self.lock:
            return self.enabled and self._await_ready()

    def _await_ready(self) -> bool:
        if self.ready:
            return True
        if self.sock is None or self.process is None:
            return False
        message = self._receive(self.ready_wait_s)
        if message is None or not message.get("ready"):
            self._lost(f"gone or not ready within {self.ready_wait_s:g}s" if message is None else str(message["error"]))
            return False
        self.ready = True
        log.info("fork server pid %d ready", self.process.pid)
        return True

    def _request(self, request: dict[str, object], fds: list[int]) -> int | None:
        data = json.dumps(request).encode()
        if len(data) > protocol.REQUEST_MAX_BYTES:
            log.info("spawn request of %d bytes is too large for the fork server; using Popen", len(data))
            return None
        assert self.sock is not None
        try:
            socket.send_fds(self.sock, [data], fds)
        except OSError as exc:
            if exc.errno == errno.EMSGSIZE:  # this request, not the fork server: only this worker uses Popen
                log.info("spawn request of %d bytes exceeds the fork server socket's buffer; using Popen", len(data))
            else:
                self._lost(f"cannot send it a request: {exc}")
            return None
        reply = self._receive(REPLY_WAIT_S)
        if reply is None:
            self._lost(f"no answer within {REPLY_WAIT_S:g}s")
            return None
        if not isinstance(reply.get("pid"), int):
            log.info("fork server did not fork %s: %s; using Popen", request["argv"], reply.get("error"))
            return None
        return int(reply["pid"])

    def _receive(self, timeout_s: float) -> dict[str, object] | None:
        """One JSON message from the fork server within ``timeout_s``; None when it is gone or silent."""
        assert self.sock is not None
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                return None
            try:
                data = self.sock.recv(_REPLY_MAX)
            except OSError:
                return None
            if not data:
                return None
            with contextlib.suppress(ValueError):
                message = json.loads(data)
                if isinstance(message, dict):
                    return message
            log.warning("fork server sent a malformed message (%d bytes)", len(data))

    def _lost(self, why: str) -> None:
        """The fork server failed: restart it once (the current spawn uses Popen), then give up on it."""
        pid = self.pid
        self.close()
        if self.restarts_left > 0:
            self.restarts_left -= 1
            log.warning("fork server pid %s failed (%s); restarting it (this worker starts with Popen)", pid, why)
            self.start()
        else:
            log.error("fork server pid %s failed (%s) after a restart; workers start with Popen from now on", pid, why)
            self.enabled = False
