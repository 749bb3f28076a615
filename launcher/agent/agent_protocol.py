"""The host agent's wire protocol: one JSON object per line, launcher -> agent on stdin, agent -> launcher on stdout.

Commands (``op``; ``req`` echoes back in the reply):
  spawn      {id, argv, env, cwd, log_prefix, ready: {kind: line|tcp|http|none, prefix?, port?, path?, probe_host?,
              deadline_s}, stdin?} -> event ``spawned`` {id, pid, create_time, log_path, zygote} or ``spawn_failed``
              {id, error}; ``stdin``: text written to the child's stdin, then closed (a worker's spawn token)
  kill       {id, grace_s}  -> the process tree is stopped; its ``exited`` event follows; reply ``killed`` {id}
  list       {}             -> ``listing`` {procs: [{id, pid, alive, ready, returncode}]}
  ports      {n}            -> ``ports`` {ports: [int]} (free TCP ports on the host, never handed out twice)
  curve_keys {dir, files: {name: text}} -> ``curve_keys_written`` {path}: the cluster's CURVE keys in WORKDIR/dir
             (dir mode 0700, files 0600); the agent removes the directory when it exits
  code_have  {digest}       -> ``code`` {path, present}: is the code package (sha256 of its zip) under WORKDIR/code
  code_put   {digest, size, offset, data} -> no reply: a base64 chunk of the zip (in order)
  code_unpack {digest, max_bytes} -> ``code`` {path}: the zip checked and unpacked safely (launcher/agent/code_cache.py)
  heartbeat  {}             -> no reply; any line counts as a heartbeat
  shutdown   {grace_s}      -> kill every tree, reply ``bye``, exit

Events (``ev``) without a request:
  hello     {host, pid, hostname, python, package_version, cuda_visible_devices}   (first line)
  ready     {id, line?}            readiness check passed (line: the matching stdout line)
  not_ready {id, error}            readiness deadline passed (the process keeps running; the launcher decides)
  log       {id, stream, text}     a line of output, already prefixed ``(worker-id pid=N host=H)``
  exited    {id, pid, returncode, signal}
  heartbeat {}                     every second (the launcher's partition detector)
  error     {req?, error}          a command was malformed
"""

from __future__ import annotations

import json
from typing import Any

READY_PREFIX = "MILES_ACTOR_READY"  # printed once by `python -m runtime.worker` when bound
PACKAGE_NAME = "miles-actors"
CURVE_DIR_PREFIX = "curve-"  # key directories: WORKDIR/curve-{launch id}[-{host}]

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
