"""Command workers for launcher tests: ``python -m launch_workers MODE ...`` (PYTHONPATH=tests/launcher)."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time


def _serve(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("0.0.0.0", port))
    sock.listen(16)
    return sock


def tree(pidfile: str, port: int) -> None:
    """A child, and an orphaned daemon (double fork + setsid) that escapes the process group; then serve."""
    child = os.fork()
    if child == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # must be SIGKILLed
        time.sleep(3600)
        os._exit(0)
    reader, writer = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(writer, str(os.getpid()).encode())
            time.sleep(3600)
            os._exit(0)
        os._exit(0)
    orphan = int(os.read(reader, 32))
    with open(pidfile + ".tmp", "w") as fh:
        json.dump({"main": os.getpid(), "child": child, "orphan": orphan}, fh)
    os.replace(pidfile + ".tmp", pidfile)
    sock = _serve(port)
    print(f"tree ready main={os.getpid()} child={child} orphan={orphan}", flush=True)
    while True:
        conn, _ = sock.accept()
        conn.close()


def crash_after(port: int, seconds: float, code: int) -> None:
    """Serve, then exit with ``code`` after ``seconds``."""
    _serve(port)
    print("serving; will crash", flush=True)
    time.sleep(seconds)
    print("crashing now", file=sys.stderr, flush=True)
    sys.exit(code)


def exit_now(code: int) -> None:
    """Fail at startup with a message."""
    print("boom: cannot start (on purpose)", file=sys.stderr, flush=True)
    sys.exit(code)


def sleep_forever() -> None:
    """Never ready, never exits (readiness deadline tests)."""
    print("sleeping", flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "tree":
        tree(args[0], int(args[1]))
    elif mode == "crash_after":
        crash_after(int(args[0]), float(args[1]), int(args[2]))
    elif mode == "exit_now":
        exit_now(int(args[0]))
    elif mode == "sleep_forever":
        sleep_forever()
    else:
        sys.exit(f"unknown mode {mode}")
