"""A caller on another "host" (run inside another network namespace): ``python death_caller.py ENDPOINT``.

Reads a spawn ticket on stdin, attaches ``death_actors:Sleeper`` in the worker at ENDPOINT (so it is not that
worker's process watcher: only the link watch can tell it of a death), starts ``sleep(60)``, prints
``DEATH_CALLER_CALLING``, then ``DEATH_CALLER_DONE {"at": unix time, "error": ...}`` once the call ended.
"""

from __future__ import annotations

import json
import sys
import time

from runtime import ActorDied
from runtime.core.control_auth import read_ticket
from runtime.internals import attach


def main() -> None:
    endpoint = sys.argv[1]
    actor = attach(endpoint, "death_actors:Sleeper", ticket=read_ticket(), host="h1", curve_dir=None)
    assert actor.sleep(0.0).result(timeout=10) == 0.0
    call = actor.sleep(60.0)
    print("DEATH_CALLER_CALLING {}", flush=True)
    try:
        call.result(timeout=30)
        outcome: dict[str, object] = {"error": None}
    except ActorDied as exc:
        outcome = {"error": str(exc)}
    outcome["at"] = time.time()
    outcome["route"] = actor.connection.transport_address
    print("DEATH_CALLER_DONE " + json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main()
