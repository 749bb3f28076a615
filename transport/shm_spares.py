"""Shared-memory files allocated ahead of need, so that a large same-host transfer only copies its bytes.

Most of the cost of writing a large buffer into ``/dev/shm`` is the kernel allocating the file's pages (on a
small VM 33 of the 42 ms a 64 MiB write takes; the copy itself is the rest). Once two large writes in a row had
the same size (a training loop sends the same shapes again and again), a background thread allocates one spare
file of that size (``posix_fallocate``), named ``miles-spare-<pid>-<random>`` once allocated; the next write of
that size renames it and copies into it. One spare at most, of at most ``MAX_SPARE_BYTES``, removed when unused
for ``IDLE_S`` seconds and when the process exits (and by ``shared_memory.sweep_orphans`` if the process died).
A forked child starts with none of its parent's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

PREFIX = "miles-spare-"
PARTIAL = ".partial"  # suffix of a spare still being allocated
MAX_SPARE_BYTES = 512 * 1024 * 1024
IDLE_S = 10.0


class SpareFiles:
    """At most one pre-allocated file in ``directory``, of the size last asked for."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._cond = threading.Condition()
        self._wanted = 0  # bytes of the spare to have ready (0: none)
        self._last_written = 0
        self._spare: tuple[int, str] | None = None  # (bytes, file name)
        self._used_at = time.monotonic()
        self._thread: threading.Thread | None = None

    def take(self, nbytes: int) -> Path | None:
        """The path of a ready file of exactly ``nbytes`` (now the caller's to rename and fill), or None."""
        with self._cond:
            spare = self._spare
            if spare is None or spare[0] != nbytes:
                return None  # writes of other sizes do not count as use: an unused spare still goes when idle
            self._spare, self._used_at = None, time.monotonic()
            self._cond.notify()  # the next one can be allocated now
        return self.directory / spare[1]

    def wrote(self, nbytes: int) -> None:
        """A buffer of ``nbytes`` was just written. Once two writes in a row had that size, keep a spare of it
        ready: a size seen once may never come again, and allocating for it would double the work."""
        with self._cond:
            repeated, self._last_written = nbytes == self._last_written, nbytes
        if repeated:
            self.want(nbytes)

    def want(self, nbytes: int) -> None:
        """Have a file of ``nbytes`` ready for the next write (allocated in the background)."""
        if nbytes > MAX_SPARE_BYTES:
            return
        with self._cond:
            self._wanted, self._used_at = nbytes, time.monotonic()
            if self._thread is None:
                self._thread = threading.Thread(target=self._allocate_forever, name="shm-spares", daemon=True)
                self._thread.start()
            self._cond.notify()

    def drop(self) -> None:
        """Remove the spare and want none (at exit, or when idle)."""
        with self._cond:
            spare, self._spare, self._wanted = self._spare, None, 0
        if spare is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.directory / spare[1])

    def _allocate_forever(self) -> None:
        while True:
            nbytes = self._next_size()
            if nbytes:
                self._replace(nbytes)
            else:
                self.drop()

    def _next_size(self) -> int:
        """Wait until a spare of another size is wanted (returns its size) or the spare went idle (returns 0)."""
        with self._cond:
            while True:
                ready = self._spare is not None and self._spare[0] == self._wanted
                if self._wanted and not ready:
                    return self._wanted
                if self._spare is None:
                    self._cond.wait()
                    continue
                idle_for = time.monotonic() - self._used_at
                if idle_for >= IDLE_S:
                    return 0
                self._cond.wait(IDLE_S - idle_for)

    def _replace(self, nbytes: int) -> None:
        name = f"{PREFIX}{os.getpid()}-{os.urandom(8).hex()}"
        partial = self.directory / f"{name}{PARTIAL}"  # renamed once allocated: a visible spare is a ready one
        try:
            fd = os.open(partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            try:
                os.posix_fallocate(fd, 0, nbytes)
            finally:
                os.close(fd)
        except OSError as exc:  # e.g. /dev/shm is full: writes then allocate as they go
            log.debug("no spare shared-memory file of %d bytes: %s", nbytes, exc)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial)
            with self._cond:
                if self._wanted == nbytes:
                    self._wanted = 0
            return
        with self._cond:
            if self._wanted != nbytes:  # dropped, or another size asked for, meanwhile
                old: Path | None = partial
            else:
                os.rename(partial, self.directory / name)
                old = self.directory / self._spare[1] if self._spare is not None else None
                self._spare = (nbytes, name)
        if old is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(old)
