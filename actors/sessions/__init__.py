"""Multi-turn agent sessions (miles' session server): exact per-session token state in front of the router.

- :mod:`actors.sessions.server` (``python -m actors.sessions``): the aiohttp session server.
- :mod:`actors.sessions.trajectory`: token in, token out; leaves keyed ``(sample_index, occurrence)``.
- :mod:`actors.sessions.pool`: its launcher pool (a command pool, like the router's).
- :mod:`actors.sessions.agent`, :mod:`actors.sessions.calculator`: a calculator tool-calling agent on a toy task.
- :mod:`actors.sessions.rollout`: :class:`AgentRollout`, episodes as trainer shards.

Importing this package imports none of them (the launcher reads :mod:`actors.sessions.pool` at plan time).
"""
