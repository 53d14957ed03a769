"""Fuzzing every decoder that reads bytes Tierkeeper did not write itself, with hypothesis.

Inputs: random bytes, and valid data (batches of every codec, indexes, checkpoints, snapshots, metadata)
with random damage - flipped bytes, cut tails, stretched length fields - and, for the batch decoders, a
recomputed CRC so the damage reaches the record parser behind the checksum. The only acceptable failure
is one of the project's typed errors (``TierkeeperError``); anything else (IndexError, struct.error,
ValueError from a codec, MemoryError) is a bug. Every loop is bounded by the input (each step consumes
bytes), so a decoder cannot hang; the targets also check that they made progress.

``TIERKEEPER_FUZZ_EXAMPLES`` sets the examples per target (CI default: 150); docs/reliability.md records
a long local run.
"""

from __future__ import annotations

import io
import json
import os
import struct
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import crc32c as reference_crc
from formats_builders import ALL_CODECS, Rec, build_batch, compressible_value, make_segment
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_core.adapters.store import RemoteStore
from storage_core.errors import CorruptDataError, TierkeeperError
from storage_core.formats.batch_chain import BatchChainCheck
from storage_core.formats.batch_stream import BatchStreamValidator
from storage_core.formats.checkpoints import (
    EpochEntry,
    format_leader_epoch_checkpoint,
    format_offset_checkpoint,
    format_partition_metadata,
    parse_leader_epoch_checkpoint,
    parse_offset_checkpoint,
    parse_partition_metadata,
)
from storage_core.formats.indexes import (
    OffsetIndex,
    OffsetPosition,
    TimeIndex,
    TimestampOffset,
    encode_offset_index,
    encode_time_index,
    iter_txn_index,
)
from storage_core.formats.producer_snapshot import (
    ProducerEntry,
    encode_producer_snapshot,
    parse_producer_snapshot,
)
from storage_core.formats.record_batch import (
    HEADER_SIZE,
    TruncatedTailError,
    iter_batch_headers,
    iter_batches,
)
from storage_core.formats.records import decode_records
from storage_core.formats.remote_index import (
    RemoteLogIndexEntry,
    RemotePointerIndex,
    iter_remote_log_index,
    read_remote_log_entry,
)
from storage_core.formats.segment_files import TopicPartition
from storage_core.formats.source import bytes_fetcher
from storage_core.remote.catalog import PartitionCatalog
from storage_core.remote.layout import RemoteLayout, SegmentState, TopicPartitionId

EXAMPLES = int(os.environ.get("TIERKEEPER_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,  # CI is a busy 2-core machine; a hang is ruled out by construction, not by a clock
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=EXAMPLES <= 150,  # the CI run is the same every time; long runs explore
)

SEGMENT, _LAYOUT = make_segment(batch_count=10)
BATCHES = [
    build_batch(
        [Rec(d, 1_000 + d, f"k{d}".encode(), compressible_value(d), (("h", b"v"),)) for d in range(4)],
        codec=codec,
        base_offset=100,
    )
    for codec in ALL_CODECS
]


def _typed_only(call: Callable[[], Any]) -> Any:
    """Run ``call``; a project error is an acceptable verdict on bad input, anything else fails."""
    try:
        return call()
    except TierkeeperError:
        return None


@st.composite
def damaged(draw: st.DrawFn, valid: bytes) -> bytes:
    """``valid`` with a few random edits: byte flips, 32-bit length-like overwrites, a cut or an insert."""
    data = bytearray(valid)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "int", "cut", "insert"]))
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] ^= draw(st.integers(1, 255))
        elif kind == "int":
            value = draw(
                st.sampled_from([0, 1, -1, 0x7FFFFFFF, -0x80000000, 0x7FFFFFF0, 61, 12, 2 << 30 - 1])
            )
            data[at : at + 4] = struct.pack(">i", max(-(2**31), min(value, 2**31 - 1)))
        elif kind == "cut":
            del data[at:]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
    return bytes(data)


def _with_crc(batch: bytes) -> bytes:
    """The batch with its CRC recomputed, so damage behind the checksum reaches the record parser."""
    if len(batch) < HEADER_SIZE:
        return batch
    data = bytearray(batch)
    struct.pack_into(">I", data, 17, reference_crc.crc32c(bytes(data[21:])))
    return bytes(data)


def _drain(iterator: Iterator[Any], limit: int) -> int:
    count = 0
    for _ in iterator:
        count += 1
        assert count <= limit, "a decoder yielded more items than its input can hold"
    return count


# ---- record batches and records ---------------------------------------------------------------


@FUZZ
@given(st.one_of(st.binary(max_size=2048), damaged(SEGMENT)))
def test_segment_scans_raise_only_typed_errors(data: bytes) -> None:
    limit = len(data) // 12 + 1  # a batch is at least 12 bytes of framing
    _typed_only(lambda: _drain(iter_batches(bytes_fetcher(data)), limit))
    _typed_only(lambda: _drain(iter_batches(io.BytesIO(data), chunk_size=64), limit))
    _typed_only(lambda: _drain(iter_batch_headers(io.BytesIO(data)), limit))
    validator = BatchStreamValidator()
    _typed_only(lambda: (validator.feed(data), validator.finish()))
    chain = BatchChainCheck()
    _typed_only(
        lambda: (chain.feed(data[: len(data) // 2]), chain.feed(data[len(data) // 2 :]), chain.finish())
    )


@FUZZ
@given(st.sampled_from(BATCHES).flatmap(lambda batch: damaged(batch)), st.booleans())
def test_record_decoding_of_every_codec_raises_only_typed_errors(batch: bytes, fix_crc: bool) -> None:
    data = _with_crc(batch) if fix_crc else batch
    records = _typed_only(lambda: decode_records(data, verify_crc=True))
    if records is not None:
        assert len(records) <= len(data), "every record takes at least one byte"


@FUZZ
@given(st.binary(max_size=512), st.sampled_from(ALL_CODECS), st.integers(0, 64))
def test_records_behind_a_valid_header_and_crc_raise_only_typed_errors(
    payload: bytes, codec: int, count: int
) -> None:
    header = bytearray(BATCHES[0][:HEADER_SIZE])
    struct.pack_into(">i", header, 8, HEADER_SIZE - 12 + len(payload))
    struct.pack_into(">h", header, 21, codec)
    struct.pack_into(">i", header, 57, count)
    _typed_only(lambda: decode_records(_with_crc(bytes(header) + payload)))


def test_a_batch_header_claiming_2_gib_allocates_nothing_of_that_size(tmp_path: Path) -> None:
    """The length field is untrusted: reading must be bounded by the data there is, not by the claim."""
    bogus = bytearray(BATCHES[0])
    struct.pack_into(">i", bogus, 8, 0x7FFFFFF0)  # ~2 GiB batch
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(BATCHES[1] + bytes(bogus))
    checks: list[Callable[[], object]] = [
        lambda: list(iter_batches(path.open("rb"))),
        lambda: list(iter_batches(bytes_fetcher(path.read_bytes()))),
        lambda: list(iter_batch_headers(path.open("rb"))),
        lambda: BatchStreamValidator().feed(path.read_bytes()),
        lambda: BatchChainCheck().feed(path.read_bytes()),
    ]
    for check in checks:
        tracemalloc.start()
        try:
            try:
                check()
            except (TruncatedTailError, CorruptDataError):
                pass
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 32 << 20, f"peak {peak} bytes for a batch claiming 2 GiB"


# ---- indexes ------------------------------------------------------------------------------------

_OFFSET_INDEX = encode_offset_index([OffsetPosition(100 + i * 10, 4096 * (i + 1)) for i in range(20)], 100)
_TIME_INDEX = encode_time_index([TimestampOffset(5_000 + i, 100 + i * 10) for i in range(20)], 100)


@FUZZ
@given(st.one_of(st.binary(max_size=512), damaged(_OFFSET_INDEX), damaged(_TIME_INDEX)))
def test_local_indexes_raise_only_typed_errors(data: bytes) -> None:
    for kind in (OffsetIndex, TimeIndex):
        index = _typed_only(lambda kind=kind: kind.from_bytes(data, 100))
        if index is None:
            continue
        _typed_only(lambda index=index: _drain(iter(index), len(data)))
        _typed_only(index.validate) if kind is TimeIndex else _typed_only(
            lambda index=index: index.validate(1 << 20)
        )
        _typed_only(lambda index=index: index.lookup(150))
    _typed_only(lambda: _drain(iter_txn_index(io.BytesIO(data)), len(data)))


def _remote_log_index() -> bytes:
    entries = [
        RemoteLogIndexEntry(i * 10, i * 10 + 9, 1_000 + i, 1_009 + i, 4096, struct.pack(">q", i * 4096))
        for i in range(8)
    ]
    return b"".join(e.encode() for e in entries)


_REMOTE_LOG_INDEX = _remote_log_index()


@FUZZ
@given(st.one_of(st.binary(max_size=512), damaged(_REMOTE_LOG_INDEX)), st.integers(0, 600))
def test_remote_index_readers_raise_only_typed_errors(data: bytes, position: int) -> None:
    _typed_only(lambda: _drain(iter_remote_log_index(io.BytesIO(data)), len(data)))
    _typed_only(lambda: read_remote_log_entry(bytes_fetcher(data), position))
    _typed_only(lambda: RemoteLogIndexEntry.decode(data))
    pointers = _typed_only(lambda: RemotePointerIndex.from_bytes(data))
    if pointers is not None:
        _typed_only(lambda: _drain(iter(pointers), len(data)))
        _typed_only(lambda: (pointers.floor(position), pointers.ceiling(position)))


# ---- checkpoints, partition.metadata, producer snapshots ----------------------------------------

_CHECKPOINT = format_offset_checkpoint({TopicPartition("orders", 0): 42, TopicPartition("orders", 1): 7})
_EPOCHS = format_leader_epoch_checkpoint([EpochEntry(0, 0), EpochEntry(3, 1200)])
_METADATA = format_partition_metadata(uuid.UUID(int=0x1234_5678_9ABC))
_SNAPSHOT = encode_producer_snapshot([ProducerEntry(7, 1, 10, 20, 5, 1_000, 3, -1)])


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


@FUZZ
@given(
    st.one_of(
        st.text(max_size=300),
        damaged(_CHECKPOINT.encode()).map(_text),
        damaged(_EPOCHS.encode()).map(_text),
        damaged(_METADATA.encode()).map(_text),
    )
)
def test_text_checkpoints_raise_only_typed_errors(text: str) -> None:
    _typed_only(lambda: parse_offset_checkpoint(text))
    _typed_only(lambda: parse_leader_epoch_checkpoint(text))
    _typed_only(lambda: parse_partition_metadata(text))


@FUZZ
@given(st.one_of(st.binary(max_size=400), damaged(_SNAPSHOT)))
def test_producer_snapshots_raise_only_typed_errors(data: bytes) -> None:
    entries = _typed_only(lambda: parse_producer_snapshot(data))
    if entries is not None:
        assert len(entries) <= len(data) // 46


# ---- the remote metadata JSON -------------------------------------------------------------------

_TP = TopicPartitionId("orders", "EjRWeJq8AAAAAAAAAAAAAA", 0)
_SEGMENT_ID = uuid.UUID(int=7)


def _json_values() -> st.SearchStrategy[Any]:
    leaves = st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=6)
        ),
        max_leaves=20,
    )


@FUZZ
@given(st.one_of(st.binary(max_size=300), _json_values().map(lambda v: json.dumps(v).encode())))
def test_remote_metadata_json_raises_only_typed_errors(raw: bytes) -> None:
    store = RemoteStore(f"memory://fuzz-{uuid.uuid4().hex}")
    layout = RemoteLayout(store.root)
    catalog = PartitionCatalog(store, layout, _TP)
    try:
        for state in SegmentState:
            store.put_atomic(layout.marker_key(_TP, 0, _SEGMENT_ID, state), raw)
            _typed_only(lambda state=state: catalog.read_marker(0, _SEGMENT_ID, state))
        store.put_atomic(layout.partition_state_key(_TP), raw)
        _typed_only(catalog.read_state)
        store.put_atomic(layout.manifest_key(_TP), raw)
        _typed_only(catalog.read_manifest)
        _typed_only(lambda: catalog.listing())
    finally:
        store.delete_tree(store.root)
