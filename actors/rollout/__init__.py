"""Rollouts for RL: generate through the router, score with a reward function, GRPO advantages, DP shards."""

from actors.rollout.advantages import balanced_ranges, group_advantages
from actors.rollout.executor import RolloutExecutor, load_function
from actors.rollout.router_client import GenerateRefused, TransientGenerateError
from actors.rollout.tasks import make_prompts, target_sequence_reward

# Use:
#     executor = spawn(RolloutExecutor, kwargs={"controller": controller, "dp_size": 2,
#                                              "reward_fn": "actors.rollout.tasks:target_sequence_reward"})
#     result = executor.generate(make_prompts(8), 4).result(300)   # {"shards": [ObjectRef, ...], "stats": {...}}
__all__ = [
    "GenerateRefused",
    "RolloutExecutor",
    "TransientGenerateError",
    "balanced_ranges",
    "group_advantages",
    "load_function",
    "make_prompts",
    "target_sequence_reward",
]
