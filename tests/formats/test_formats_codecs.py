"""Each codec decodes what independent encoders produce, streamed in small reads, and reports damage."""

from __future__ import annotations

import gzip
import io
import struct

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_codec

from storage_core.formats.codecs import XERIAL_MAGIC, Codec, CodecError, decompress, open_decompressed

DATA = b"".join(f"record {i:06d} payload {'x' * (i % 50)}\n".encode() for i in range(20000))


def _read_in_pieces(codec: Codec, payload: bytes, piece: int) -> bytes:
    reader = open_decompressed(codec, payload)
    parts = []
    while True:
        chunk = reader.read(piece)
        if not chunk:
            return b"".join(parts)
        assert len(chunk) <= piece
        parts.append(chunk)


def _zstd_streamed_without_content_size(data: bytes) -> bytes:
    out = io.BytesIO()
    compressor = zstandard.ZstdCompressor(write_content_size=False)
    with compressor.stream_writer(out, closefd=False) as writer:
        for i in range(0, len(data), 7000):
            writer.write(data[i : i + 7000])
    payload = out.getvalue()
    assert zstandard.get_frame_parameters(payload).content_size == zstandard.CONTENTSIZE_UNKNOWN
    return payload


ENCODINGS = {
    "gzip-kafka-python": (Codec.GZIP, kafka_codec.gzip_encode),
    "gzip-stdlib": (Codec.GZIP, gzip.compress),
    "snappy-xerial": (Codec.SNAPPY, kafka_codec.snappy_encode),
    "snappy-raw": (Codec.SNAPPY, lambda d: bytes(cramjam.snappy.compress_raw(d))),
    "lz4-frame": (Codec.LZ4, kafka_codec.lz4_encode),
    "lz4-frame-checksums": (
        Codec.LZ4,
        lambda d: lz4.frame.compress(d, block_checksum=True, content_checksum=True),
    ),
    "zstd-one-shot": (Codec.ZSTD, kafka_codec.zstd_encode),
    "zstd-streamed": (Codec.ZSTD, _zstd_streamed_without_content_size),
    "none": (Codec.NONE, lambda d: d),
}


@pytest.mark.parametrize("name", sorted(ENCODINGS))
@pytest.mark.parametrize("piece", [1, 4096, 1 << 20])
def test_decompresses_independent_encodings_in_pieces(name: str, piece: int) -> None:
    codec, encode = ENCODINGS[name]
    data = DATA if piece > 1 else DATA[:5000]
    assert _read_in_pieces(codec, encode(data), piece) == data


def test_xerial_stream_framing_is_what_kafka_python_writes() -> None:
    payload = kafka_codec.snappy_encode(DATA)
    assert payload.startswith(XERIAL_MAGIC)
    version, compatible = struct.unpack_from(">ii", payload, len(XERIAL_MAGIC))
    assert (version, compatible) == (1, 1)
    assert decompress(Codec.SNAPPY, payload) == DATA


def test_concatenated_xerial_streams_are_read_through() -> None:
    first, second = DATA[:70000], DATA[70000:]
    payload = kafka_codec.snappy_encode(first) + kafka_codec.snappy_encode(second)
    assert decompress(Codec.SNAPPY, payload) == DATA


def test_concatenated_zstd_frames_are_read_through() -> None:
    payload = kafka_codec.zstd_encode(DATA[:1000]) + _zstd_streamed_without_content_size(DATA[1000:])
    assert _read_in_pieces(Codec.ZSTD, payload, 10000) == DATA


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=5000), st.sampled_from(sorted(ENCODINGS)))
def test_arbitrary_bytes_round_trip(data: bytes, name: str) -> None:
    codec, encode = ENCODINGS[name]
    assert decompress(codec, encode(data)) == data


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_garbage_raises_codec_error(codec: Codec) -> None:
    with pytest.raises(CodecError):
        decompress(codec, b"\x00\x01garbage that no codec accepts" * 3)


@pytest.mark.parametrize("name", ["gzip-kafka-python", "snappy-xerial", "lz4-frame", "zstd-one-shot"])
def test_truncated_payload_raises_codec_error(name: str) -> None:
    codec, encode = ENCODINGS[name]
    payload = encode(DATA)
    with pytest.raises(CodecError):
        decompress(codec, payload[: len(payload) // 2])
