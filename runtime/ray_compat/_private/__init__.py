"""``ray._private``: the few internal names RL frameworks call (:mod:`.services`, :mod:`.state`)."""
