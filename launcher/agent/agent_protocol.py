"""The host agent's wire protocol: one JSON object per line, launcher -> agent on stdin, agent -> launcher on stdout.

Both sides take the op and event names and the line encoding from here, so they cannot drift apart.
"""

from __future__ import annotations

import json
from typing import Any

READY_PREFIX = "MILES_ACTOR_READY"  # printed once by `python -m runtime.worker` when bound
PACKAGE_NAME = "miles-actors"
CURVE_DIR_PREFIX = "curve-"  # key directories: WORKDIR/curve-{launch id}[-{host}]

# Commands (``op``; ``req`` echoes back in the reply) are types, one per op, each with its ``parse``
# (launcher.agent.agent_commands): spawn -> ``spawned``/``spawn_failed``, kill -> ``killed``, list -> ``listing``,
# ports -> ``ports``, curve_keys -> ``curve_keys_written``, code_have/code_unpack -> ``code``, code_put and heartbeat
# -> no reply, shutdown -> ``bye``. A malformed one is answered ``error`` naming the field.
OP_SPAWN = "spawn"
OP_KILL = "kill"
OP_LIST = "list"
OP_PORTS = "ports"
OP_HEARTBEAT = "heartbeat"
OP_SHUTDOWN = "shutdown"
OP_CURVE_KEYS = "curve_keys"
OP_CODE_HAVE = "code_have"
OP_CODE_PUT = "code_put"
OP_CODE_UNPACK = "code_unpack"

# Replies (``ev``, with the command's ``req``):
#   spawned {id, pid, create_time, log_path, zygote} | spawn_failed {id, error}     killed {id, known}
#   listing {procs: [{id, pid, alive, ready, returncode}]}     ports {ports: [int]}     curve_keys_written {path}
#   code {path, present?}     bye {reason}     error {error}
# Events (``ev``) without a request:
#   hello     {host, pid, hostname, python, package_version, cuda_visible_devices}   (first line)
#   ready     {id, line?}            readiness check passed (line: the matching stdout line)
#   not_ready {id, error}            readiness deadline passed (the process keeps running; the launcher decides)
#   log       {id, stream, text}     a line of output, already prefixed ``(worker-id pid=N host=H)``
#   exited    {id, pid, returncode, signal}
#   heartbeat {}                     every second (the launcher's partition detector)
#   error     {req?, error}          a command was malformed
EV_HELLO = "hello"
EV_SPAWNED = "spawned"
EV_SPAWN_FAILED = "spawn_failed"
EV_READY = "ready"
EV_NOT_READY = "not_ready"
EV_LOG = "log"
EV_EXITED = "exited"
EV_KILLED = "killed"
EV_LISTING = "listing"
EV_PORTS = "ports"
EV_BYE = "bye"
EV_HEARTBEAT = "heartbeat"  # sent every second; the launcher declares the agent lost after its heartbeat timeout
EV_CURVE_KEYS = "curve_keys_written"
EV_CODE = "code"
EV_ERROR = "error"
EV_AGENT_LOST = "agent_lost"  # synthesized launcher-side when the agent's stream ends


def encode(message: dict[str, Any]) -> bytes:
    """One message as a JSON line."""
    return (json.dumps(message, separators=(",", ":"), default=str) + "\n").encode()


def decode(line: bytes | str) -> dict[str, Any]:
    """Parse one JSON line; raises ValueError on anything but a JSON object."""
    message = json.loads(line)
    if not isinstance(message, dict):
        raise ValueError(f"expected a JSON object, got {type(message).__name__}")
    return message
