"""The runtime's plumbing, for the launcher and other runtimes that start workers themselves: not for user code.

User code spawns actors and calls them through :mod:`runtime` (its ``__all__``). A launcher that starts
``python -m runtime.worker`` on a host itself uses these: ``worker_command`` (the command line), a
``SpawnTicket`` written to the worker's stdin, then ``attach``/``attach_async`` with the same ticket to construct
the actor in it (:mod:`runtime.control_auth`, :mod:`runtime.construction`). ``StoreLimits`` sizes an actor's call
store (spawn's ``limits=``); ``MethodRef`` is the type of ``handle.method(name)``.
"""

from runtime.call_store import StoreLimits
from runtime.construction import attach, attach_async
from runtime.control_auth import SpawnTicket
from runtime.handle import MethodRef
from runtime.process import worker_command

__all__ = ["MethodRef", "SpawnTicket", "StoreLimits", "attach", "attach_async", "worker_command"]
