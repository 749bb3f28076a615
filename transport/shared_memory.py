"""Same-host shared-memory path for large buffers: one copy into /dev/shm instead of two through TCP.

The sender writes a buffer into a fresh file ``miles-<pid>-<32 hex digits>`` (mode 0600) in its user's private
directory ``SHM_DIR`` (``/dev/shm/miles-u<uid>``, mode 0700) and sends only the name; the receiver maps the file
and unlinks it at once, so the memory lives exactly as long as the arrays that use it. The sender also unlinks its
files once the call is settled (covering messages never decoded), and ``sweep_orphans`` removes files left by
processes that died. A write fills a file allocated ahead of need when one of its size is ready
(:mod:`transport.shm_spares`). ``MILES_SHM=0`` turns the path off (every byte then crosses the socket: useful to
measure TCP, or where /dev/shm is small); ``MILES_SHM_DIR`` moves the base directory.

What binds a reference to the buffer it names: the name's 128 random bits, known only to the writer and to the
peer it sent the name to, in a directory no other user can list or write. The pid in a name only says whose it
is for ``sweep_orphans``: it proves nothing. The directory is used only if it is a real directory (not a link) of
this user with mode 0700. A reader opens a file without following links and maps it only if it is a regular file
of this user, linked once, of exactly the size the reference states; otherwise it raises ValueError and leaves the
file alone. Processes of different users never share buffers: their ``machine_id`` differs.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import mmap
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import psutil

from transport import shm_spares

log = logging.getLogger(__name__)

SHM_ROOT = Path(os.environ.get("MILES_SHM_DIR", "/dev/shm"))
#: This user's private directory of buffers (created on first use).
SHM_DIR = SHM_ROOT / f"miles-u{os.geteuid()}"
#: Set to ``0`` to keep every buffer on the socket, even between processes of one machine.
SHM_ENV = "MILES_SHM"
#: Buffers at least this large use shared memory when both ends are on one machine.
SHM_THRESHOLD = 4 * 1024 * 1024  # below this, one zero-copy TCP frame is as fast as a file in /dev/shm
_NAME = re.compile(r"miles-([1-9][0-9]{0,6})-[0-9a-f]{32}")  # Linux pids have at most 7 digits
_SPARE_NAME = re.compile(rf"{shm_spares.PREFIX}([1-9][0-9]{{0,6}})-[0-9a-f]{{16}}({re.escape(shm_spares.PARTIAL)})?")
_MAX_WRITE = 1 << 30
_MAX_BYTES = 1 << 48
_OPEN_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def machine_id() -> str:
    """Identifies this machine, boot and user: equal on both ends means they can share buffers."""
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


@contextlib.contextmanager
def _directory(*, create: bool = False) -> Iterator[int]:
    """A descriptor of SHM_DIR, checked to be this user's own directory with mode 0700; raises OSError."""
    created = False
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(SHM_DIR, 0o700)
            created = True
    fd = os.open(SHM_DIR, _OPEN_DIRECTORY)  # a symbolic link fails here (O_NOFOLLOW)
    try:
        if created:
            os.fchmod(fd, 0o700)  # whatever the umask
        info = os.fstat(fd)
        if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) != 0o700:
            raise PermissionError(
                f"{SHM_DIR} belongs to uid {info.st_uid} with mode {stat.S_IMODE(info.st_mode):o}; it must be this "
                f"user's (uid {os.geteuid()}) with mode 700: remove it"
            )
        yield fd
    finally:
        os.close(fd)


_spares = shm_spares.SpareFiles(SHM_DIR)


def _fresh_spares() -> None:
    global _spares
    _spares = shm_spares.SpareFiles(SHM_DIR)  # a forked child must not take its parent's spare


os.register_at_fork(after_in_child=_fresh_spares)
atexit.register(lambda: drop_spares())


def write(data: memoryview) -> str:
    """Copy ``data`` into a new shared-memory file (a spare allocated ahead, if one fits); returns its name."""
    name = f"miles-{os.getpid()}-{secrets.token_hex(16)}"
    with _directory(create=True) as directory:
        fd = _open_new(directory, name, _spares.take(data.nbytes))
        _spares.wrote(data.nbytes)  # a spare for the next write, if this size repeats
        try:
            view = data.cast("B") if data.format != "B" else data
            offset = 0
            while offset < len(view):
                offset += os.write(fd, view[offset : offset + _MAX_WRITE])
        except BaseException:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=directory)
            raise
        os.close(fd)
    return name


def _open_new(directory: int, name: str, spare: Path | None) -> int:
    """A descriptor to write buffer ``name`` into: ``spare`` renamed to it if given (and still there), else a
    new file."""
    if spare is not None:
        with contextlib.suppress(FileNotFoundError):  # someone removed the spare
            os.rename(spare.name, name, src_dir_fd=directory, dst_dir_fd=directory)
            return os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(name, flags, 0o600, dir_fd=directory)


def read(name: str, nbytes: int) -> memoryview:
    """Map buffer ``name`` (``nbytes`` long) and unlink it; raises ValueError, and leaves the file alone, if it is
    not a buffer this user wrote."""
    if type(name) is not str or not _NAME.fullmatch(name) or type(nbytes) is not int or not 0 < nbytes <= _MAX_BYTES:
        shown = name[:80] if isinstance(name, str) else type(name).__name__
        raise ValueError(f"invalid shared-memory reference {shown!r}")
    gone = f"shared-memory buffer {name} is gone (already consumed or cleaned up)"
    try:
        with _directory() as directory:
            try:
                fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory)
            except FileNotFoundError:
                raise ValueError(gone) from None
            try:
                info = os.fstat(fd)
                problem = _problem(info, nbytes)
                if problem:
                    raise ValueError(f"shared-memory buffer {name} {problem}; it was left in place")
                mapped = mmap.mmap(fd, nbytes)
            finally:
                os.close(fd)
            _unlink_if_same(directory, name, info)
    except FileNotFoundError:
        raise ValueError(gone) from None
    except OSError as exc:  # ELOOP: a symbolic link; EACCES; an unusable directory
        raise ValueError(f"shared-memory buffer {name} cannot be read: {exc}") from None
    return memoryview(mapped)


def _problem(info: os.stat_result, nbytes: int) -> str:
    """Why a file is not a buffer to map (an empty string if it is one)."""
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file"
    if info.st_uid != os.geteuid():
        return f"belongs to uid {info.st_uid}, not to this process's uid {os.geteuid()}"
    if info.st_nlink != 1:
        return f"has {info.st_nlink} links"
    if info.st_size != nbytes:
        return f"holds {info.st_size} bytes, not the {nbytes} its reference states"
    return ""


def _unlink_if_same(directory: int, name: str, opened: os.stat_result) -> None:
    with contextlib.suppress(FileNotFoundError):
        now = os.stat(name, dir_fd=directory, follow_symlinks=False)
        if (now.st_dev, now.st_ino) == (opened.st_dev, opened.st_ino):
            os.unlink(name, dir_fd=directory)


def unlink(names: Iterable[str]) -> None:
    """Remove buffers (names that are not buffer names are skipped)."""
    names = [name for name in names if type(name) is str and _NAME.fullmatch(name)]
    if names:
        _remove(lambda name: True, names)


def drop_spares() -> None:
    """Remove this process's spare files now (a process that ends with ``os._exit`` skips ``atexit``)."""
    _spares.drop()
    remove_spares_of(os.getpid())  # one still being allocated, too


def remove_spares_of(pid: int) -> None:
    """Remove the spare files of process ``pid``, which is gone (its parent calls this once it reaped it).
    Buffers it wrote stay: a receiver may still read them; ``sweep_orphans`` removes what nobody will."""
    prefix = f"{shm_spares.PREFIX}{pid}-"
    _remove(lambda name: name.startswith(prefix))


def sweep_orphans() -> int:
    """Remove buffers written by processes that no longer exist; returns how many were removed."""

    def orphan(name: str) -> bool:
        match = _NAME.fullmatch(name) or _SPARE_NAME.fullmatch(name)
        return match is not None and not psutil.pid_exists(int(match.group(1)))

    return _remove(orphan)


def _remove(condition: Callable[[str], bool], names: Iterable[str] | None = None) -> int:
    """Unlink the files in SHM_DIR (among ``names``, else all) that meet ``condition``; returns how many."""
    removed = 0
    try:
        with _directory() as directory:
            for name in os.listdir(directory) if names is None else names:
                if condition(name):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(name, dir_fd=directory)
                        removed += 1
    except OSError:  # no directory yet, or not one to touch
        return removed
    return removed
