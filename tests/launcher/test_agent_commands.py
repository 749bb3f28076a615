"""The host agent's commands (launcher.agent.agent_commands): each one's JSON line parses back to it, and malformed ones
are refused with the field named. The shapes are those the launcher sends (launcher.launch.cell_starter, code_shipping,
agent_pool, provider_base, agent_link); the refusals what a broken launcher (or a test) could write to the agent."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.agent import agent_commands as commands
from launcher.agent import agent_protocol as proto
from launcher.agent.agent_commands import (
    CodeHave,
    CodePut,
    CodeUnpack,
    CurveKeys,
    Heartbeat,
    Kill,
    ListProcs,
    Ports,
    Shutdown,
    Spawn,
)

DIGEST = "ab" * 32
EXAMPLES = [
    Spawn("pool-0-0", ["/py", "-m", "runtime.worker"], {"RANK": "0"}, cwd="/w", python_path=["/w/code/x"], stdin="t"),
    Spawn("pool-0-1", ["sleep", "1"], {}, ready={"kind": "tcp", "port_number": 5, "deadline_s": 3.0}),
    Kill("pool-0-0", grace_s=2.5),
    ListProcs(),
    Ports(3),
    CurveKeys("curve-1-a", {"server.key": "text"}),
    CodeHave(DIGEST),
    CodePut(DIGEST, size=10, offset=0, data="QUJD"),
    CodeUnpack(DIGEST, max_bytes=1 << 20),
    Heartbeat(),
    Shutdown(1.0),
    Shutdown(),
]


def _line(command: Any, req: int | None = None) -> dict[str, Any]:
    return proto.decode(commands.encode(command, req))


def test_every_op_has_one_command_type() -> None:
    ops = {value for name, value in vars(proto).items() if name.startswith("OP_")}
    assert set(commands.COMMANDS) == ops
    assert {type(command) for command in EXAMPLES} == set(commands.COMMANDS.values())


@pytest.mark.parametrize("command", EXAMPLES, ids=[type(c).__name__ for c in EXAMPLES])
def test_a_command_parses_back_from_its_json_line(command: Any) -> None:
    message = _line(command, req=7)
    assert message["op"] == command.OP and commands.request_id(message) == 7
    assert commands.parse(message) == command
    assert "req" not in _line(command)


def test_parse_takes_what_older_senders_write() -> None:
    """Integer seconds and env values, a null ready check, and defaults for what is left out (tests/launcher
    test_host_agent writes its commands by hand like this)."""
    spawn = commands.parse({"op": "spawn", "id": "w-0-0", "argv": ["x"], "env": {"N": 3}, "ready": None})
    assert spawn == Spawn("w-0-0", ["x"], {"N": "3"}, ready={"kind": "none"})
    assert commands.parse({"op": "kill", "id": "w-0-0", "grace_s": 1}) == Kill("w-0-0", 1.0)
    assert commands.parse({"op": "ports"}) == Ports(1)
    assert commands.parse({"op": "shutdown", "grace_s": None}) == Shutdown(None)
    assert commands.request_id({"op": "list", "req": "7"}) is None  # a req that is no int is not echoed


@pytest.mark.parametrize(
    ("message", "match"),
    [
        ({"op": "frobnicate"}, "unknown op 'frobnicate'"),
        ({"op": 5}, "unknown op 5"),
        ({}, "unknown op None"),
        ({"op": "spawn"}, "'argv' is missing"),
        ({"op": "spawn", "id": "w", "argv": []}, "'argv' must not be empty"),
        ({"op": "spawn", "id": "w", "argv": "ls -l"}, "'argv' must be a list"),
        ({"op": "spawn", "id": "w", "argv": ["ls", 1]}, "'argv' must be a list of strings"),
        ({"op": "spawn", "id": "w", "argv": ["ls"], "env": {"A": ["b"]}}, "env must map names to strings"),
        ({"op": "spawn", "id": "w", "argv": ["ls"], "ready": {"kind": "ping"}}, "ready.kind must be one of"),
        ({"op": "spawn", "id": "w", "argv": ["ls"], "stdin": 5}, "'stdin' must be a str"),
        ({"op": "spawn", "id": "../../etc/x", "argv": ["ls"]}, "'id' must be a worker id"),
        ({"op": "spawn", "id": "", "argv": ["ls"]}, "'id' must be a worker id"),
        ({"op": "kill", "id": 5}, "'id' must be a str"),
        ({"op": "kill", "id": "w", "grace_s": -1}, "'grace_s' must be seconds"),
        ({"op": "kill", "id": "w", "grace_s": "10"}, "'grace_s' must be seconds"),
        ({"op": "ports", "n": 0}, "n must be 1 to"),
        ({"op": "ports", "n": 10**6}, "n must be 1 to"),
        ({"op": "ports", "n": True}, "'n' must be an int"),
        ({"op": "curve_keys", "dir": "curve-1"}, "'files' is missing"),
        ({"op": "curve_keys", "dir": "curve-1", "files": [["a", "b"]]}, "'files' must be a dict"),
        ({"op": "code_put", "digest": DIGEST, "size": "10", "offset": 0, "data": ""}, "'size' must be an int"),
        ({"op": "code_unpack", "digest": DIGEST}, "'max_bytes' is missing"),
        ({"op": "code_have", "digest": None}, "'digest' must be a str, got NoneType"),
        ({"op": "shutdown", "grace_s": 1e9}, "'grace_s' must be seconds"),
    ],
)
def test_a_malformed_command_is_refused_with_the_field_named(message: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        commands.parse(message)


def test_an_unknown_op_is_told_apart_from_a_bad_field() -> None:
    """The agent answers the first ``unknown op`` and the second ``bad <op> command`` (launcher.agent.host_agent)."""
    with pytest.raises(commands.UnknownOp):
        commands.parse({"op": "frobnicate"})
    with pytest.raises(ValueError) as refused:
        commands.parse({"op": "kill"})
    assert not isinstance(refused.value, commands.UnknownOp)
