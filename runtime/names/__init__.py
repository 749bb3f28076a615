"""Named actors and the services a launch's processes share (the name service)."""
