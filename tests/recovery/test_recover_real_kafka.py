"""Delete a tiered topic in a real Kafka, recover it with the real CLI, read its history back.

References: a real consumer's read of the original topic before it was deleted (read_committed, so
aborted transactions and control records are not part of the history), and Kafka itself for the
recreated topic (its topic id, high watermarks and a real consumer again).
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness.kafka import KafkaCluster
from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.faults import ENV

from .conftest import Deleted, Remote
from .history import PARTITIONS, Rec, consume, delete_topic, high_watermarks, run_cli, start_cli


def _recover(
    d: Deleted, remote: Remote, *extra: str, json_out: bool = True
) -> subprocess.CompletedProcess[str]:
    return run_cli(
        "recover",
        "--topic",
        d.topic,
        "--bootstrap-servers",
        d.bootstrap,
        *remote.flags,
        *extra,
        *(["--json"] if json_out else []),
        env=remote.env,
    )


def _old_to_new(summary: dict[str, Any], partition: int) -> dict[int, int]:
    detail = next(p for p in summary["partition_details"] if p["partition"] == partition)
    return {old + i: new + i for old, new, length in detail["mapping"] for i in range(length)}


def _assert_restored(
    d: Deleted, summary: dict[str, Any], isolations: tuple[str, ...] = ("read_committed",)
) -> None:
    """The recreated topic holds exactly the tiered committed history, once, in order, and the reported
    offset mapping says where each old record went."""
    assert summary["complete"] is True
    assert summary["restored_total"] == sum(len(v) for v in d.expected.values())
    for p, want in d.expected.items():
        mapping = _old_to_new(summary, p)
        for isolation in isolations:
            got = consume(d.bootstrap, d.topic, p, isolation)
            assert [g.content() for g in got] == [w.content() for w in want], f"partition {p} ({isolation})"
            assert {g.timestamp_type for g in got} == {1}, "timestamps must be CreateTime"
            assert [mapping.get(w.offset) for w in want] == [g.offset for g in got], f"partition {p} mapping"


def _live_topic_id(d: Deleted) -> str | None:
    described = KafkaAdmin(d.bootstrap).describe_if_exists(d.topic)
    ids = {info.topic_id for info in described.values()}
    assert len(ids) <= 1
    return ids.pop() if ids else None


def _decode(field: dict[str, str] | None) -> bytes | None:
    if field is None:
        return None
    import base64

    return field["utf8"].encode() if "utf8" in field else base64.b64decode(field["base64"])


def _read_back(line: dict[str, Any]) -> Rec:
    headers = tuple((k, _decode(v)) for k, v in line["headers"])
    return Rec(line["offset"], line["timestamp"], 1, _decode(line["key"]), _decode(line["value"]), headers)


def test_recover_from_file_tier_restores_history_and_keeps_the_old_incarnation_readable(
    deleted_topic: Deleted,
) -> None:
    d = deleted_topic
    delete_topic(d.bootstrap, d.topic)
    proc = _recover(d, d.file)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["action"] == "create" and summary["source_topic_id"] == d.topic_id
    new_id = _live_topic_id(d)
    assert new_id is not None and new_id != d.topic_id and summary["target_topic_id"] == new_id
    assert len(KafkaAdmin(d.bootstrap).describe_if_exists(d.topic)) == PARTITIONS
    _assert_restored(d, summary, ("read_committed", "read_uncommitted"))
    assert any(p["offsets_shifted"] for p in summary["partition_details"]), "aborted data must shift offsets"

    # The printed commands read the old incarnation from the remote tier, record for record.
    assert len(summary["read_commands"]) == PARTITIONS
    for p, command in enumerate(summary["read_commands"]):
        argv = shlex.split(command)
        assert argv[:2] == ["tierkeeper", "read"] and d.topic_id in argv
        read = run_cli(*argv[1:], env=d.file.env)  # argv[1:] starts with the verb
        assert read.returncode == 0, read.stderr
        got = [_read_back(json.loads(line)) for line in read.stdout.splitlines()]
        assert [(g.offset, g.content()) for g in got] == [(w.offset, w.content()) for w in d.expected[p]]

    # A rerun finds everything restored and writes nothing.
    before = high_watermarks(d.bootstrap, d.topic)
    again = _recover(d, d.file, json_out=False)
    assert again.returncode == 0, again.stderr
    assert f"--topic-id {d.topic_id}" in again.stdout and "(0 in this run)" in again.stdout
    assert high_watermarks(d.bootstrap, d.topic) == before
    for p, want in d.expected.items():
        assert [g.content() for g in consume(d.bootstrap, d.topic, p)] == [w.content() for w in want]


def test_recover_from_s3_tier(deleted_topic: Deleted) -> None:
    d = deleted_topic
    delete_topic(d.bootstrap, d.topic)
    proc = _recover(d, d.s3, "--replication-factor", "1")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["replication_factor"] == 1 and summary["source_topic_id"] == d.topic_id
    _assert_restored(d, summary)
    with d.s3.reader() as reader:
        for p, want in d.expected.items():
            tp = reader.resolve(d.topic, p, d.topic_id)
            got = [
                (r.offset, (r.timestamp, r.key, r.value, r.headers)) for r in reader.read_from_offset(tp, 0)
            ]
            assert got == [(w.offset, w.content()) for w in want], f"partition {p}"


@pytest.mark.parametrize(
    ("point", "kill_at"),
    [("recover.chunk.committed", 0.15), ("recover.chunk.produced", 0.5), ("recover.chunk.committed", 0.8)],
)
def test_kill_9_mid_recover_then_rerun_restores_each_record_once(
    deleted_topic: Deleted, point: str, kill_at: float
) -> None:
    d = deleted_topic
    delete_topic(d.bootstrap, d.topic)
    total = sum(len(v) for v in d.expected.values())
    # Transactions of at most 100 records, so there are at least total // 100 chunks; the kill lands at a
    # named point (storage_core/faults.py) of the chunk at about ``kill_at`` of the history: mid-restore
    # by construction, whatever the machine's speed (``recover.chunk.produced`` leaves a transaction open).
    nth = max(1, int(kill_at * (total // 100)))
    proc = start_cli(
        "recover",
        "--topic",
        d.topic,
        "--bootstrap-servers",
        d.bootstrap,
        *d.file.flags,
        "--transaction-records",
        "100",
        "--json",
        env={ENV: f"{point}:{nth}"},
    )
    proc.communicate(timeout=300)
    assert proc.returncode == -9
    partial = sum(len(consume(d.bootstrap, d.topic, p)) for p in d.expected)
    assert 0 < partial < total, "the kill must land mid-restore"

    rerun = _recover(d, d.file)
    assert rerun.returncode == 0, rerun.stderr
    summary = json.loads(rerun.stdout)
    assert summary["action"] == "resume"
    assert sum(p["restored_before"] for p in summary["partition_details"]) == partial
    assert summary["restored_now"] == total - partial
    _assert_restored(d, summary)


def test_several_incarnations_need_topic_id(
    deleted_topic: Deleted, kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    d = deleted_topic
    delete_topic(d.bootstrap, d.topic)
    root = tmp_path / "tier"
    shutil.copytree(d.file.url.removeprefix("file://"), root)
    remote = Remote(f"file://{root}", {}, ["--remote", f"file://{root}"])
    # Recover, then tier the recreated topic: the remote tier now holds two incarnations of the name.
    first = _recover(d, remote, "--config", "internal.segment.bytes=65536")
    assert first.returncode == 0, first.stderr
    second_id = json.loads(first.stdout)["target_topic_id"]
    copy = run_cli(
        "copy",
        "--log-dir",
        str(kafka_broker.log_dir(1)),
        "--bootstrap-servers",
        d.bootstrap,
        "--topic",
        d.topic,
        *remote.flags,
    )
    assert copy.returncode == 0, copy.stderr
    delete_topic(d.bootstrap, d.topic)

    ambiguous = _recover(d, remote)
    assert ambiguous.returncode == 1
    lines = ambiguous.stderr.strip().splitlines()
    assert len(lines) == 1 and "--topic-id" in lines[0], ambiguous.stderr
    assert d.topic_id in lines[0] and second_id in lines[0]
    assert _live_topic_id(d) is None, "a refused recovery must not create the topic"

    chosen = _recover(d, remote, "--topic-id", d.topic_id)
    assert chosen.returncode == 0, chosen.stderr
    _assert_restored(d, json.loads(chosen.stdout))


def test_refuses_to_mix_into_a_foreign_non_empty_topic(deleted_topic: Deleted) -> None:
    d = deleted_topic
    delete_topic(d.bootstrap, d.topic)
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": d.bootstrap})
    for fut in admin.create_topics([NewTopic(d.topic, PARTITIONS, 1)]).values():
        fut.result(60)
    producer = Producer({"bootstrap.servers": d.bootstrap})
    producer.produce(d.topic, value=b"someone else's data", partition=0)
    assert producer.flush(30) == 0
    proc = _recover(d, d.file)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "refusing to mix" in lines[0], proc.stderr
    assert high_watermarks(d.bootstrap, d.topic) == {0: 1, 1: 0, 2: 0}
    delete_topic(d.bootstrap, d.topic)


def test_dry_run_changes_nothing(deleted_topic: Deleted) -> None:
    d = deleted_topic
    delete_topic(d.bootstrap, d.topic)
    proc = _recover(d, d.file, "--dry-run", json_out=False)
    assert proc.returncode == 0, proc.stderr
    assert f"would create topic {d.topic} ({PARTITIONS} partitions" in proc.stdout
    assert _live_topic_id(d) is None


def test_unknown_topic_is_a_clear_error(deleted_topic: Deleted) -> None:
    d = deleted_topic
    proc = run_cli("recover", "--topic", "no-such-topic", "--bootstrap-servers", d.bootstrap, *d.file.flags)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no-such-topic" in lines[0] and "no tiered data" in lines[0], proc.stderr
