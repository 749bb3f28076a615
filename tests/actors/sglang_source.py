"""SGLang 0.5.23's own source, read without installing SGLang (it needs a GPU), for the conformance tests.

Where: ``$SGLANG_SOURCE_DIR``, ``/work/peers/sglang-0.5.23/sglang``, or ``.venv/peers/sglang-0.5.23/sglang``
(scripts/setup.sh unpacks the wheel there: ``pip download --no-deps sglang==0.5.23``). Functions and classes
are taken from the files by ``ast`` and run as they are, so the tests use SGLang's code, not a copy of it.

Run as a script it is one rank of a weight-update group built with SGLang's ``init_custom_process_group``
(``srt/utils/common.py``), as an engine's TP worker (``weight_updater.py``) or a trainer (miles) does::

    python tests/actors/sglang_source.py {receive|send} HOST PORT RANK WORLD GROUP SPEC_JSON

``SPEC_JSON`` lists ``[name, dtype, shape, fill]``: ``send`` broadcasts ``full(shape, fill)`` tensors from rank 0,
``receive`` receives them and prints ``{name: sum}`` as JSON.
"""

from __future__ import annotations

import ast
import datetime
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
CANDIDATES = [
    os.environ.get("SGLANG_SOURCE_DIR", ""),
    "/work/peers/sglang-0.5.23/sglang",
    str(ROOT / ".venv" / "peers" / "sglang-0.5.23" / "sglang"),
]


def source_dir() -> Path:
    """SGLang's package directory; raises with how to get it (never skips)."""
    for candidate in CANDIDATES:
        if candidate and (Path(candidate) / "srt" / "utils" / "common.py").is_file():
            return Path(candidate)
    raise FileNotFoundError(
        f"SGLang 0.5.23's source is not in any of {[c for c in CANDIDATES if c]}: run scripts/setup.sh "
        "(it unpacks `pip download --no-deps sglang==0.5.23`) or set SGLANG_SOURCE_DIR"
    )


def read(relative: str) -> str:
    return (source_dir() / relative).read_text()


def class_fields(relative: str, class_name: str) -> set[str]:
    """Annotated field names declared in ``class_name`` and its bases defined in the same file."""
    tree = ast.parse(read(relative))
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    fields: set[str] = set()
    pending = [class_name]
    while pending:
        node = classes[pending.pop()]
        fields |= {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
        pending += [b.id for b in node.bases if isinstance(b, ast.Name) and b.id in classes]
    return fields


def load_function(relative: str, name: str, namespace: dict[str, Any]) -> Any:
    """SGLang's function ``name`` from ``relative``, compiled as written, with ``namespace`` as its globals."""
    tree = ast.parse(read(relative))
    [node] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    module = ast.Module(body=[node], type_ignores=[])
    scope = dict(namespace)
    exec(compile(module, str(source_dir() / relative), "exec"), scope)  # SGLang's code, run as written
    return scope[name]


def init_custom_process_group() -> Any:
    """``sglang.srt.utils.common.init_custom_process_group`` (its module needs only ``torch_release`` here)."""
    release = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    return load_function("srt/utils/common.py", "init_custom_process_group", {"torch_release": release})


def _main(argv: list[str]) -> None:
    role, host, port, rank, world, group_name, spec = argv
    group = init_custom_process_group()(
        backend="gloo",
        init_method=f"tcp://{host}:{port}",
        world_size=int(world),
        rank=int(rank),
        group_name=group_name,
        timeout=datetime.timedelta(seconds=60),
    )
    sums = {}
    for name, dtype, shape, fill in json.loads(spec):
        tensor = torch.full(shape, float(fill) if role == "send" else 0.0, dtype=getattr(torch, dtype))
        torch.distributed.broadcast(tensor, src=0, group=group)
        sums[name] = float(tensor.double().sum())
    torch.distributed.destroy_process_group(group)
    print(json.dumps(sums), flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
