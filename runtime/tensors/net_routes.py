"""Which network interface this host uses to reach an address: what gloo must bind when a hostname resolves to
loopback (a usual multi-host setup), named by ``GLOO_SOCKET_IFNAME`` (used by :mod:`runtime.tensors.collective_groups`
and the trainer's ``init_distributed``)."""

from __future__ import annotations

import socket

import psutil


def interface_towards(address: str) -> str | None:
    """The name of the network interface this host uses to reach ``address`` (None if unknown)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((address, 9))  # UDP connect sends nothing: it only picks the route
            local_ip = probe.getsockname()[0]
    except OSError:
        return None
    for name, addresses in psutil.net_if_addrs().items():
        if any(entry.address == local_ip for entry in addresses):
            return name
    return None
