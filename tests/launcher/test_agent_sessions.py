"""examples/agent-sessions-cpu.toml: multi-turn agent RL with miles-launch, the session servers a command pool.

The pool table is what actors/sessions/pool.py renders; each session server finds its router by asking the
controller through the launch's name service (``--controller``), the rollout finds the servers through the provider
API (as miles' ``placement_group.py`` waits for the session server pool ``SESSION_SERVER_POOL_ID`` through its
worker provider and ``agentic_tool_call.py`` reaches a session's server by ip and port), and the trainer trains on the
sessions' records (tests/actors/test_sessions.py checks those records token by token).
"""

from __future__ import annotations

from pathlib import Path

import tomllib
from launch_helpers import result_line, run_local_example

from actors.sessions.pool import session_server_pool

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "agent-sessions-cpu.toml"


def test_agent_sessions_example_trains_on_session_records_through_a_session_server_pool(tmp_path: Path) -> None:
    data = tomllib.loads(EXAMPLE.read_text())
    pools = {pool["id"]: pool for pool in data["pools"]}
    rendered = session_server_pool("sessions", cells=2, controller="inference-0-0", bind="127.0.0.1",
                                   extra_args=["--max-context-tokens", "512"])  # fmt: skip
    assert pools["sessions"] == rendered
    result, output = run_local_example(data, tmp_path, ROOT)
    assert result.returncode == 0 and "RESULT " in result.stdout, output[-5000:]
    report = result_line(result.stdout)
    samples = data["job"]["args"]["prompts_per_iteration"] * data["job"]["args"]["samples_per_prompt"]
    assert report["iterations"] == 2 and report["weight_version"] == "v2"
    assert report["samples_lost"] == 0 and report["leaves"] >= 2 * samples
    assert report["turns"] > report["leaves"] // 2 and report["tool_calls"] > 0  # multi-turn, tool output fed back
