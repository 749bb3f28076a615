"""Shared-memory references from the wire: only a buffer this user wrote, named by its unguessable name, is read.

The attacks of the security review: name another process's buffer, plant a symbolic link (to a file of the right
size) where a buffer would be, a file of another owner or too small for its reference, a directory that is a link or
open to others. Each is refused with ValueError (DecodeError through the codec), and the file it named is left in
place, under its name (a reader takes a buffer by renaming it, and renames back what fails a check).
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgpack
import numpy as np
import pytest

from transport import DecodeError, decode, shared_memory
from transport.codec import encode_shared

ROOT = Path(__file__).resolve().parents[2]
SIZE = 64
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as, or give files to, another user")
OTHER_UID = 65534  # nobody
HEX = "0123456789abcdef" * 2


def buffer_name(pid: int | None = None) -> str:
    return f"miles-{pid or os.getpid()}-{os.urandom(16).hex()}"


def reference(name: str, nbytes: int = SIZE) -> bytes:
    """A body whose only value is a bytes object held in the shared-memory file ``name``."""
    return msgpack.packb(msgpack.ExtType(1, msgpack.packb([name, nbytes])))


@pytest.fixture
def shm_dir() -> Iterator[Path]:
    """The real private directory; what a test plants in it is removed afterwards (this process's pool notices).

    Other processes of this user (another pytest-xdist worker, its engines) use the same directory at the same
    time: only names of this process or of a process gone (the test's writer) are removed, those gone already
    skipped."""
    assert shared_memory.available()
    before = set(os.listdir(shared_memory.SHM_DIR))
    yield shared_memory.SHM_DIR
    for name in set(os.listdir(shared_memory.SHM_DIR)) - before:
        path = shared_memory.SHM_DIR / name
        if not _of_this_or_a_gone_process(name):
            continue
        with contextlib.suppress(FileNotFoundError):
            path.rmdir() if path.is_dir() and not path.is_symlink() else path.unlink()


def _of_this_or_a_gone_process(name: str) -> bool:
    found = re.match(r"miles-(?:seg-)?(\d+)-", name)  # a buffer or a pool's segment names its process
    if found is None:
        return False
    pid = int(found.group(1))
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_buffers_have_unguessable_names_in_a_directory_only_this_user_can_list(shm_dir: Path) -> None:
    name = shared_memory.write(memoryview(b"x" * SIZE))
    try:
        assert re.fullmatch(rf"miles-{os.getpid()}-[0-9a-f]{{32}}", name)  # 128 random bits
        info = os.lstat(shm_dir)
        assert stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) == 0o700
        assert shm_dir.parent == shared_memory.SHM_ROOT and shm_dir.name == f"miles-u{os.geteuid()}"
        assert stat.S_IMODE(os.lstat(shm_dir / name).st_mode) == 0o600
    finally:
        assert bytes(shared_memory.read(name, SIZE)) == b"x" * SIZE
    assert not (shm_dir / name).exists()  # the reader took it: the name is never valid again
    assert shared_memory.machine_id().endswith(f"/u{os.geteuid()}")  # other users never try shared memory


_WRITE_ONE = """
import sys
from transport import shared_memory
print(shared_memory.write(memoryview(b"secret!!" * 8)), flush=True)
sys.stdin.read()  # the buffer lives as long as its writer
"""


@pytest.mark.processes
def test_another_processs_buffer_cannot_be_named_without_its_name(shm_dir: Path) -> None:
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITE_ONE], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None and writer.stdin is not None
        name = writer.stdout.readline().strip()
        assert (shm_dir / name).exists(), name
        pid = int(name.split("-")[1])
        guesses = (buffer_name(pid), f"miles-{pid}-{name[-32:-16]}", f"miles-{pid}-0", f"../miles-{pid}-{name[-32:]}")
        for guess in (*guesses, f"{name}.f", f"{name}.r{os.getpid()}", f"miles-seg-{pid}-{name[-32:]}"):
            with pytest.raises(ValueError, match=r"gone|invalid"):
                shared_memory.read(guess, SIZE)
            with pytest.raises(DecodeError):
                decode(reference(guess))
        assert (shm_dir / name).exists()  # guesses touched nothing
        assert decode(reference(name)) == b"secret!!" * 8  # the name itself is the capability
        assert not (shm_dir / name).exists()
    finally:
        writer.communicate(timeout=60)  # its stdin closes: it exits


@pytest.mark.processes
@AS_ROOT
def test_another_user_can_neither_list_nor_open_nor_plant_buffers(shm_dir: Path) -> None:
    name = shared_memory.write(memoryview(b"y" * SIZE))
    try:
        pid = os.fork()
        if pid == 0:  # the child only makes system calls, then leaves with a bit per attack that worked
            worked = 0
            try:
                os.setgroups([])
                os.setgid(OTHER_UID)
                os.setuid(OTHER_UID)
                for bit, attack in enumerate(
                    (
                        lambda: os.listdir(shm_dir),
                        lambda: os.open(shm_dir / name, os.O_RDONLY),
                        lambda: os.open(shm_dir / buffer_name(), os.O_CREAT | os.O_WRONLY, 0o600),
                        lambda: os.rename(shm_dir, shm_dir.with_name("moved")),
                    )
                ):
                    try:
                        attack()
                        worked |= 1 << bit
                    except PermissionError:
                        pass
            except BaseException:
                worked = 255
            os._exit(worked)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, f"attacks that worked (bits): {status}"
    finally:
        shared_memory.unlink([name])


def test_a_symbolic_link_is_never_followed_nor_removed(shm_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "id_rsa"
    target.write_bytes(b"k" * SIZE)  # the right size for the reference
    name = buffer_name()
    (shm_dir / name).symlink_to(target)
    with pytest.raises(ValueError, match="cannot be read"):
        shared_memory.read(name, SIZE)
    with pytest.raises(DecodeError, match="cannot be read"):
        decode(reference(name))
    assert (shm_dir / name).is_symlink() and target.read_bytes() == b"k" * SIZE


@pytest.mark.parametrize("problem", ["size", "fifo", "directory", "hard link"])
def test_a_file_that_fails_validation_is_left_in_place(shm_dir: Path, tmp_path: Path, problem: str) -> None:
    name = buffer_name()
    path = shm_dir / name
    if problem == "size":  # fewer bytes than the reference states: mapping them would fault past the end
        path.write_bytes(b"z" * (SIZE - 1))
    elif problem == "fifo":
        os.mkfifo(path, 0o600)
    elif problem == "directory":
        path.mkdir(0o700)
    else:
        path.write_bytes(b"z" * SIZE)
        os.link(path, shm_dir / buffer_name())
    with pytest.raises(ValueError, match=r"left in place|cannot be read"):
        shared_memory.read(name, SIZE)
    with pytest.raises(DecodeError):
        decode(reference(name))
    assert os.path.lexists(path) and not os.path.lexists(f"{path}.r{os.getpid()}")
    if problem == "size":  # the same file read with at most its size is a valid buffer: mapped, then released
        assert bytes(shared_memory.read(name, SIZE - 2)) == b"z" * (SIZE - 2)
        assert not path.exists() and (shm_dir / f"{name}.f").exists()


@AS_ROOT
def test_a_file_of_another_owner_is_refused_and_left_in_place(shm_dir: Path) -> None:
    name = buffer_name()
    (shm_dir / name).write_bytes(b"o" * SIZE)
    os.chown(shm_dir / name, OTHER_UID, OTHER_UID)
    with pytest.raises(ValueError, match=f"belongs to uid {OTHER_UID}"):
        shared_memory.read(name, SIZE)
    with pytest.raises(DecodeError, match="belongs to uid"):
        decode(reference(name))
    assert (shm_dir / name).exists()


@pytest.fixture
def own_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """SHM_DIR moved under ``tmp_path`` (not created yet), with a pool of its own."""
    root = tmp_path / "shm"
    root.mkdir()
    monkeypatch.setattr(shared_memory, "SHM_ROOT", root)
    monkeypatch.setattr(shared_memory, "SHM_DIR", root / f"miles-u{os.geteuid()}")
    monkeypatch.setattr(shared_memory, "_pool", None)
    yield shared_memory.SHM_DIR
    if shared_memory._pool is not None:
        shared_memory._pool.close()


def _plant_real_dir(directory: Path) -> str:
    directory.mkdir(0o700)
    name = buffer_name()
    (directory / name).write_bytes(b"d" * SIZE)
    return name


@pytest.mark.parametrize("problem", ["symbolic link", "mode 755"] + (["owner"] if os.geteuid() == 0 else []))
def test_a_directory_that_is_not_ours_alone_is_never_used(own_dir: Path, tmp_path: Path, problem: str) -> None:
    if problem == "symbolic link":
        name = _plant_real_dir(tmp_path / "elsewhere")
        own_dir.symlink_to(tmp_path / "elsewhere")
        planted = tmp_path / "elsewhere" / name
    else:
        name = _plant_real_dir(own_dir)
        os.chmod(own_dir, 0o755) if problem == "mode 755" else os.chown(own_dir, OTHER_UID, OTHER_UID)
        planted = own_dir / name
    assert not shared_memory.available()
    assert shared_memory.write(memoryview(b"w" * SIZE)) is None  # the caller falls back to the socket
    with pytest.raises(ValueError, match="cannot be read"):
        shared_memory.read(name, SIZE)
    assert shared_memory.sweep_orphans() == 0
    shared_memory.unlink([name])
    assert planted.read_bytes() == b"d" * SIZE  # nothing read, nothing removed


def test_a_fresh_private_directory_is_made_with_mode_700(own_dir: Path) -> None:
    old_umask = os.umask(0o777)  # whatever the umask
    try:
        assert shared_memory.available()
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(os.lstat(own_dir).st_mode) == 0o700
    array = np.arange(shared_memory.SHM_THRESHOLD, dtype=np.uint8)
    (body, buffers), names = encode_shared({"a": array})
    assert buffers == [] and os.listdir(own_dir) == names
    assert stat.S_IMODE(os.lstat(own_dir / names[0]).st_mode) == 0o600
    assert np.array_equal(decode(body, buffers)["a"], array)
    assert os.listdir(own_dir) == [f"{names[0]}.f"]  # released by its reader (this process) once the array went


@pytest.mark.processes
def test_sweeping_and_unlinking_touch_only_buffer_names_in_the_private_directory(own_dir: Path) -> None:
    assert shared_memory.available()
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True).stdout)
    me = os.getpid()
    orphans = [buffer_name(dead), f"{buffer_name(dead)}.f", f"{buffer_name(dead)}.r{me}", f"miles-seg-{dead}-{HEX}"]
    read_by_the_dead = buffer_name()
    kept = [buffer_name(), f"{buffer_name()}.r{me}", f"miles-seg-{me}-{HEX}", "notes.txt", f"{read_by_the_dead}.f"]
    not_ours = [
        f"{buffer_name(dead)}.r0",
        f"{buffer_name(dead)}.x",
        f"miles-{dead}-{HEX.upper()}",
        f"miles-0{dead}-{HEX}",
    ]
    for name in (*orphans, *kept[:-1], *not_ours, f"{read_by_the_dead}.r{dead}"):
        (own_dir / name).write_bytes(b"s")
    outside = own_dir.parent / buffer_name(dead)
    outside.write_bytes(b"s")
    assert shared_memory.sweep_orphans() == len(orphans) + 1  # and the buffer a dead reader held, released
    assert sorted(os.listdir(own_dir)) == sorted(kept + not_ours) and outside.exists()
    shared_memory.unlink(["notes.txt", f"../{outside.name}", kept[0]])  # none of them sent by this pool
    assert sorted(os.listdir(own_dir)) == sorted(kept + not_ours) and outside.exists()
