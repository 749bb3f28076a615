"""The sender's pool of shared-memory segments: a large buffer costs one memcpy into memory mapped once.

Who holds a segment is said only by its name (:mod:`transport.shm_names`), changed by atomic renames: no flag lives
in shared memory, so there is no memory-ordering race (of two renames of one name, exactly one succeeds).
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil

from transport import shm_names

log = logging.getLogger(__name__)

POOL_BYTES_ENV = "MILES_SHM_POOL_BYTES"
GRAIN = 1 << 20  # new segments are a whole number of MiB, so that nearby sizes share them
IDLE_S = 30.0  # a free segment unused this long is removed
JANITOR_S = 1.0  # how often released segments, dead readers and idle segments are looked for
_DEFAULT_MAX_BYTES = 2 << 30
_PID_REUSE_SLACK_S = 1.0  # a process started this long after a send is not the reader of that send

OpenDirectory = Callable[[], AbstractContextManager[int]]


def max_bytes_from_env(root: Path) -> int:
    """The pool's cap: ``MILES_SHM_POOL_BYTES``, else the smaller of 2 GiB and a quarter of ``root``'s size."""
    value = os.environ.get(POOL_BYTES_ENV, "")
    if value:
        if value.isdigit():
            return int(value)
        log.warning("%s=%r is not a number of bytes; using the default", POOL_BYTES_ENV, value)
    try:
        info = os.statvfs(root)
    except OSError:
        return _DEFAULT_MAX_BYTES
    return min(_DEFAULT_MAX_BYTES, info.f_blocks * info.f_frsize // 4)


@dataclass(eq=False)
class _Segment:
    private: str
    fd: int  # kept open: fstat tells whether someone removed the file
    mapping: mmap.mmap  # read-write, the whole capacity
    capacity: int
    transient: bool
    public: str = ""  # while sent
    sent_at: float = 0.0  # time.time() of the send: a reader pid whose process started later is another process
    freed_at: float = 0.0  # time.monotonic() when it last became free

    def close(self) -> None:
        with contextlib.suppress(BufferError, OSError):
            self.mapping.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)


class SegmentPool:
    """One process's segments; thread-safe. ``open_directory`` yields a descriptor of the private directory.

    A segment comes back to the pool once its reader released it, once its reader died (the janitor looks every
    ``JANITOR_S``), or when the call that carried it is settled and its public name was never taken (:meth:`settle`).
    Bounds: at most ``max_bytes``; past it, free segments are removed (least recently used first), and when readers
    hold everything, a *transient* segment is made, removed instead of reused once released. A free segment unused
    for ``IDLE_S`` is removed. A reader's mapping stays valid when its file is removed.
    """

    def __init__(self, open_directory: OpenDirectory, max_bytes: int) -> None:
        self._open_directory = open_directory
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._free: list[_Segment] = []
        self._busy: dict[str, _Segment] = {}  # public name -> segment
        self._bytes = 0  # capacity of every segment, transient ones included
        self._janitor: threading.Thread | None = None
        self._closed = threading.Event()

    def write(self, data: memoryview) -> str:
        """Copy ``data`` (C-contiguous) into a segment and publish it; returns its public name. Raises OSError.

        Each message only copies its bytes (15-20 GB/s on a small VM, against under 2 GB/s writing a fresh tmpfs
        file), then renames the segment from its private name to a fresh public one."""
        nbytes = data.nbytes
        with self._open_directory() as directory:
            segment = self._segment_for(directory, nbytes)
            try:
                np.copyto(np.frombuffer(segment.mapping, np.uint8, nbytes), np.frombuffer(data, np.uint8))
                public = shm_names.public_name()
                os.rename(segment.private, public, src_dir_fd=directory, dst_dir_fd=directory)
            except BaseException:
                with self._lock:
                    self._drop(directory, segment)
                raise
        with self._lock:
            segment.public, segment.sent_at = public, time.time()
            self._busy[public] = segment
            if self._janitor is None and not self._closed.is_set():
                self._janitor = threading.Thread(target=self._tend_forever, name="shm-pool", daemon=True)
                self._janitor.start()
        return public

    def settle(self, names: list[str]) -> None:
        """The calls that carried these names are over: take back the segments not taken (or already released).
        The rename back means a reader that comes later finds the name gone."""
        with self._lock, self._open_directory() as directory:
            for public in names:
                segment = self._busy.get(public)
                if segment is not None:
                    for current in (public, shm_names.freed_name(public)):
                        if self._take_back(directory, segment, current):
                            break

    def stats(self) -> dict[str, int]:
        """Counts for tests and metrics: segments free and busy, bytes held."""
        with self._lock:
            return {"free": len(self._free), "busy": len(self._busy), "bytes": self._bytes}

    def close(self) -> None:
        """Unmap every segment and stop the janitor (the files are the caller's to remove)."""
        self._closed.set()
        with self._lock:
            segments = [*self._free, *self._busy.values()]
            self._free, self._busy, self._bytes = [], {}, 0
        for segment in segments:
            segment.close()

    def abandon(self) -> None:
        """In a forked child: unmap the parent's segments here, leaving its files alone. Takes no lock (a thread of
        the parent may have held it at the fork)."""
        for segment in [*self._free, *self._busy.values()]:
            segment.close()

    def _segment_for(self, directory: int, nbytes: int) -> _Segment:
        """A free segment for ``nbytes``, now the caller's to fill, or a new one."""
        with self._lock:
            self._take_back_released(directory)
            segment = self._pick(directory, nbytes)
            if segment is not None:
                return segment
            capacity = -(-nbytes // GRAIN) * GRAIN
            transient = not self._make_room(directory, capacity)
            self._bytes += capacity  # reserved while the file is made
        try:
            return self._create(directory, capacity, transient)
        except BaseException:
            with self._lock:
                self._bytes -= capacity
            raise

    def _pick(self, directory: int, nbytes: int) -> _Segment | None:
        """The smallest free segment that holds ``nbytes`` and wastes at most half of it or ``GRAIN``, whichever is
        more; None: a new one is made (``nbytes`` rounded up to ``GRAIN``)."""
        while True:
            fits = [s for s in self._free if nbytes <= s.capacity <= max(2 * nbytes, nbytes + GRAIN)]
            if not fits:
                return None
            segment = min(fits, key=lambda s: s.capacity)
            self._free.remove(segment)
            if os.fstat(segment.fd).st_nlink:
                return segment
            self._drop(directory, segment)  # someone removed its file

    def _make_room(self, directory: int, capacity: int) -> bool:
        """Remove free segments (least recently used first) until ``capacity`` more fits under the cap."""
        if self._bytes + capacity > self.max_bytes:
            self._reap_dead_readers(directory)
        for segment in sorted(self._free, key=lambda s: s.freed_at):
            if self._bytes + capacity <= self.max_bytes:
                break
            self._free.remove(segment)
            self._drop(directory, segment)
        return self._bytes + capacity <= self.max_bytes

    def _create(self, directory: int, capacity: int, transient: bool) -> _Segment:
        """A new segment, allocated once (``posix_fallocate``: a full /dev/shm fails here, cleanly, rather than with
        SIGBUS on a later write) and kept mapped read-write for its life, so its pages are faulted once."""
        private = shm_names.private_name()
        flags = os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(private, flags, 0o600, dir_fd=directory)
        try:
            os.posix_fallocate(fd, 0, capacity)
            mapping = mmap.mmap(fd, capacity)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(private, dir_fd=directory)
            raise
        return _Segment(private, fd, mapping, capacity, transient)

    def _take_back(self, directory: int, segment: _Segment, current: str) -> bool:
        """Rename a busy segment from ``current`` to its private name: it is free again (or removed if transient)."""
        try:
            os.rename(current, segment.private, src_dir_fd=directory, dst_dir_fd=directory)
        except FileNotFoundError:
            return False
        del self._busy[segment.public]
        segment.public = ""
        if segment.transient:
            self._drop(directory, segment)
        else:
            segment.freed_at = time.monotonic()
            self._free.append(segment)
        return True

    def _take_back_released(self, directory: int) -> None:
        for public, segment in list(self._busy.items()):
            self._take_back(directory, segment, shm_names.freed_name(public))

    def _reap_dead_readers(self, directory: int) -> None:
        """Take back segments whose reader died, and forget those whose file someone removed."""
        for name in os.listdir(directory):
            parsed = shm_names.parse(name)
            segment = self._busy.get(shm_names.public_of(name)) if parsed and parsed.reader else None
            if segment is not None and not _alive(parsed.reader, segment.sent_at):
                self._take_back(directory, segment, name)
        for public, segment in list(self._busy.items()):
            if not os.fstat(segment.fd).st_nlink:
                del self._busy[public]
                self._drop(directory, segment)

    def _drop(self, directory: int, segment: _Segment) -> None:
        """Unmap a segment that is in neither list and remove its file (under its private name, if it has it)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(segment.private, dir_fd=directory)
        segment.close()
        self._bytes -= segment.capacity

    def _tend_forever(self) -> None:
        """Take back released segments and those of dead readers, remove idle ones; end once the pool is empty."""
        while not self._closed.wait(JANITOR_S):
            with self._lock:
                try:
                    with self._open_directory() as directory:
                        self._tend(directory)
                except OSError as exc:
                    log.debug("shared-memory pool: %s", exc)
                if not self._free and not self._busy:
                    self._janitor = None
                    return

    def _tend(self, directory: int) -> None:
        self._take_back_released(directory)
        if self._busy:
            self._reap_dead_readers(directory)
        idle_since = time.monotonic() - IDLE_S
        for segment in [s for s in self._free if s.freed_at <= idle_since]:
            self._free.remove(segment)
            self._drop(directory, segment)


def _alive(pid: int, since: float) -> bool:
    """Whether process ``pid`` lives and is the one that existed at time ``since`` (pids are reused)."""
    try:
        process = psutil.Process(pid)
        return process.status() != psutil.STATUS_ZOMBIE and process.create_time() <= since + _PID_REUSE_SLACK_S
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:  # not ours to inspect: assume it lives
        return True
