"""Where this process reaches a launcher-placed worker that the provider API reports.

A worker on a ``local`` host is reported at a loopback address, which is right only on the launcher's own machine.
"""

from __future__ import annotations

from launcher.config.hosts_config import LOCAL_ADDRESSES
from launcher.launch.provider_views import WorkerView
from runtime import ActorHandle


def reachable_address(address: str, api: ActorHandle) -> str:
    """``address`` (a worker's, from the provider API), or for a loopback one the provider API's host.

    The provider API's cells view gives each worker its host's ``reach_address`` (launcher/launch/cell_starter.py):
    an SSH host's address, or a loopback address for a ``local`` host (the launcher's own machine, e.g. the built-in
    host "launcher"). From an SSH host the launcher's machine is reached at the address this process reaches the
    provider API at (the launcher serves it). Workers on local hosts must therefore listen on an interface other
    hosts reach (engine and router pools bind 0.0.0.0)."""
    if address not in LOCAL_ADDRESSES:
        return address
    endpoint = api.endpoint.removeprefix("tcp://")
    return endpoint.rsplit(":", 1)[0].strip("[]")


def worker_url_host(worker: WorkerView, api: ActorHandle) -> str:
    """The host part of a URL of ``worker`` (a provider API worker view), an IPv6 address in brackets; ``api``: the
    provider API's handle."""
    address = reachable_address(worker.address, api)
    return f"[{address}]" if ":" in address else address
