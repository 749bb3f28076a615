"""hosts.toml into a plan: the config models and their errors, pools and expanders, worker specs, placement, and the
checks of the user's code before anything starts."""
