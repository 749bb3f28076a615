"""Launcher errors: each says what happened, where (host, pool, cell, field) and what to do."""

from __future__ import annotations


class LauncherError(Exception):
    """Base class of every launcher error."""


class ConfigError(LauncherError):
    """Invalid hosts.toml or worker spec (the message names the file, host/pool and field)."""


class PlacementError(LauncherError):
    """The placement plan cannot reserve every bundle (all-or-nothing); nothing was started."""


class HostUnreachable(LauncherError):
    """A host cannot be reached over SSH (connect or handshake fails, or times out)."""


class HostAuthError(LauncherError):
    """SSH authentication to a host failed: the key is rejected or cannot be read."""


class HostCheckError(LauncherError):
    """A host's Python, package version or GPU environment does not fit the launcher."""


class AgentError(LauncherError):
    """The host agent died, refused a command or missed a deadline."""


class WorkerStartError(LauncherError):
    """A worker did not become ready before its deadline (exited, failed readiness or attach)."""


class UnknownPool(LauncherError, KeyError):
    """A pool id a job asks for that hosts.toml does not define (the message names the pools; also a KeyError, as a
    missing mapping key)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""
