"""The runtime's plumbing, for the launcher and other runtimes that start workers themselves: not for user code.

A launcher starting ``python -m runtime.worker`` itself runs ``worker_command``, writes a ``SpawnTicket`` to the
worker's stdin, then constructs the actor with ``attach``/``attach_async`` and the same ticket.
"""

from runtime.actor.call_store import StoreLimits  # sizes an actor's call store (spawn's limits=)
from runtime.caller.handle import MethodRef  # the type of handle.method(name)
from runtime.core.control_auth import SpawnTicket
from runtime.processes.construction import attach, attach_async
from runtime.processes.process import worker_command

__all__ = ["MethodRef", "SpawnTicket", "StoreLimits", "attach", "attach_async", "worker_command"]
