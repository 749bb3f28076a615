"""The host agent's side of its fork server (``launcher.zygote``): start it, ask it for workers, fall back.

``ZygoteClient.launch`` starts every child of the agent. It forks through the zygote (a ``ForkedWorker``: the
parts of ``subprocess.Popen`` the agent uses) an argv that is exactly this interpreter running
``-m runtime.worker``, and uses ``Popen`` otherwise: another command or interpreter, zygote disabled
(``MILES_ZYGOTE=0`` in the agent's environment, e.g. a host's ``env`` in hosts.toml), not up within
``ready_wait_s``, refusing the request, or dead (restarted once, then off). Every wait on the zygote has a
deadline. Call it from the agent's main thread only: the death signals and the workers' re-parenting are tied to
that thread.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import select
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import BinaryIO

from launcher import zygote
from runtime.parent_death import die_with_parent_preexec

log = logging.getLogger("launcher.zygote_client")

ENABLE_ENV = "MILES_ZYGOTE"
READY_WAIT_S = 10.0  # how long a spawn waits for a starting zygote (the Popen way would import as long)
REPLY_WAIT_S = zygote.SETUP_DEADLINE_S + 3.0
_REPLY_MAX = 64 * 1024


class ForkedWorker:
    """A worker forked by the zygote and re-parented to the agent: pid, stdio pipes, ``wait``/``poll``.

    Only the agent's wait thread calls ``wait`` (it reaps the pid); ``poll`` reads what it found.
    """

    def __init__(self, pid: int, stdin: BinaryIO | None, stdout: BinaryIO, stderr: BinaryIO) -> None:
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None

    def wait(self) -> int:
        try:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        except ChildProcessError:  # reaped elsewhere: should not happen (the agent reaps only unmanaged pids)
            log.error("worker %d was reaped by someone else; its exit status is lost", self.pid)
            self.returncode = 255
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


class ZygoteClient:
    """Starts the zygote (from the agent's main thread), forwards spawn requests, restarts it once."""

    def __init__(self, agent_pid: int, *, ready_wait_s: float = READY_WAIT_S, enabled: bool | None = None) -> None:
        self.agent_pid = agent_pid
        self.ready_wait_s = ready_wait_s
        self.enabled = os.environ.get(ENABLE_ENV, "1") != "0" if enabled is None else enabled
        self.process: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self.ready = False
        self.restarts_left = 1

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self) -> None:
        """Start the zygote; it imports in the background and says when it is ready."""
        if not self.enabled:
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # One request is one datagram, which must fit the send buffer (the kernel may cap this at wmem_max:
        # a larger request then gets EMSGSIZE, and that worker uses Popen).
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, zygote.REQUEST_MAX_BYTES + _REPLY_MAX)
        argv = [sys.executable, "-m", "launcher.zygote", "--socket-fd", str(theirs.fileno())]
        argv += ["--agent-pid", str(self.agent_pid), "--title-room", " " * zygote.TITLE_ROOM]
        try:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                preexec_fn=die_with_parent_preexec(self.agent_pid),
            )
        except OSError as exc:
            log.warning("cannot start the zygote (%s); workers start with Popen", exc)
            self.enabled = False
            ours.close()
            return
        finally:
            theirs.close()
        self.sock, self.ready = ours, False

    def launch(
        self, argv: list[str], env: dict[str, str], cwd: Path, *, stdin: bool
    ) -> subprocess.Popen[bytes] | ForkedWorker:
        """Start a worker with piped stdout/stderr (and stdin if ``stdin``), its own session and a death signal
        tied to the agent: forked by the zygote when it can, else executed with ``subprocess.Popen``."""
        forked = self.spawn(argv, env, cwd, stdin=stdin)
        if forked is not None:
            return forked
        return subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=die_with_parent_preexec(self.agent_pid),  # forked from the main thread only
        )

    def spawn(self, argv: list[str], env: dict[str, str], cwd: Path, *, stdin: bool) -> ForkedWorker | None:
        """Fork a ``runtime.worker`` through the zygote, or None: the caller uses Popen (the reason is logged)."""
        if not self.enabled or argv[1:3] != ["-m", zygote.WORKER_MODULE] or not same_interpreter(argv[0], env, cwd):
            return None
        if not self._await_ready():
            return None
        pipes = [os.pipe() for _ in range(3)]  # child's ends: stdin read, stdout write, stderr write
        stdin_fd = pipes[0][0] if stdin else os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        child_fds = [stdin_fd, pipes[1][1], pipes[2][1]]
        try:
            pid = self._request({"argv": argv, "env": env, "cwd": str(cwd)}, child_fds)
        finally:
            for fd in {*child_fds, pipes[0][0]}:
                os.close(fd)
        if pid is None:
            for fd in (pipes[0][1], pipes[1][0], pipes[2][0]):
                os.close(fd)
            return None
        if stdin:
            stdin_file: BinaryIO | None = open(pipes[0][1], "wb")
        else:
            os.close(pipes[0][1])
            stdin_file = None
        return ForkedWorker(pid, stdin_file, open(pipes[1][0], "rb"), open(pipes[2][0], "rb"))

    def close(self) -> None:
        """Stop the zygote (its workers are the agent's children and are not affected)."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.process is not None:
            self.process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5.0)

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
        log.info("zygote pid %d ready", self.process.pid)
        return True

    def _request(self, request: dict[str, object], fds: list[int]) -> int | None:
        data = json.dumps(request).encode()
        if len(data) > zygote.REQUEST_MAX_BYTES:
            log.info("spawn request of %d bytes is too large for the zygote; using Popen", len(data))
            return None
        assert self.sock is not None
        try:
            socket.send_fds(self.sock, [data], fds)
        except OSError as exc:
            if exc.errno == errno.EMSGSIZE:  # this request, not the zygote: only this worker uses Popen
                log.info("spawn request of %d bytes exceeds the zygote socket's buffer; using Popen", len(data))
            else:
                self._lost(f"cannot send it a request: {exc}")
            return None
        reply = self._receive(REPLY_WAIT_S)
        if reply is None:
            self._lost(f"no answer within {REPLY_WAIT_S:g}s")
            return None
        if not isinstance(reply.get("pid"), int):
            log.info("zygote did not fork %s: %s; using Popen", request["argv"], reply.get("error"))
            return None
        return int(reply["pid"])

    def _receive(self, timeout_s: float) -> dict[str, object] | None:
        """One JSON message from the zygote within ``timeout_s``; None when it is gone or silent."""
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
            log.warning("zygote sent a malformed message (%d bytes)", len(data))

    def _lost(self, why: str) -> None:
        """The zygote failed: restart it once (the current spawn uses Popen), then give up on it."""
        pid = self.pid
        self.close()
        if self.restarts_left > 0:
            self.restarts_left -= 1
            log.warning("zygote pid %s failed (%s); restarting it (this worker starts with Popen)", pid, why)
            self.start()
        else:
            log.error("zygote pid %s failed (%s) after a restart; workers start with Popen from now on", pid, why)
            self.enabled = False
