"""What a fork server and its client agree on, kept apart so that the client (imported with the runtime) does not
import the server module, which runs as ``python -m runtime.processes.fork_server``."""

from __future__ import annotations

WORKER_MODULE = "runtime.worker"
SERVER_MODULE = "runtime.processes.fork_server"
REQUEST_MAX_BYTES = 1 << 20
STDIO_FDS = 3
SETUP_DEADLINE_S = 5.0  # fork, re-parent and death signal of one worker
TITLE_ROOM = 512  # bytes of argv area reserved so a worker's /proc/PID/cmdline can show its own argv
