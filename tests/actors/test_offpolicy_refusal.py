"""The async demo's refusal of an uncorrected off-policy run (actors/demo/async_loop.py), judged the same way from
the launch's config before anything starts and from the live trainer and rollout at the job's start."""

from __future__ import annotations

import pytest

from actors.demo.async_loop import (
    AsyncDemoSettings,
    OffPolicyRefused,
    refuse_uncorrected,
    refuse_uncorrected_before_start,
)
from actors.rollout.executor import DEFAULT_SAMPLING_PARAMS
from actors.trainer.config import TrainerConfig

CORRECTED = {"objective": {"policy_loss": "reinforce", "use_tis": True, "tis_clip": 2.0}}


def pools(config: dict, sampling: dict | None = None) -> dict:
    return {"trainer": {"config": config}, "rollout": {"sampling_params": sampling} if sampling else {}}


def test_before_start_an_uncorrected_stale_run_is_refused_naming_the_fixes() -> None:
    stale = AsyncDemoSettings(iterations=4, max_staleness=1)
    with pytest.raises(OffPolicyRefused, match=r"max_staleness = 1 .*objective\.use_tis = true") as refused:
        refuse_uncorrected_before_start(stale, pools({}))
    assert "allow_uncorrected_off_policy = true" in str(refused.value)
    refuse_uncorrected_before_start(stale, pools(CORRECTED))  # corrected: accepted
    on_policy = AsyncDemoSettings(iterations=4, max_staleness=0, in_flight="finish")
    refuse_uncorrected_before_start(on_policy, pools({}))  # on-policy: nothing to correct
    refuse_uncorrected_before_start(stale, {"trainer": {}})  # pools it cannot read: judged live at start


class Trainer:
    def __init__(self, config: dict) -> None:
        self.config = TrainerConfig.model_validate(config)

    def objective(self) -> object:
        return self.config.objective


class Rollout:
    class _Done:
        def result(self, timeout: float) -> dict:
            return dict(DEFAULT_SAMPLING_PARAMS)

    def sampling_settings(self) -> _Done:
        return self._Done()


def test_at_start_the_live_objective_is_judged_the_same_way() -> None:
    stale = AsyncDemoSettings(iterations=4, max_staleness=1)
    with pytest.raises(OffPolicyRefused, match=r"max_staleness = 1 .*objective\.use_tis = true"):
        refuse_uncorrected(stale, Trainer({}), Rollout())  # type: ignore[arg-type]
    assert refuse_uncorrected(stale, Trainer(CORRECTED), Rollout()) == "objective reinforce with use_tis"  # type: ignore[arg-type]
