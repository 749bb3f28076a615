"""The runtime's plumbing, for the launcher and other runtimes that start workers themselves: not for user code.

User code spawns actors and calls them through :mod:`runtime` (its ``__all__``). A launcher that starts
``python -m runtime.worker`` on a host itself uses these: ``worker_command`` (the command line), a
``SpawnTicket`` written to the worker's stdin, then ``attach``/``attach_async`` with the same ticket to construct
the actor in it (:mod:`runtime.core.control_auth`, :mod:`runtime.processes.construction`). ``StoreLimits`` sizes an
actor's call store (spawn's ``limits=``); ``MethodRef`` is the type of ``handle.method(name)``.
"""

from runtime.actor.call_store import StoreLimits
from runtime.caller.handle import MethodRef
from runtime.core.control_auth import SpawnTicket
from runtime.processes.construction import attach, attach_async
from runtime.processes.process import worker_command

__all__ = ["MethodRef", "SpawnTicket", "StoreLimits", "attach", "attach_async", "worker_command"]
