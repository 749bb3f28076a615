"""An actor server's phase moves only along its table; a refused move changes nothing."""

from __future__ import annotations

import pytest

from runtime.actor.server_phase import LEAVING_PHASES, PhaseMachine, ServerPhase

P = ServerPhase


def _at(*path: ServerPhase) -> PhaseMachine:
    phase = PhaseMachine()
    for to in path:
        assert phase.move(to) is not None
    return phase


def test_an_actor_lives_created_listening_constructing_serving_leaving_stopping_stopped() -> None:
    phase = PhaseMachine()
    lived = [phase.now]
    for to in (P.LISTENING, P.CONSTRUCTING, P.SERVING, P.LEAVING, P.STOPPING, P.STOPPED):
        assert phase.move(to) is lived[-1]  # returns the phase it left
        lived.append(phase.now)
    assert lived[-1] is P.STOPPED


@pytest.mark.parametrize(
    ("path", "refused"),
    [
        ((), P.SERVING),  # not started
        ((P.LISTENING,), P.LISTENING),  # started twice
        ((P.LISTENING, P.CONSTRUCTING), P.CONSTRUCTING),  # a second construct
        ((P.LISTENING, P.SERVING), P.CONSTRUCTING),  # constructed already
        ((P.LISTENING, P.LEAVING), P.SERVING),  # a constructor returning after the process began to leave
        ((P.LISTENING, P.STOPPING), P.LEAVING),  # leave() while stopping
        ((P.LISTENING, P.STOPPING), P.STOPPING),  # stop() twice
        ((P.LISTENING, P.STOPPING, P.STOPPED), P.STOPPING),
    ],
)
def test_a_move_off_the_table_is_refused_and_changes_nothing(
    path: tuple[ServerPhase, ...], refused: ServerPhase
) -> None:
    phase = _at(*path)
    before = phase.now
    entered = []
    assert phase.move(refused, entering=entered.append) is None
    assert phase.now is before and entered == []


def test_entering_runs_with_the_phase_left_before_the_move_shows() -> None:
    phase = _at(P.LISTENING, P.CONSTRUCTING)
    seen = []
    assert phase.move(P.STOPPING, entering=lambda left: seen.append((left, phase.now))) is P.CONSTRUCTING
    assert seen == [(P.CONSTRUCTING, P.CONSTRUCTING)] and phase.now is P.STOPPING
    assert P.STOPPING in LEAVING_PHASES and P.SERVING not in LEAVING_PHASES
