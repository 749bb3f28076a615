"""The shared-memory pool: buffers copied into segments mapped once, reused once their readers let them go.

Between real processes (an actor spawned by the runtime, or plain interpreters): data round-trips, a segment is
reused (same inode) once released and never while any view of it lives, received arrays are read-only, a reader
killed with SIGKILL gives its segment back, a sender leaves no file behind, an untaken buffer comes back when its
call is settled, stale names are refused, and the pool stays under its cap.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from waiting import wait_until

from runtime import ActorHandle, spawn
from transport import DecodeError, decode, shared_memory, shm_names, shm_pool
from transport.codec import encode_shared
from transport.shm_pool import SegmentPool

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20
SIZE = 8 * MIB  # above shared_memory.SHM_THRESHOLD


def _files_of(sender: int) -> dict[str, int]:
    """The files of ``sender`` in the private directory, with their inodes. A segment changes its name as it
    changes hands: one renamed while the directory was being read is looked for again, never left out."""
    for _ in range(1000):
        files = {}
        for name in os.listdir(shared_memory.SHM_DIR):
            parsed = shm_names.parse(name)
            if parsed is not None and parsed.sender == sender:
                try:
                    files[name] = os.stat(shared_memory.SHM_DIR / name).st_ino
                except FileNotFoundError:  # renamed (or removed) since listdir: read the directory again
                    break
        else:
            return files
    raise AssertionError(f"the files of {sender} kept changing while they were listed")


def _held_by_readers(sender: int) -> list[str]:
    return [name for name in _files_of(sender) if shm_names.TAKEN in name]


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[SegmentPool]:
    """A fresh pool for this process; its files are removed afterwards."""
    monkeypatch.setattr(shared_memory, "_pool", None)
    fresh = shared_memory.pool()
    yield fresh
    gc.collect()
    shared_memory.remove_own_files()


@pytest.fixture
def holder(no_leaks: None) -> Iterator[ActorHandle]:
    handle = spawn("shm_actors:Holder")
    try:
        yield handle
    finally:
        handle.kill()


@pytest.mark.processes
def test_buffers_round_trip_through_an_actor_and_one_segment_serves_them_all(
    pool: SegmentPool, holder: ActorHandle
) -> None:
    earlier = set(_files_of(os.getpid()).values())  # of other tests' pools
    arguments: set[int] = set()
    for value in (1, 2, 3):
        assert holder.checksum(np.full(SIZE, value, np.uint8)).result(30) == SIZE * value
        arguments |= set(_files_of(os.getpid()).values()) - earlier
        wait_until(lambda: pool.stats()["busy"] == 0, "the actor never released its argument")
    assert len(arguments) == 1, f"segments seen: {arguments} (before: {earlier}), pool {pool.stats()}"
    assert pool.stats() == {"free": 1, "busy": 0, "bytes": SIZE}
    results: set[int] = set()
    for value in (4, 5, 6):
        out = holder.make(SIZE, value).result(30)
        assert out.sum(dtype=np.uint64) == SIZE * value
        assert not out.flags.writeable  # a view on the actor's segment
        with pytest.raises(ValueError, match="read-only"):
            out[0] = 0
        results |= set(_files_of(holder.pid).values())
        del out
        wait_until(lambda: not _held_by_readers(holder.pid), "this process never released the actor's result")
    assert len(results) == 1
    assert holder.writable(np.ones(SIZE, np.uint8)).result(30) is False


@pytest.mark.processes
@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_a_kept_slice_holds_its_segment_and_is_never_overwritten(pool: SegmentPool, kind: str, no_leaks: None) -> None:
    """The actor keeps a slice and drops the array it came from: the segment stays the actor's until the slice
    goes. Reusing it earlier would overwrite the slice's bytes with the next argument's."""
    holder = spawn("shm_actors:Holder", kwargs={"with_torch": kind == "torch"})
    try:

        def full(value: int) -> object:
            return np.full(SIZE, value, np.uint8) if kind == "numpy" else torch.full((SIZE,), value, dtype=torch.uint8)

        earlier = set(_files_of(os.getpid()).values())  # of other tests' pools
        assert holder.keep_slice(full(1), MIB).result(60) == MIB
        first = set(_files_of(os.getpid()).values()) - earlier
        assert len(first) == 1
        assert holder.checksum(full(2)).result(30) == SIZE * 2
        assert holder.kept_checksum().result(30) == MIB  # still ones: the second argument used another segment
        assert pool.stats()["bytes"] == 2 * SIZE
        holder.drop().result(30)
        wait_until(lambda: pool.stats()["busy"] == 0, "the dropped slice never released its segment")
        assert holder.checksum(full(3)).result(30) == SIZE * 3
        assert pool.stats()["bytes"] == 2 * SIZE and first <= set(_files_of(os.getpid()).values())  # reused
    finally:
        holder.kill()


def test_received_arrays_are_read_only_and_a_tensor_written_in_place_changes_only_its_own_pages(
    pool: SegmentPool,
) -> None:
    (body, buffers), names = encode_shared({"a": np.ones(SIZE, np.uint8), "t": torch.ones(SIZE, dtype=torch.uint8)})
    out = decode(body, buffers)
    with pytest.raises(ValueError, match="read-only"):
        out["a"][0] = 5
    out["t"].add_(1)  # no crash: the mapping is copy-on-write
    assert int(out["t"].sum()) == 2 * SIZE
    taken = shared_memory.SHM_DIR / shm_names.taken_name(names[1], os.getpid())
    with open(taken, "rb") as segment:
        assert set(segment.read(SIZE)) == {1}  # the sender's pages are untouched
    del out
    gc.collect()  # both views go: released, then taken back by the pool's janitor
    assert not any((shared_memory.SHM_DIR / shm_names.taken_name(name, os.getpid())).exists() for name in names)
    _wait_until_back(pool, busy=0, free=2)


def _wait_until_back(pool: SegmentPool, *, busy: int, free: int) -> None:
    """The pool's janitor takes released segments back within a few of its rounds."""
    deadline = time.monotonic() + 10 * shm_pool.JANITOR_S
    while (pool.stats()["busy"], pool.stats()["free"]) != (busy, free) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert (pool.stats()["busy"], pool.stats()["free"]) == (busy, free)


_READER = """
import sys
from transport import decode
kept = decode(bytes.fromhex(sys.stdin.readline()))
print("taken", int(kept.sum()), flush=True)
sys.stdin.read()
"""


@pytest.mark.processes
def test_a_segment_whose_reader_was_killed_comes_back_to_its_pool(pool: SegmentPool) -> None:
    (body, _), names = encode_shared(np.full(SIZE, 7, np.uint8))
    reader = subprocess.Popen(
        [sys.executable, "-c", _READER], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert reader.stdin is not None and reader.stdout is not None
        reader.stdin.write(body.hex() + "\n")
        reader.stdin.flush()
        assert reader.stdout.readline().split() == ["taken", str(SIZE * 7)]
        taken = shared_memory.SHM_DIR / shm_names.taken_name(names[0], reader.pid)
        assert taken.exists()
        shared_memory.unlink(names)  # the call is settled, but the reader still holds the segment
        assert pool.stats()["busy"] == 1
        reader.send_signal(signal.SIGKILL)  # not reaped yet: a zombie, which maps nothing
        wait_until(lambda: pool.stats() == {"free": 1, "busy": 0, "bytes": SIZE}, "the dead reader's segment stayed")
        assert not taken.exists()
    finally:
        reader.kill()
        reader.communicate(timeout=30)


def test_an_untaken_buffer_comes_back_when_its_call_is_settled_and_stale_names_are_refused(
    pool: SegmentPool,
) -> None:
    (body, _), names = encode_shared(np.ones(SIZE, np.uint8))
    inode = os.stat(shared_memory.SHM_DIR / names[0]).st_ino
    shared_memory.unlink(names)
    assert pool.stats() == {"free": 1, "busy": 0, "bytes": SIZE}
    with pytest.raises(DecodeError, match="gone"):
        decode(body)  # taken back: a reader that comes late finds nothing
    (body, _), again = encode_shared(np.full(SIZE, 3, np.uint8))
    assert again != names and os.stat(shared_memory.SHM_DIR / again[0]).st_ino == inode
    assert decode(body).sum(dtype=np.uint64) == 3 * SIZE
    with pytest.raises(DecodeError, match="gone"):
        decode(body)  # taken: a name is valid once


_SENDER = """
import sys
import numpy as np
from transport import shared_memory
from transport.codec import encode_shared
(body, _), _ = encode_shared(np.full(shared_memory.SHM_THRESHOLD, 9, np.uint8))
encode_shared(np.ones(shared_memory.SHM_THRESHOLD, np.uint8))  # never taken
shared_memory.unlink(encode_shared(np.ones(2 * shared_memory.SHM_THRESHOLD, np.uint8))[1])  # back in the pool
print(body.hex(), flush=True)
sys.stdin.readline()
"""


@pytest.mark.processes
@pytest.mark.parametrize("end", ["exit", "SIGKILL"])
def test_a_sender_leaves_no_file_behind_and_what_it_sent_stays_readable(end: str) -> None:
    sender = subprocess.Popen(
        [sys.executable, "-c", _SENDER], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert sender.stdin is not None and sender.stdout is not None
        kept = decode(bytes.fromhex(sender.stdout.readline()))
        assert len(_files_of(sender.pid)) == 3  # taken by this process, untaken, free
        if end == "exit":
            sender.stdin.write("\n")
            sender.stdin.flush()
            assert sender.wait(timeout=30) == 0
        else:
            sender.send_signal(signal.SIGKILL)
            sender.wait(timeout=30)
            assert len(_files_of(sender.pid)) == 3
            assert shared_memory.sweep_orphans() >= 3
        assert not _files_of(sender.pid)
        assert kept.sum(dtype=np.uint64) == 9 * shared_memory.SHM_THRESHOLD  # a mapping outlives its file
        del kept
        gc.collect()  # releasing a removed file is a no-op
    finally:
        sender.kill()
        sender.communicate(timeout=30)


def test_the_pool_stays_under_its_cap(pool: SegmentPool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool, "max_bytes", 2 * SIZE)
    held = []
    for value in (1, 2, 3):  # readers hold all three: the third segment is transient
        (body, _), names = encode_shared(np.full(SIZE, value, np.uint8))
        held.append((decode(body), names))
    assert pool.stats() == {"free": 0, "busy": 3, "bytes": 3 * SIZE}
    transient = _files_of(os.getpid())[shm_names.taken_name(held[2][1][0], os.getpid())]
    assert [int(array[0]) for array, _ in held] == [1, 2, 3]
    while held:
        names = held.pop()[1]  # the array goes with its tuple
        gc.collect()
        shared_memory.unlink(names)
    assert pool.stats() == {"free": 2, "busy": 0, "bytes": 2 * SIZE}  # the transient one was removed, not kept
    assert transient not in _files_of(os.getpid()).values()
    (body, _), names = encode_shared(np.ones(SIZE + SIZE // 2, np.uint8))  # 12 MiB: both free ones must go
    assert pool.stats() == {"free": 0, "busy": 1, "bytes": SIZE + SIZE // 2}
    shared_memory.unlink(names)


def test_idle_segments_are_removed(pool: SegmentPool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shm_pool, "IDLE_S", 0.3)
    (_, _), names = encode_shared(np.ones(SIZE, np.uint8))
    segment = os.stat(shared_memory.SHM_DIR / names[0]).st_ino
    shared_memory.unlink(names)
    assert pool.stats()["free"] == 1 and segment in _files_of(os.getpid()).values()
    wait_until(lambda: pool.stats()["bytes"] == 0, "an idle segment was kept")
    assert segment not in _files_of(os.getpid()).values()


def test_the_cap_comes_from_the_environment_or_the_size_of_dev_shm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(shm_pool.POOL_BYTES_ENV, "123456789")
    assert shm_pool.max_bytes_from_env(shared_memory.SHM_ROOT) == 123456789
    info = os.statvfs(shared_memory.SHM_ROOT)
    default = min(2 << 30, info.f_blocks * info.f_frsize // 4)
    for value in ("lots", "-5", ""):
        monkeypatch.setenv(shm_pool.POOL_BYTES_ENV, value)
        assert shm_pool.max_bytes_from_env(shared_memory.SHM_ROOT) == default


@pytest.mark.processes
def test_a_forked_child_neither_shares_the_pool_nor_releases_its_parents_buffers(pool: SegmentPool) -> None:
    (body, _), names = encode_shared(np.ones(SIZE, np.uint8))
    kept = decode(body)
    taken = shared_memory.SHM_DIR / shm_names.taken_name(names[0], os.getpid())
    child = os.fork()
    if child == 0:  # only system calls and this module's code, then os._exit with what went wrong
        try:
            del kept
            gc.collect()  # the child's copy of the view goes: the parent's buffer stays taken
            fresh = shared_memory.pool() is not pool and shared_memory.pool().stats()["bytes"] == 0
            os._exit(0 if fresh and taken.exists() else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert taken.exists() and pool.stats()["busy"] == 1
    del kept
    gc.collect()  # the parent's own view goes: released (.f), then taken back by the pool's janitor
    assert not taken.exists()
    _wait_until_back(pool, busy=0, free=1)
    assert not (shared_memory.SHM_DIR / shm_names.freed_name(names[0])).exists()


def test_a_buffer_shared_memory_cannot_take_goes_over_the_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unusable = tmp_path / f"miles-u{os.geteuid()}"
    unusable.mkdir(mode=0o755)  # open to others: never used
    monkeypatch.setattr(shared_memory, "SHM_DIR", unusable)
    monkeypatch.setattr(shared_memory, "_pool", None)
    array = np.arange(SIZE, dtype=np.uint64)
    (body, buffers), names = encode_shared({"a": array})
    assert names == [] and len(buffers) == 1 and not os.listdir(unusable)
    assert np.array_equal(decode(body, buffers)["a"], array)
