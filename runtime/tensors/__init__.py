"""Collective groups (gloo, NCCL) and the device-resident tensor refs sent over them (API: runtime.collective)."""
