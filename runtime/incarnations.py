"""The incarnations of one actor that a connection knows to be gone: calls pinned to one are refused unsent.

An actor restarted by its spawner keeps its endpoint but is a new process with a new boot id (an incarnation).
A handle that does not follow restarts pins each call to the incarnation it reached (``Call.boot_id``); the
actor refuses a SUBMIT pinned to another (:mod:`runtime.call_routing`), and a connection that has already seen
the incarnation go refuses such a call without sending it.
"""

from __future__ import annotations

#: Past incarnations remembered per connection (an actor restarted more often refuses the older pins itself).
MAX_REMEMBERED = 256


class GoneIncarnations:
    """Boot ids known to be gone, the ``MAX_REMEMBERED`` most recent. Read on any thread, changed under the
    connection's lock."""

    __slots__ = ("_ids",)

    def __init__(self) -> None:
        self._ids: dict[str, None] = {}  # insertion-ordered: the oldest is dropped first

    def add(self, boot_id: str | None) -> None:
        if boot_id is not None and boot_id not in self._ids:
            self._ids[boot_id] = None
            if len(self._ids) > MAX_REMEMBERED:
                del self._ids[next(iter(self._ids))]

    def __contains__(self, boot_id: object) -> bool:
        return boot_id in self._ids
