"""Ports a host agent hands out (transport/ports.py ``free_ports``): drawn below the kernel's ephemeral
range, so a ``bind(0)`` or an outgoing connection on the host cannot take one before its worker binds it (CI saw a
worker fail with "Address already in use" on a port handed out from the ephemeral range); never twice, never one
that is bound."""

from __future__ import annotations

import socket

from transport.ports import EPHEMERAL_RANGE, LOWEST_PORT, free_ports, handed_out_pool


def test_ports_come_from_below_the_ephemeral_range_and_never_twice() -> None:
    with open(EPHEMERAL_RANGE) as fh:
        low = int(fh.read().split()[0])
    pool = handed_out_pool()
    assert pool == range(LOWEST_PORT, low)
    handed: set[int] = set()
    first = free_ports(5, handed)
    second = free_ports(5, handed)
    assert all(LOWEST_PORT <= port < low for port in first + second)
    assert len(set(first + second)) == 10 and handed == set(first + second)


def test_a_bound_port_is_skipped_and_an_empty_pool_leaves_the_pick_to_the_kernel() -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        busy = taken.getsockname()[1]
        with socket.socket() as probe:
            probe.bind(("0.0.0.0", 0))
            spare = probe.getsockname()[1]
        assert free_ports(1, set(), pool=[busy, spare]) == [spare]
    (picked,) = free_ports(1, set(), pool=range(0))
    assert picked > 0


def test_ports_a_process_hands_to_its_children_come_from_below_the_range_and_never_twice() -> None:
    # actors.processes.free_port: a trainer group's rendezvous port, an engine's, a router's (CI: a rendezvous port
    # from the ephemeral range was taken before rank 0 bound it, and the ranks hung)
    from actors.processes import free_port

    ports = [free_port() for _ in range(20)]
    pool = handed_out_pool()
    assert len(set(ports)) == 20 and (not pool or all(port in pool for port in ports)), ports
