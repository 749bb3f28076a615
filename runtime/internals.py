"""The runtime's plumbing, for the launcher and other runtimes that start workers themselves: not for user code.

A launcher starting ``python -m runtime.worker`` itself runs ``worker_command``, writes a ``SpawnTicket`` to the
worker's stdin, then constructs the actor with ``attach``/``attach_async`` and the same ticket.
"""

from runtime.actor.call_store import StoreLimits  # sizes an actor's call store (spawn's limits=)
from runtime.caller.call_policy import CallPolicy
from runtime.caller.client import ClientRuntime
from runtime.caller.handle import MethodRef  # the type of handle.method(name)
from runtime.core.control_auth import SpawnTicket
from runtime.core.metadata import check_keyword_only_constructor
from runtime.core.type_checks import deep_check, hint_name, matches, short
from runtime.names.name_registry import NameRegistry
from runtime.names.name_service import NAME_SERVICE_ENV
from runtime.names.name_service import serve as serve_name_service
from runtime.names.naming import DEFAULT_NAMESPACE
from runtime.names.service import ServiceAddress, ServiceServer
from runtime.names.service import connect as connect_service
from runtime.names.service import serve as serve_service
from runtime.processes.construction import attach, attach_async
from runtime.processes.fork_client import READY_WAIT_S, ForkClient, ForkedWorker
from runtime.processes.parent_death import die_with_parent_preexec
from runtime.processes.process import worker_command

__all__ = [
    "DEFAULT_NAMESPACE",
    "NAME_SERVICE_ENV",
    "READY_WAIT_S",
    "CallPolicy",
    "ClientRuntime",
    "ForkClient",
    "ForkedWorker",
    "MethodRef",
    "NameRegistry",
    "ServiceAddress",
    "ServiceServer",
    "SpawnTicket",
    "StoreLimits",
    "attach",
    "attach_async",
    "check_keyword_only_constructor",
    "connect_service",
    "deep_check",
    "die_with_parent_preexec",
    "hint_name",
    "matches",
    "serve_name_service",
    "serve_service",
    "short",
    "worker_command",
]
