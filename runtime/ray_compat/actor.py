"""``ray.actor``: ``exit_actor`` and the handle classes."""

from runtime.actor.actor_exit import exit_actor
from runtime.ray_compat.actors import ActorClass
from runtime.ray_compat.handles import ActorHandle, ActorMethod

__all__ = ["ActorClass", "ActorHandle", "ActorMethod", "exit_actor"]
