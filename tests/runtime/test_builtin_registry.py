"""The built-in methods registry (runtime/actor/builtin_methods.py): features above the actor's side add theirs here,
and a
name that could shadow a user's method or one registered twice is refused."""

from __future__ import annotations

import pytest

import runtime  # noqa: F401  (importing the runtime registers every feature's built-ins)
from runtime.actor import builtin_methods
from runtime.actor.builtin_methods import BUILTINS, Builtin, register, without_server
from runtime.actor.server_lanes import COLLECTIVE_LANE


def test_the_features_built_ins_are_registered_with_their_lanes() -> None:
    assert {"__object_get__", "__object_free__", "__tensor_send__", "__tensor_free__"} <= set(BUILTINS)
    assert BUILTINS["__collective_join__"].lane == COLLECTIVE_LANE  # joins block: never on the loop
    assert BUILTINS["__collective_store__"].lane is None and BUILTINS["__object_get__"].is_async


def test_a_name_a_user_could_define_or_one_taken_is_refused() -> None:
    with pytest.raises(ValueError, match="must be named __like_this__"):
        register("object_get", Builtin(lambda server: None))
    with pytest.raises(ValueError, match="registered twice"):
        register("__health__", Builtin(lambda server: None))
    assert "object_get" not in BUILTINS


def test_a_features_function_is_called_without_the_server() -> None:
    builtin = Builtin(without_server(lambda a, b=0: a + b))
    assert builtin.function(object(), 2, b=3) == 5


def test_an_actor_process_checks_classes_with_the_callers_rules() -> None:
    import runtime.worker  # noqa: F401  (an actor process's entry point sets the check)
    from runtime.caller.handle_names import checked_class_info

    assert builtin_methods._class_check is checked_class_info  # a method named like handle.pid is refused on its host
