"""The push validator sees the same batches as the pull iterator however the bytes are chunked, and
refuses damage with the offending batch's offset."""

from __future__ import annotations

import struct

import pytest
from formats_builders import Rec, build_batch, compressible_value, make_segment
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_core.errors import CorruptDataError
from storage_core.formats.batch_stream import BatchStreamValidator
from storage_core.formats.crc import crc32c
from storage_core.formats.record_batch import CRC_START, HEADER_SIZE, TruncatedTailError, iter_batch_headers
from storage_core.formats.source import bytes_fetcher

SEGMENT, LAYOUT = make_segment(40)


def _feed_in_chunks(data: bytes, cuts: list[int], validator: BatchStreamValidator) -> list[tuple[int, int]]:
    seen = []
    previous = 0
    for cut in sorted(set(cuts)) + [len(data)]:
        for position, header in validator.feed(data[previous:cut]):
            seen.append((position, header.base_offset))
        previous = cut
    return seen


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(SEGMENT)), max_size=60))
def test_any_chunking_finds_every_batch(cuts: list[int]) -> None:
    validator = BatchStreamValidator()
    seen = _feed_in_chunks(SEGMENT, cuts, validator)
    assert seen == [(pos, h.base_offset) for pos, h in iter_batch_headers(bytes_fetcher(SEGMENT))]
    summary = validator.finish()
    assert summary.batches == len(LAYOUT)
    assert summary.records == sum(count for _, _, count in LAYOUT)
    assert summary.first_offset == LAYOUT[0][1]
    assert summary.end_position == len(SEGMENT)
    assert summary.chain_crc32c == crc32c(b"".join(SEGMENT[pos : pos + CRC_START] for pos, _, _ in LAYOUT))


def test_byte_at_a_time() -> None:
    validator = BatchStreamValidator(start_position=100)
    seen = [pos for i in range(len(SEGMENT)) for pos, _ in validator.feed(SEGMENT[i : i + 1])]
    assert seen == [100 + pos for pos, _, _ in LAYOUT]
    assert validator.position == 100 + len(SEGMENT)


def test_summary_reports_offsets_timestamps_and_flags() -> None:
    batches = [
        build_batch([Rec(0, 500, b"a", compressible_value(0))], base_offset=10),
        build_batch(
            [Rec(0, 900, b"b", b"x"), Rec(1, 300, b"c", b"y")],
            base_offset=11,
            producer_id=3,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        ),
        build_batch([Rec(0, 700, b"d", b"z")], base_offset=20),
    ]
    validator = BatchStreamValidator()
    validator.feed(b"".join(batches))
    summary = validator.finish()
    assert (summary.first_offset, summary.last_offset, summary.max_timestamp) == (10, 20, 900)
    assert summary.has_transactional and not summary.has_control
    assert summary.records == 4


@pytest.mark.parametrize("chunk", [1, 97, 1 << 20])
def test_flipped_byte_fails_at_the_damaged_batch(chunk: int) -> None:
    position, offset, _ = LAYOUT[25]
    damaged = bytearray(SEGMENT)
    damaged[position + HEADER_SIZE + 10] ^= 0x02
    validator = BatchStreamValidator(path="/d/t-3/00000000000000001000.log")
    with pytest.raises(CorruptDataError) as err:
        for i in range(0, len(damaged), chunk):
            validator.feed(bytes(damaged[i : i + chunk]))
    assert err.value.offset == offset
    assert "CRC" in str(err.value) and "t-3" in str(err.value)


def test_flipped_header_byte_inside_the_crc_range_is_caught() -> None:
    position, offset, _ = LAYOUT[3]
    damaged = bytearray(SEGMENT)
    damaged[position + 40] ^= 0x80  # maxTimestamp: checksummed, otherwise unchecked
    with pytest.raises(CorruptDataError) as err:
        BatchStreamValidator().feed(bytes(damaged))
    assert err.value.offset == offset


@pytest.mark.parametrize("cut", [3, HEADER_SIZE, HEADER_SIZE + 1])
def test_stream_ending_inside_a_batch_is_a_truncated_tail(cut: int) -> None:
    position, offset, _ = LAYOUT[-1]
    validator = BatchStreamValidator()
    validator.feed(SEGMENT[: position + cut])
    with pytest.raises(TruncatedTailError) as err:
        validator.finish()
    assert err.value.position == position
    if cut >= 8:
        assert err.value.offset == offset


def test_offsets_going_backwards_are_corruption() -> None:
    first = build_batch([Rec(0, 1, b"k", b"v"), Rec(1, 1, b"k", b"v")], base_offset=100)
    second = build_batch([Rec(0, 1, b"k", b"v")], base_offset=101)
    with pytest.raises(CorruptDataError, match="not after") as err:
        BatchStreamValidator().feed(first + second)
    assert err.value.offset == 101


def test_empty_stream_summary() -> None:
    summary = BatchStreamValidator().finish()
    assert summary.batches == 0 and summary.first_offset is None and summary.max_timestamp is None


def test_header_struct_sanity() -> None:
    # A batch header declaring fewer bytes than a header holds is rejected before any CRC work.
    damaged = bytearray(SEGMENT[: LAYOUT[1][0]])
    struct.pack_into(">i", damaged, 8, 20)
    with pytest.raises(CorruptDataError, match="length"):
        BatchStreamValidator().feed(bytes(damaged))


def test_the_chain_covers_what_the_batch_crcs_do_not() -> None:
    # The leader epoch lies before the CRC's range: a flipped epoch passes every batch check, so the
    # stored object's checksum (the chain) must be what catches it.
    changed = bytearray(SEGMENT)
    changed[LAYOUT[7][0] + 12] ^= 0x40
    summaries = []
    for data in (SEGMENT, bytes(changed)):
        validator = BatchStreamValidator()
        validator.feed(data)
        summaries.append(validator.finish())
    assert summaries[0].batches == summaries[1].batches == len(LAYOUT)
    assert summaries[0].chain_crc32c != summaries[1].chain_crc32c


def test_the_chain_does_not_depend_on_chunking() -> None:
    whole = BatchStreamValidator()
    whole.feed(SEGMENT)
    pieces = BatchStreamValidator()
    _feed_in_chunks(SEGMENT, list(range(0, len(SEGMENT), 7)), pieces)
    assert whole.finish().chain_crc32c == pieces.finish().chain_crc32c
