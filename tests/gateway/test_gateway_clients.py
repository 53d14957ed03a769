"""Client compatibility through the gateway (issue 27, "Tested with real parts"): Kafka's own Java tools, a
KIP-848 consumer, timestamp lookups and seeks into the tier, ListOffsets earliest / earliest-local /
latest-tiered, Spark's Kafka source, transactions read_committed and read_uncommitted, and every compression
codec. Each compares with what a direct consumer read before the trim, every offset once."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from harness.tierkeeper_cli import run_cli

from .conftest import (
    CODECS,
    PARTITIONS,
    PEAK_OFFSETS,
    PEAK_RECORDS,
    RECORDS,
    TXN_LAST,
    TXN_PARTITIONS,
    Record,
    Tiered,
    read_all,
    read_group,
)

JAVA_TIMEOUT_S = 240


def _run_java(tiered: Tiered, main_class: str, *args: str) -> str:
    proc = subprocess.run(
        tiered.cluster.tool_command(main_class, *args),
        capture_output=True,
        text=True,
        timeout=JAVA_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, f"{main_class} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc.stdout


def _by_partition(records: list[Any]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for r in records:
        out.setdefault(r[0], []).append(r)
    for p, rs in out.items():
        assert [r[1] for r in rs] == list(range(len(rs))), f"partition {p}: offsets are not 0..n-1"
    return out


def _console_consume(tiered: Tiered, topic: str, max_messages: int, *args: str) -> str:
    """Kafka's console consumer through the gateway from the beginning, printing partition, offset and key."""
    return _run_java(
        tiered,
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server",
        tiered.gateway.bootstrap,
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        str(max_messages),
        "--timeout-ms",
        "60000",  # no record for 60 s: the consumer gives up, prints what it has, and the test fails below
        "--property",
        "print.partition=true",
        "--property",
        "print.offset=true",
        "--property",
        "print.key=true",
        *args,
    )


# ---- 1. Kafka's Java console consumer ------------------------------------------------------------------
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_the_java_console_consumer_reads_every_offset_once_from_zero(tiered: Tiered, protocol: str) -> None:
    """Kafka's own consumer, in a classic group and in a KIP-848 group (its new consumer, with fetch
    sessions and topic ids), from the beginning."""
    out = _console_consume(
        tiered,
        tiered.topic,
        RECORDS,
        "--group",
        f"console-{uuid.uuid4().hex[:8]}",
        "--consumer-property",
        f"group.protocol={protocol}",
    )
    got: list[Record] = []
    for line in out.splitlines():
        if not line.startswith("Partition:"):
            continue
        fields = line.split("\t")
        partition = next(int(f[len("Partition:") :]) for f in fields if f.startswith("Partition:"))
        offset = next(int(f[len("Offset:") :]) for f in fields if f.startswith("Offset:"))
        got.append((partition, offset, fields[-2].encode(), fields[-1].encode()))
    assert len(got) == RECORDS, f"the console consumer printed {len(got)} of {RECORDS} records"
    assert sorted(got) == tiered.expected


# ---- 2. A KIP-848 consumer -------------------------------------------------------------------------------
def test_a_kip848_consumer_group_reads_every_offset_once_from_zero(tiered: Tiered) -> None:
    group = f"kip848-{uuid.uuid4().hex[:8]}"
    got = read_group(tiered.gateway.bootstrap, tiered.topic, group, **{"group.protocol": "consumer"})
    assert sorted(got) == tiered.expected
    # The group really is a KIP-848 ("consumer") group, and its commits landed through the gateway.
    admin = AdminClient({"bootstrap.servers": tiered.cluster.bootstrap_servers})
    description = admin.describe_consumer_groups([group])[group].result(30)
    assert description.type.name == "CONSUMER", description.type
    committed = admin.list_consumer_group_offsets([_group_request(group)])[group].result(30)
    ends = {tp.partition: tp.offset for tp in committed.topic_partitions}
    assert ends == {p: len([r for r in tiered.expected if r[0] == p]) for p in range(PARTITIONS)}


def _group_request(group: str) -> Any:
    from confluent_kafka import ConsumerGroupTopicPartitions

    return ConsumerGroupTopicPartitions(group)


# ---- 3. Timestamps, seeks and ListOffsets ----------------------------------------------------------------
def test_offsets_for_times_finds_tiered_and_local_records(tiered: Tiered) -> None:
    parts = _by_partition(tiered.history_detail)
    questions: list[tuple[int, int, int]] = []  # (partition, timestamp, expected offset)
    for p, records in parts.items():
        start = tiered.log_starts[p]

        def first_at(ts: int, records: list[Any] = records) -> int:
            return next((r[1] for r in records if r[4] >= ts), -1)

        for ts in (
            0,  # older than everything: the tier's first record
            records[1][4],  # exactly a tiered record's timestamp
            records[start // 2][4] - 1,  # between two tiered records
            records[start - 1][4],  # the last record below the brokers' log start
            records[start - 1][4] + 1,  # after the tier's last record, before the brokers' first
            records[start + 3][4],  # a local record: the broker's own answer
            records[-1][4] + 1000,  # newer than everything: no record (-1)
        ):
            questions.append((p, ts, first_at(ts)))
    assert any(0 < o < tiered.log_starts[p] for p, _, o in questions)
    consumer = Consumer({"bootstrap.servers": tiered.gateway.bootstrap, "group.id": "times"})
    got: list[tuple[int, int, int]] = []
    try:
        # One question per partition and call: a ListOffsets request names each partition once.
        for p, ts, _ in questions:
            (found,) = consumer.offsets_for_times([TopicPartition(tiered.topic, p, ts)], timeout=60)
            assert found.error is None, (p, ts, found.error)
            got.append((p, ts, found.offset))
    finally:
        consumer.close()
    assert got == questions


def test_seek_into_the_tier_reads_across_the_boundary_every_offset_once(tiered: Tiered) -> None:
    parts = _by_partition(tiered.expected)
    consumer = Consumer(
        {
            "bootstrap.servers": tiered.gateway.bootstrap,
            "group.id": f"seek-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
        }
    )
    try:
        # Start on the brokers' own data, then seek back into the tier.
        consumer.assign(
            [TopicPartition(tiered.topic, p, tiered.log_starts[p] + 5) for p in range(PARTITIONS)]
        )
        seen: set[int] = set()
        deadline = time.monotonic() + 60
        while len(seen) < PARTITIONS:
            assert time.monotonic() < deadline, f"no local record from partitions {set(range(3)) - seen}"
            msg = consumer.poll(1)
            if msg is not None and not msg.error():
                assert msg.offset() >= tiered.log_starts[msg.partition()] + 5
                seen.add(msg.partition())
        targets = {p: tiered.log_starts[p] // 3 for p in range(PARTITIONS)}
        stops = {p: tiered.log_starts[p] + 20 for p in range(PARTITIONS)}
        for p, offset in targets.items():
            consumer.seek(TopicPartition(tiered.topic, p, offset))
        got: dict[int, list[Record]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + 60
        while any(not got[p] or got[p][-1][1] < stops[p] for p in range(PARTITIONS)):
            assert time.monotonic() < deadline, {p: len(rs) for p, rs in got.items()}
            msg = consumer.poll(1)
            if msg is None:
                continue
            assert not msg.error(), msg.error()
            p = msg.partition()
            if not got[p] and msg.offset() != targets[p]:
                # Records fetched before the seek may still be on their way; the seek's own start
                # with the target offset, which is below every one of them.
                assert msg.offset() > tiered.log_starts[p], (p, msg.offset())
                continue
            got[p].append((p, msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    for p in range(PARTITIONS):
        upto = [r for r in got[p] if r[1] <= stops[p]]
        assert upto == parts[p][targets[p] : stops[p] + 1], f"partition {p}"


def test_list_offsets_earliest_is_the_tier_start_and_latest_tiered_the_tier_end(tiered: Tiered) -> None:
    tps = [TopicPartition(tiered.topic, p) for p in range(PARTITIONS)]
    # librdkafka: the low watermark (ListOffsets earliest, -2) and the Admin API's earliest.
    consumer = Consumer({"bootstrap.servers": tiered.gateway.bootstrap, "group.id": "marks"})
    try:
        marks = {tp.partition: consumer.get_watermark_offsets(tp, timeout=30) for tp in tps}
    finally:
        consumer.close()
    ends = {p: len([r for r in tiered.expected if r[0] == p]) for p in range(PARTITIONS)}
    assert marks == {p: (0, ends[p]) for p in range(PARTITIONS)}
    admin = AdminClient({"bootstrap.servers": tiered.gateway.bootstrap})
    earliest = admin.list_offsets({tp: OffsetSpec.earliest() for tp in tps}, request_timeout=30)
    assert {tp.partition: f.result(30).offset for tp, f in earliest.items()} == dict.fromkeys(ends, 0)

    tier_ends = _tier_last_offsets(tiered)
    assert all(tiered.log_starts[p] - 1 <= tier_ends[p] < ends[p] for p in range(PARTITIONS)), tier_ends
    # latest-tiered (-5) as Kafka's Java AdminClient asks it (OffsetSpec.latestTiered(), by GetOffsetShell).
    out = _run_java(
        tiered,
        "org.apache.kafka.tools.GetOffsetShell",
        "--bootstrap-server",
        tiered.gateway.bootstrap,
        "--topic",
        tiered.topic,
        "--time",
        "latest-tiered",
    )
    lines = [line.split(":") for line in out.splitlines() if line.startswith(f"{tiered.topic}:")]
    assert {int(partition): int(offset) for _, partition, offset in lines} == tier_ends
    # earliest (-2), earliest-local (-4) and latest-tiered (-5) in raw ListOffsets requests to each leader.
    for p, address in _leaders(tiered, tiered.topic).items():
        answers = {ts: _raw_list_offset(address, tiered.topic, p, ts) for ts in (-2, -4, -5)}
        assert answers == {-2: 0, -4: tiered.log_starts[p], -5: tier_ends[p]}, p


def test_max_timestamp_is_the_first_record_with_the_largest_timestamp_tiered_ones_included(
    tiered: Tiered,
) -> None:
    tp = TopicPartition(tiered.peak_topic, 0)
    assert tiered.all_log_starts[(tiered.peak_topic, 0)] > max(PEAK_OFFSETS), "the peak was not trimmed"

    def max_timestamp(bootstrap: str) -> tuple[int, int]:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        (future,) = admin.list_offsets({tp: OffsetSpec.max_timestamp()}, request_timeout=30).values()
        found = future.result(30)
        return found.offset, found.timestamp

    # The broker looks in its local segments only (as Kafka's own tiered storage does: KAFKA-17552); a
    # segment below the trimmed log start still counts until the broker's retention check deletes it.
    deadline = time.monotonic() + 60
    while (local := max_timestamp(tiered.cluster.bootstrap_servers))[0] in PEAK_OFFSETS:
        assert time.monotonic() < deadline, "the brokers kept the trimmed segment of the peak"
        time.sleep(0.5)
    assert local[0] == PEAK_RECORDS - 1 and local[1] < tiered.peak_timestamp
    assert max_timestamp(tiered.gateway.bootstrap) == (min(PEAK_OFFSETS), tiered.peak_timestamp)


def _tier_last_offsets(tiered: Tiered) -> dict[int, int]:
    """The last offset the tier holds per partition, as ``tierkeeper ls`` lists the segments."""
    listed = run_cli("ls", "--topic", tiered.topic, "--json", "--remote", tiered.remote)
    assert listed.returncode == 0, listed.stderr
    out: dict[int, int] = {}
    for seg in json.loads(listed.stdout)["segments"]:
        if seg["state"] == "COPY_FINISHED":
            out[seg["partition"]] = max(out.get(seg["partition"], -1), seg["end_offset"])
    return out


# ---- 4. Spark's own Kafka source -------------------------------------------------------------------------
def test_spark_kafka_source_reads_exactly_the_expected_records(tiered: Tiered, spark: Any) -> None:
    rows = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", tiered.gateway.bootstrap)
        .option("subscribe", tiered.topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
        .select("partition", "offset", "key", "value")
        .collect()
    )
    got = [(r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in rows]
    assert len(got) == RECORDS
    assert sorted(got) == tiered.expected


# ---- 5. Transactions ---------------------------------------------------------------------------------------
def test_transactions_read_committed_equal_a_direct_read_before_the_trim(tiered: Tiered) -> None:
    below = [r for r in tiered.txn_committed if r[1] < tiered.all_log_starts[(tiered.txn_topic, r[0])]]
    assert below, "no committed record lies below the brokers' log start: the test would prove nothing"
    # The last transaction (aborted) begins in the tier and ends on the brokers: the tier's end is in it.
    written = len(tiered.txn_uncommitted)
    for p in range(TXN_PARTITIONS):
        last = [r[1] for r in tiered.txn_uncommitted if r[0] == p and int(r[2][1:]) >= written - TXN_LAST]
        assert min(last) < tiered.all_log_starts[(tiered.txn_topic, p)] <= max(last), (
            p,
            min(last),
            max(last),
        )
    got = read_all(
        tiered.gateway.bootstrap, tiered.txn_topic, TXN_PARTITIONS, **{"isolation.level": "read_committed"}
    )
    assert len(got) == len(tiered.txn_committed)
    assert got == tiered.txn_committed


def test_the_java_consumer_reads_committed_transactions_as_a_direct_read_did(tiered: Tiered) -> None:
    """Kafka's own consumer filters aborted transactions from the tier's batches (and checks their CRCs)."""
    out = _console_consume(
        tiered,
        tiered.txn_topic,
        len(tiered.txn_committed),
        "--isolation-level",
        "read_committed",
        "--property",
        "print.value=false",
    )
    got = []
    for line in out.splitlines():
        if line.startswith("Partition:"):
            partition, offset, key = line.split("\t")[:3]
            got.append((int(partition.split(":")[1]), int(offset.split(":")[1]), key.encode()))
    assert sorted(got) == [r[:3] for r in tiered.txn_committed]


def test_transactions_read_uncommitted_equal_a_direct_read_before_the_trim(tiered: Tiered) -> None:
    got = read_all(
        tiered.gateway.bootstrap, tiered.txn_topic, TXN_PARTITIONS, **{"isolation.level": "read_uncommitted"}
    )
    assert len(got) == len(tiered.txn_uncommitted)
    assert got == tiered.txn_uncommitted


# ---- 6. Compression codecs ---------------------------------------------------------------------------
def test_every_compression_codec_passes_through(tiered: Tiered) -> None:
    got = read_all(tiered.gateway.bootstrap, tiered.codecs_topic, len(CODECS), detail=True)
    for p, codec in enumerate(CODECS):
        mine = [r for r in got if r[0] == p]
        theirs = [r for r in tiered.codecs_expected if r[0] == p]
        assert mine[0][1] == 0 and tiered.all_log_starts[(tiered.codecs_topic, p)] > 0, codec
        assert mine == theirs, f"{codec}: records differ"
    assert got == tiered.codecs_expected


def test_tiered_batches_are_served_as_stored_in_their_codec(tiered: Tiered) -> None:
    """A raw Fetch at offset 0 through the gateway: the tier's batches arrive as the producer compressed
    them (each batch's codec bits and CRC intact), not decompressed or re-encoded on the way."""
    from storage_core.formats.record_batch import BatchHeader, validate_crc

    leaders = _leaders(tiered, tiered.codecs_topic)
    for p, codec in enumerate(CODECS):
        records = _raw_fetch(leaders[p], tiered.codecs_topic, p, 0)
        pos, codecs, first = 0, set(), None
        while pos < len(records):
            header = BatchHeader.parse(records, pos)
            if pos + 12 + header.batch_length > len(records):
                break  # a partial batch at the end of the byte limit, as a broker may send
            validate_crc(records[pos : pos + 12 + header.batch_length])
            first = header.base_offset if first is None else first
            codecs.add(header.attributes & 0x07)
            pos += 12 + header.batch_length
        assert first == 0, (codec, first)
        assert codecs == {CODECS.index(codec)}, f"{codec}: batches came with codecs {codecs}"


def _leaders(tiered: Tiered, topic: str) -> dict[int, str]:
    """Partition -> the gateway address of its leader, as the gateway's Metadata says."""
    metadata = AdminClient({"bootstrap.servers": tiered.gateway.bootstrap}).list_topics(topic, timeout=30)
    brokers = metadata.brokers
    return {
        p: f"{brokers[info.leader].host}:{brokers[info.leader].port}"
        for p, info in metadata.topics[topic].partitions.items()
    }


def _raw_request(address: str, api_key: int, version: int, body: Any) -> Any:
    """One request over a plain socket, without ApiVersions first (a broker answers such a client)."""
    import socket

    from storage_core.gateway.protocol import SIZE, RequestHeader, decode_response, encode_request

    frame = b"".join(encode_request(RequestHeader(api_key, version, 7, "raw-client", 0), body, 7))
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(frame)
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + SIZE.unpack_from(buf)[0]:
            chunk = sock.recv(1 << 16)
            assert chunk, "the gateway closed the connection"
            buf += chunk
    return decode_response(api_key, version, buf[4:])


def _raw_list_offset(address: str, topic: str, partition: int, timestamp: int) -> int:
    """ListOffsets v9 (the first with latest-tiered, -5) for one partition: its offset."""
    from storage_core.gateway.protocol import request_type

    cls = request_type(2, 9)
    module = sys.modules[cls.__module__]
    body = cls(
        replica_id=-1,
        isolation_level=0,
        topics=(
            module.ListOffsetsTopic(
                name=topic,
                partitions=(
                    module.ListOffsetsPartition(
                        partition_index=partition, current_leader_epoch=-1, timestamp=timestamp
                    ),
                ),
            ),
        ),
    )
    ((part,),) = (t.partitions for t in _raw_request(address, 2, 9, body).topics)
    assert part.error_code == 0, (timestamp, part.error_code)
    return int(part.offset)


def _raw_fetch(address: str, topic: str, partition: int, offset: int) -> bytes:
    """One Fetch v12 (topic names, sessionless): the partition's records bytes."""
    import datetime

    from storage_core.gateway.protocol import request_type

    cls = request_type(1, 12)
    module = sys.modules[cls.__module__]
    body = cls(
        cluster_id=None,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=100),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            module.FetchTopic(
                topic=topic,
                partitions=(
                    module.FetchPartition(
                        partition=partition,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    ((part,),) = (t.partitions for t in _raw_request(address, 1, 12, body).responses)
    assert part.error_code == 0, part.error_code
    return bytes(part.records or b"")
