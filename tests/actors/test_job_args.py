"""[job.args] into a job's settings: an unknown key is refused by name (a typo must not run on defaults)."""

from __future__ import annotations

import pytest

from actors.demo.async_loop import AsyncDemoSettings
from actors.demo.loop import DemoSettings
from actors.job_args import job_settings, takes_settings
from actors.sessions.job import AgentJobSettings
from launcher.errors import ConfigError
from launcher.launch.job import check_job_args


def test_known_keys_make_the_settings_and_an_unknown_one_is_named_with_the_known_ones() -> None:
    settings = job_settings(DemoSettings, {"iterations": 3, "target_len": 2}, "demo settings")
    assert (settings.iterations, settings.target_len) == (3, 2)
    with pytest.raises(ValueError, match=r"job\.args: unknown async demo settings \['iteratons'\]; known: \[") as bad:
        job_settings(AsyncDemoSettings, {"iteratons": 3}, "async demo settings")
    assert "'iterations'" in str(bad.value)
    with pytest.raises(ValueError, match=r"job\.args\.iterations must be at least 1"):  # the dataclass's own checks
        job_settings(DemoSettings, {"iterations": 0})


def test_the_agent_job_refuses_a_staleness_it_cannot_reach() -> None:
    assert job_settings(AgentJobSettings, {"iterations": 2, "max_staleness": 1}).max_staleness == 1
    with pytest.raises(ValueError, match=r"max_staleness = 2: give 0 \(synchronous\) up to iterations - 1 = 1"):
        job_settings(AgentJobSettings, {"iterations": 2, "max_staleness": 2})


def test_an_entrypoint_taking_settings_gets_them_and_its_check_runs_before_the_launch() -> None:
    @takes_settings(DemoSettings, "demo settings")
    def main(ctx: object, settings: DemoSettings) -> int:
        return settings.iterations

    class Ctx:
        args = {"iterations": 3}

    assert main(Ctx()) == 3 and main.__name__ == "main"  # called as the launcher calls it: main(ctx)
    check_job_args(main, {"iterations": 3}, {})  # miles-launch's check before anything starts (launch_checks)
    with pytest.raises(ConfigError, match=r"^job\.args: unknown demo settings \['iteratons'\]"):
        check_job_args(main, {"iteratons": 3}, {})
    with pytest.raises(ConfigError, match=r"^job\.args\.iterations must be at least 1"):
        check_job_args(main, {"iterations": 0}, {})
    check_job_args(lambda ctx: 0, {"anything": 1}, {})  # an entrypoint without a check: its args are its own business
