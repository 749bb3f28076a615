"""The host agent (``python -m launcher.agent.host_agent``, one per host) and its protocol: it starts, logs, probes and
kills that host's processes."""
