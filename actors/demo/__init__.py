"""The demo job ``miles-launch hosts.example.toml`` runs: GRPO on a toy copy task, all on CPU.

It shows the whole RL loop working end to end on any machine: exit code 0 means the reward rose.
"""

from __future__ import annotations

from typing import Any

from actors.demo.loop import DemoSettings, finish, run_loop
from actors.job_args import takes_settings
from actors.job_roles import rl_roles


@takes_settings(DemoSettings, "demo settings")
def main(ctx: Any, settings: DemoSettings) -> int:
    """Entrypoint for ``[job] entrypoint = "actors.demo:main"``; ``ctx`` is a launcher.JobContext.

    The launcher starts three pools (see hosts.example.toml): ``trainer`` (TrainerActor ranks on megatron-core with
    gloo), ``inference`` (an InferenceController that runs CPU engines behind the real sglang-router) and
    ``rollout`` (a RolloutExecutor). This wires them together and runs generate → reward → train → push weights,
    printing one line per iteration and writing a reward plot at the end.

    The default is the tiny built-in model; a commented variant in hosts.example.toml starts from a Hugging Face
    directory instead (``model_path`` for the trainer, the engines, the rollout's tokenizer and this job)."""
    trainer, controller, rollout = rl_roles(ctx)
    print("[demo] starting the router and the engines ...", flush=True)
    cells = controller.start().result(timeout=300)
    print(f"[demo] engine cells: {[(c['id'], c['state']) for c in cells]}", flush=True)
    try:
        board = run_loop(settings, trainer, controller, rollout)
    finally:
        controller.shutdown().result(timeout=60)
    return finish(board, settings)


__all__ = ["DemoSettings", "main"]
