"""The move table of a connection's state (runtime.caller.connection_state), and the connection holding to it."""

from __future__ import annotations

import pytest
import zmq

from runtime.caller.connection import Connection
from runtime.caller.connection_state import MOVES, ConnectionState

S = ConnectionState


def _reachable(start: ConnectionState) -> set[ConnectionState]:
    seen, todo = {start}, [start]
    while todo:
        for to in MOVES[todo.pop()]:
            if to not in seen:
                seen.add(to)
                todo.append(to)
    return seen


def test_the_table_covers_every_state_and_no_state_moves_to_itself() -> None:
    assert set(MOVES) == set(S)
    assert all(state not in moves for state, moves in MOVES.items())


def test_dead_is_final_and_every_state_can_die() -> None:
    assert MOVES[S.DEAD] == frozenset()
    assert all(S.DEAD in _reachable(state) for state in S)
    assert _reachable(S.IDLE) == set(S)


def test_an_open_socket_is_never_reopened_but_a_restart_released_before_any_call_goes_back_to_idle() -> None:
    assert S.IDLE not in MOVES[S.OPEN]
    assert S.IDLE in MOVES[S.RESTARTING] and S.OPEN in MOVES[S.RESTARTING]


class _NoLoop:
    """A connection's loop work for a test that sends nothing: nothing may be scheduled."""

    def run_soon(self, callback: object) -> None:
        raise AssertionError(f"nothing should be scheduled, got {callback}")

    def on_loop_thread(self) -> bool:
        return False


@pytest.mark.parametrize(
    ("path", "refused"),
    [((), S.IDLE), ((S.OPEN,), S.IDLE), ((S.DEAD,), S.OPEN), ((S.DEAD,), S.RESTARTING)],
)
def test_a_connection_refuses_a_move_off_the_table_and_names_the_actor(
    path: tuple[ConnectionState, ...], refused: ConnectionState
) -> None:
    context = zmq.Context()
    try:
        connection = Connection(context, _NoLoop(), "tcp://127.0.0.1:9", actor="trainer-0", host="n1", boot_id=None)
        for to in path:
            connection._move(to)
        expected = rf"connection to trainer-0 at tcp://127\.0\.0\.1:9: no move from \S+ to {refused}"
        with pytest.raises(RuntimeError, match=expected):
            connection._move(refused)
        assert connection._state is (path[-1] if path else S.IDLE)
    finally:
        context.term()
