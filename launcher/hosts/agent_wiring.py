"""What the launch hands every host-agent opener: its settings, where agent events go, where each remote host
reaches the launcher, and how to report a step."""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass

from launcher.config.hosts_config import LauncherSettings
from launcher.console.progress import Say
from launcher.hosts.agent_link import EventCallback


@dataclass(frozen=True)
class AgentWiring:
    """The launch's side of every agent link an opener makes."""

    settings: LauncherSettings  # timeouts and heartbeats of every link
    on_event: EventCallback  # every agent's events (the provider's WorkerEvents)
    reach_back: MutableMapping[str, str]  # remote host -> the launcher's address as its processes reach it
    say: Say  # progress lines (SSH connected, srun step started)
