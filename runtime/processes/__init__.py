"""Starting actor processes: spawn, the worker entry point, the fork server, supervision and restarts."""
