"""Producer snapshots: the version-1 layout, CRC over everything after the CRC field, damage refused."""

from __future__ import annotations

import dataclasses
import struct

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage_core.errors import CorruptDataError
from storage_core.formats.producer_snapshot import (
    ProducerEntry,
    encode_producer_snapshot,
    parse_producer_snapshot,
)

ENTRIES = st.lists(
    st.builds(
        ProducerEntry,
        st.integers(0, 2**63 - 1),
        st.integers(-1, 2**15 - 1),
        st.integers(-1, 2**31 - 1),
        st.integers(-1, 2**63 - 1),
        st.integers(0, 2**31 - 1),
        st.integers(-1, 2**63 - 1),
        st.integers(-1, 2**31 - 1),
        st.integers(-1, 2**63 - 1),
    ),
    max_size=20,
)


def _independent_snapshot(rows: list[tuple[int, ...]]) -> bytes:
    body = struct.pack(">i", len(rows)) + b"".join(struct.pack(">qhiqiqiq", *row) for row in rows)
    return struct.pack(">hI", 1, crc32c.crc32c(body)) + body


def test_parses_the_documented_layout() -> None:
    rows = [
        (1000, 2, 41, 5000, 3, 1_700_000_000_000, 7, -1),
        (1001, 0, 9, 5010, 0, 1_700_000_000_500, -1, 4990),
    ]
    entries = parse_producer_snapshot(_independent_snapshot(rows))
    assert [dataclasses.astuple(e) for e in entries] == rows
    assert [e.has_open_transaction for e in entries] == [False, True]


@given(ENTRIES)
def test_round_trip(entries: list[ProducerEntry]) -> None:
    data = encode_producer_snapshot(entries)
    assert len(data) == 10 + 46 * len(entries)
    assert parse_producer_snapshot(data) == entries


def test_empty_snapshot() -> None:
    assert parse_producer_snapshot(_independent_snapshot([])) == []


def test_damage_is_refused() -> None:
    data = bytearray(_independent_snapshot([(1, 0, 0, 10, 0, 100, 0, -1)]))
    flipped = bytearray(data)
    flipped[20] ^= 0x01
    with pytest.raises(CorruptDataError, match="CRC"):
        parse_producer_snapshot(bytes(flipped), path="/d/t-0/00000000000000000010.snapshot")
    wrong_version = bytearray(data)
    wrong_version[1] = 2
    with pytest.raises(CorruptDataError, match="version"):
        parse_producer_snapshot(bytes(wrong_version))
    with pytest.raises(CorruptDataError):
        parse_producer_snapshot(bytes(data[:5]))
    extra = bytes(data) + b"\x00"
    body = extra[6:]
    with pytest.raises(CorruptDataError, match="declares"):
        parse_producer_snapshot(struct.pack(">hI", 1, crc32c.crc32c(body)) + body)
