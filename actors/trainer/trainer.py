"""One rank of a Megatron trainer: policy-gradient steps, HF export, checkpoints, weight pushes.

A plain class: the actor runtime hosts one per process (Megatron's parallel state is process-global).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import torch
import torch.distributed as dist
from torch import Tensor

from actors.hf.writer import DEFAULT_SHARD_BYTES
from actors.trainer import checkpoint, hf_checkpoint
from actors.trainer import model as gpt_model
from actors.trainer.batch import Advantages, FloatRows, PackedBatch, TokenRows, pack_batch
from actors.trainer.config import TrainerConfig
from actors.trainer.digest import digest_named_tensors
from actors.trainer.distributed import (
    ParallelLayout,
    all_ok,
    gather_along,
    init_distributed,
    resolve_backend,
    setup_parallel,
    teardown_parallel,
)
from actors.trainer.errors import BatchRejected, CheckpointError, TrainerError, WeightPushError
from actors.trainer.hf_export import export_hf
from actors.trainer.optimizer import OptimizerKind, build_optimizer, choose_optimizer, state_pairs
from actors.trainer.policy_update import PolicyUpdate
from actors.trainer.rollout_extras import RolloutExtras, attach_extras
from actors.trainer.run_guard import RunGuard
from actors.trainer.weights_push import push_over_group, push_to_engines

logger = logging.getLogger(__name__)

HealthValue = int | float | str | bool | None


class Trainer:
    """One rank of a data- and tensor-parallel megatron-core GPT trainer (CPU with gloo, or GPU with nccl).

    The constructor joins the process group (every rank must construct one; it waits for the others up
    to ``config.collective_timeout_s``) and builds this rank's model slice with identical initial weights
    on every DP replica. Methods marked *collective* must be called on every rank, in the same order, like any
    SPMD program; with the default serial concurrency group the runtime gives exactly that. :meth:`health` may be
    called from another thread at any time. Every method runs under the rank's
    :class:`~actors.trainer.run_guard.RunGuard`.
    """

    def __init__(
        self, *, rank: int, world_size: int, master_addr: str, master_port: int, config: TrainerConfig
    ) -> None:
        self._config = config
        self._step = 0
        self._last_step_s: float | None = None
        config.parallel.data_parallel_size(world_size)  # fail fast, before any network
        if config.cpu_threads is not None:
            torch.set_num_threads(config.cpu_threads)
        init_distributed(
            rank=rank,
            world_size=world_size,
            master_addr=master_addr,
            master_port=master_port,
            backend=resolve_backend(config.backend),
            timeout_s=config.collective_timeout_s,
        )
        try:
            tp = config.parallel.tensor_model_parallel_size
            # Initial weights come from model.seed on every rank (CPU init slices the same full matrices).
            self._layout = setup_parallel(
                tensor_model_parallel_size=tp, seed=config.model.seed, timeout_s=config.collective_timeout_s
            )
            self._guard = RunGuard(self._layout.rank, config.collective_timeout_s)
            kind = choose_optimizer(config.optimizer, self._layout.device)  # before the model: fail fast
            self._model = gpt_model.build_gpt_model(
                config.model, tensor_model_parallel_size=tp, device=self._layout.device,
                initialize=config.model_path is None,
            )  # fmt: skip
            torch.manual_seed(config.seed)
            self._named = dict(self._model.named_parameters())
            self._hf_dtypes: dict[str, torch.dtype] = {}
            if config.model_path is not None:
                self._hf_dtypes = hf_checkpoint.load(config.model_path, self._named, config.model, self._layout)
            # After loading: Megatron's DDP moves the parameters into its buffers, keeping their values.
            self._optimizer = build_optimizer(kind, self._model, config.optimizer, self._layout)
            self._update = PolicyUpdate(  # after loading: the reference model is the initial weights
                objective=config.objective, layout=self._layout, optimizer=self._optimizer, model=self._model,
                named=self._named, micro_batch_size=config.micro_batch_size,
            )  # fmt: skip
        except BaseException:
            teardown_parallel()
            raise
        logger.info(
            "trainer rank %d ready: tp %d/%d dp %d/%d on %s, %d local parameters, optimizer %s",
            rank, self._layout.tp_rank, self._layout.tp_size, self._layout.dp_rank, self._layout.dp_size,
            self._layout.device, sum(p.numel() for p in self._named.values()), kind,
        )  # fmt: skip

    @property
    def optimizer_kind(self) -> OptimizerKind:
        """``torch_adamw`` (CPU), ``megatron`` or ``megatron_distributed`` (CUDA); see :mod:`.optimizer`."""
        return self._optimizer.kind

    @property
    def layout(self) -> ParallelLayout:
        """This rank's place in the TP x DP grid."""
        return self._layout

    @property
    def step(self) -> int:
        """Optimizer steps taken (restored by :meth:`load_checkpoint`)."""
        return self._step

    def _pack(
        self,
        tokens: TokenRows,
        loss_mask: FloatRows | None,
        advantages: Advantages,
        extras: RolloutExtras | None = None,
    ) -> PackedBatch:
        """Pack this rank's shard and agree with every rank that all shards are usable (collective)."""
        layout, model = self._layout, self._config.model
        packed: PackedBatch | None = None
        error = ""
        try:
            packed = pack_batch(
                tokens,
                loss_mask,
                advantages,
                vocab_size=model.vocab_size,
                max_length=model.max_position_embeddings,
            )
            if extras is not None:  # a training batch (not a forward pass)
                packed = attach_extras(packed, extras, self._config.objective)
        except (ValueError, TypeError) as exc:
            packed = None
            error = str(exc)
        mismatch = 0
        if layout.tp_size > 1:  # TP peers must see the very same shard
            fp = packed.fingerprint() if packed is not None else -1
            bounds = torch.tensor([fp, -fp], dtype=torch.int64, device=layout.device)
            dist.all_reduce(bounds, op=dist.ReduceOp.MAX, group=layout.tp_group)
            mismatch = int(bounds[0].item() != -bounds[1].item())
        flags = torch.tensor([int(packed is None), mismatch], dtype=torch.int64, device=layout.device)
        dist.all_reduce(flags, op=dist.ReduceOp.SUM)
        if flags[0].item():
            raise BatchRejected(f"rank {layout.rank}: batch rejected: {error or 'malformed on another rank'}")
        if flags[1].item():
            raise BatchRejected(f"rank {layout.rank}: TP ranks of one group were given different batches")
        assert packed is not None
        return packed

    def train_step(
        self,
        tokens: TokenRows,
        loss_mask: FloatRows | None,
        advantages: Advantages,
        *,
        rollout_logprobs: FloatRows | None = None,
        version_lags: FloatRows | None = None,
        temperature: float = 1.0,
    ) -> dict[str, float]:
        """Train on this rank's shard of one rollout batch (collective; every DP rank passes its own shard, TP
        peers the same one): ``config.objective.num_steps_per_rollout`` optimizer steps with the objective of
        :mod:`actors.trainer.objectives`, logprobs at the engines' sampling ``temperature``. ``rollout_logprobs``
        (the engines' logprobs) and ``version_lags`` (weight versions behind this trainer) hold one value per
        generated token of each sample. Returns ``loss`` (before the update), ``grad_norm`` (before clipping),
        ``tokens`` (global masked tokens), ``step_time_s``, ``step`` (after) and the objective's metrics
        (``train_rollout_logprob_abs_diff``, ``ess_ratio``, ``pg_clipfrac``, ``entropy``, ...). See
        :mod:`actors.trainer.batch` for shapes.
        """
        with self._guard.running("train_step"):
            started = time.perf_counter()
            extras = RolloutExtras(rollout_logprobs, version_lags, temperature)  # type: ignore[arg-type]
            packed = self._pack(tokens, loss_mask, advantages, extras)
            counts = torch.tensor([packed.masked_tokens], dtype=torch.float64, device=self._layout.device)
            dist.all_reduce(counts, group=self._layout.dp_group)
            metrics, steps = self._update.step(packed, temperature)
            self._step += steps
            elapsed = time.perf_counter() - started
            self._last_step_s = elapsed
            return {**metrics, "tokens": float(counts.item()), "step_time_s": elapsed, "step": float(self._step)}

    def forward_logprobs(self, tokens: TokenRows) -> list[Tensor]:
        """log p(token_t | tokens_<t) for t >= 1 of each sequence (collective over TP); CPU tensors."""
        with self._guard.running("forward_logprobs"), torch.no_grad():
            packed = self._pack(tokens, None, [0.0] * len(tokens))
            logprobs = gpt_model.token_logprobs(self._model, packed.tokens.to(self._layout.device)).cpu()
            lengths = packed.mask.sum(dim=1).to(torch.int64).tolist()
            return [row[:n].clone() for row, n in zip(logprobs, lengths, strict=True)]

    def forward_logits(self, tokens: Tensor) -> Tensor:
        """Full-vocabulary logits [b, s, vocab] for a [b, s] batch (collective over TP; for tests/eval)."""
        with self._guard.running("forward_logits"), torch.no_grad():
            device = self._layout.device
            ids = tokens.to(device=device, dtype=torch.int64)
            local = self._model(ids, gpt_model.position_ids(ids), None)  # [b, s, vocab / tp]
            return gather_along(local, -1, self._layout.tp_group, self._layout.tp_size).cpu()

    def export_hf_weights(self) -> list[tuple[str, Tensor]]:
        """Full HF llama tensors (CPU) on every rank (collective over TP; DP replicas need no traffic).

        Names: ``model.embed_tokens.weight``, ``model.layers.{i}.{input_layernorm, self_attn.{q,k,v,o}_proj,
        post_attention_layernorm, mlp.{gate,up,down}_proj}.weight``, ``model.norm.weight``, ``lm_head.weight``
        (equal to the embedding when tied).
        """
        with self._guard.running("export_hf_weights"):
            return self._export()

    def _export(self) -> list[tuple[str, Tensor]]:
        layout = self._layout
        return export_hf(self._named, self._config.model, group=layout.tp_group, tp_size=layout.tp_size)

    def save_hf_checkpoint(self, path: str, max_shard_bytes: int = DEFAULT_SHARD_BYTES) -> str:
        """Write the current weights as a Hugging Face directory at ``path`` (collective; rank 0 writes).

        config.json (model_path's own, else one for the built-in model), safetensors shards of at most
        ``max_shard_bytes`` (with ``model.safetensors.index.json`` when there are several) in model_path's dtypes
        (float32 for the built-in model), and model_path's tokenizer files. ``path`` must not exist or be empty;
        transformers' ``from_pretrained`` loads the result. The Megatron checkpoint (:meth:`save_checkpoint`)
        remains the way to resume training.
        """
        with self._guard.running("save_hf_checkpoint"):
            pairs = self._export() if self._layout.dp_rank == 0 else []
            error = ""
            if self._layout.rank == 0:
                try:
                    hf_checkpoint.save(path, pairs, self._config, self._hf_dtypes, max_shard_bytes=max_shard_bytes)
                except (OSError, ValueError) as exc:
                    error = f"cannot write the HF checkpoint {path}: {type(exc).__name__}: {exc}"
            if not all_ok(not error):
                raise CheckpointError(error or f"rank {self._layout.rank}: rank 0 failed to write {path} (see its log)")
            return path

    def weights_digest(self, *, gathered: bool = False) -> str:
        """sha256 of this rank's parameter shards (equal on DP replicas), or with ``gathered`` of the full
        exported HF weights (equal on every rank; collective over TP)."""
        with self._guard.running("weights_digest"):
            if gathered:
                return digest_named_tensors(self._export())
            return digest_named_tensors(self._named.items())

    def optimizer_digest(self) -> str:
        """sha256 of this rank's AdamW state (moments and step counts), e.g. to check a checkpoint reload;
        with the distributed optimizer each DP rank digests its own shard."""
        with self._guard.running("optimizer_digest"):
            return digest_named_tensors(list(state_pairs(self._optimizer)))

    def save_checkpoint(self, path: str | None = None) -> str:
        """Write a checkpoint (collective) to ``path``, default ``{checkpoint_dir}/step_{step:08d}``;
        returns the directory. See :mod:`actors.trainer.checkpoint` for the layout."""
        with self._guard.running("save_checkpoint"):
            directory = self._checkpoint_path(path)
            checkpoint.save(
                directory,
                layout=self._layout,
                model_config=self._config.model,
                params=self._named,
                optimizer=self._optimizer,
                step=self._step,
                reference=self._update.reference,
            )
            return str(directory)

    def load_checkpoint(self, path: str) -> int:
        """Restore weights, optimizer state and step from ``path`` (collective); returns the step."""
        with self._guard.running("load_checkpoint"):
            self._step = checkpoint.load(
                Path(path),
                layout=self._layout,
                model_config=self._config.model,
                params=self._named,
                optimizer=self._optimizer,
                reference=self._update.reference,
            )
            return self._step

    def _checkpoint_path(self, path: str | None) -> Path:
        if path is not None:
            return Path(path)
        if self._config.checkpoint_dir is None:
            raise TrainerError("save_checkpoint() needs a path: config.checkpoint_dir is not set")
        return Path(self._config.checkpoint_dir) / f"step_{self._step:08d}"

    def push_weights_to_engines(
        self,
        urls: list[str],
        weight_version: str,
        bucket_bytes: int | None = None,
        timeout_s: float = 120.0,
        flush_cache: bool = True,
    ) -> list[dict[str, object]]:
        """Send the current weights to each engine's ``/update_weights_from_tensor`` (collective).

        DP replica 0 gathers its TP shards, global rank 0 posts; other ranks return ``[]``. If any engine
        fails, every rank raises :class:`WeightPushError`. Keep ``timeout_s`` times the number of requests
        under ``collective_timeout_s``: the other ranks wait for rank 0 in a collective meanwhile.
        """
        with self._guard.running("push_weights_to_engines"):

            def send(pairs: list[tuple[str, Tensor]]) -> list[dict[str, object]]:
                return push_to_engines(urls, pairs, weight_version=weight_version, bucket_bytes=bucket_bytes,
                                       timeout_s=timeout_s, flush_cache=flush_cache)  # fmt: skip

            return self._push_from_rank_zero(send)

    def push_weights_over_group(
        self,
        urls: list[str],
        weight_version: str,
        *,
        master_address: str,
        master_port: int,
        backend: str | None = None,
        bucket_bytes: int | None = None,
        timeout_s: float = 120.0,
        flush_cache: bool = True,
    ) -> list[dict[str, object]]:
        """Broadcast the current weights to each engine over a torch.distributed group (collective).

        SGLang's protocol (``/init_weights_update_group``, ``/update_weights_from_distributed``,
        ``/destroy_weights_update_group``): global rank 0 hosts the group at ``master_address:master_port``
        as its rank 0, engine ``i`` joins as rank ``1 + i``. ``backend`` defaults to ``nccl`` with CUDA and
        ``gloo`` otherwise. DP replica 0 gathers its TP shards, rank 0 pushes, other ranks return ``[]``; if
        any engine fails, every rank raises :class:`WeightPushError`. Keep the push (about ``timeout_s`` per
        bucket plus two) under ``collective_timeout_s``: the other ranks wait for rank 0 meanwhile.
        """
        with self._guard.running("push_weights_over_group"):
            chosen = backend or ("nccl" if self._layout.device.type == "cuda" else "gloo")

            def send(pairs: list[tuple[str, Tensor]]) -> list[dict[str, object]]:
                try:
                    return push_over_group(
                        urls, pairs, weight_version=weight_version, master_address=master_address,
                        master_port=master_port, backend=chosen, bucket_bytes=bucket_bytes, timeout_s=timeout_s,
                        flush_cache=flush_cache,
                    )  # fmt: skip
                except WeightPushError:
                    raise
                except Exception as exc:  # anything else from the group: report it as a push failure
                    raise WeightPushError(
                        f"weight push over {chosen} group failed: {type(exc).__name__}: {exc}"
                    ) from exc

            return self._push_from_rank_zero(send)

    def _push_from_rank_zero(
        self, send: Callable[[list[tuple[str, Tensor]]], list[dict[str, object]]]
    ) -> list[dict[str, object]]:
        """DP replica 0 gathers its TP shards, global rank 0 sends them with ``send`` (other ranks return ``[]``);
        if that raised :class:`WeightPushError`, every rank raises it (collective)."""
        replies: list[dict[str, object]] = []
        error = ""
        pairs = self._export() if self._layout.dp_rank == 0 else []
        if self._layout.rank == 0:
            try:
                replies = send(pairs)
            except WeightPushError as exc:
                error = str(exc)
        if not all_ok(not error):
            raise WeightPushError(error or f"rank {self._layout.rank}: rank 0 failed to push the weights")
        return replies

    def health(self) -> dict[str, HealthValue]:
        """Cheap, thread-safe: step counter, what is running, whether the trainer is broken."""
        return {
            "rank": self._layout.rank,
            "step": self._step,
            "running": self._guard.current is not None,
            "current": self._guard.current,
            "failed": self._guard.failed,
            "last_step_s": self._last_step_s,
            "closed": self._guard.closed,
        }

    def close(self) -> None:
        """Leave the process groups (local; does not wait for peers). Idempotent."""
        if not self._guard.closed:
            self._guard.closed = True
            teardown_parallel()
            logger.info("trainer rank %d closed", self._layout.rank)

    def __enter__(self) -> Trainer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
