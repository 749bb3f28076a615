"""Entry point of an actor process: ``python -m runtime.worker --bind tcp://HOST:PORT [--metrics-port N]``, started
by ``runtime.spawn`` or a launcher, which then constructs the actor in it."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import resource
import signal
import sys

from runtime import metrics, server_metrics
from runtime.actor import builtin_methods
from runtime.actor.actor_server import ActorServer
from runtime.actor.call_store import StoreLimits
from runtime.caller.handle_names import checked_class_info
from runtime.core import control_auth, event_loop
from runtime.objects import object_owner
from runtime.processes.parent_death import die_with_parent
from runtime.processes.process import LIFETIME_PID_ENV, READY_PREFIX
from transport import security, shared_memory

log = logging.getLogger(__name__)

# __construct__ refuses a class whose methods a caller's handle would shadow, as spawn does before it starts us.
builtin_methods.set_class_check(checked_class_info)


async def _watch_parent(parent_pid: int, server: ActorServer) -> None:
    """Portable fallback for the death signal: poll the parent."""
    while os.getppid() == parent_pid:
        await asyncio.sleep(1.0)
    log.warning("parent %d is gone; actor %s exits", parent_pid, server.name)
    await server.stop()


def _start_time(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from /proc), or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


async def _watch_process(pid: int, server: ActorServer) -> None:
    """A detached actor lives as long as ``pid`` (its owner's owner): poll it (a reused pid is told apart by its
    start time)."""
    started = _start_time(pid)
    while started is not None and _start_time(pid) == started:
        await asyncio.sleep(1.0)
    log.warning("process %d, which this detached actor lives no longer than, is gone; %s exits", pid, server.name)
    await server.stop()


def _serve_metrics(server: ActorServer, host: str, port: int) -> None:
    """Serve /metrics; a fixed port that is taken falls back to any free one (the ready line tells which)."""
    server_metrics.install(server)
    try:
        server.metrics_port = metrics.serve(port, host).port
    except OSError as exc:
        if port == 0:
            raise
        log.warning("%s; serving metrics on a free port instead", exc)
        server.metrics_port = metrics.serve(0, host).port


def _raise_fd_limit() -> None:
    """Take the soft limit on open files up to the hard one: every connection to this actor costs a descriptor."""
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def serve(
    bind: str,
    parent_pid: int | None,
    *,
    watch_pid: int | None = None,
    ticket: control_auth.SpawnTicket,
    metrics_port: int | None = 0,
    metrics_host: str | None = None,
) -> int:
    """Run an actor server until it is stopped; returns the exit code (runtime.actor.actor_exit).
    ``metrics_port=None`` serves no metrics.

    The spawn ticket (read from stdin by ``main``, :mod:`runtime.core.control_auth`) gates the control calls: only
    requests proven with its token may construct the actor or shut the process down, and with CURVE
    (``MILES_CURVE_DIR``, :mod:`transport.security`) the socket proves the ticket's keypair, the actor's own, and
    admits only clients holding the cluster's client key. Once bound and serving ``/metrics`` it prints one
    ``MILES_ACTOR_READY {json}`` line; the spawner then sends ``__construct__``. It stops on ``__shutdown__``,
    SIGTERM/SIGINT, when ``parent_pid`` is gone (code 0), and when a method calls ``exit_actor()`` or raises
    SystemExit or another BaseException (the code :mod:`runtime.actor.actor_exit` gives)."""
    from runtime.caller.client import ClientRuntime

    ClientRuntime.install_on_running_loop()  # calls made by this actor share its loop
    server = ActorServer(
        bind=bind,
        limits=StoreLimits(),
        curve=security.resolve(),
        spawn_token=ticket.token,
        server_keys=ticket.server_keys,
    )
    address = await server.start()
    object_owner.bind_server(server)
    if metrics_port is not None:
        _serve_metrics(server, metrics_host or metrics.host_of_bind(address), metrics_port)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, lambda: asyncio.ensure_future(server.stop()))
    watcher = asyncio.create_task(_watch_parent(parent_pid, server)) if parent_pid else None
    if watch_pid:
        watcher = asyncio.create_task(_watch_process(watch_pid, server))
    ready = {
        "endpoint": address,
        "boot_id": server.boot_id,
        "pid": os.getpid(),
        "host": server.host,
        "metrics_port": server.metrics_port,
    }
    sys.stdout.write(READY_PREFIX + json.dumps(ready) + "\n")
    sys.stdout.flush()
    await server.stopped.wait()
    if watcher is not None:
        watcher.cancel()
    return server.exit_code


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run one actor process (started by runtime.spawn or a launcher).")
    parser.add_argument("--bind", default="tcp://127.0.0.1:0", help="ZeroMQ address to bind (port 0: any free)")
    parser.add_argument("--parent-pid", type=int, default=None, help="exit when this process is gone")
    parser.add_argument(
        "--watch-pid", type=int, default=None, help="exit when this process (not the parent: a detached actor) is gone"
    )
    parser.add_argument(
        "--metrics-port", type=int, default=0, help="port of the Prometheus /metrics endpoint (0: any free port)"
    )
    parser.add_argument("--no-metrics", action="store_true", help="serve no /metrics endpoint")
    parser.add_argument(
        "--metrics-host", default=None, help="interface for /metrics (default: the one --bind names; * = all)"
    )
    args = parser.parse_args(argv)
    if not args.no_metrics and not 0 <= args.metrics_port < 65536:
        parser.error(f"--metrics-port must be in 0..65535 (0: any free port), got {args.metrics_port}")
    logging.basicConfig(
        level=os.environ.get("MILES_LOG_LEVEL", "INFO"),
        format=f"%(asctime)s %(levelname)s pid={os.getpid()} %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.parent_pid:
        if not die_with_parent(args.parent_pid):  # gone before we could ask
            os._exit(1)
    # What a detached actor spawned here lives no longer than (runtime.processes.process): a launcher's worker has no
    # such variable, and lives as long as the process that started it.
    os.environ.setdefault(LIFETIME_PID_ENV, str(args.watch_pid or args.parent_pid or os.getppid()))
    try:
        ticket = control_auth.read_ticket()
    except control_auth.SpawnTokenError as exc:
        log.error("%s", exc)
        sys.exit(2)
    _raise_fd_limit()
    metrics_port = None if args.no_metrics else args.metrics_port
    metrics_host = metrics.host_of_bind(f"tcp://{args.metrics_host}:0") if args.metrics_host else None
    code = event_loop.run(
        serve(
            args.bind,
            args.parent_pid,
            watch_pid=args.watch_pid,
            ticket=ticket,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
        )
    )
    shared_memory.remove_own_files()  # atexit does not run after os._exit
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # lane threads may still be inside user code: do not wait for them


if __name__ == "__main__":
    main()
