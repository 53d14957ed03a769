"""Kafka frames and headers, and the one codec for message bodies: kio, generated from the message schemas
Kafka's own clients are generated from (``common/message/*.json`` in kafka-clients).

A frame is a 4-byte big-endian size and a payload. A request payload starts with api_key i16,
api_version i16, correlation_id i32 at fixed places whatever the header version, so frames nobody decodes
are forwarded with only their correlation id patched (:func:`with_correlation_id`). Record batches stay
opaque bytes: a decoded Fetch response holds them as ``bytes`` and an encoded one writes them as given.
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from functools import cache
from typing import Any, TypeVar

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import DecodeError
from kio.static.constants import EntityType
from kio.static.protocol import Entity, Payload, RequestPayload, ResponsePayload
from kio.static.protocol import RequestHeader as KioRequestHeader
from kio.static.protocol import ResponseHeader as KioResponseHeader

from storage_core.errors import TierkeeperError

SIZE = struct.Struct(">i")
CORRELATION_ID = struct.Struct(">i")
FIXED_HEADER = struct.Struct(">hhi")
"""api_key, api_version, correlation_id: the first 8 bytes of every request payload."""


class ApiKey(IntEnum):
    """The Kafka APIs the gateway names, by Kafka's key: the one place a key is written (each member's name
    is Kafka's, as kio's ``api_key_map`` spells it in lower case; tests/gateway/test_gateway_rooms.py
    checks they agree). Frames carry plain ints; an API the gateway never names needs no member."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    """Its response is always sent with header v0, whatever the version (KIP-511), so a client that sent a
    version the broker does not know can still read the error."""
    SASL_AUTHENTICATE = 36
    DESCRIBE_QUORUM = 55
    DESCRIBE_CLUSTER = 60
    CONSUMER_GROUP_HEARTBEAT = 68
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79


Chunks = list[bytes | memoryview]
"""An encoded frame as pieces to write in order (large record sets are not copied into one buffer)."""


DECODE_ERRORS: tuple[type[Exception], ...] = (
    DecodeError,
    ValueError,  # UnicodeDecodeError included
    IndexError,
    TypeError,
    OverflowError,
    KeyError,
)
"""What kio's readers raise on bytes that are not a message. KeyError included: kio's native reader raises
it for a tagged field whose tag it does not know ("Unknown tagged field tag: 0", found by
tests/gateway/test_gateway_protocol_props.py), which reached the session as an unexpected exception
instead of a ProtocolError."""


class ProtocolError(TierkeeperError):
    """A frame or message that cannot be read: the connection that sent it is closed."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int
    """Bytes of the header in the payload; the body follows."""


def read_request_header(payload: bytes) -> RequestHeader:
    """The header of a request payload. ``client_id`` and the header's size are only known for APIs and
    versions the codec knows (else None and 8: such frames are only forwarded)."""
    if len(payload) < FIXED_HEADER.size:
        raise ProtocolError(f"request of {len(payload)} bytes is shorter than a request header")
    api_key, api_version, correlation_id = FIXED_HEADER.unpack_from(payload)
    if not knows(api_key, api_version):
        return RequestHeader(api_key, api_version, correlation_id, None, FIXED_HEADER.size)
    header_type = _request_header_type(api_key, api_version)
    try:
        header, size = entity_reader(header_type)(payload, 0)
    except DECODE_ERRORS as exc:
        raise ProtocolError(f"malformed request header (api {api_key} v{api_version}): {exc}") from exc
    return RequestHeader(api_key, api_version, correlation_id, header.client_id, size)


def with_correlation_id(payload: bytes, correlation_id: int, *, response: bool = False) -> bytes:
    """The payload with its correlation id replaced (requests: bytes 4-8; responses: bytes 0-4)."""
    at = 0 if response else 4
    return payload[:at] + struct.pack(">i", correlation_id) + payload[at + 4 :]


def framed_with_correlation_id(payload: bytes, correlation_id: int, *, response: bool = False) -> Chunks:
    """The whole frame of :func:`with_correlation_id`'s payload, as pieces that leave the rest of the payload
    where it is (a view, not a copy: record sets of a megabyte pass through without being copied)."""
    at = 0 if response else 4
    view = memoryview(payload)
    return [SIZE.pack(len(payload)), view[:at], CORRELATION_ID.pack(correlation_id), view[at + 4 :]]


def response_correlation_id(payload: bytes) -> int:
    if len(payload) < 4:
        raise ProtocolError(f"response of {len(payload)} bytes has no correlation id")
    return int(SIZE.unpack_from(payload)[0])


@cache
def supported_versions() -> dict[int, tuple[int, int]]:
    """API key -> (min, max) versions the codec can read and write, requests and responses both."""
    out: dict[int, tuple[int, int]] = {}
    for key, name in api_key_map.items():
        versions = sorted(
            v
            for v, kinds in schema_name_map[name].items()
            if EntityType.request in kinds and EntityType.response in kinds
        )
        if versions:
            out[key] = (versions[0], versions[-1])
    return out


def knows(api_key: int, api_version: int) -> bool:
    span = supported_versions().get(api_key)
    return span is not None and span[0] <= api_version <= span[1]


@cache
def _request_type(api_key: int, api_version: int) -> type[RequestPayload]:
    return load_request_schema(api_key, api_version)


@cache
def _response_type(api_key: int, api_version: int) -> type[ResponsePayload]:
    return load_response_schema(api_key, api_version)


@cache
def _request_header_type(api_key: int, api_version: int) -> type[KioRequestHeader]:
    return _request_type(api_key, api_version).__header_schema__


@cache
def _response_header_type(api_key: int, api_version: int) -> type[KioResponseHeader]:
    if api_key == ApiKey.API_VERSIONS:
        from kio.schema.response_header.v0.header import ResponseHeader as V0

        return V0
    return _response_type(api_key, api_version).__header_schema__


def decode_request(header: RequestHeader, payload: bytes) -> RequestPayload:
    """The request body as a kio entity."""
    entity_type = _request_type(header.api_key, header.api_version)
    return _decode(entity_type, payload, header.size, "request")


def decode_response(api_key: int, api_version: int, payload: bytes) -> ResponsePayload:
    """The response body (after its header) as a kio entity."""
    try:
        header, size = entity_reader(_response_header_type(api_key, api_version))(payload, 0)
    except DECODE_ERRORS as exc:
        raise ProtocolError(f"malformed response header (api {api_key} v{api_version}): {exc}") from exc
    return _decode(_response_type(api_key, api_version), payload, size, "response")


_E = TypeVar("_E", bound=Entity)


def _decode(entity_type: type[_E], payload: bytes, offset: int, what: str) -> _E:
    try:
        body, size = entity_reader(entity_type)(payload, offset)
    except DECODE_ERRORS as exc:
        raise ProtocolError(f"malformed {entity_type.__name__} {what}: {exc}") from exc
    except (UnknownAPIKey, UnknownEntity) as exc:  # pragma: no cover - knows() was asked first
        raise ProtocolError(str(exc)) from exc
    if offset + size != len(payload):
        raise ProtocolError(
            f"{entity_type.__name__} {what}: {len(payload) - offset - size} bytes left over after the message"
        )
    return body


class _ChunkWriter:
    """A kio ``Writable`` that keeps large writes (record sets) as they are instead of copying them."""

    LARGE = 16 << 10

    def __init__(self) -> None:
        self.chunks: Chunks = []
        self._small = bytearray()

    def write(self, data: bytes | memoryview) -> int:
        if len(data) >= self.LARGE:
            if self._small:
                self.chunks.append(bytes(self._small))
                self._small = bytearray()
            self.chunks.append(data)
        else:
            self._small += data
        return len(data)

    def done(self) -> Chunks:
        if self._small:
            self.chunks.append(bytes(self._small))
        return self.chunks


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Payload) -> Chunks:
    """A whole response frame (size prefix included) for ``body``."""
    header_type = _response_header_type(api_key, api_version)
    out = _ChunkWriter()
    # Plain ints for kio's i16/i32: its phantom types check a value when made (~1.5 us each, per frame);
    # these come from a frame's header or ApiKey, in range already.
    _write(out, header_type(correlation_id=correlation_id))  # type: ignore[arg-type]
    _write(out, body)
    return framed(out.done())


def encode_request(header: RequestHeader, body: Payload, correlation_id: int) -> Chunks:
    """A whole request frame for ``body`` with the header's API, version and client id."""
    header_type = _request_header_type(header.api_key, header.api_version)
    fields: dict[str, Any] = {  # plain ints, as in encode_response
        "request_api_key": header.api_key,
        "request_api_version": header.api_version,
        "correlation_id": correlation_id,
        "client_id": header.client_id,
    }
    out = _ChunkWriter()
    _write(out, header_type(**fields))
    _write(out, body)
    return framed(out.done())


def _write(out: _ChunkWriter, entity: Entity) -> None:
    # kio's writers call only .write(); its annotation names IO[bytes].
    entity_writer(type(entity))(out, entity)  # type: ignore[arg-type]


def framed(chunks: Sequence[bytes | memoryview]) -> Chunks:
    return [SIZE.pack(sum(len(c) for c in chunks)), *chunks]


def request_type(api_key: int, api_version: int) -> type[RequestPayload]:
    """The kio request class of an API version the codec knows."""
    return _request_type(api_key, api_version)


def response_type(api_key: int, api_version: int) -> type[ResponsePayload]:
    return _response_type(api_key, api_version)


def build_request(api: ApiKey, version: int, **fields: object) -> RequestPayload:
    """A request of ``api`` at ``version`` (for the gateway's own requests): the one way to make one.

    Nested entities are given as dicts (or sequences of them) of their fields, so no caller imports a
    version's classes; fields this version lacks (Metadata v10's topic ids, ListOffsets v1's leader epoch)
    are left out, as the protocol leaves them out (so a misspelt name is left out too: not checked against
    every version here, which would load every version's module of the message, memory and CPU the
    gateway's serving showed; tests/gateway covers each request the gateway builds)."""
    return built(_request_type(api, version), **fields)


def build_response(api: ApiKey, version: int, **fields: object) -> ResponsePayload:
    """A response of ``api`` at ``version``, as :func:`build_request` makes a request."""
    return built(_response_type(api, version), **fields)


def produce_acks(header: RequestHeader, payload: bytes) -> int:
    """The ``acks`` of a Produce request, read without decoding its records: acks=0 gets no response.

    The body starts with transactional_id (a nullable string: int16 length before v9, unsigned varint
    length + 1 from v9, the flexible versions) and then acks (int16)."""
    pos = header.size
    try:
        if header.api_version >= 9:
            length, shift = 0, 0
            while True:
                byte = payload[pos]
                pos += 1
                length |= (byte & 0x7F) << shift
                if not byte & 0x80:
                    break
                shift += 7
                if shift > 28:
                    raise ProtocolError("Produce request: transactional_id length is not a varint")
            pos += max(length - 1, 0)
        else:
            (length,) = struct.unpack_from(">h", payload, pos)
            pos += 2 + max(length, 0)
        (acks,) = struct.unpack_from(">h", payload, pos)
    except (IndexError, struct.error) as exc:
        raise ProtocolError(f"Produce request too short to hold acks: {exc}") from exc
    return int(acks)


def api_name(api_key: int) -> str:
    """Kafka's name of an API (``fetch``, ``list_offsets``), or ``api_<key>`` for one the codec lacks."""
    return api_key_map.get(api_key, f"api_{api_key}")


def replaced(entity: _E, **changes: object) -> _E:
    """``dataclasses.replace`` for fields this version of the message has (a field a version lacks, such as
    Fetch v4's log start offset or ListOffsets v1's leader epoch, is left out); nested entities may be
    given as dicts, as :func:`built` takes them."""
    return dataclasses.replace(entity, **_values(type(entity), changes))


def built(entity_type: type[_E], **values: object) -> _E:
    """An entity of ``entity_type`` from the values its version has fields for (the others are left out,
    as :func:`replaced` does); a nested entity (or a tuple of them) may be given as a dict of its fields
    (or a sequence of such dicts)."""
    return entity_type(**_values(entity_type, values))


def _values(entity_type: type[Entity], values: Mapping[str, object]) -> dict[str, object]:
    # On every tier answer's path (with_answers, unanswered): plain dict and tuple checks only.
    nested = _nested_types(entity_type)
    out: dict[str, object] = {}
    for name, value in values.items():
        inner = nested.get(name, _ABSENT)
        if inner is _ABSENT:
            continue  # a field of other versions
        if inner is not None:
            if isinstance(value, dict):
                value = built(inner, **value)
            elif isinstance(value, (list, tuple)) and value and isinstance(value[0], dict):
                value = tuple(built(inner, **v) for v in value)
            elif isinstance(value, list):
                value = tuple(value)
        out[name] = value
    return out


_ABSENT: Any = object()


@cache
def _nested_types(entity_type: type[Entity]) -> dict[str, type[Entity] | None]:
    """Field name -> the entity type a field holds (alone, in a tuple, or optional), or None for a value."""
    out: dict[str, type[Entity] | None] = {}
    for f in dataclasses.fields(entity_type):
        kind: Any = f.type
        if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
            kind = next((a for a in typing.get_args(kind) if a is not type(None)), kind)
        if typing.get_origin(kind) is tuple:
            kind = typing.get_args(kind)[0]
        out[f.name] = kind if isinstance(kind, type) and dataclasses.is_dataclass(kind) else None  # type: ignore[assignment]
    return out
