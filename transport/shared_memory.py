"""Same-host shared-memory path for large buffers: the sender copies once into memory it keeps mapped, the
receiver maps the same pages (no copy) and hands out read-only views on them.
A reference is bound to its buffer by the name's 128 random bits, in a directory no other user can list or write.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import mmap
import os
import stat
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import psutil

from transport import shm_names
from transport.shm_pool import SegmentPool, max_bytes_from_env

log = logging.getLogger(__name__)

SHM_ROOT = Path(os.environ.get("MILES_SHM_DIR", "/dev/shm"))  # MILES_SHM_DIR moves the base directory
#: This user's private directory of buffers (created on first use; used only as this user's own, mode 0700).
SHM_DIR = SHM_ROOT / f"miles-u{os.geteuid()}"
#: Set to ``0`` to keep every buffer on the socket, even between processes of one machine (useful to measure TCP,
#: or where /dev/shm is small).
SHM_ENV = "MILES_SHM"
#: Buffers at least this large use shared memory when both ends are on one machine.
SHM_THRESHOLD = 4 * 1024 * 1024  # below this, one zero-copy TCP frame is as fast as a copy through /dev/shm
_MAX_BYTES = 1 << 48
_OPEN_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_BUFFER = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a planted FIFO
_WARN_EVERY_S = 60.0


def machine_id() -> str:
    """Identifies this machine, boot and user: equal on both ends means they can share buffers (processes of
    different users never do)."""
    try:
        boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""
    return f"{boot_id}/u{os.geteuid()}" if boot_id else ""


def available() -> bool:
    """Whether this process may pass buffers through shared memory (read when a connection opens)."""
    if os.environ.get(SHM_ENV, "1") == "0":
        return False
    try:
        with _directory(create=True):
            return True
    except OSError as exc:
        log.warning("shared memory is off for this process: %s", exc)
        return False


def shared_with(peer_machine: str) -> bool:
    """Whether a process whose :func:`machine_id` is ``peer_machine`` can read our /dev/shm (and we its)."""
    return bool(peer_machine) and peer_machine == machine_id() and available()


@contextlib.contextmanager
def _directory(*, create: bool = False, path: Path | None = None) -> Iterator[int]:
    """A descriptor of ``path`` (default SHM_DIR), checked to be this user's own directory with mode 0700;
    raises OSError."""
    path = path or SHM_DIR
    created = False
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
            created = True
    fd = os.open(path, _OPEN_DIRECTORY)  # a symbolic link fails here (O_NOFOLLOW)
    try:
        if created:
            os.fchmod(fd, 0o700)  # whatever the umask
        info = os.fstat(fd)
        if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) != 0o700:
            raise PermissionError(
                f"{path} belongs to uid {info.st_uid} with mode {stat.S_IMODE(info.st_mode):o}; it must be this "
                f"user's (uid {os.geteuid()}) with mode 700: remove it"
            )
        yield fd
    finally:
        os.close(fd)


_pool: SegmentPool | None = None
_pool_lock = threading.Lock()
_warned_at = -_WARN_EVERY_S


def pool() -> SegmentPool:
    """This process's pool of segments (made on first use; ``MILES_SHM_POOL_BYTES`` caps it)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = SegmentPool(lambda: _directory(create=True), max_bytes_from_env(SHM_ROOT))
        return _pool


def _forget_pool_in_child() -> None:
    """A forked child starts with no segments: its parent's stay the parent's (unmapped here, not removed)."""
    global _pool, _pool_lock
    old, _pool, _pool_lock = _pool, None, threading.Lock()  # the parent's lock may have been held at the fork
    if old is not None:
        old.abandon()


os.register_at_fork(after_in_child=_forget_pool_in_child)


def write(data: memoryview) -> str | None:
    """Copy ``data`` into a segment and publish it; returns its name, or None when shared memory cannot take it
    now (e.g. /dev/shm is full: the caller then sends the bytes on the socket).

    The segment is a file of this process's pool (transport.shm_pool) in ``SHM_DIR``; only its public name
    (transport.shm_names: 128 random bits, fresh for every message) is sent, to the one peer that reads it."""
    global _warned_at
    try:
        return pool().write(data)
    except OSError as exc:
        if time.monotonic() - _warned_at >= _WARN_EVERY_S:
            _warned_at = time.monotonic()
            log.warning("a %d-byte buffer goes over the socket: shared memory cannot take it (%s)", data.nbytes, exc)
        return None


def read(name: str, nbytes: int) -> memoryview:
    """Take buffer ``name`` and map its first ``nbytes`` bytes: a read-only view, released to its sender when
    the last view of it goes. Raises ValueError, and leaves the file in place, if it is not a buffer this user
    wrote.

    The take is an atomic rename to ``<name>.r<pid>`` (one reader at most gets it); the file is opened without
    following links and mapped copy-on-write only if it is a regular file of this user, linked once, holding at
    least ``nbytes``. A torch tensor written in place gets private pages, never the sender's. When the last view
    goes, the file is renamed ``<name>.f`` and the sender reuses the segment."""
    if type(name) is not str or not shm_names.PUBLIC.fullmatch(name) or type(nbytes) is not int:
        shown = name[:80] if isinstance(name, str) else type(name).__name__
        raise ValueError(f"invalid shared-memory reference {shown!r}")
    if not 0 < nbytes <= _MAX_BYTES:
        raise ValueError(f"invalid shared-memory reference {name}: {nbytes} bytes")
    taken, directory_path = shm_names.taken_name(name, os.getpid()), SHM_DIR
    try:
        with _directory() as directory:
            try:
                os.rename(name, taken, src_dir_fd=directory, dst_dir_fd=directory)
            except FileNotFoundError:
                raise ValueError(
                    f"shared-memory buffer {name} is gone: already read, or taken back by its sender (its call was "
                    "settled, or the sender exited, before this process read it)"
                ) from None
            try:
                mapping = _map(directory, taken, nbytes)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.rename(taken, name, src_dir_fd=directory, dst_dir_fd=directory)
                raise
    except OSError as exc:  # ELOOP: a symbolic link; EACCES; an unusable directory
        raise ValueError(f"shared-memory buffer {name} cannot be read: {exc}") from None
    weakref.finalize(mapping, _release, directory_path, taken, shm_names.freed_name(name), os.getpid())
    return memoryview(mapping).toreadonly()


def _map(directory: int, taken: str, nbytes: int) -> mmap.mmap:
    """Open and check a taken buffer, then map it copy-on-write: nothing done here can reach the file."""
    fd = os.open(taken, _OPEN_BUFFER, dir_fd=directory)
    try:
        problem = _problem(os.fstat(fd), nbytes)
        if problem:
            raise ValueError(f"shared-memory buffer {shm_names.public_of(taken)} {problem}; it was left in place")
        return mmap.mmap(fd, nbytes, access=mmap.ACCESS_COPY)
    finally:
        os.close(fd)


def _problem(info: os.stat_result, nbytes: int) -> str:
    """Why a file is not a buffer to map (an empty string if it is one)."""
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if info.st_uid != os.geteuid():
        return f"belongs to uid {info.st_uid}, not to this process's uid {os.geteuid()}"
    if info.st_nlink != 1:
        return f"has {info.st_nlink} links"
    if info.st_size < nbytes:
        return f"holds {info.st_size} bytes, fewer than the {nbytes} its reference states"
    return ""


def _release(directory_path: Path, taken: str, freed: str, reader: int) -> None:
    """The last view of a taken buffer is gone: hand it back to its sender (gone already: nothing to do)."""
    if os.getpid() != reader:  # a forked child's copy of the parent's view
        return
    with contextlib.suppress(OSError), _directory(path=directory_path) as directory:
        os.rename(taken, freed, src_dir_fd=directory, dst_dir_fd=directory)


def unlink(names: Iterable[str]) -> None:
    """The calls that carried these buffers (written by this process) are settled: the ones never taken go back
    to the pool now, under their private names, so the public names are gone; taken ones come back once their
    readers release them. Names this pool did not send are skipped."""
    names = [name for name in names if type(name) is str and shm_names.PUBLIC.fullmatch(name)]
    if names and _pool is not None:
        with contextlib.suppress(OSError):
            _pool.settle(names)


def remove_own_files() -> None:
    """Unmap this process's segments and remove its files now (at exit; a process that ends with ``os._exit``
    skips ``atexit``). Readers keep what they mapped."""
    if _pool is not None:
        _pool.close()
    remove_files_of(os.getpid())


atexit.register(remove_own_files)


def remove_files_of(pid: int) -> None:
    """Remove the files process ``pid`` wrote and release the buffers it had taken: it is gone (its parent calls
    this once it reaped it) or ending."""
    _clean(lambda sender, reader: sender == pid, lambda sender, reader: reader == pid)


def sweep_orphans() -> int:
    """Remove the files of senders that no longer exist and release the buffers of readers that no longer exist;
    returns how many files were handled."""
    return _clean(lambda sender, _: not psutil.pid_exists(sender), lambda _, reader: not psutil.pid_exists(reader))


def _clean(remove: Callable[[int, int], bool], release: Callable[[int, int], bool]) -> int:
    """Unlink the files in SHM_DIR for which ``remove(sender, reader)`` holds, rename to freed those taken by a
    reader for which ``release`` holds; returns how many. Names that are not ours are never touched."""
    handled = 0
    try:
        with _directory() as directory:
            for name in os.listdir(directory):
                parsed = shm_names.parse(name)
                with contextlib.suppress(FileNotFoundError):
                    if parsed is not None and remove(*parsed):
                        os.unlink(name, dir_fd=directory)
                        handled += 1
                    elif parsed is not None and parsed.reader and release(*parsed):
                        freed = shm_names.freed_name(shm_names.public_of(name))
                        os.rename(name, freed, src_dir_fd=directory, dst_dir_fd=directory)
                        handled += 1
    except OSError:  # no directory yet, or not one to touch
        return handled
    return handled
