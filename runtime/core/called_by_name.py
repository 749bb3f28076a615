"""Actor classes called through another API's handles, which reach every method by name (runtime.ray_compat's,
as Ray's do): marked with the class attribute :data:`CALLED_BY_NAME`."""

import inspect

#: Such a class's ``_private`` methods are actor methods too (Ray code calls them: verl's ``_query_dispatch_info``),
#: names this runtime's handles keep for themselves are not refused (their handles keep none), and its hints neither
#: check nor register types: values travel as they are, as in Ray (typed on the wire, else as sealed pickles).
CALLED_BY_NAME = "__actor_called_by_name__"


def by_name(cls: type) -> bool:
    """Whether ``cls`` is marked :data:`CALLED_BY_NAME`."""
    return getattr(cls, CALLED_BY_NAME, False) is True


def sync_on_loop(cls: type) -> bool:
    """Whether ``cls``'s sync methods run on their group's event loop (a class called by name with async methods).

    As Ray's async actors: the sync methods run on their concurrency group's loop, on its thread, so an
    ``asyncio.Event`` a sync method sets wakes the coroutines awaiting it."""
    if not by_name(cls):
        return False
    return any(inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f) for _, f in inspect.getmembers(cls))
