"""Launcher errors: each says what happened, where (host, pool, cell, field) and what to do.

| error              | raised when                                                          |
|--------------------|----------------------------------------------------------------------|
| ConfigError        | hosts.toml or a spec is invalid (names file, host/pool and field)    |
| PlacementError     | the plan cannot reserve every bundle (all-or-nothing, nothing starts) |
| HostUnreachable    | SSH connect/handshake fails or times out                             |
| HostAuthError      | the SSH key is rejected or cannot be read                            |
| HostCheckError     | Python / miles-actors version or GPU env on a host does not match    |
| AgentError         | the host agent died, refused a command or did not answer in time     |
| WorkerStartError   | a worker exited, failed readiness or attach before its deadline      |
| UnknownPool        | a job asks for a pool hosts.toml does not define (names the pools)   |
"""

from __future__ import annotations


class LauncherError(Exception):
    """Base class of every launcher error."""


class ConfigError(LauncherError):
    """Invalid hosts.toml or worker spec."""


class PlacementError(LauncherError):
    """The placement plan cannot be satisfied; nothing was started."""


class HostUnreachable(LauncherError):
    """A host cannot be reached over SSH before the connect deadline."""


class HostAuthError(LauncherError):
    """SSH authentication to a host failed."""


class HostCheckError(LauncherError):
    """A host's Python, package version or GPU environment does not fit the launcher."""


class AgentError(LauncherError):
    """The host agent died, refused a command or missed a deadline."""


class WorkerStartError(LauncherError):
    """A worker did not become ready (exited, readiness timeout, attach failure)."""


class UnknownPool(LauncherError, KeyError):
    """A pool id that hosts.toml does not define (also a KeyError, as a missing mapping key)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""
