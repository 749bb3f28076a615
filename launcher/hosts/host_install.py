"""What to say when a host's Python lacks miles-actors: which Python, which host, and the command that fixes it."""

from __future__ import annotations

from launcher.config.hosts_config import HostConfig
from launcher.errors import HostCheckError
from launcher.hosts.agent_pool import launcher_versions

AGENT_MODULE_MISSING = "No module named 'launcher'"  # how starting the host agent fails without the package


def not_installed(host: HostConfig, executable: str | None = None) -> HostCheckError:
    """miles-actors is missing for ``host.python`` (``executable``: where it resolved to) on ``host``."""
    _, version = launcher_versions()
    pin = f"=={version}" if version else ""
    resolved = f" ({executable})" if executable and executable != host.python else ""
    return HostCheckError(
        f"miles-actors is not installed in {host.python}{resolved} on host {host.name!r}: install it there "
        f"(`{host.python} -m pip install miles-actors{pin}`), or set hosts.toml `python` for this host to a Python "
        "that has it"
    )


def agent_missing_package(stderr_tail: list[str]) -> bool:
    """Whether a host agent's last words say its Python has no miles-actors."""
    return any(AGENT_MODULE_MISSING in line for line in stderr_tail)
