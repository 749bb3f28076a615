"""[job.args] into a job's settings: an unknown key is refused by name (a typo must not run on defaults)."""

from __future__ import annotations

import pytest

from actors.demo.async_loop import AsyncDemoSettings
from actors.demo.loop import DemoSettings
from actors.job_args import job_settings
from actors.sessions.job import AgentJobSettings


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
