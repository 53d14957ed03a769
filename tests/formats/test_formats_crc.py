"""CRC-32C: the published check value, continuation across chunks, and agreement with kafka-python."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from kafka.record._crc32c import crc as kafka_python_pure_crc32c

from storage_core.formats.crc import crc32c


def test_standard_check_value() -> None:
    # The CRC-32C catalogue check value: the checksum of the ASCII digits 1-9.
    assert crc32c(b"123456789") == 0xE3069283


@given(st.binary(max_size=2000), st.integers(min_value=0, max_value=2000))
def test_continuation_equals_one_pass(data: bytes, cut: int) -> None:
    cut = min(cut, len(data))
    assert crc32c(data[cut:], crc32c(data[:cut])) == crc32c(data)
    assert crc32c(memoryview(data)) == kafka_python_pure_crc32c(data)
