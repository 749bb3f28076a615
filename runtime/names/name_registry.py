"""A registry of actor names: ``(namespace, name) -> handle state``, thread-safe, bounded; and the rule for names.

The data structure a launch's name service serves (:mod:`runtime.names.name_service`) and the launcher uses directly.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

DEFAULT_MAX_NAMES = 10_000
DEFAULT_MAX_ENTRY_BYTES = 4096
LISTED_NAMES = 50  # names() returns at most this many (they go into error messages)
_VALID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:+=@-]{0,199}")


class NameRegistryFull(RuntimeError):
    """The registry holds ``max_names`` names: a new one is refused until some are forgotten."""


def check_name(what: str, value: str) -> None:
    """Refuse a name or namespace that could not be a file name of its own (e.g. ``../x``)."""
    if not isinstance(value, str) or not _VALID.fullmatch(value):
        raise ValueError(
            f"actor {what} {str(value)[:80]!r} is not allowed: use 1 to 200 letters, digits and _ . : + = @ -, not "
            "starting with a dot or a dash"
        )


def check_key(namespace: str, name: str) -> None:
    """Refuse a name, or a namespace other than the default one (``""``), that :func:`check_name` refuses."""
    check_name("name", name)
    if namespace:
        check_name("namespace", namespace)


class NameRegistry:
    """Names of one launch: ``(namespace, name) -> handle state``, thread-safe, bounded.

    It knows nothing of handles, servers or clients: an entry is a handle's state (a JSON-safe dict) that it only
    stores, compares by endpoint and bounds in size.
    """

    def __init__(self, *, max_names: int = DEFAULT_MAX_NAMES, max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES) -> None:
        self.max_names = max_names
        self.max_entry_bytes = max_entry_bytes
        self._entries: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()

    def _store(self, namespace: str, name: str, state: dict[str, Any]) -> None:
        """Write an entry (under the lock), refusing one too big or a new name past ``max_names``."""
        size = len(json.dumps(state))
        if size > self.max_entry_bytes:
            raise ValueError(
                f"the registry entry for actor name {name!r} is {size} bytes, over the limit of "
                f"{self.max_entry_bytes} (a handle's state is a few hundred bytes)"
            )
        if (namespace, name) not in self._entries and len(self._entries) >= self.max_names:
            raise NameRegistryFull(
                f"cannot register actor name {name!r}: the launch's name registry holds {len(self._entries)} names "
                f"(max_names={self.max_names}); kill named actors you no longer need"
            )
        self._entries[(namespace, name)] = dict(state)

    def claim(
        self, namespace: str, name: str, state: dict[str, Any], replacing: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """Register ``state`` under the name unless another actor holds it; returns that holder's entry (the claim
        then failed). ``replacing``: an entry the caller found dead; it is taken over only if it is still there.
        Atomic: it checks and writes under one lock, so two callers cannot both take a name."""
        check_key(namespace, name)
        with self._lock:
            current = self._entries.get((namespace, name))
            if current is not None and current.get("endpoint") != state.get("endpoint") and current != replacing:
                return dict(current)
            self._store(namespace, name, state)
        return None

    def put(self, namespace: str, name: str, state: dict[str, Any]) -> None:
        """Register ``state`` under the name whoever held it (the launcher names its cells; not served)."""
        check_key(namespace, name)
        with self._lock:
            self._store(namespace, name, state)

    def lookup(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The entry under the name, if any."""
        check_key(namespace, name)
        with self._lock:
            current = self._entries.get((namespace, name))
        return dict(current) if current is not None else None

    def forget(self, namespace: str, name: str, endpoint: str) -> bool:
        """Drop the name if it still names the actor at ``endpoint``; returns whether it did."""
        check_key(namespace, name)
        with self._lock:
            current = self._entries.get((namespace, name))
            if current is None or current.get("endpoint") != endpoint:
                return False
            del self._entries[(namespace, name)]
        return True

    def refresh(self, namespace: str, name: str, state: dict[str, Any]) -> bool:
        """Rewrite the entry if it still names the actor at the same endpoint (it restarted: a new boot id)."""
        check_key(namespace, name)
        with self._lock:
            current = self._entries.get((namespace, name))
            if current is None or current.get("endpoint") != state.get("endpoint"):
                return False
            self._store(namespace, name, state)
        return True

    def names(self, namespace: str) -> list[str]:
        """Names registered in ``namespace`` (sorted, at most 50)."""
        if namespace:
            check_name("namespace", namespace)
        with self._lock:
            found = sorted(name for ns, name in self._entries if ns == namespace)
        return found[:LISTED_NAMES]
