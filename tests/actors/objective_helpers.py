"""One trainer rank for tests/actors/test_trainer_objective.py, run as a subprocess (a script, not a test module).

    python objective_helpers.py objective --rank R --world-size W --port P --tp T --out DIR

Writes ``DIR/rank{R}.json``: the vocab-parallel logprobs and entropy at a temperature against the gathered
logits, their gradient against Megatron's cross entropy, a PPO + TIS + KL step of two mini-batches on rollout
logprobs equal to the trainer's own, the reference model through a checkpoint, and a decoupled step with the
proximal policy interpolated from per-token version lags.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

import torch
from trainer_helpers import TINY_MODEL, target

from actors.trainer import ObjectiveConfig, OptimizerConfig, ParallelConfig, Trainer, TrainerConfig
from actors.trainer import model as gpt_model
from actors.trainer.batch import pack_batch
from actors.trainer.digest import digest_named_tensors
from actors.trainer.policy_update import PolicyUpdate
from actors.trainer.rollout_extras import RolloutExtras, attach_extras

PROMPT = 3
OBJECTIVE = ObjectiveConfig(policy_loss="ppo_clip", use_tis=True, kl_loss_coef=0.05, entropy_coef=0.001,
                            num_steps_per_rollout=2)  # fmt: skip


def check_logprobs(trainer: Trainer, tokens: torch.Tensor) -> dict[str, float]:
    layout, model = trainer.layout, trainer._model
    tp = {"tp_group": layout.tp_group, "tp_rank": layout.tp_rank, "tp_size": layout.tp_size}
    full = trainer.forward_logits(tokens)[:, :-1] / 0.7
    want = full.log_softmax(-1)
    with torch.no_grad():
        got, entropy = gpt_model.logprobs_and_entropy(model, tokens, temperature=0.7, with_entropy=True, **tp)
    assert entropy is not None
    params = [p for p in model.parameters() if p.requires_grad]
    megatron = torch.autograd.grad(gpt_model.token_logprobs(model, tokens).sum(), params)
    ours = torch.autograd.grad(gpt_model.logprobs_and_entropy(model, tokens, with_entropy=True, **tp)[0].sum(), params)
    return {
        "logprob_err": float((got - want.gather(-1, tokens[:, 1:, None]).squeeze(-1)).abs().max()),
        "entropy_err": float((entropy - -(want.exp() * want).sum(-1)).abs().max()),
        "grad_err": max(float((a - b).abs().max()) for a, b in zip(megatron, ours, strict=True)),
    }


def run(trainer: Trainer, out: Path) -> dict[str, object]:
    tokens = [target(trainer.layout.dp_rank)] * 2
    mask = [[0] * PROMPT + [1] * (len(row) - PROMPT) for row in tokens]
    result: dict[str, object] = check_logprobs(trainer, torch.tensor(tokens))
    own = [row[PROMPT - 1 :].tolist() for row in trainer.forward_logprobs(tokens)]  # the response's logprobs
    reference = trainer._update.reference
    assert reference is not None
    initial = digest_named_tensors(reference.tensors.items())
    result["metrics"] = trainer.train_step(tokens, mask, [1.0, -0.5], rollout_logprobs=own)
    result["checkpoint"] = trainer.save_checkpoint(str(out / "ckpt"))
    for tensor in reference.tensors.values():  # as if this trainer had started from other weights
        tensor.zero_()
    trainer.load_checkpoint(str(result["checkpoint"]))
    result["reference_restored"] = digest_named_tensors(reference.tensors.items()) == initial
    result["after_load"] = trainer.train_step(tokens, mask, [1.0, -0.5], rollout_logprobs=own)
    decoupled = ObjectiveConfig(policy_loss="ppo_clip", decoupled=True, proximal="interpolate")
    update = PolicyUpdate(objective=decoupled, layout=trainer.layout, optimizer=trainer._optimizer,
                          model=trainer._model, named=trainer._named, micro_batch_size=None)  # fmt: skip
    lags = [[0] * 4 + [2] * (len(row) - PROMPT - 4) for row in tokens]
    packed = pack_batch(tokens, mask, [1.0, -0.5], vocab_size=TINY_MODEL.vocab_size, max_length=64)
    packed = attach_extras(packed, RolloutExtras(own, lags), decoupled)
    result["decoupled"], result["decoupled_steps"] = update.step(packed, 1.0)
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=["objective"])
    for name in ("--rank", "--world-size", "--port"):
        parser.add_argument(name, type=int, required=True)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out_file = Path(args.out) / f"rank{args.rank}.json"
    config = TrainerConfig(model=TINY_MODEL, parallel=ParallelConfig(tensor_model_parallel_size=args.tp),
                           optimizer=OptimizerConfig(lr=3e-3), collective_timeout_s=args.timeout, cpu_threads=1,
                           objective=OBJECTIVE)  # fmt: skip
    trainer = Trainer(rank=args.rank, world_size=args.world_size, master_addr="127.0.0.1", master_port=args.port,
                      config=config)  # fmt: skip
    try:
        result = run(trainer, Path(args.out))
    except BaseException:
        out_file.write_text(json.dumps({"exception": traceback.format_exc()}))
        raise
    finally:
        trainer.close()
    out_file.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
