"""Actor for the zygote tests (workers import it via PYTHONPATH=tests/launcher); ``python -m zygote_actors`` prints
the ``sys.path`` a real ``python -m`` gets, to hold a forked worker's against."""

from __future__ import annotations

import json
import os
import random
import sys

from runtime.core import call_ids


class Inspector:
    """Reports what its process sees: environment, cwd, sys.path, fresh random and call ids; exits on request."""

    def __init__(self) -> None:
        self.pid = os.getpid()

    def env(self, name: str) -> str | None:
        """One environment variable."""
        return os.environ.get(name)

    def cwd(self) -> str:
        """The working directory."""
        return os.getcwd()

    def sys_path(self) -> list[str]:
        """The import path."""
        return list(sys.path)

    def randomness(self, n: int) -> dict[str, list[str]]:
        """``n`` new call ids, random floats and urandom bytes (hex)."""
        return {
            "call_ids": [call_ids.new_call_id().hex() for _ in range(n)],
            "random": [repr(random.random()) for _ in range(n)],
            "urandom": [os.urandom(8).hex() for _ in range(n)],
        }

    def leave(self, code: int) -> None:
        """Exit the process with ``code``."""
        raise SystemExit(code)


if __name__ == "__main__":
    print(json.dumps(sys.path))
