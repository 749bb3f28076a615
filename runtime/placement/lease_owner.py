"""This process as the owner of what it placed on the launch: its id (with a secret that proves its releases) and
the renewal that tells the launch it lives, so that its actors and groups end with it."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket

from runtime.placement.placement_api import PlacementApi, PlacementUnavailable, api

log = logging.getLogger(__name__)

RENEW_S = 1.0  # this process tells the launch it is alive this often while it holds leases
_owner: list[str] = []
_renewing: list[bool] = []
_local: set[asyncio.Future[None]] = set()


def owner() -> str:
    """``host:pid/secret``: others see the host and pid, only this process knows the secret."""
    if not _owner:
        _owner.append(f"{socket.gethostname()}:{os.getpid()}/{secrets.token_hex(16)}")
    return _owner[0]


def keep_renewing() -> None:
    """Renew this process's leases from now on, every second, until it exits (on the runtime's loop: a timer, so
    nothing is left pending when the loop stops)."""
    if not _renewing:
        _renewing.append(True)
        asyncio.get_running_loop().call_soon(_tick)


def _tick() -> None:
    try:
        found = api()
        if isinstance(found, PlacementApi):  # the launcher itself: a coroutine that ends in one step
            _local.add(task := asyncio.ensure_future(found.renew(owner())))
            task.add_done_callback(_local.discard)
        else:
            found.method("renew")(owner=owner())  # not awaited: a lost renewal is the next one's to make up
    except PlacementUnavailable as exc:
        log.debug("renewing this process's leases: %s", exc)
    asyncio.get_running_loop().call_later(RENEW_S, _tick)
