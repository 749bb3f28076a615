"""``ray.experimental``: only the state API (``ray.experimental.state.api``) that RL frameworks import."""
