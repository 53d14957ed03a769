"""Which Fetch responses may pass to the client as their bytes arrive (cut-through), decided from their first
bytes, and the check of their last ones.

A Fetch response needs the gateway only when a partition has an error (OFFSET_OUT_OF_RANGE: the tier may
answer it; NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH: the broker adds ``NodeEndpoints`` whose
addresses are rewritten) or when it names a fetch session. A response of one topic and one partition, with
no error anywhere and no session, is forwarded as it is: its header and partition header come first, then
its records, then its tagged fields. :func:`plain_fetch` reads the part before the records; the records
stream; :func:`tail_is_plain` checks the rest (held back until checked) says nothing to rewrite either.
Multi-partition responses are stored and forwarded whole: a later partition's error would come after the
earlier records were sent.

Positions count from the first byte after the correlation id (the response payload's bytes 4..).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from storage_core.gateway.protocol import ProtocolError

STREAM_MIN_BYTES = 64 << 10
"""Responses from this size on may be streamed as they arrive; smaller ones cost less whole than in
pieces, and when nothing in them changes they pass whole from the broker connection's reader
(gateway_server/call.py)."""

NODE_ENDPOINTS_TAG = 0
FLEXIBLE_FROM = 12
TOPIC_IDS_FROM = 13


class NeedMore(Exception):
    """The bytes end before the records start."""


@dataclass(frozen=True, slots=True)
class PlainFetch:
    records_start: int
    """Where the partition's record bytes start."""
    records_end: int
    """One past the last record byte: the tagged fields that follow are checked before they are sent."""


class _Cursor:
    def __init__(self, data: bytes | memoryview) -> None:
        self.data = data
        self.at = 0

    def take(self, n: int) -> bytes | memoryview:
        if self.at + n > len(self.data):
            raise NeedMore
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def int16(self) -> int:
        return int(struct.unpack(">h", self.take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self.take(4))[0])

    def uvarint(self) -> int:
        value, shift = 0, 0
        while True:
            (byte,) = self.take(1)
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise ProtocolError("Fetch response: a varint longer than 5 bytes")

    def skip_tags(self) -> set[int]:
        tags = set()
        for _ in range(self.uvarint()):
            tags.add(self.uvarint())
            self.take(self.uvarint())
        return tags


def plain_fetch(version: int, data: bytes | memoryview) -> PlainFetch | None:
    """Where the records of a one-partition, error-free, sessionless Fetch response of ``version`` lie in
    ``data`` (the payload after the correlation id), or None when the gateway may have to change the
    response. Raises :class:`NeedMore` when ``data`` ends before the records start."""
    if version < 4:
        return None
    flexible = version >= FLEXIBLE_FROM
    c = _Cursor(data)
    if flexible:
        c.skip_tags()  # the response header's
    c.take(4)  # throttle time
    if version >= 7 and (c.int16() != 0 or c.int32() != 0):  # top-level error, session id
        return None
    if (c.uvarint() - 1 if flexible else c.int32()) != 1:
        return None
    if version >= TOPIC_IDS_FROM:
        c.take(16)
    else:
        c.take(c.uvarint() - 1 if flexible else c.int16())
    if (c.uvarint() - 1 if flexible else c.int32()) != 1:
        return None
    c.take(4)  # partition index
    if c.int16() != 0:
        return None
    c.take(8 + 8 + (8 if version >= 5 else 0))  # high watermark, last stable offset, log start
    aborted = c.uvarint() - 1 if flexible else c.int32()
    for _ in range(max(aborted, 0)):
        c.take(16)
        if flexible:
            c.skip_tags()
    if version >= 11:
        c.take(4)  # preferred read replica: a node id, which the client maps through rewritten Metadata
    size = c.uvarint() - 1 if flexible else c.int32()
    size = max(size, 0)
    return PlainFetch(c.at, c.at + size)


def tail_is_plain(version: int, tail: bytes | memoryview) -> bool:
    """Whether the bytes after the records of a :func:`plain_fetch` response (the partition's, the topic's
    and the response's tagged fields) are well formed and carry no NodeEndpoints, which the gateway would
    have to rewrite: only then may the response end as the broker sent it."""
    if version < FLEXIBLE_FROM:
        return len(tail) == 0
    c = _Cursor(tail)
    try:
        c.skip_tags()  # the partition's
        c.skip_tags()  # the topic's
        top = c.skip_tags()
    except (NeedMore, ProtocolError):
        return False
    return c.at == len(tail) and NODE_ENDPOINTS_TAG not in top
