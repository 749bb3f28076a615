"""Shared-memory files allocated ahead of need: filled by the next write of their size, gone when idle or dead."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from transport import shared_memory, shm_spares
from transport.shm_spares import SpareFiles

ROOT = Path(__file__).resolve().parents[2]


def _spares_in(directory: Path, pid: int) -> list[Path]:
    """Every spare file of ``pid``, allocated or still being allocated."""
    return sorted(directory.glob(f"{shm_spares.PREFIX}{pid}-*"))


def _ready_spares(directory: Path, pid: int) -> list[Path]:
    return [path for path in _spares_in(directory, pid) if not path.name.endswith(shm_spares.PARTIAL)]


def _eventually(condition: Callable[[], bool], what: str, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_spare_of_the_wanted_size_is_allocated_taken_once_and_replaced(tmp_path: Path) -> None:
    spares = SpareFiles(tmp_path)
    assert spares.take(1 << 20) is None  # nothing asked for yet
    spares.want(1 << 20)
    _eventually(lambda: len(_ready_spares(tmp_path, os.getpid())) == 1, "no spare was allocated")
    (first,) = _ready_spares(tmp_path, os.getpid())
    assert first.stat().st_size == 1 << 20  # visible once allocated
    assert spares.take(2 << 20) is None  # another size: not this file
    assert spares.take(1 << 20) == first
    first.rename(tmp_path / "taken")  # the taker's now (shared_memory.write renames it into its buffer)
    _eventually(lambda: len(_ready_spares(tmp_path, os.getpid())) == 1, "no new spare followed")
    assert _ready_spares(tmp_path, os.getpid())[0].name != first.name  # a new file: the taken one is never reused
    spares.drop()  # also one that is still being allocated: it is discarded once allocated
    _eventually(lambda: not _spares_in(tmp_path, os.getpid()), "a dropped spare was left behind")
    assert (tmp_path / "taken").stat().st_size == 1 << 20


def test_an_idle_spare_is_removed_and_oversized_ones_are_never_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shm_spares, "IDLE_S", 0.2)
    spares = SpareFiles(tmp_path)
    spares.want(shm_spares.MAX_SPARE_BYTES + 1)
    spares.want(1 << 20)
    _eventually(lambda: len(_ready_spares(tmp_path, os.getpid())) == 1, "no spare was allocated")
    assert _ready_spares(tmp_path, os.getpid())[0].stat().st_size == 1 << 20
    # Writes of another size (each asks for a spare of its own size first) are no use of this one.
    _eventually(
        lambda: spares.take(2 << 20) is None and not _spares_in(tmp_path, os.getpid()),
        "an idle spare was kept",
        timeout_s=3.0,
    )


def test_a_size_written_twice_in_a_row_gets_a_spare_and_a_size_written_once_does_not(tmp_path: Path) -> None:
    spares = SpareFiles(tmp_path)
    for size in (1 << 20, 2 << 20, 1 << 20):  # no repeat yet
        spares.wrote(size)
    time.sleep(0.2)
    assert not _spares_in(tmp_path, os.getpid())
    spares.wrote(1 << 20)
    _eventually(lambda: len(_ready_spares(tmp_path, os.getpid())) == 1, "a repeated size got no spare")
    spares.drop()


def test_writes_fill_the_spare_and_the_data_reads_back() -> None:
    size = shared_memory.SHM_THRESHOLD * 2
    first = np.arange(size, dtype=np.uint8)
    shared_memory.unlink([shared_memory.write(memoryview(first))])  # the size repeats from the next write on
    name = shared_memory.write(memoryview(first))
    try:
        _eventually(lambda: len(_ready_spares(shared_memory.SHM_DIR, os.getpid())) == 1, "no spare after writes")
        (spare,) = _ready_spares(shared_memory.SHM_DIR, os.getpid())
        second = (np.arange(size, dtype=np.uint64) * 7).astype(np.uint8)
        filled = shared_memory.write(memoryview(second))
        assert not spare.exists()  # renamed into the buffer just written
        assert np.array_equal(np.frombuffer(shared_memory.read(filled, size), dtype=np.uint8), second)
        assert np.array_equal(np.frombuffer(shared_memory.read(name, size), dtype=np.uint8), first)
    finally:
        shared_memory.unlink([name])
        shared_memory.drop_spares()
    _eventually(lambda: not _spares_in(shared_memory.SHM_DIR, os.getpid()), "a dropped spare was left behind")


_WRITE_AND_EXIT = """
import os, time
import numpy as np
from transport import shared_memory
for _ in range(2):  # a size written twice in a row gets a spare
    shared_memory.unlink([shared_memory.write(memoryview(np.ones(shared_memory.SHM_THRESHOLD, np.uint8)))])
time.sleep(0.5)  # the spare is allocated in the background meanwhile
print(os.getpid(), len(list(shared_memory.SHM_DIR.glob(f"miles-spare-{os.getpid()}-*"))))
"""


def test_a_process_leaves_no_spare_when_it_exits_and_sweeping_removes_those_of_dead_ones() -> None:
    done = subprocess.run([sys.executable, "-c", _WRITE_AND_EXIT], cwd=ROOT, capture_output=True, text=True, timeout=60)
    pid, had = map(int, done.stdout.split())
    assert had == 1, done.stderr
    assert not _spares_in(shared_memory.SHM_DIR, pid)  # removed at exit

    orphan = shared_memory.SHM_DIR / f"{shm_spares.PREFIX}{pid}-{os.urandom(8).hex()}"  # as if it had been killed
    orphan.write_bytes(b"x")
    assert shared_memory.sweep_orphans() >= 1
    assert not orphan.exists()
