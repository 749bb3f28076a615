"""The launcher's log file, ``[launcher] workdir/launcher.log``: what libraries log about a failure (paramiko's
tracebacks of an SSH handshake) goes there, so the console shows the one line that says what failed and the fix."""

from __future__ import annotations

import logging
from pathlib import Path

LOG_NAME = "launcher.log"
TO_FILE_ONLY = ("paramiko",)  # loggers whose records never reach the console (unless -v)


def library_logs_to_file(workdir: Path, *, verbose: bool) -> Path:
    """Send the records of ``TO_FILE_ONLY`` loggers to ``workdir/launcher.log`` (and, with ``verbose``, the console
    too); the file's path."""
    path = workdir / LOG_NAME
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler = logging.FileHandler(path)
    except OSError:  # no file: the records are dropped rather than shown
        handler = logging.NullHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in TO_FILE_ONLY:
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.propagate = verbose
    return path
