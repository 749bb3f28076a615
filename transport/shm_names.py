"""Names of shared-memory files: who holds a segment is said by its file's name alone.

Each change of holder is an atomic rename in the private directory; nothing that does not match exactly is touched.
"""

from __future__ import annotations

import os
import re
import secrets
from typing import NamedTuple

# A sender's segment is named, in turn:
# - ``miles-seg-<pid>-<32 hex>``: free, its sender's (the *private* name);
# - ``miles-<pid>-<32 hex>``: sent, not yet taken (the *public* name, with 128 fresh random bits per message, so a
#   public name is valid once);
# - ``<public>.r<reader pid>``: taken by that reader, which maps it;
# - ``<public>.f``: released by its reader (its last view is gone); its sender takes it back.
# ``<pid>`` is always the sender's: it says whose a file is, for cleaning up, and proves nothing. Pids have at most
# 7 digits (Linux's limit), hex digits are lower case.
SEGMENT_PREFIX = "miles-seg-"
TAKEN = ".r"
FREED = ".f"
_PID = "[1-9][0-9]{0,6}"
_TOKEN = "[0-9a-f]{32}"
PUBLIC = re.compile(rf"miles-({_PID})-{_TOKEN}")
_ANY = re.compile(rf"{re.escape(SEGMENT_PREFIX)}({_PID})-{_TOKEN}|miles-({_PID})-{_TOKEN}(?:\.r({_PID})|\.f)?")


class FileName(NamedTuple):
    """A parsed file name: its sender, and its reader while taken (0 otherwise)."""

    sender: int
    reader: int


def private_name() -> str:
    return f"{SEGMENT_PREFIX}{os.getpid()}-{secrets.token_hex(16)}"


def public_name() -> str:
    return f"miles-{os.getpid()}-{secrets.token_hex(16)}"


def taken_name(public: str, reader: int) -> str:
    return f"{public}{TAKEN}{reader}"


def freed_name(public: str) -> str:
    return f"{public}{FREED}"


def parse(name: str) -> FileName | None:
    """Who a file of the private directory belongs to, or None if it is not one of ours."""
    match = _ANY.fullmatch(name)
    if match is None:
        return None
    segment_pid, sender, reader = match.groups()
    return FileName(int(segment_pid or sender), int(reader or 0))


def public_of(name: str) -> str:
    """The public name a taken or freed name derives from."""
    return name.rsplit(".", 1)[0]
