"""This process as the owner of what it placed on the launch: its id (with a secret that proves its releases) and
the renewal that tells the launch it lives, so that its actors and groups end with it."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket

from runtime.placement.placement_api import PlacementUnavailable, call

log = logging.getLogger(__name__)

RENEW_S = 1.0  # this process tells the launch it is alive this often while it holds leases
_owner: list[str] = []
_renewing: list[asyncio.Task[None]] = []


def owner() -> str:
    """``host:pid/secret``: others see the host and pid, only this process knows the secret."""
    if not _owner:
        _owner.append(f"{socket.gethostname()}:{os.getpid()}/{secrets.token_hex(16)}")
    return _owner[0]


def keep_renewing() -> None:
    """Renew this process's leases from now on (on the runtime's loop)."""
    if not _renewing or _renewing[0].done():
        _renewing[:] = [asyncio.ensure_future(_renew())]


async def _renew() -> None:
    while True:
        try:
            await call("renew", owner=owner())
        except PlacementUnavailable as exc:
            log.debug("renewing this process's leases: %s", exc)
        await asyncio.sleep(RENEW_S)
