"""Decompression of record-batch payloads, streamed so a batch never has to be inflated in one piece.

Kafka compresses everything after the 61-byte batch header as one unit. The codec id is in bits 0-2 of
the batch attributes:

- 1 gzip: a gzip stream (``java.util.zip.GZIPOutputStream``).
- 2 snappy: snappy-java's *xerial* stream framing: an 8-byte magic ``\\x82SNAPPY\\x00``, two big-endian
  int32 (format version and minimum compatible version), then blocks, each a big-endian int32 length and
  a raw snappy block. A payload without the magic is taken to be one raw snappy block, which is what
  some non-Java producers used to send.
- 3 lz4: the LZ4 *frame* format.
- 4 zstd: zstd frames, which may not carry the content size (zstd-jni streams them), so decompression
  must be streaming rather than one-shot; a frame cut short is an error, not a short result.

:func:`open_decompressed` returns a reader with ``read(n)``; the record decoder pulls a bounded chunk at
a time. Any decoding failure is raised as :class:`CodecError`, which callers turn into
``CorruptDataError`` with the batch's offset.
"""

from __future__ import annotations

import gzip
import io
import struct
import zlib
from enum import IntEnum
from typing import Protocol

import cramjam
import lz4.frame
import zstandard

Payload = bytes | bytearray | memoryview

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = len(XERIAL_MAGIC) + 8
_INT32 = struct.Struct(">i")


class Codec(IntEnum):
    """Compression codec ids of record batch attributes (bits 0-2)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class CodecError(ValueError):
    """A payload that its codec cannot decode."""


class Reader(Protocol):
    """The one method the record decoder needs from a decompressed stream."""

    def read(self, size: int = -1, /) -> bytes: ...


class _ChunkedReader:
    """A decompressed stream made a chunk at a time: ``_next_chunk`` replaces ``_chunk`` (False at the
    end of the payload) and ``read`` serves the bytes across chunks."""

    _chunk = b""
    _chunk_pos = 0

    def _next_chunk(self) -> bool:
        raise NotImplementedError

    def read(self, size: int = -1, /) -> bytes:
        parts: list[bytes] = []
        want = size if size >= 0 else None
        while want is None or want > 0:
            if self._chunk_pos >= len(self._chunk):
                if not self._next_chunk():
                    break
                continue
            end = len(self._chunk) if want is None else min(len(self._chunk), self._chunk_pos + want)
            piece = self._chunk[self._chunk_pos : end]
            self._chunk_pos = end
            parts.append(piece)
            if want is not None:
                want -= len(piece)
        return b"".join(parts)


class _XerialSnappyReader(_ChunkedReader):
    """Reads snappy-java's block stream one block at a time."""

    def __init__(self, payload: Payload) -> None:
        self._view = memoryview(payload)
        self._pos = 0
        if bytes(self._view[: len(XERIAL_MAGIC)]) != XERIAL_MAGIC:
            # No framing: the whole payload is one raw block.
            self._chunk = _snappy_raw(self._view)
            self._pos = len(self._view)

    def _next_chunk(self) -> bool:
        view = self._view
        # snappy-java reads concatenated streams, each with its own header; accept the same.
        while bytes(view[self._pos : self._pos + len(XERIAL_MAGIC)]) == XERIAL_MAGIC:
            if self._pos + _XERIAL_HEADER_SIZE > len(view):
                raise CodecError("snappy: truncated xerial stream header")
            self._pos += _XERIAL_HEADER_SIZE
        if self._pos >= len(view):
            return False
        if self._pos + 4 > len(view):
            raise CodecError("snappy: truncated block length")
        (length,) = _INT32.unpack_from(view, self._pos)
        start = self._pos + 4
        if length < 0 or start + length > len(view):
            raise CodecError(f"snappy: block length {length} runs past the payload")
        self._chunk = _snappy_raw(view[start : start + length])
        self._chunk_pos = 0
        self._pos = start + length
        return True


def _snappy_raw(block: Payload) -> bytes:
    try:
        return bytes(cramjam.snappy.decompress_raw(bytes(block)))
    except cramjam.DecompressionError as exc:
        raise CodecError(f"snappy: {exc}") from exc


class _ZstdReader(_ChunkedReader):
    """Reads zstd frames through a decompression object fed in small pieces.

    zstandard's stream readers end quietly on a truncated frame; a decompression object reports
    whether the frame finished, so truncation becomes an error here. Feeding small input pieces keeps
    each step's output small for any realistic ratio.
    """

    _PIECE = 2048

    def __init__(self, payload: Payload) -> None:
        self._view = memoryview(payload)
        self._pos = 0
        self._dctx = zstandard.ZstdDecompressor()
        self._obj = self._dctx.decompressobj()

    def _next_chunk(self) -> bool:
        while True:
            if self._obj.eof:
                # The frame ended; what was fed past its end starts the next frame, if any.
                leftover = bytes(self._obj.unused_data)
                if not leftover and self._pos >= len(self._view):
                    return False
                self._obj = self._dctx.decompressobj()
                piece = leftover
            elif self._pos < len(self._view):
                piece = bytes(self._view[self._pos : self._pos + self._PIECE])
                self._pos += len(piece)
            else:
                raise CodecError("zstd: payload ends inside a frame")
            out = self._obj.decompress(piece) if piece else b""
            if out:
                self._chunk, self._chunk_pos = out, 0
                return True


class _Guarded:
    """Turns whatever a third-party decompressor raises into :class:`CodecError`."""

    def __init__(self, inner: Reader, codec: Codec) -> None:
        self._inner = inner
        self._codec = codec

    def read(self, size: int = -1, /) -> bytes:
        try:
            return bytes(self._inner.read(size))
        except CodecError:
            raise
        except (OSError, EOFError, zlib.error, RuntimeError, ValueError, zstandard.ZstdError) as exc:
            raise CodecError(f"{self._codec.name.lower()}: {exc}") from exc


def open_decompressed(codec: Codec, payload: Payload) -> Reader:
    """A reader of the decompressed bytes of ``payload``; ``Codec.NONE`` reads the payload as is."""
    if codec is Codec.NONE:
        return io.BytesIO(payload)
    inner: Reader
    if codec is Codec.GZIP:
        inner = gzip.GzipFile(fileobj=io.BytesIO(payload), mode="rb")
    elif codec is Codec.SNAPPY:
        inner = _XerialSnappyReader(payload)
    elif codec is Codec.LZ4:
        inner = lz4.frame.LZ4FrameFile(io.BytesIO(payload), mode="rb")
    elif codec is Codec.ZSTD:
        inner = _ZstdReader(payload)
    else:
        raise CodecError(f"unknown compression codec {int(codec)}")
    return _Guarded(inner, codec)


def decompress(codec: Codec, payload: Payload) -> bytes:
    """The whole decompressed payload; for small payloads and tests (prefer :func:`open_decompressed`)."""
    return open_decompressed(codec, payload).read()
