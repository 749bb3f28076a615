"""Sealed pickles: values the codec has no wire type for, cloudpickled and authenticated by the session secret.

A pickle from a peer without the secret, from another launch or another call, truncated or grown, is refused and
never unpickled: its size and MAC are checked before a byte of the stream is read (:func:`open_sealed`).
"""

from __future__ import annotations

import hashlib
import hmac
import io
import logging
import os
import pickle
import socket
import sys
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import cloudpickle

from transport import session_secret
from transport.codec_types import Buffer, DecodeError, UnsupportedTypeError

log = logging.getLogger(__name__)

#: The environment variable bounding one pickled value (stream and buffers together), in bytes.
MAX_BYTES_ENV = "MILES_PICKLE_MAX_BYTES"
DEFAULT_MAX_BYTES = 1 << 30
_DOMAIN = b"miles-sealed-pickle/1\0"  # what the MAC is for: never valid as another MAC made with the secret
# One SHA-256 stream runs at about 1.3 GB/s, ~50 ms per 64 MiB at each end: buffers longer than this are digested
# in pieces on a few threads (hashlib releases the GIL) and the MAC covers the digests.
_CHUNK = 4 << 20
_MAX_OUT_OF_BAND = 256  # buffers beyond this many stay in the stream (the message's frame count is bounded)
_LOGGED_REFUSALS = 20

#: Refused pickles by reason: ``forged`` (wrong MAC), ``oversized``, ``no_secret``, ``disabled``, ``malformed``.
REFUSED: dict[str, int] = dict.fromkeys(("forged", "oversized", "no_secret", "disabled", "malformed"), 0)

_pool: tuple[int, ThreadPoolExecutor] | None = None  # (owner pid, pool): a forked child makes its own
_pool_lock = threading.Lock()


class PickleRefused(DecodeError):
    """A pickled value this process will not unpickle (see :data:`REFUSED` for the counts)."""


def max_bytes() -> int:
    """The size bound of one pickled value (``MILES_PICKLE_MAX_BYTES``, default 1 GiB)."""
    text = os.environ.get(MAX_BYTES_ENV, "")
    try:
        return int(text) if text else DEFAULT_MAX_BYTES
    except ValueError:
        raise ValueError(f"{MAX_BYTES_ENV} must be a number of bytes, got {text!r}") from None


def unavailable() -> str | None:
    """Why this process cannot send or accept pickled values now, or None when it can."""
    if not session_secret.enabled():
        return f"pickled values are turned off in this process ({session_secret.PICKLE_ENV}=0)"
    try:
        secret = session_secret.current()
    except session_secret.SessionSecretError as exc:
        return str(exc)
    return session_secret.missing_hint() if secret is None else None


class _Pickler(cloudpickle.Pickler):
    """cloudpickle, with dense CPU tensors as out-of-band buffers (torch's own reduction copies them in-band)."""

    def reducer_override(self, obj: Any) -> Any:
        torch = sys.modules.get("torch")
        if torch is not None and type(obj) is torch.Tensor and _dense(obj):
            raw = obj.detach().reshape(-1).view(torch.uint8).numpy()
            name = str(obj.dtype).removeprefix("torch.")
            return _tensor_from_buffer, (pickle.PickleBuffer(raw), name, tuple(obj.shape), obj.requires_grad)
        return super().reducer_override(obj)


def _dense(tensor: Any) -> bool:
    """Whether a tensor is exactly its own storage: CPU, strided, contiguous, unshared offset, no lazy bits."""
    return (
        tensor.device.type == "cpu"
        and tensor.layout is sys.modules["torch"].strided
        and tensor.numel() > 0
        and tensor.is_contiguous()
        and tensor.storage_offset() == 0
        and tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()
        and not (tensor.is_conj() or tensor.is_neg() or tensor.is_quantized)
        and (tensor.is_leaf or not tensor.requires_grad)  # a graph's tensors: torch's own reduction decides
    )


def _tensor_from_buffer(buffer: Buffer, dtype: str, shape: tuple[int, ...], requires_grad: bool) -> Any:
    """A tensor over a received buffer (shared, not copied; read-only frames stay private to the tensor's writes)."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # read-only buffers: see transport.decoder
        tensor = torch.frombuffer(buffer, dtype=torch.uint8).view(getattr(torch, dtype)).reshape(shape)
    return tensor.requires_grad_(requires_grad) if requires_grad else tensor


def dumps(obj: Any, threshold: int) -> tuple[memoryview, list[memoryview]]:
    """The pickle stream of ``obj`` and its out-of-band buffers (those at least ``threshold`` bytes long).

    For what the codec cannot carry as itself (an ``argparse.Namespace``, a function, a numpy object array, a
    ``TensorDict``...). Pickle protocol 5: numpy arrays and dense CPU tensors are not copied into the stream; the
    codec sends the buffers as frames or through shared memory like any array."""
    buffers: list[memoryview] = []

    def out_of_band(buffer: pickle.PickleBuffer) -> bool:  # False: out of band
        try:
            view = buffer.raw()
        except BufferError:  # not contiguous: pickle copies it into the stream
            return True
        if view.nbytes < threshold or len(buffers) >= _MAX_OUT_OF_BAND:
            return True
        buffers.append(view)
        return False

    file = io.BytesIO()
    _Pickler(file, protocol=5, buffer_callback=out_of_band).dump(obj)
    return file.getbuffer(), buffers


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(min(8, os.cpu_count() or 1), thread_name_prefix="pickle-mac"))
        return _pool[1]


def _digest(piece: memoryview) -> bytes:
    return hashlib.sha256(piece).digest()


def mac(secret: bytes, parts: list[Buffer], names: list[str | None], bind: bytes = b"") -> bytes:
    """The seal of a pickle stream and its buffers (``parts``: the stream first), bound to ``bind`` (the runtime
    binds a call's arguments and its result to the call's id and direction: runtime.core.outcome):
    ``HMAC-SHA256(session secret, domain | binding | lengths | stream | buffers)`` (transport.session_secret).

    A part that travels through shared memory (``names[i]``: its segment's name, else None) is bound by its name
    and length, not its bytes: a segment is only ever honoured in this user's private directory under a fresh
    128-bit name, valid once (transport.shared_memory), so only a process of this user on this host could have
    written it, and those are trusted alike (README: trust model). Hashing it would cost ~50 ms per 64 MiB at
    each end for no protection.
    """
    views = [memoryview(part).cast("B") for part in parts]
    seal = hmac.new(secret, _DOMAIN + len(bind).to_bytes(4, "little") + bind, hashlib.sha256)
    seal.update(len(views).to_bytes(4, "little"))
    for view, name in zip(views, names, strict=True):
        seal.update(view.nbytes.to_bytes(8, "little"))
        tag = name.encode() if name is not None else b""
        seal.update((b"S" if name is not None else b"B") + len(tag).to_bytes(2, "little") + tag)
    hashed = [view for view, name in zip(views, names, strict=True) if name is None]
    pieces = [view[at : at + _CHUNK] for view in hashed if view.nbytes > _CHUNK for at in range(0, view.nbytes, _CHUNK)]
    digests = iter(_executor().map(_digest, pieces) if len(pieces) > 1 else map(_digest, pieces))
    for view in hashed:
        if view.nbytes <= _CHUNK:
            seal.update(view)
        else:  # the lengths above fix how each part was cut
            seal.update(b"".join(next(digests) for _ in range(0, view.nbytes, _CHUNK)))
    return seal.digest()


def pickled(obj: Any, threshold: int) -> tuple[memoryview, list[memoryview]]:
    """The stream and out-of-band buffers of ``obj``, to be sealed by :func:`seal` once the codec has placed
    them; UnsupportedTypeError (saying why) when it cannot or must not travel pickled."""
    why = unavailable()
    if why is not None:
        raise UnsupportedTypeError(why)
    try:
        stream, buffers = dumps(obj, threshold)
    except Exception as exc:
        raise UnsupportedTypeError(f"it cannot be pickled ({type(exc).__name__}: {exc})") from exc
    size, limit = stream.nbytes + sum(buffer.nbytes for buffer in buffers), max_bytes()
    if size > limit:
        raise UnsupportedTypeError(
            f"pickled it takes {size} bytes, over the {limit} bytes "
            f"receivers accept ({MAX_BYTES_ENV}; raise it for every process of the job, or send the large parts "
            "as numpy arrays or tensors in dicts, which travel without pickling)"
        )
    return stream, buffers


def seal(parts: list[Buffer], names: list[str | None], bind: bytes = b"") -> bytes:
    """The MAC of a pickled value's parts (stream first) with this process's secret (see :func:`mac`)."""
    return mac(session_secret.current() or b"", parts, names, bind)


def _refuse(reason: str, message: str) -> PickleRefused:
    REFUSED[reason] += 1
    if sum(REFUSED.values()) <= _LOGGED_REFUSALS:
        log.warning("refused a pickled value: %s", message)
    return PickleRefused(f"a pickled value refused by process {os.getpid()} on {socket.gethostname()}: {message}")


def check_size(size: int) -> None:
    """Refuse a pickled value of ``size`` bytes (declared, before anything is read) over the bound."""
    limit = max_bytes()
    if size > limit:
        raise _refuse(
            "oversized",
            f"a pickled value of {size} bytes is over this process's bound of {limit} bytes ({MAX_BYTES_ENV}: "
            "set it higher for every process of the job if the value is expected)",
        )


def refuse_malformed(message: str) -> PickleRefused:
    return _refuse("malformed", f"a malformed pickled value: {message}")


def open_sealed(given: Any, parts: list[Buffer], names: list[str | None], bind: bytes = b"") -> Any:
    """The value of a sealed pickle (``parts``: its stream, then its buffers; ``names``: the shared-memory segment
    each came in, or None), unpickled only once its MAC is this process's secret's.

    Checked before a byte of the stream is read: that this process accepts pickles at all (``MILES_PICKLE`` is not
    ``0``) and holds a secret, that the declared sizes are within ``MILES_PICKLE_MAX_BYTES``, and that the MAC is
    the one its own secret gives for ``bind``. A refusal is counted in :data:`REFUSED` (reason -> count)."""
    why = unavailable()
    if why is not None:
        raise _refuse("disabled" if not session_secret.enabled() else "no_secret", f"not unpickled: {why}")
    check_size(sum(memoryview(part).nbytes for part in parts))
    expected = mac(session_secret.current() or b"", parts, names, bind)
    if type(given) is not bytes or not hmac.compare_digest(given, expected):
        raise _refuse(
            "forged",
            "its MAC is not this session's for this call (it comes from a process of another launch or driver "
            "tree, was replayed from another call, or was forged or altered on the way): never unpickled",
        )
    try:
        return pickle.loads(parts[0], buffers=parts[1:])
    except Exception as exc:  # an authentic pickle that does not load here (a module missing on this host...)
        problem = f"{type(exc).__name__}: {exc}"
        raise DecodeError(f"an authenticated pickled value does not load in this process: {problem}") from exc
