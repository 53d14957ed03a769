"""The in-kernel copy into a local remote tier: every stored byte is inspected, read back from the object
itself; a failed inspection stops the copy; a short source is refused; fsync follows the store's setting."""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage_core.adapters import local_copy
from storage_core.adapters.store import RemoteStore
from storage_core.errors import CorruptDataError

MiB = 1 << 20


def _source(tmp_path: Path, size: int, seed: int = 7) -> Path:
    path = tmp_path / "source.bin"
    path.write_bytes(
        os.urandom(size) if seed < 0 else bytes((i * seed + i // 251) % 256 for i in range(size))
    )
    return path


def _copier_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "tierkeeper-local-copy"]


def _small_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranges from 256 KiB up to 1 MiB and slices of 64 KiB, so that small test files span several of each."""
    monkeypatch.setattr(local_copy, "RANGE", MiB)
    monkeypatch.setattr(local_copy, "FIRST_RANGE", 256 << 10)
    monkeypatch.setattr(local_copy, "SLICE", 64 << 10)


@pytest.mark.parametrize("first,largest", [(MiB, 32 * MiB), (256 << 10, MiB), (4096, 4096)])
def test_ranges_cover_the_file_in_order_small_at_both_ends(first: int, largest: int) -> None:
    sizes = [
        0,
        1,
        first - 1,
        first,
        first + 1,
        2 * first,
        3 * first + 5,
        largest,
        4 * largest + 12_345,
        128 * MiB,
        128 * MiB + 4095,
        1000 * MiB + 3,
    ]
    for size in sizes:
        ranges = local_copy.plan_ranges(size, largest, first)
        assert sum(length for _, length in ranges) == size
        position = 0
        for start, length in ranges:
            assert start == position and start % 4096 == 0 and length > 0
            position += length
        # Every range but the last is a whole number of ``first``s no larger than ``largest``; the last
        # also carries the bytes past the final multiple of ``first``.
        assert all(length % first == 0 and length <= largest for _, length in ranges[:-1])
        if size >= 2 * first:
            assert ranges[0][1] == first and ranges[-1][1] < 2 * first
        if size >= 4 * largest:
            assert max(length for _, length in ranges[:-1]) == largest
            assert len(ranges) <= size // largest + 2 * (largest // first).bit_length() + 1


@pytest.mark.parametrize("small_ranges", [False, True])
@pytest.mark.parametrize("size", [0, 1, MiB - 1, MiB, 3 * MiB + 12_345])
def test_the_object_equals_the_source_and_inspect_saw_every_byte_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int, small_ranges: bool
) -> None:
    if small_ranges:
        _small_ranges(monkeypatch)
    src = _source(tmp_path, size, seed=-1)
    seen = bytearray()
    with open(src, "rb") as f:
        written = local_copy.copy_inspected(f, size, str(tmp_path / "out"), seen.extend, fsync=False)
    assert written == size
    assert (tmp_path / "out").read_bytes() == src.read_bytes() == bytes(seen)
    assert _copier_threads() == []


def test_inspect_reads_the_stored_object_not_the_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy that stores something other than the source is caught: the check runs on what was written."""
    _small_ranges(monkeypatch)
    src = _source(tmp_path, 2 * MiB + 100)
    real = local_copy._kernel_copy

    def damaging(s: int, d: int, position: int, length: int) -> int:
        n = real(s, d, position, length)
        if position <= MiB + 5 < position + n:
            os.pwrite(d, bytes([os.pread(s, 1, MiB + 5)[0] ^ 0xFF]), MiB + 5)
        return n

    monkeypatch.setattr(local_copy, "_kernel_copy", damaging)
    seen = bytearray()
    with open(src, "rb") as f:
        local_copy.copy_inspected(f, src.stat().st_size, str(tmp_path / "out"), seen.extend, fsync=False)
    original = src.read_bytes()
    assert seen != original
    assert [i for i in range(len(original)) if seen[i] != original[i]] == [MiB + 5]


def test_a_failing_inspection_stops_the_copy_and_propagates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _small_ranges(monkeypatch)
    size = 64 * MiB
    src = _source(tmp_path, size, seed=-1)
    calls = 0

    def inspect(_view: memoryview) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise CorruptDataError("bad batch", offset=42)

    with open(src, "rb") as f, pytest.raises(CorruptDataError, match="bad batch"):
        local_copy.copy_inspected(f, size, str(tmp_path / "out"), inspect, fsync=False)
    assert calls == 2
    assert _copier_threads() == []
    # The copier may run a bounded distance ahead of the check, never through the whole file.
    assert (tmp_path / "out").stat().st_size <= (2 + local_copy._AHEAD + 1) * local_copy.RANGE


@pytest.mark.parametrize("small_ranges", [False, True])
def test_a_source_shorter_than_announced_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_ranges: bool
) -> None:
    if small_ranges:
        _small_ranges(monkeypatch)
    src = _source(tmp_path, MiB + 10)
    with open(src, "rb") as f, pytest.raises(CorruptDataError, match="ended 90 bytes early"):
        local_copy.copy_inspected(f, MiB + 100, str(tmp_path / "out"), lambda _v: None, fsync=False)
    assert _copier_threads() == []


@pytest.fixture
def other_filesystem() -> Iterator[Path]:
    """A directory on tmpfs (/dev/shm), so a copy from it into tmp_path crosses filesystems."""
    path = Path(tempfile.mkdtemp(prefix="tk-local-copy-", dir="/dev/shm"))
    try:
        yield path
    finally:
        shutil.rmtree(path)


def test_across_filesystems_it_falls_back_to_reading_and_writing(
    tmp_path: Path, other_filesystem: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _small_ranges(monkeypatch)
    src = other_filesystem / "source.bin"
    src.write_bytes(os.urandom(2 * MiB + 3))
    with open(src, "rb") as f, open(tmp_path / "probe", "wb") as probe, pytest.raises(OSError) as refused:
        os.copy_file_range(f.fileno(), probe.fileno(), 1, 0, 0)
    # The fallback is what is under test: this kernel must refuse the cross-filesystem copy.
    assert refused.value.errno in local_copy._UNSUPPORTED, refused.value
    seen = bytearray()
    with open(src, "rb") as f:
        local_copy.copy_inspected(f, src.stat().st_size, str(tmp_path / "out"), seen.extend, fsync=False)
    assert (tmp_path / "out").read_bytes() == src.read_bytes() == bytes(seen)


def test_a_full_device_is_reported_not_swallowed(tmp_path: Path) -> None:
    """/dev/full answers every write with ENOSPC (after the kernel copy refuses a character device)."""
    src = _source(tmp_path, MiB)
    with open(src, "rb") as f, pytest.raises(OSError, match="No space left"):
        local_copy.copy_inspected(f, MiB, "/dev/full", lambda _v: None, fsync=False)
    assert _copier_threads() == []


@pytest.mark.parametrize("fsync", [True, False])
def test_the_store_fsyncs_data_and_markers_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: bool
) -> None:
    store = RemoteStore(f"file://{tmp_path}/tier", fsync=fsync)
    src = _source(tmp_path, 3 * MiB)
    synced: list[int] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    with open(src, "rb") as f:
        store.put_from_file(f"{store.root}/t/0/seg.log", f, 3 * MiB, lambda _v: None)
    store.put_chunks(f"{store.root}/t/0/seg.index", [b"a", b"b"])
    store.put_atomic(f"{store.root}/t/0/seg.marker", b"{}")
    assert len(synced) == (3 if fsync else 0)
    assert Path(f"{store.root}/t/0/seg.log").read_bytes() == src.read_bytes()


def test_the_fsync_setting_survives_pickling(tmp_path: Path) -> None:
    for fsync in (True, False):
        clone = pickle.loads(pickle.dumps(RemoteStore(f"file://{tmp_path}", fsync=fsync)))
        assert clone.fsync is fsync and clone.url == f"file://{tmp_path}"


def test_other_stores_inspect_the_chunks_on_their_way_up(tmp_path: Path) -> None:
    store = RemoteStore("memory://tk-local-copy-test")
    src = _source(tmp_path, 2 * MiB + 7, seed=-1)
    seen = bytearray()
    sizes: list[int] = []

    def inspect(view: memoryview) -> None:
        sizes.append(len(view))
        seen.extend(view)

    with open(src, "rb") as f:
        assert store.put_from_file(f"{store.root}/obj", f, 2 * MiB + 7, inspect) == 2 * MiB + 7
    assert store.get(f"{store.root}/obj") == src.read_bytes() == bytes(seen)
    assert max(sizes) <= MiB  # the file is streamed in small chunks, never held whole
    with open(src, "rb") as f, pytest.raises(CorruptDataError, match="ended 1 bytes early"):
        store.put_from_file(f"{store.root}/obj2", f, 2 * MiB + 8, lambda _v: None)


@pytest.mark.parametrize("fsync", [True, False])
def test_a_durable_copy_starts_each_ranges_disk_write_as_it_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: bool
) -> None:
    _small_ranges(monkeypatch)
    started: list[tuple[int, int]] = []
    monkeypatch.setattr(local_copy, "_writeback_starter", lambda: lambda _fd, o, n: started.append((o, n)))
    src = _source(tmp_path, 3 * MiB + 5)
    with open(src, "rb") as f:
        local_copy.copy_inspected(f, 3 * MiB + 5, str(tmp_path / "out"), lambda _v: None, fsync=fsync)
    # 256 KiB doubling to 512 KiB, 1 MiB in the middle, halving again; the 5 odd bytes end the last range.
    expected = [
        (0, 256 << 10),
        (256 << 10, 512 << 10),
        (768 << 10, MiB),
        (1792 << 10, 512 << 10),
        (2304 << 10, 512 << 10),
        (2816 << 10, (256 << 10) + 5),
    ]
    assert started == (expected if fsync else [])


def test_the_c_librarys_writeback_call_is_found_and_accepts_a_real_file(tmp_path: Path) -> None:
    start = local_copy._writeback_starter()
    assert start is not None  # glibc on Linux has sync_file_range; without it durability rests on fsync
    path = tmp_path / "dirty"
    with open(path, "wb") as f:
        f.write(b"x" * MiB)
        start(f.fileno(), 0, MiB)
