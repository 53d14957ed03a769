"""Tier a real broker's log dir to file:// and moto s3://, then check every byte and every record.

The dataset holds >= 50,000 records over every codec, headers, null keys and values, committed and
aborted transactions, and a transaction left open. References: the broker's own files, a real Kafka
consumer (same isolation level), Kafka's DumpLogSegments and Kafka's ListOffsets.
"""

from __future__ import annotations

import itertools
import random
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import s3fs
from confluent_kafka import Consumer, TopicPartition

from harness.kafka import KafkaCluster
from harness.moto_s3 import MotoServer
from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.errors import CorruptDataError
from storage_core.formats.record_batch import iter_batches
from storage_core.formats.records import iter_records
from storage_core.formats.source import bytes_fetcher
from storage_core.remote.catalog import PartitionCatalog
from storage_core.remote.layout import SegmentObject, SegmentState
from storage_core.remote.reader import Isolation

from .conftest import Remote, expected_records, file_remote, run_cli, s3_remote
from .dataset import Dataset


def _copy(
    remote: Remote, dataset: Dataset, broker: KafkaCluster, *flags: str
) -> subprocess.CompletedProcess[str]:
    """Run ``tierkeeper copy`` of every dataset topic from the broker's log dir into ``remote``."""
    topics = [arg for t in dataset.partitions for arg in ("--topic", t)]
    return run_cli(
        "copy",
        "--log-dir",
        str(broker.log_dir(1)),
        "--bootstrap-servers",
        dataset.bootstrap,
        *flags,
        *topics,
        *remote.flags,
        env=remote.env,
    )


@pytest.fixture(scope="module", params=["file", "s3"])
def tiered(
    request: pytest.FixtureRequest,
    dataset: Dataset,
    kafka_broker: KafkaCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Remote, dict[str, Any]]:
    """The dataset copied by the real CLI into a file:// or moto s3:// remote tier."""
    if request.param == "file":
        remote = file_remote(tmp_path_factory.mktemp("remote"))
    else:
        moto: MotoServer = request.getfixturevalue("moto_server")
        import s3fs

        options = moto.storage_options()
        s3fs.S3FileSystem(**options).mkdir("tiered-dataset")
        remote = s3_remote(moto, "s3://tiered-dataset/some/prefix", options)
    proc = _copy(remote, dataset, kafka_broker, "--json")
    assert proc.returncode == 0, proc.stderr
    import json

    return remote, json.loads(proc.stdout)


def _finished(remote: Remote, dataset: Dataset) -> dict[tuple[str, int], list[Any]]:
    reader = remote.reader()
    out = {}
    for topic, p in dataset.all_partitions():
        out[(topic, p)] = reader.manifest(reader.resolve(topic, p)).segments
    return out


def test_dataset_is_big_enough(dataset: Dataset) -> None:
    assert dataset.total_records >= 50_000


def test_tiered_logs_are_byte_identical(
    tiered: tuple[Remote, dict[str, Any]], dataset: Dataset, kafka_broker: KafkaCluster
) -> None:
    remote, summary = tiered
    store = remote.store()
    assert summary["failed_partitions"] == 0
    count = 0
    for (topic, p), segments in _finished(remote, dataset).items():
        assert segments, f"{topic}-{p}: nothing tiered"
        for meta in segments:
            local = kafka_broker.log_dir(1) / f"{topic}-{p}" / f"{meta.base_offset:020d}.log"
            key = PartitionCatalog(store, remote.reader().layout, meta.tp).layout.object_key(
                meta.tp, meta.base_offset, meta.segment_id, SegmentObject.LOG
            )
            assert store.get(key) == local.read_bytes(), f"{topic}-{p} segment {meta.base_offset} differs"
            for obj, ext in (
                (SegmentObject.OFFSET_INDEX, ".index"),
                (SegmentObject.TIME_INDEX, ".timeindex"),
            ):
                okey = key.rsplit(".", 1)[0] + "." + obj.value
                assert store.get(okey) == local.with_suffix(ext).read_bytes()
            count += 1
    assert count >= 50


def test_only_rolled_segments_below_the_lso_are_copied(
    tiered: tuple[Remote, dict[str, Any]], dataset: Dataset, kafka_broker: KafkaCluster
) -> None:
    remote, _ = tiered
    admin = KafkaAdmin(dataset.bootstrap)
    lso = admin.last_stable_offsets(dataset.all_partitions())
    hw = admin.high_watermarks(dataset.all_partitions())
    assert lso[(dataset.open_txn_topic, 0)] < hw[(dataset.open_txn_topic, 0)], (
        "the open transaction must hold the LSO"
    )
    for (topic, p), segments in _finished(remote, dataset).items():
        bases = sorted(int(f.stem) for f in (kafka_broker.log_dir(1) / f"{topic}-{p}").glob("*.log"))
        expected = [b for b, nxt in zip(bases, bases[1:]) if nxt <= lso[(topic, p)]]
        assert [m.base_offset for m in segments] == expected, f"{topic}-{p}"
        assert bases[-1] not in {m.base_offset for m in segments}, "the active segment was copied"
        assert all(m.end_offset < lso[(topic, p)] for m in segments)
    open_segments = _finished(remote, dataset)[(dataset.open_txn_topic, 0)]
    local_open = sorted((kafka_broker.log_dir(1) / f"{dataset.open_txn_topic}-0").glob("*.log"))
    assert len(open_segments) < len(local_open) - 1, "segments at or above the open transaction were copied"


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_remote_reads_equal_a_real_consumer(
    tiered: tuple[Remote, dict[str, Any]], dataset: Dataset, isolation: str
) -> None:
    remote, _ = tiered
    reader = remote.reader(Isolation(isolation))
    for topic, p in dataset.all_partitions():
        tp = reader.resolve(topic, p)
        manifest = reader.manifest(tp)
        assert manifest.end_offset is not None
        want = expected_records(dataset, topic, p, isolation, manifest.end_offset)
        got = [
            (r.offset, r.timestamp, r.key, r.value, r.headers)
            for r in reader.read_from_offset(tp, manifest.start_offset or 0)
        ]
        assert got == [(e.offset, e.timestamp, e.key, e.value, e.headers) for e in want], f"{topic}-{p}"
    reader.close()


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_batch_reads_are_the_brokers_batches(
    tiered: tuple[Remote, dict[str, Any]], dataset: Dataset, kafka_broker: KafkaCluster, isolation: str
) -> None:
    """read_batches_from_offset serves the broker's own batches byte for byte (on file:// from the mapped
    object, on s3:// through the read-ahead), in order, without control batches, and decoding them gives
    what a real consumer reads."""
    remote, _ = tiered
    with remote.reader(Isolation(isolation)) as reader:
        for topic, p in dataset.all_partitions():
            tp = reader.resolve(topic, p)
            manifest = reader.manifest(tp)
            assert manifest.end_offset is not None
            local = _local_batches(kafka_broker.log_dir(1) / f"{topic}-{p}")
            start = manifest.start_offset or 0
            batches = list(reader.read_batches_from_offset(tp, start))
            assert batches, f"{topic}-{p}"
            offsets = [b.header.base_offset for b in batches]
            assert offsets == sorted(set(offsets)), f"{topic}-{p}: batches out of order"
            assert not any(b.header.is_control for b in batches)
            for batch in batches:
                assert bytes(batch.data) == local[batch.header.base_offset], (
                    f"{topic}-{p} @{batch.header.base_offset}"
                )
            want = expected_records(dataset, topic, p, isolation, manifest.end_offset)
            got = [(r.offset, r.key, r.value) for b in batches for r in iter_records(b) if r.offset >= start]
            assert got == [(e.offset, e.key, e.value) for e in want], f"{topic}-{p}"


def _local_batches(partition_dir: Path) -> dict[int, bytes]:
    out = {}
    for log in sorted(partition_dir.glob("*.log")):
        with log.open("rb") as f:
            for batch in iter_batches(f):
                out[batch.header.base_offset] = bytes(batch.data)
    return out


@pytest.mark.parametrize("damage", ["flipped byte", "control bit set", "cut at a batch boundary"])
def test_a_damaged_remote_object_is_refused_where_it_is_damaged(
    tiered: tuple[Remote, dict[str, Any]], dataset: Dataset, tmp_path: Path, damage: str
) -> None:
    """A byte flipped in a tiered .log object (on a copy of the remote tier) stops the read at the damaged
    batch, naming its offset; an object cut short at a batch boundary (which framing alone cannot see)
    stops it where the data ends. Every record before the damage is returned first; batch reads and Arrow
    reads (whose decoder checks the CRCs) stop at the same place with the same error. A flipped bit that
    makes a data batch look like a transaction marker, which every read leaves out, is refused too, not
    dropped silently."""
    remote, _ = tiered
    source = remote.store()
    if source.is_local:
        damaged = file_remote(tmp_path / "damaged")
        shutil.copytree(source.root, tmp_path / "damaged")
    else:
        damaged = Remote(remote.url.rstrip("/") + "-" + damage.replace(" ", "-"), remote.options, [], {})
        # Test setup, so through an s3fs with botocore's own retries: the store's filesystem makes one
        # attempt per request (RetryPolicy retries above it), and a busy moto can miss one connect.
        s3fs.S3FileSystem(**remote.options, skip_instance_cache=True).cp(
            source.root, damaged.store().root, recursive=True
        )
    topic = dataset.codec_topics[0]
    with damaged.reader(Isolation.READ_UNCOMMITTED) as reader:
        tp = reader.resolve(topic, 0)
        segments = reader.manifest(tp).segments
        assert len(segments) >= 2
        meta = segments[1]
        key = reader.layout.object_key(tp, meta.base_offset, meta.segment_id, SegmentObject.LOG)
        store = damaged.store()
        data = bytearray(store.get(key))
        batches = list(iter_batches(bytes_fetcher(bytes(data))))
        victim = batches[len(batches) // 2]
        if damage == "flipped byte":
            data[victim.position + 70] ^= 0xFF  # inside the CRC-covered part
        elif damage == "control bit set":
            assert not victim.header.is_control
            data[victim.position + 22] |= 0x20  # the low byte of the attributes, CRC-covered
        else:
            del data[victim.position :]
        store.delete([key])
        store.put_atomic(key, bytes(data))
        start = segments[0].base_offset
        seen: list[int] = []
        with pytest.raises(CorruptDataError) as err:
            for record in reader.read_from_offset(tp, start):
                seen.append(record.offset)
        if damage == "cut at a batch boundary":
            assert f"ends at byte {victim.position}" in str(err.value)
        else:
            assert err.value.offset == victim.header.base_offset
            assert "CRC mismatch" in str(err.value)
        assert seen and seen[-1] < victim.header.base_offset
        assert max(seen) >= batches[len(batches) // 2 - 1].header.base_offset  # read right up to it
        with pytest.raises(CorruptDataError) as again:
            for _ in reader.read_batches_from_offset(tp, start):
                pass
        assert str(again.value) == str(err.value)
        with pytest.raises(CorruptDataError) as arrow:
            for _ in reader.read_arrow(tp, start):
                pass
        assert str(arrow.value) == str(err.value)


def test_aborted_records_differ_between_isolation_levels(
    tiered: tuple[Remote, dict[str, Any]], dataset: Dataset
) -> None:
    remote, _ = tiered
    counts = {}
    for isolation in Isolation:
        with remote.reader(isolation) as reader:
            tp = reader.resolve(dataset.txn_topic, 0)
            counts[isolation] = sum(1 for _ in reader.read_from_offset(tp, 0))
    assert counts[Isolation.READ_UNCOMMITTED] > counts[Isolation.READ_COMMITTED] > 0


def test_read_from_the_middle_of_a_segment(tiered: tuple[Remote, dict[str, Any]], dataset: Dataset) -> None:
    remote, _ = tiered
    topic = dataset.codec_topics[-1]
    with remote.reader() as reader:
        tp = reader.resolve(topic, 1)
        manifest = reader.manifest(tp)
        want = expected_records(dataset, topic, 1, "read_committed", manifest.end_offset or 0)
        rng = random.Random(7)
        for start in rng.sample(range(manifest.end_offset or 0), 15):
            got = [r.offset for _, r in zip(range(50), reader.read_from_offset(tp, start))]
            assert got == [e.offset for e in want if e.offset >= start][:50]


def test_read_by_timestamp_matches_list_offsets(
    tiered: tuple[Remote, dict[str, Any]], dataset: Dataset
) -> None:
    remote, _ = tiered
    consumer = Consumer({"bootstrap.servers": dataset.bootstrap, "group.id": "ts-check"})
    rng = random.Random(11)
    try:
        with remote.reader(Isolation.READ_UNCOMMITTED) as reader:
            for topic in dataset.codec_topics:
                tp = reader.resolve(topic, 0)
                segments = reader.manifest(tp).segments
                # Retried batches of a non-idempotent producer land out of order, so timestamps are not
                # monotonic here: exactly the case where "first offset with ts >= T" needs care.
                lo = min(s.first_timestamp for s in segments)
                hi = max(s.max_timestamp for s in segments)
                for target in [lo - 5, lo, hi] + [rng.randint(lo, hi) for _ in range(8)]:
                    kafka = consumer.offsets_for_times([TopicPartition(topic, 0, target)], timeout=30)[
                        0
                    ].offset
                    ours = list(itertools.islice(reader.read_from_timestamp(tp, target), 400))
                    assert ours[0].offset == kafka, f"{topic} ts={target}"
                    assert ours[0].timestamp >= target
                    # After the first match, everything in offset order (across segment boundaries).
                    from_offset = itertools.islice(reader.read_from_offset(tp, kafka), 400)
                    assert [r.offset for r in ours] == [r.offset for r in from_offset], f"{topic} ts={target}"
    finally:
        consumer.close()


def test_decoder_agrees_with_dump_log_segments(dataset: Dataset, kafka_broker: KafkaCluster) -> None:
    files: list[Path] = []
    for topic, p in dataset.all_partitions():
        logs = sorted((kafka_broker.log_dir(1) / f"{topic}-{p}").glob("*.log"))
        files.extend(logs[:-1][:3])  # rolled segments: a few per partition keeps the JVM run short
    dump = kafka_broker.dump_log_segments(files)
    sections = re.split(r"^Dumping (.+)$", dump, flags=re.M)[1:]
    assert len(sections) == 2 * len(files)
    batch_re = re.compile(
        r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .*?producerId: (-?\d+) .*?"
        r"partitionLeaderEpoch: (-?\d+) isTransactional: (\w+) isControl: (\w+) .*?"
        r"position: (\d+) (?:CreateTime|LogAppendTime): (-?\d+) size: (\d+) magic: 2 "
        r"compresscodec: (\w+) crc: (\d+) isvalid: (\w+)$",
        re.M,
    )
    record_re = re.compile(r"^\| offset: (\d+) (?:CreateTime|LogAppendTime): (-?\d+)", re.M)
    batches_checked = 0
    for path, text in zip(sections[0::2], sections[1::2]):
        theirs = [m.groups() for m in batch_re.finditer(text)]
        their_records = [(int(o), int(t)) for o, t in record_re.findall(text)]
        ours = []
        our_records = []
        with open(path.strip(), "rb") as f:
            for batch in iter_batches(f, path=path):
                h = batch.header
                ours.append(
                    (
                        str(h.base_offset),
                        str(h.last_offset),
                        str(h.records_count),
                        str(h.producer_id),
                        str(h.partition_leader_epoch),
                        str(h.is_transactional).lower(),
                        str(h.is_control).lower(),
                        str(batch.position),
                        str(h.max_timestamp),
                        str(h.size_in_bytes),
                        h.codec.name.lower(),
                        str(h.crc),
                        "true",
                    )
                )
                our_records.extend((r.offset, r.timestamp) for r in iter_records(batch, verify_crc=False))
        assert ours == theirs, path
        assert our_records == their_records, path
        batches_checked += len(ours)
    assert batches_checked > 100


def test_rerun_is_idempotent(
    tiered: tuple[Remote, dict[str, Any]], dataset: Dataset, kafka_broker: KafkaCluster
) -> None:
    remote, _ = tiered
    before = {k: [m.segment_id for m in v] for k, v in _finished(remote, dataset).items()}
    proc = _copy(remote, dataset, kafka_broker)
    assert proc.returncode == 0, proc.stderr
    after = {k: [m.segment_id for m in v] for k, v in _finished(remote, dataset).items()}
    assert after == before
    store = remote.store()
    for (topic, p), segments in _finished(remote, dataset).items():
        listing = PartitionCatalog(store, remote.reader().layout, segments[0].tp).listing()
        states = [e.state for e in listing.segments.values()]
        assert states.count(SegmentState.COPY_FINISHED) == len(segments), f"{topic}-{p} has extra copies"
