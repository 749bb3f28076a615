"""The session secret: what every process of one launch (or of one driver's tree) holds, and no peer outside it.

It authenticates values that travel pickled (:mod:`transport.sealed_pickle`).
"""

from __future__ import annotations

import os
import secrets

#: The environment variable holding the secret: 64 hex digits (32 bytes). ``miles-launch`` draws one per launch and
#: hands it to every worker in the spawn command its host agents get (over the same SSH or pipe channel as the CURVE
#: keys); a driver run without the launcher draws one the first time it spawns a child
#: (``runtime.processes.driver_fork.child_environment``). Either way it reaches children in their environment,
#: never on a command line and never over the network in clear.
SECRET_ENV = "MILES_SESSION_SECRET"
#: ``0`` turns pickled values off in this process; anything else (or unset) leaves them on.
PICKLE_ENV = "MILES_PICKLE"
SECRET_BYTES = 32

_cache: tuple[str, bytes] = ("", b"")  # (the env text last parsed, its bytes)


class SessionSecretError(ValueError):
    """``MILES_SESSION_SECRET`` is set but is not a secret."""


def enabled() -> bool:
    """Whether this process sends and accepts pickled values at all (``MILES_PICKLE`` is not ``0``)."""
    return os.environ.get(PICKLE_ENV, "1").strip() != "0"


def current() -> bytes | None:
    """This process's session secret, or None when it holds none."""
    global _cache
    text = os.environ.get(SECRET_ENV, "")
    if not text:
        return None
    if text == _cache[0]:
        return _cache[1]
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        secret = b""
    if len(secret) != SECRET_BYTES:
        raise SessionSecretError(
            f"{SECRET_ENV} must be {2 * SECRET_BYTES} hex digits ({SECRET_BYTES} random bytes), got {len(text)} "
            "characters; unset it (the launcher or the first driver draws one) or set it from "
            "`python -c 'import secrets; print(secrets.token_hex(32))'` for every process of the job"
        )
    _cache = (text, secret)
    return secret


def ensure() -> str:
    """This process's secret as hex, drawn now (and put in our environment, so children inherit it) if it had none."""
    if current() is None:
        os.environ[SECRET_ENV] = secrets.token_hex(SECRET_BYTES)
    return os.environ[SECRET_ENV]


def missing_hint() -> str:
    """What to do when a process holds no secret (for error messages)."""
    return (
        f"this process holds no session secret ({SECRET_ENV}): processes started by miles-launch or spawned by "
        "runtime.spawn inherit their launch's or driver's; a process started some other way must be given the "
        f"same {SECRET_ENV} as the processes it talks to"
    )
