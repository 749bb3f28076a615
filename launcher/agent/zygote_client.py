"""The host agent's fork server ("zygote", :mod:`runtime.processes.fork_server`): every child of the agent starts
here, in milliseconds, or with ``Popen`` when it cannot."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from runtime.internals import READY_WAIT_S, ForkClient, ForkedWorker, die_with_parent_preexec

__all__ = ["ENABLE_ENV", "READY_WAIT_S", "ForkedWorker", "ZygoteClient"]

ENABLE_ENV = "MILES_ZYGOTE"


class ZygoteClient(ForkClient):
    """The agent's fork server client, with the Popen fallback. Call it from the agent's main thread only: the death
    signals and the workers' re-parenting are tied to that thread."""

    def __init__(self, agent_pid: int, *, ready_wait_s: float = READY_WAIT_S, enabled: bool | None = None) -> None:
        on = os.environ.get(ENABLE_ENV, "1") != "0" if enabled is None else enabled
        super().__init__(agent_pid, ready_wait_s=ready_wait_s, enabled=on, death_signal=True)

    def launch(
        self, argv: list[str], env: dict[str, str], cwd: Path, *, stdin: bool
    ) -> subprocess.Popen[bytes] | ForkedWorker:
        """Start a worker with piped stdout/stderr (and stdin if ``stdin``), its own session and a death signal
        tied to the agent: forked by the zygote when it can, else executed with ``subprocess.Popen``.

        Forked workers are re-parented to the agent (a child subreaper) and killed when it dies. Popen serves
        another command or interpreter, the zygote disabled (``MILES_ZYGOTE=0`` in the agent's environment, e.g. a
        host's ``env`` in hosts.toml), or the fork server not up, refusing, or dead."""
        forked = self.spawn(argv, env, cwd, stdin=stdin)
        if forked is not None:
            return forked
        return subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=die_with_parent_preexec(self.agent_pid),  # forked from the main thread only
        )

    @property
    def agent_pid(self) -> int:
        return self.reaper_pid
