"""The objective inside the trainer (actors/trainer/policy_update.py) on two real TP ranks (gloo on 127.0.0.1).

Rank processes run tests/actors/objective_helpers.py; every process is killed by pid when the test ends.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from rank_processes import Ranks

pytestmark = pytest.mark.processes

HELPER = Path(__file__).with_name("objective_helpers.py")


def test_objective_on_tensor_parallel_ranks(tmp_path: Path) -> None:
    ranks = Ranks(HELPER, "objective", world_size=2, tp=2, out=tmp_path, timeout_s=30.0, extra=[])
    try:
        ranks.wait([0, 1], time.monotonic() + 90.0)
        results = [ranks.result(0), ranks.result(1)]
    finally:
        ranks.stop()
    for result in results:
        # vocab-parallel log-softmax at temperature 0.7 and entropy equal the gathered logits'; same gradient
        # as Megatron's vocab-parallel cross entropy at temperature 1
        assert result["logprob_err"] < 1e-5 and result["entropy_err"] < 1e-5, result
        assert result["grad_err"] < 1e-6, result
        metrics = result["metrics"]
        # the rollout logprobs are the trainer's own: no mismatch, every TIS weight 1, full effective sample size
        assert metrics["train_rollout_logprob_abs_diff"] < 1e-5 and metrics["ess_ratio"] == pytest.approx(1.0)
        assert metrics["tis"] == pytest.approx(1.0) and metrics["tis_clipfrac"] == 0.0
        assert metrics["step"] == 2.0  # num_steps_per_rollout = 2: two optimizer steps on one rollout batch
        assert metrics["ref_kl"] > 0  # the second mini-batch trains on updated weights, the reference stays
        assert 0 < metrics["entropy"] < 4.2  # below log(64), the uniform distribution's
        assert result["reference_restored"], "load_checkpoint did not restore the reference model"
        assert result["after_load"]["step"] == 4.0
        decoupled = result["decoupled"]
        assert result["decoupled_steps"] == 1
        assert decoupled["version_lag_0_frac"] == pytest.approx(4 / 9)
        assert decoupled["version_lag_2_frac"] == pytest.approx(5 / 9)
        assert decoupled["behav_imp_weight"] > 0
    timed = ("step_time_s",)
    first, second = ({k: v for k, v in r["metrics"].items() if k not in timed} for r in results)
    assert first == pytest.approx(second, rel=1e-5, abs=1e-6)  # TP peers agree on every metric
