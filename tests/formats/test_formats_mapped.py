"""MappedFile: ranges of a local file as views of one mapping; pages behind a scan leave the resident set."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from formats_builders import make_segment

from storage_core.formats import mapped
from storage_core.formats.crc import crc32c
from storage_core.formats.mapped import MappedFile
from storage_core.formats.record_batch import iter_batches

MIB = 1 << 20


def test_ranges_are_views_of_the_file(tmp_path: Path) -> None:
    data = os.urandom(3 * MIB + 123)
    path = tmp_path / "object"
    path.write_bytes(data)
    with path.open("rb") as f:
        fetch = MappedFile(f)
    # The file object is closed: the mapping lives on in the fetcher.
    for start, end in [(0, 10), (MIB - 1, MIB + 1), (3 * MIB, 4 * MIB), (len(data), len(data) + 5), (7, 7)]:
        got = fetch(start, end)
        assert isinstance(got, memoryview)
        assert bytes(got) == data[start:end]


def test_size_bounds_the_mapping_and_an_empty_file_reads_nothing(tmp_path: Path) -> None:
    path = tmp_path / "object"
    path.write_bytes(b"0123456789")
    with path.open("rb") as f:
        assert bytes(MappedFile(f, 4)(0, 100)) == b"0123"
        assert bytes(MappedFile(f, 100)(0, 100)) == b"0123456789"  # no more than the file holds
    (tmp_path / "empty").write_bytes(b"")
    with (tmp_path / "empty").open("rb") as f:
        empty = MappedFile(f)
    assert bytes(empty(0, 100)) == b""
    empty.release_before(100)  # nothing mapped, nothing to release


@pytest.mark.parametrize("chunk_size", [4096, 1 << 30])
def test_batches_scan_from_the_mapping(tmp_path: Path, chunk_size: int) -> None:
    segment, layout = make_segment(40)
    path = tmp_path / "00000000000000001000.log"
    path.write_bytes(segment)
    with path.open("rb") as f:
        fetch = MappedFile(f)
    got = [
        (b.position, b.header.base_offset, b.header.records_count)
        for b in iter_batches(fetch, chunk_size=chunk_size)
    ]
    assert got == layout


def _rss_file_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssFile:"):
            return int(line.split()[1])
    raise AssertionError("no RssFile line in /proc/self/status")


@pytest.mark.parametrize("release", [True, False])
def test_pages_behind_the_scan_leave_the_resident_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, release: bool
) -> None:
    """Scanning 96 MiB while releasing 8 MiB behind keeps a few steps resident; without releasing all of
    it stays (the control case shows the measurement sees mapped pages at all)."""
    monkeypatch.setattr(mapped, "RELEASE_STEP", 4 * MIB)
    size = 96 * MIB
    path = tmp_path / "object"
    with path.open("wb") as out:
        for _ in range(size // MIB):
            out.write(os.urandom(MIB))
    with path.open("rb") as f:
        fetch = MappedFile(f)
    before = _rss_file_kib()
    held = []
    for start in range(0, size, MIB):
        chunk = fetch(start, start + MIB)
        crc32c(chunk)  # touch every page
        held.append(chunk)  # views behind the scan stay usable (below)
        if release:
            fetch.release_before(start - 8 * MIB)
    grown_mib = (_rss_file_kib() - before) / 1024
    if release:
        assert grown_mib < 24, f"{grown_mib:.0f} MiB resident after the scan"
    else:
        assert grown_mib > 64, f"only {grown_mib:.0f} MiB resident without releasing"
    with path.open("rb") as f:
        assert bytes(held[0]) == f.read(MIB)  # a released page reads the same bytes again
