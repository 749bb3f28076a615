"""Host agent: one per host, spawns and supervises that host's processes; ``python -m launcher.agent.host_agent``.

The launcher drives it with JSON-line commands on stdin (``agent_protocol``) and reads its events on stdout. It kills
every child on stdin EOF, no heartbeat for ``--heartbeat-timeout`` seconds, SIGTERM/SIGHUP/SIGINT or ``shutdown``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import os
import platform
import queue
import signal
import socket
import sys
import threading
import time
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

from launcher.agent import agent_commands as commands
from launcher.agent import agent_protocol as proto
from launcher.agent.agent_events import EventWriter
from launcher.agent.agent_keys import HostKeys
from launcher.agent.child_supervisor import ChildSupervisor
from launcher.agent.code_cache import CodeCache
from launcher.agent.zygote_client import READY_WAIT_S, ZygoteClient
from launcher.launch.gpu_check import detect_gpus
from transport.ports import free_ports

log = logging.getLogger("launcher.agent.host_agent")

PR_SET_CHILD_SUBREAPER = 36
HEARTBEAT_INTERVAL_S = 1.0  # agent -> launcher
_EOF = object()


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class HostAgent:
    """The agent's main loop: commands are handled on the main thread, which forks every child (``children``).

    Its children (``child_supervisor``) each get their own session/process group, PR_SET_PDEATHSIG(SIGKILL) on Linux
    and a log file. ``python -m runtime.worker`` children are forked by the agent's fork server
    (``runtime.processes.fork_server``, driven by ``launcher.agent.zygote_client``) and re-parented to the agent, with
    the same supervision."""

    def __init__(self, host: str, workdir: Path, heartbeat_timeout_s: float, orphan_grace_s: float) -> None:
        self.host = host
        self.workdir = workdir
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.orphan_grace_s = orphan_grace_s
        self.out = EventWriter(sys.stdout.buffer, self._stop)
        self.handed_ports: set[int] = set()
        self.commands: queue.Queue[Any] = queue.Queue()
        self.stop_reason: str | None = None
        self.keys = HostKeys(workdir)  # CURVE key directories written for the launcher; removed on exit
        self.code = CodeCache(workdir)  # the job's code packages, kept for the next launch
        # A spawn may wait for a starting zygote, blocking heartbeats: well under the launcher's patience.
        wait_s = min(READY_WAIT_S, heartbeat_timeout_s / 3) if heartbeat_timeout_s > 0 else READY_WAIT_S
        self.zygote = ZygoteClient(os.getpid(), ready_wait_s=wait_s)
        self.children = ChildSupervisor(host, workdir, self.out, self.zygote)

    def _stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason

    def run(self) -> int:
        """Serve until EOF, heartbeat loss, a signal or ``shutdown``; always kills every tree on the way out."""
        # A child subreaper: orphans of its children's trees are reparented to the agent, which kills them too.
        # Children die with it even when it is killed with SIGKILL (their PDEATHSIG).
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, lambda signum, _frame: self._stop(f"signal {signal.Signals(signum).name}"))
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        threading.Thread(target=self._read_stdin, name="agent-stdin", daemon=True).start()
        self.out.emit(
            proto.EV_HELLO,
            host=self.host,
            pid=os.getpid(),
            hostname=socket.gethostname(),
            python=platform.python_version(),
            executable=sys.executable,
            package_version=_package_version(),
            cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
            gpus=detect_gpus(),  # the launcher refuses GPU ids this host does not have (launcher/launch/gpu_check.py)
            cpus=len(os.sched_getaffinity(0)),  # what actors placed at run time may reserve (hosts.toml cpus wins)
        )
        self.zygote.start()  # imports in the background; the first worker spawn waits for it (bounded)
        last_heard = time.monotonic()
        next_scan = next_beat = 0.0
        grace = self.orphan_grace_s
        while self.stop_reason is None:
            try:
                command = self.commands.get(timeout=0.2)
            except queue.Empty:
                command = None
            now = time.monotonic()
            if command is _EOF:
                self._stop("stdin closed (launcher gone)")
                break
            if command is not None:
                last_heard = now
                parsed, req = command
                if isinstance(parsed, commands.Shutdown):
                    grace = parsed.grace_s if parsed.grace_s is not None else grace
                    self._stop("shutdown requested")
                    break
                self._handle(parsed, req)
            if self.heartbeat_timeout_s > 0 and now - last_heard > self.heartbeat_timeout_s:
                self._stop(f"no heartbeat for {self.heartbeat_timeout_s:g}s")
            if now >= next_scan:
                next_scan = now + 1.0
                self.children.scan()
            if now >= next_beat:  # lets the launcher notice a partition too
                next_beat = now + HEARTBEAT_INTERVAL_S
                self.out.emit(proto.EV_HEARTBEAT)
        log.warning("host agent %s stopping: %s", self.host, self.stop_reason)
        self.zygote.close()
        self.children.kill_all(grace)  # every tree: SIGTERM, grace, SIGKILL
        self.keys.remove_all()  # the CURVE key directories the launcher gave it (agent_keys)
        self.code.close()
        self.out.emit(proto.EV_BYE, reason=self.stop_reason)
        return 0

    def _read_stdin(self) -> None:
        for raw in iter(sys.stdin.buffer.readline, b""):
            if not raw.strip():
                continue
            try:
                message = proto.decode(raw)
            except ValueError as exc:
                self.out.emit(proto.EV_ERROR, error=f"bad command line: {exc}")
                continue
            req = commands.request_id(message)
            try:  # parsed here: the main loop only sees commands whose fields are checked
                self.commands.put((commands.parse(message), req))
            except commands.UnknownOp as exc:
                self.out.emit(proto.EV_ERROR, req=req, error=str(exc))
            except ValueError as exc:
                self.out.emit(proto.EV_ERROR, req=req, error=f"bad {message.get('op')} command: {exc}")
        self.commands.put(_EOF)

    def _handle(self, command: commands.Command, req: int | None) -> None:
        op = command.OP
        try:
            match command:
                case commands.Heartbeat():
                    return
                case commands.Spawn():
                    self.children.spawn(command, req)
                case commands.Kill():
                    self.children.kill(command, req)
                case commands.ListProcs():
                    self.out.emit(proto.EV_LISTING, req=req, procs=self.children.listing())
                case commands.CurveKeys():
                    self.out.emit(proto.EV_CURVE_KEYS, req=req, path=str(self.keys.write(command)))
                case commands.CodePut():
                    self.code.put(command)
                case commands.CodeHave():
                    self.out.emit(proto.EV_CODE, req=req, **self.code.have(command))
                case commands.CodeUnpack():
                    self.out.emit(proto.EV_CODE, req=req, **self.code.unpack(command))
                case commands.Ports():
                    self.out.emit(proto.EV_PORTS, req=req, ports=free_ports(command.n, self.handed_ports))
        except (KeyError, TypeError, ValueError) as exc:
            self.out.emit(proto.EV_ERROR, req=req, error=f"bad {op} command: {exc!r}")
        except OSError as exc:
            self.out.emit(proto.EV_ERROR, req=req, error=f"{op} failed on host {self.host}: {exc}")


def _package_version() -> str | None:
    try:
        return metadata.version(proto.PACKAGE_NAME)
    except metadata.PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> NoReturn:
    """Entry point of ``python -m launcher.agent.host_agent``."""
    parser = argparse.ArgumentParser(prog="python -m launcher.agent.host_agent", description=__doc__)
    parser.add_argument("--host", required=True, help="host name from hosts.toml (used in log prefixes)")
    parser.add_argument("--workdir", required=True, type=Path, help="logs go to WORKDIR/logs")
    parser.add_argument("--heartbeat-timeout", type=float, default=15.0, help="0 disables")
    parser.add_argument("--orphan-grace", type=float, default=3.0, help="SIGTERM->SIGKILL when the launcher is gone")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=f"[agent {args.host}] %(message)s")
    agent = HostAgent(args.host, args.workdir, args.heartbeat_timeout, args.orphan_grace)
    code = agent.run()
    # The stdin reader thread may be blocked in readline: skip interpreter teardown (nothing left to flush).
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
