"""Zigzag varints agree with kafka-python's independent implementation and reject malformed input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.record import util as kafka_util

from storage_core.formats.varint import (
    VarintError,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    size_of_varint,
)

INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def _kafka_python_encoding(value: int) -> bytes:
    out = bytearray()
    kafka_util.encode_varint(value, out.append)
    return bytes(out)


@given(INT32)
def test_varint_matches_kafka_python_encoding(value: int) -> None:
    encoded = encode_varint(value)
    assert encoded == _kafka_python_encoding(value)
    assert decode_varint(encoded) == (value, len(encoded))
    assert size_of_varint(value) == len(encoded)


@given(INT64)
def test_varlong_round_trips_and_matches_kafka_python(value: int) -> None:
    encoded = encode_varlong(value)
    assert encoded == _kafka_python_encoding(value)
    assert decode_varlong(encoded) == (value, len(encoded))
    assert len(encoded) <= 10


@given(st.lists(INT64, min_size=1, max_size=20), st.binary(max_size=5))
def test_decoding_walks_a_buffer_of_consecutive_values(values: list[int], prefix: bytes) -> None:
    buf = prefix + b"".join(encode_varlong(v) for v in values)
    pos = len(prefix)
    decoded = []
    for _ in values:
        value, pos = decode_varlong(memoryview(buf), pos)
        decoded.append(value)
    assert decoded == values
    assert pos == len(buf)


def test_truncated_varint_is_an_error() -> None:
    encoded = encode_varint(-(2**31))
    with pytest.raises(VarintError):
        decode_varint(encoded[:-1])
    with pytest.raises(VarintError):
        decode_varint(b"", 0)


def test_overlong_varints_are_rejected() -> None:
    with pytest.raises(VarintError):
        decode_varint(b"\x80" * 5 + b"\x01")
    with pytest.raises(VarintError):
        decode_varlong(b"\x80" * 10 + b"\x01")


def test_out_of_range_values_cannot_be_encoded() -> None:
    with pytest.raises(ValueError):
        encode_varint(2**31)
    with pytest.raises(ValueError):
        encode_varlong(-(2**63) - 1)
