"""``ray.experimental.state``: :mod:`.api`."""
