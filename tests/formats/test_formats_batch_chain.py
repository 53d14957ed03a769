"""The restore's checker agrees with the copy's validator on the batch chain however the bytes are chunked,
and refuses every kind of damage: a record's bytes, a leader epoch (outside the batch CRC), framing, a cut."""

from __future__ import annotations

import pytest
from formats_builders import make_segment
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_core.errors import CorruptDataError
from storage_core.formats.batch_chain import BatchChainCheck
from storage_core.formats.batch_stream import BatchStreamValidator
from storage_core.formats.crc import crc32c
from storage_core.formats.record_batch import HEADER_SIZE, TruncatedTailError

SEGMENT, LAYOUT = make_segment(40)
EXPECTED = crc32c(b"".join(SEGMENT[pos : pos + 21] for pos, _, _ in LAYOUT))


def _check_in_chunks(data: bytes, cuts: list[int], expected: int | None = EXPECTED) -> int:
    check = BatchChainCheck(path="/r/t-0/00000000000000001000-x.log")
    previous = 0
    for cut in sorted(set(cuts)) + [len(data)]:
        check.feed(data[previous:cut])
        previous = cut
    return check.finish(expected)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(SEGMENT)), max_size=60))
def test_any_chunking_gives_the_validators_chain(cuts: list[int]) -> None:
    validator = BatchStreamValidator()
    validator.feed(SEGMENT)
    assert validator.finish().chain_crc32c == EXPECTED
    assert _check_in_chunks(SEGMENT, cuts) == EXPECTED


def test_byte_at_a_time() -> None:
    assert _check_in_chunks(SEGMENT, list(range(len(SEGMENT)))) == EXPECTED


@pytest.mark.parametrize("chunk", [1, 97, 4096, 1 << 20])
def test_a_flipped_record_byte_fails_at_its_batch(chunk: int) -> None:
    position, offset, _ = LAYOUT[25]
    damaged = bytearray(SEGMENT)
    damaged[position + HEADER_SIZE + 10] ^= 0x02
    with pytest.raises(CorruptDataError, match="CRC mismatch") as err:
        _check_in_chunks(bytes(damaged), list(range(0, len(damaged), chunk)))
    assert err.value.offset == offset
    assert f"at byte {position}:" in str(err.value) and "t-0" in str(err.value)


def test_a_flipped_leader_epoch_fails_only_the_chain() -> None:
    damaged = bytearray(SEGMENT)
    damaged[LAYOUT[7][0] + 12] ^= 0x40
    assert _check_in_chunks(bytes(damaged), [1000, 5000], expected=None) != EXPECTED
    with pytest.raises(CorruptDataError, match="batch chain"):
        _check_in_chunks(bytes(damaged), [1000, 5000])


@pytest.mark.parametrize("cut", [3, 21, HEADER_SIZE, HEADER_SIZE + 1])
def test_a_cut_object_is_a_truncated_tail(cut: int) -> None:
    position, offset, _ = LAYOUT[-1]
    with pytest.raises(TruncatedTailError) as err:
        _check_in_chunks(SEGMENT[: position + cut], [position // 2, position + 1])
    assert err.value.position == position
    assert err.value.offset == (offset if cut >= 8 else None)


@pytest.mark.parametrize(("at", "value", "problem"), [(16, 1, "magic 1"), (8, 20, "length 20")])
def test_broken_framing_is_refused(at: int, value: int, problem: str) -> None:
    position, offset, _ = LAYOUT[10]
    damaged = bytearray(SEGMENT)
    damaged[position + at : position + at + (1 if at == 16 else 4)] = value.to_bytes(
        1 if at == 16 else 4, "big"
    )
    for cuts in ([], [position + 5]):  # in one chunk, and with the header split across two
        with pytest.raises(CorruptDataError, match=problem) as err:
            _check_in_chunks(bytes(damaged), cuts)
        assert err.value.offset == offset


def test_an_empty_object_has_the_empty_chain() -> None:
    assert BatchChainCheck().finish(0) == 0
