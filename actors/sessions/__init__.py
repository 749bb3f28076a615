"""Multi-turn agent sessions (miles' session server): exact per-session token state in front of the router.

The server (``python -m actors.sessions``), its launcher pool, a calculator agent and the rollout that runs it.
Importing this package imports none of them (the launcher reads :mod:`actors.sessions.pool` at plan time).
"""
