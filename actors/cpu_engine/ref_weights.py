"""Weights pulled from device-resident refs straight into the CPU engine's live parameters: the trainer puts each
bucket of HF-named tensors as a collective ref (``runtime.put(..., transport="collective")``,
:mod:`actors.trainer.weights_collective`), and the engine receives it without a copy where it can.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

from actors.cpu_engine.model import LlamaForCausalLM
from actors.cpu_engine.weights import check_named_tensors, load_named_tensors
from runtime import TensorRef
from runtime.collective import torch_dtype


def ref_loader(
    model: LlamaForCausalLM, lock: threading.Lock, refs: list[TensorRef], timeout_s: float
) -> Callable[[], int]:
    """The load step for ``refs``: checks every ref first, then receives them one by one; returns tensors loaded.

    ``WeightSync.update_weights_from_refs`` runs it under SGLang's model-update lock, as the other update paths.
    Nothing is received for a bucket whose names or shapes are refused.
    """
    metas = [
        [(spec.name, torch.empty(spec.shape, dtype=torch_dtype(spec.dtype), device="meta")) for spec in ref.specs]
        for ref in refs
    ]
    kept = [{name for name, _ in check_named_tensors(model.config, pairs, require_all=False)} for pairs in metas]

    def load() -> int:
        params = dict(model.named_parameters())
        count = 0
        for ref, names in zip(refs, kept, strict=True):
            into: dict[str, torch.Tensor] = {}
            cast: list[tuple[str, torch.Tensor]] = []
            for spec in ref.specs:
                param = params.get(spec.name) if spec.name in names else None
                if param is not None and param.dtype == torch_dtype(spec.dtype) and param.is_contiguous():
                    into[spec.name] = param.data  # the live weight itself
                else:
                    # a buffer, then copied into the parameter with a cast; for names the engine ignores
                    # (rotary_emb.inv_freq, a tied lm_head.weight) it is scratch
                    into[spec.name] = torch.empty(spec.shape, dtype=torch_dtype(spec.dtype))
                    if param is not None:
                        cast.append((spec.name, into[spec.name]))
            with lock, torch.no_grad():
                ref.get(into=into, timeout=timeout_s)
                load_named_tensors(model, cast)
            ref.free()  # the trainer's wait_freed returns, and it may reuse the bucket
            count += len(names)
        return count

    return load
