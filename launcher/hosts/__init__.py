"""Reaching the hosts: the launcher's side of each host agent, opened locally, over SSH or as an srun step."""
