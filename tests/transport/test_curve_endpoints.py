"""CURVE on the ROUTER/DEALER endpoints: the cluster's clients get through, others fail the handshake for good."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path

import pytest
import zmq

from transport import security, shared_memory
from transport.sockets import dealer, router, shared_context


async def _exchange(
    config: security.CurveConfig, client: security.CurveConfig | None, *, expect_other_server: bool = False
) -> tuple[list, list, list]:
    """One message from a DEALER with ``client`` keys to a CURVE ROUTER; returns (served, replies, failures).
    ``expect_other_server``: the client expects another actor's public key than the server's own."""
    server_keys = security.ServerKeys.new()
    expected = security.ServerKeys.new().public if expect_other_server else server_keys.public
    context = shared_context()
    served: list[bytes] = []
    replies: list[bytes] = []
    failures: list[str] = []
    server = None

    def on_server(frames: list[zmq.Frame]) -> None:
        served.append(frames[1].bytes)
        server.send([frames[0], b"re:" + frames[1].bytes])

    server, address = router(
        context, "tcp://127.0.0.1:0", on_server, max_message_bytes=1 << 20, curve=config, server_keys=server_keys
    )
    server.start()
    endpoint = dealer(
        context,
        address,
        lambda frames: replies.append(frames[0].bytes),
        routing_id=os.urandom(8),
        curve=client,
        server_key=expected if client is not None else None,
        on_handshake_failure=failures.append,
    )
    endpoint.start()
    endpoint.send([b"hello"])
    for _ in range(80):
        if replies or failures:
            break
        await asyncio.sleep(0.05)
    endpoint.close()
    server.close()
    return served, replies, failures


def test_cluster_client_is_served(tmp_path: Path) -> None:
    keys = security.generate_cluster_keys(tmp_path / "keys")
    served, replies, failures = asyncio.run(_exchange(keys, keys))
    assert served == [b"hello"] and replies == [b"re:hello"] and not failures


def test_unknown_client_key_is_refused(tmp_path: Path) -> None:
    keys = security.generate_cluster_keys(tmp_path / "keys")
    public, secret = zmq.curve_keypair()
    stranger = dataclasses.replace(keys, client_public=public, client_secret=secret)
    served, replies, failures = asyncio.run(_exchange(keys, stranger))
    assert not served and not replies
    assert failures and "refused this process's CURVE client key" in failures[0]


def test_a_server_without_the_expected_actor_key_is_refused(tmp_path: Path) -> None:
    """A server holding the cluster's keys but not the actor key the client expects gets nothing."""
    keys = security.generate_cluster_keys(tmp_path / "keys")
    served, replies, failures = asyncio.run(_exchange(keys, keys, expect_other_server=True))
    assert not served and not replies
    assert failures and "does not hold the actor key this handle names" in failures[0]


def test_plain_client_is_refused(tmp_path: Path) -> None:
    keys = security.generate_cluster_keys(tmp_path / "keys")
    served, replies, failures = asyncio.run(_exchange(keys, None))
    assert not served and not replies
    assert failures and "one side uses CURVE" in failures[0]


def test_shared_memory_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MILES_SHM", "0")
    assert not shared_memory.available()
    monkeypatch.setenv("MILES_SHM", "1")
    assert shared_memory.available() == (shared_memory.SHM_DIR.is_dir() and os.access(shared_memory.SHM_DIR, os.W_OK))
