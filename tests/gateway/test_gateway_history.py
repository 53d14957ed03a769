"""TierHistory (storage_core/gateway/history.py) on the real tier of the session: segments Kafka wrote,
tiered by ``tierkeeper copy`` from every broker and trimmed on the brokers. (A copy skips segments another
broker already tiered, so this tier holds no overlapping segments; overlap is left to tests/overlap.)
Served slices are whole batches within the byte limits, every offset once; a damaged batch is refused, and
through a gateway it is KAFKA_STORAGE_ERROR."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from harness.gateway import GatewayProcess
from storage_core.adapters.local_ranges import LocalRanges
from storage_core.adapters.store import RemoteStore
from storage_core.errors import CorruptDataError
from storage_core.formats.record_batch import HEADER_SIZE, BatchHeader, RawBatch
from storage_core.formats.records import iter_records
from storage_core.gateway.block_cache import BlockCache
from storage_core.gateway.history import TierHistory, TierSlice
from storage_core.gateway.ranges import Buffer, NotReady
from storage_core.remote.catalog import PartitionCatalog, list_topics
from storage_core.remote.layout import RemoteLayout, SegmentObject, TopicPartitionId

from .conftest import PARTITIONS, Tiered
from .rawkafka import FETCH, FETCH_VERSION, RawClient, fetch_frame, leaders

KAFKA_STORAGE_ERROR = 56


def _history(
    url: str, pool: ThreadPoolExecutor, block_bytes: int = 4096, source: str = "blocks"
) -> TierHistory:
    store = RemoteStore(url, {})
    if source == "local":  # what the gateway uses for a file:// tier
        return TierHistory(store, LocalRanges(read_ahead_bytes=block_bytes))
    return TierHistory(store, BlockCache(store.get_range, pool, block_bytes=block_bytes, max_bytes=1 << 20))


SOURCES = pytest.mark.parametrize("source", ["blocks", "local"])


@pytest.fixture(scope="module")
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4) as executor:
        yield executor


def _tps(url: str, topic: str) -> list[TopicPartitionId]:
    store = RemoteStore(url, {})
    ((name, tid),) = [(n, t) for n, t in list_topics(store, RemoteLayout(store.root)) if n == topic]
    return [TopicPartitionId(name, tid, p) for p in range(PARTITIONS)]


def _batches(data: Buffer) -> list[BatchHeader]:
    out, position = [], 0
    while position < len(data):
        header = BatchHeader.parse(data[position : position + HEADER_SIZE], path="slice", position=position)
        out.append(header)
        position += header.size_in_bytes
    assert position == len(data), "a slice ends inside a batch"
    return out


def _records(data: Buffer) -> list[tuple[int, bytes | None, bytes | None]]:
    data = bytes(data)
    out, position = [], 0
    for header in _batches(data):
        batch = RawBatch(
            position=position, header=header, data=data[position : position + header.size_in_bytes]
        )
        out += [(r.offset, r.key, r.value) for r in iter_records(batch)]
        position += header.size_in_bytes
    return out


@SOURCES
def test_the_tier_serves_every_offset_once_in_whole_batches(
    tiered: Tiered, pool: ThreadPoolExecutor, source: str
) -> None:
    history = _history(tiered.remote, pool, source=source)
    for tp in _tps(tiered.remote, tiered.topic):
        start, end = history.earliest(tp), history.latest_tiered(tp)
        assert start == 0 and end is not None and end >= tiered.log_starts[tp.partition] - 1
        got: list[tuple[int, bytes | None, bytes | None]] = []
        offset = 0
        while offset <= end:
            found = history.read(tp, offset, 8192, min_one=True, read_committed=False)
            assert isinstance(found, TierSlice) and found.records, f"nothing served at {offset}"
            headers = _batches(found.records)
            assert headers[0].base_offset <= offset <= headers[0].last_offset, (
                "starts with the batch holding it"
            )
            assert found.upper_offset == headers[-1].last_offset + 1
            got += [r for r in _records(found.records) if r[0] >= offset]
            offset = found.upper_offset
        expected = [(o, k, v) for p, o, k, v in tiered.expected if p == tp.partition and o <= end]
        assert got == expected, "every tiered offset once, equal to what a consumer read before the trim"
        assert history.read(tp, end + 1, 8192, min_one=True, read_committed=False) is None


@SOURCES
def test_byte_limits_whole_batches_at_least_one_when_min_one_none_over_the_limit_otherwise(
    tiered: Tiered, pool: ThreadPoolExecutor, source: str
) -> None:
    history = _history(tiered.remote, pool, source=source)
    tp = _tps(tiered.remote, tiered.topic)[0]
    one = history.read(tp, 0, 1, min_one=True, read_committed=False)
    assert one is not None and len(_batches(one.records)) == 1 and len(one.records) > 1
    none = history.read(tp, 0, len(one.records) - 1, min_one=False, read_committed=False)
    assert none is not None and none.records == b"", "no batch fits: nothing, not a partial batch"
    size = len(one.records)
    segment_ends = {r.last_offset for r in history.cover(tp).ranges}
    for limit in (size, size + 1, 2 * size + 7, 3 * size, 5 * size):  # the batches are ~16 KiB
        found = history.read(tp, 0, limit, min_one=False, read_committed=False)
        assert found is not None and 0 < len(found.records) <= limit
        headers = _batches(found.records)
        following = history.read(tp, found.upper_offset, 1, min_one=True, read_committed=False)
        assert following is not None
        # An answer ends at its segment's end, as a broker's does (the producer's batching decides where
        # that falls); anywhere else it stops only where the next batch does not fit.
        at_segment_end = found.upper_offset - 1 in segment_ends
        assert at_segment_end or len(found.records) + len(following.records) > limit, (
            "stopped although the next batch fit"
        )
        assert headers[0].base_offset == 0
    # min_one starts a response: one oversize batch, then the limit holds again
    mid = history.read(tp, 5, 1, min_one=True, read_committed=False)
    assert (
        mid is not None and _batches(mid.records)[0].base_offset <= 5 <= _batches(mid.records)[0].last_offset
    )


def _corrupt_copy(tiered: Tiered, tmp_path: Path, tp: TopicPartitionId) -> tuple[str, int]:
    """A copy of the tier with one byte flipped inside the first batch of the segment serving offset 0 (in
    its records, after the CRC): (the copy's URL, the damaged batch's base offset)."""
    source = Path(tiered.remote.removeprefix("file://"))
    target = tmp_path / "tier"
    shutil.copytree(source, target)
    store = RemoteStore(f"file://{target}", {})
    layout = RemoteLayout(store.root)
    manifest = PartitionCatalog(store, layout, tp).rebuild_manifest(write=False)
    cover = manifest.cover()
    meta = cover.ranges[cover.index_for_offset(0)].segment
    key = layout.object_key(meta.tp, meta.base_offset, meta.segment_id, SegmentObject.LOG)
    (path,) = target.rglob(Path(key).name)
    data = bytearray(path.read_bytes())
    data[HEADER_SIZE + 3] ^= 0xFF
    path.write_bytes(bytes(data))
    return f"file://{target}", meta.base_offset


def test_a_damaged_batch_is_refused_and_the_gateway_answers_kafka_storage_error(
    tiered: Tiered, pool: ThreadPoolExecutor, tmp_path: Path
) -> None:
    tp = _tps(tiered.remote, tiered.topic)[0]
    url, base = _corrupt_copy(tiered, tmp_path, tp)
    for source in ("blocks", "local"):
        with pytest.raises(CorruptDataError):
            _history(url, pool, source=source).read(tp, base, 1 << 20, min_one=True, read_committed=False)

    gateway = GatewayProcess(tiered.cluster.bootstrap_servers, url, tmp_path / "gateway").start()
    try:
        probe = RawClient.at(gateway.bootstrap)
        probe.handshake()
        partition_leaders, addresses = leaders(probe, tiered.topic)
        probe.close()
        c = RawClient.at(addresses[partition_leaders[0]])
        c.handshake()
        body = c.call(FETCH, FETCH_VERSION, fetch_frame(tiered.topic, {0: base}, 3))
        (part,) = body.responses[0].partitions
        assert part.error_code == KAFKA_STORAGE_ERROR and not part.records
        assert gateway.metric("tierkeeper_gateway_tier_bytes_total") == 0
        # The connection stays usable: the client retries, as it does after a broker's storage error.
        assert c.call(FETCH, FETCH_VERSION, fetch_frame(tiered.topic, {1: 0}, 4)).responses
        c.close()
    finally:
        gateway.stop()


def test_a_read_that_must_not_wait_answers_from_memory_or_says_not_ready(
    tiered: Tiered, pool: ThreadPoolExecutor
) -> None:
    """The event loop's reads (``nowait``) never wait for the store: while the manifest, the indexes or a
    block are not in memory they say NotReady (and the gateway reads on a thread); once a read has brought
    them in, they give exactly that read's answer; a manifest past its age is NotReady again."""
    store = RemoteStore(tiered.remote, {})
    gate = threading.Event()

    def gated_range(key: str, start: int, end: int) -> bytes:
        assert gate.wait(120), "the test never opened the gate"
        return store.get_range(key, start, end)

    now = [0.0]
    history = TierHistory(
        store,
        BlockCache(gated_range, pool, block_bytes=4096, max_bytes=1 << 20, readahead=0),
        metadata_ttl_s=10.0,
        clock=lambda: now[0],
    )
    tp = _tps(tiered.remote, tiered.topic)[0]

    def read(nowait: bool) -> TierSlice | None:
        return history.read(tp, 0, 8192, min_one=True, read_committed=False, nowait=nowait)

    with pytest.raises(NotReady):  # nothing of the partition in memory yet
        read(True)
    blocking = pool.submit(read, False)  # loads the manifest and indexes, then waits at the gate
    with pytest.raises(NotReady):  # whatever it has loaded so far, the block is not fetched
        read(True)
    gate.set()
    expected = blocking.result(120)
    found = read(True)
    assert expected is not None and found is not None and found.records
    assert bytes(found.records) == bytes(expected.records) and found.upper_offset == expected.upper_offset
    now[0] += 11.0  # the manifest is older than its time to live: only a read that may wait refreshes it
    with pytest.raises(NotReady):
        read(True)
    refreshed = read(False)
    assert refreshed is not None and bytes(refreshed.records) == bytes(expected.records)


@SOURCES
def test_the_next_read_resumes_where_the_last_one_ended_without_the_indexes(
    tiered: Tiered, pool: ThreadPoolExecutor, source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A consumer reading history asks next for the offset after what it was served: that read starts at the
    byte where the last one ended (the segment's indexes are not parsed again) and answers exactly what a
    read from the indexes answers (within a segment: the next segment's first read uses its indexes); any
    other offset is found in the indexes."""
    history = _history(tiered.remote, pool, source=source)
    fresh = _history(tiered.remote, pool, source=source)
    tp = _tps(tiered.remote, tiered.topic)[0]
    first = history.read(tp, 0, 20000, min_one=True, read_committed=False)
    assert first is not None and first.records
    looked_up: list[int | None] = []
    real_position = history._position

    def position(meta: Any, offset: int | None, timestamp: int | None, nowait: bool = False) -> int:
        looked_up.append(offset)
        return real_position(meta, offset, timestamp, nowait)

    monkeypatch.setattr(history, "_position", position)
    segment_starts = {r.first_offset for r in history.cover(tp).ranges}
    offset, last = first.upper_offset, history.latest_tiered(tp)
    assert last is not None and last > offset
    for _ in range(8):
        if offset > last:
            break
        found = history.read(tp, offset, 20000, min_one=True, read_committed=False)
        expected = fresh.read(tp, offset, 20000, min_one=True, read_committed=False)
        assert found is not None and expected is not None and found.records
        assert bytes(found.records) == bytes(expected.records) and found.upper_offset == expected.upper_offset
        offset = found.upper_offset
    assert all(o in segment_starts for o in looked_up), "each read in a segment resumed where the last ended"
    assert len(looked_up) < 4
    looked_up.clear()
    inside = first.upper_offset + 1  # inside the batch after the first answer: not where a read ended
    found = history.read(tp, inside, 20000, min_one=True, read_committed=False)
    expected = fresh.read(tp, inside, 20000, min_one=True, read_committed=False)
    assert found is not None and expected is not None
    assert bytes(found.records) == bytes(expected.records)
    assert looked_up == [inside]
