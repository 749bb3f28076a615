"""Same-host shared-memory path for large buffers: one copy into /dev/shm instead of two through TCP.

The sender writes a buffer into a fresh file ``/dev/shm/miles-<pid>-<random>`` (mode 0600) and sends only its
name; the receiver maps the file and unlinks it at once, so the memory lives exactly as long as the arrays that
use it. The sender also unlinks its files once the call is settled (covering messages never decoded), and
``sweep_orphans`` removes files left by processes that died. A write fills a file allocated ahead of need
when one of its size is ready (:mod:`transport.shm_spares`). ``MILES_SHM=0`` turns the path off (every byte
then crosses the socket: useful to measure TCP, or where /dev/shm is small).
"""

from __future__ import annotations

import atexit
import contextlib
import mmap
import os
import re
from collections.abc import Iterable
from pathlib import Path

import psutil

from transport import shm_spares

SHM_DIR = Path(os.environ.get("MILES_SHM_DIR", "/dev/shm"))
#: Set to ``0`` to keep every buffer on the socket, even between processes of one machine.
SHM_ENV = "MILES_SHM"
#: Buffers at least this large use shared memory when both ends are on one machine.
SHM_THRESHOLD = 4 * 1024 * 1024  # below this, one zero-copy TCP frame is as fast as a file in /dev/shm
_NAME = re.compile(r"^miles-(\d+)-[0-9a-f]{16}$")
_SPARE_NAME = re.compile(rf"^{shm_spares.PREFIX}(\d+)-[0-9a-f]{{16}}({re.escape(shm_spares.PARTIAL)})?$")
_MAX_WRITE = 1 << 30


def machine_id() -> str:
    """Identifies this machine and boot: equal on both ends means /dev/shm is shared."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def available() -> bool:
    """Whether this process may pass buffers through shared memory (read when a connection opens)."""
    return os.environ.get(SHM_ENV, "1") != "0" and SHM_DIR.is_dir() and os.access(SHM_DIR, os.W_OK)


_spares = shm_spares.SpareFiles(SHM_DIR)


def _fresh_spares() -> None:
    global _spares
    _spares = shm_spares.SpareFiles(SHM_DIR)  # a forked child must not take its parent's spare


os.register_at_fork(after_in_child=_fresh_spares)
atexit.register(lambda: drop_spares())


def write(data: memoryview) -> str:
    """Copy ``data`` into a new shared-memory file (a spare allocated ahead, if one fits); returns its name."""
    name = f"miles-{os.getpid()}-{os.urandom(8).hex()}"
    fd = _open_new(name, _spares.take(data.nbytes))
    _spares.wrote(data.nbytes)  # a spare for the next write, if this size repeats
    try:
        view = data.cast("B") if data.format != "B" else data
        offset = 0
        while offset < len(view):
            offset += os.write(fd, view[offset : offset + _MAX_WRITE])
    except BaseException:
        os.close(fd)
        unlink([name])
        raise
    os.close(fd)
    return name


def _open_new(name: str, spare: Path | None) -> int:
    """A descriptor to write buffer ``name`` into: ``spare`` renamed to it if given (and still there), else a
    new file."""
    if spare is not None:
        with contextlib.suppress(FileNotFoundError):  # someone removed the spare
            os.rename(spare, SHM_DIR / name)
            return os.open(SHM_DIR / name, os.O_WRONLY)
    return os.open(SHM_DIR / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)


def read(name: str, nbytes: int) -> memoryview:
    """Map the file ``name`` (``nbytes`` long) and unlink it; raises ValueError if it is not ours to read."""
    if not isinstance(name, str) or not _NAME.match(name) or type(nbytes) is not int or nbytes <= 0:
        raise ValueError(f"invalid shared-memory reference {name!r}")
    try:
        fd = os.open(SHM_DIR / name, os.O_RDWR)
    except FileNotFoundError:
        raise ValueError(f"shared-memory buffer {name} is gone (already consumed or cleaned up)") from None
    try:
        if os.fstat(fd).st_size != nbytes:
            raise ValueError(f"shared-memory buffer {name} has the wrong size")
        mapped = mmap.mmap(fd, nbytes)
    finally:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(SHM_DIR / name)
    return memoryview(mapped)


def unlink(names: Iterable[str]) -> None:
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(SHM_DIR / name)


def drop_spares() -> None:
    """Remove this process's spare files now (a process that ends with ``os._exit`` skips ``atexit``)."""
    _spares.drop()
    remove_spares_of(os.getpid())  # one still being allocated, too


def remove_spares_of(pid: int) -> None:
    """Remove the spare files of process ``pid``, which is gone (its parent calls this once it reaped it).
    Buffers it wrote stay: a receiver may still read them; ``sweep_orphans`` removes what nobody will."""
    for path in SHM_DIR.glob(f"{shm_spares.PREFIX}{pid}-*"):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def sweep_orphans() -> int:
    """Remove buffers written by processes that no longer exist; returns how many were removed."""
    removed = 0
    if not SHM_DIR.is_dir():
        return 0
    for path in SHM_DIR.glob("miles-*"):
        match = _NAME.match(path.name) or _SPARE_NAME.match(path.name)
        if match and not psutil.pid_exists(int(match.group(1))):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed += 1
    return removed
