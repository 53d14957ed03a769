"""Topics that cannot be tiered safely are refused on real brokers: one line naming the topic and the
reason, a non-zero exit, and nothing written to the remote tier (or to Kafka)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from storage.private_logdir import copy_partitions

from harness.kafka import KafkaCluster
from harness.kafka_dist import classpath, java_binary
from harness.tierkeeper_cli import run_cli
from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.formats.checkpoints import CLEANER_OFFSET_CHECKPOINT
from storage_core.tiering.eligibility import SAFETY_MARGIN_MS

from .topics import SMALL_SEGMENTS, create_topic

JAVA_STUB = Path(__file__).parent / "java" / "RefusingRemoteStorage.java"


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def _error_lines(stderr: str, verb: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(f"tierkeeper {verb}: error:")]


def _copy(cluster: KafkaCluster, remote: Path, *topics: str, extra: tuple[str, ...] = ()) -> Any:
    args = [a for t in topics for a in ("--topic", t)]
    return run_cli(
        "copy",
        "--log-dir",
        str(cluster.log_dir(1)),
        *args,
        "--bootstrap-servers",
        cluster.bootstrap_servers,
        "--remote",
        f"file://{remote}",
        *extra,
    )


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_a_compacted_topic_is_refused_and_the_others_still_tier(
    kafka_broker: KafkaCluster, tmp_path: Path, policy: str
) -> None:
    compacted = create_topic(kafka_broker, {**SMALL_SEGMENTS, "cleanup.policy": policy})
    plain = create_topic(kafka_broker, SMALL_SEGMENTS)
    remote = tmp_path / "remote"
    proc = _copy(kafka_broker, remote, compacted, plain, extra=("--json",))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert _error_lines(proc.stderr, "copy") == [
        f"tierkeeper copy: error: topic {compacted}: cleanup.policy={policy}: the log cleaner rewrites "
        "segments after they are copied; only cleanup.policy=delete topics can be tiered"
    ]
    summary = json.loads(proc.stdout)
    assert summary["copied_segments"] > 0 and summary["failed_partitions"] == 0, proc.stdout
    assert [p["topic"] for p in summary["partitions"]] == [plain]
    assert not any(compacted in str(p) for p in _files(remote)), "nothing of the refused topic is written"


def _refusing_rsm_jar(tmp_path: Path) -> Path:
    """Compile the stub RemoteStorageManager against the harness's Kafka jars (javac beside java)."""
    javac = str(Path(java_binary()).with_name("javac"))
    classes = tmp_path / "rsm-classes"
    subprocess.run([javac, "-d", str(classes), "-cp", classpath(), str(JAVA_STUB)], check=True, timeout=300)
    jar = tmp_path / "rsm.jar"
    subprocess.run(
        [str(Path(javac).with_name("jar")), "cf", str(jar), "-C", str(classes), "tierkeeper"],
        check=True,
        timeout=120,
    )
    return jar


def test_a_topic_tiered_by_kafka_itself_is_refused(
    kafka_cluster_factory: Callable[..., KafkaCluster], tmp_path: Path
) -> None:
    jar = _refusing_rsm_jar(tmp_path)
    cluster = kafka_cluster_factory(
        1,
        {
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "tierkeeper.test.RefusingRemoteStorage",
            "remote.log.storage.manager.class.path": str(jar),
            "remote.log.metadata.manager.listener.name": "PLAINTEXT",
            "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
            "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
        },
    )
    topic = create_topic(cluster, {**SMALL_SEGMENTS, "remote.storage.enable": "true"})
    assert KafkaAdmin(cluster.bootstrap_servers).topic_configs(topic)["remote.storage.enable"] == "true"
    remote = tmp_path / "remote"
    proc = _copy(cluster, remote, topic)
    assert proc.returncode == 1, proc.stderr
    assert _error_lines(proc.stderr, "copy") == [
        f"tierkeeper copy: error: topic {topic}: remote.storage.enable=true: Kafka's own tiered storage "
        "manages this topic; Tierkeeper does not tier it a second time"
    ]
    assert _files(remote) == []


def test_copy_without_kafka_needs_the_assertion_and_still_reads_the_cleaner_checkpoint(
    kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    topic = create_topic(kafka_broker, SMALL_SEGMENTS)
    log_dir = copy_partitions(kafka_broker.log_dir(1), [topic], tmp_path / "logs")
    remote = tmp_path / "remote"
    proc = run_cli("copy", "--log-dir", str(log_dir), "--remote", f"file://{remote}")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert _error_lines(proc.stderr, "copy") == [
        "tierkeeper copy: error: without --bootstrap-servers the topics' cleanup.policy and "
        "remote.storage.enable cannot be checked; pass --bootstrap-servers, or --assume-tierable to "
        "assert they are tierable"
    ]
    assert _files(remote) == []

    # The log cleaner's checkpoint (the format the broker writes) names partitions it compacted.
    (log_dir / CLEANER_OFFSET_CHECKPOINT).write_text(f"0\n1\n{topic} 0 100\n")
    proc = run_cli("copy", "--assume-tierable", "--log-dir", str(log_dir), "--remote", f"file://{remote}")
    assert proc.returncode == 1
    lines = _error_lines(proc.stderr, "copy")
    assert (
        len(lines) == 1 and f"{topic}-0: topic {topic}: the log dir's cleaner-offset-checkpoint" in lines[0]
    )
    assert _files(remote) == []

    (log_dir / CLEANER_OFFSET_CHECKPOINT).write_text("0\n0\n")
    proc = run_cli("copy", "--assume-tierable", "--log-dir", str(log_dir), "--remote", f"file://{remote}")
    assert proc.returncode == 0, proc.stderr
    assert _files(remote) != []


def _alter(cluster: KafkaCluster, topic: str, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in config.items()
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(60)
    described = KafkaAdmin(cluster.bootstrap_servers)
    assert {k: described.topic_configs(topic)[k] for k in config} == config


HOUR_MS = 3_600_000


@pytest.mark.parametrize(
    ("config", "flags", "reason"),
    [
        # Kafka deletes after 1 h; Tierkeeper needs local window 0 + copy interval 1 h + margin 1 h.
        ({"retention.ms": str(HOUR_MS)}, (), f"Kafka's retention.ms={HOUR_MS} may delete segments"),
        # A short copy interval does not make up for a retention shorter than the margin.
        ({"retention.ms": str(SAFETY_MARGIN_MS)}, ("--copy-interval-ms", "60000"), "retention.ms="),
        # 3 h would do for a local window of 0, not for one of 2 h.
        (
            {"retention.ms": str(3 * HOUR_MS)},
            ("--local-retention-ms", str(2 * HOUR_MS)),
            "local window 7200000",
        ),
        # Room for less than two segments (segment.bytes 1 GiB) above the local window.
        ({"retention.bytes": str(1 << 30)}, (), "Kafka's retention.bytes=1073741824 may delete segments"),
        ({"cleanup.policy": "compact"}, (), "cleanup.policy=compact"),
    ],
)
def test_local_trim_is_refused_where_kafka_could_delete_first(
    kafka_broker: KafkaCluster,
    tmp_path: Path,
    config: dict[str, str],
    flags: tuple[str, ...],
    reason: str,
) -> None:
    topic = create_topic(kafka_broker, SMALL_SEGMENTS)
    remote = tmp_path / "remote"
    assert _copy(kafka_broker, remote, topic).returncode == 0
    before = {p: p.read_bytes() for p in _files(remote)}
    admin = KafkaAdmin(kafka_broker.bootstrap_servers)
    start = admin.log_start_offsets([(topic, 0)])
    _alter(kafka_broker, topic, config)
    cleanup = (
        "cleanup",
        "--remote",
        f"file://{remote}",
        "--bootstrap-servers",
        kafka_broker.bootstrap_servers,
        "--topic",
        topic,
    )
    window = () if "--local-retention-ms" in flags else ("--local-retention-ms", "0")
    proc = run_cli(*cleanup, *window, *flags)
    assert proc.returncode == 1, proc.stdout
    lines = _error_lines(proc.stderr, "cleanup")
    assert len(lines) == 1 and lines[0].startswith(f"tierkeeper cleanup: error: topic {topic}: "), proc.stderr
    assert reason in lines[0], lines[0]
    assert {p: p.read_bytes() for p in _files(remote)} == before, "nothing written to the remote tier"
    assert admin.log_start_offsets([(topic, 0)]) == start, "nothing trimmed"

    # The same topic with configs that leave time to tier is trimmed (the refusal was the config's).
    _alter(
        kafka_broker,
        topic,
        {"retention.ms": str(10 * HOUR_MS), "retention.bytes": "-1", "cleanup.policy": "delete"},
    )
    proc = run_cli(*cleanup, "--local-retention-ms", "0", "--json")
    assert proc.returncode == 0, proc.stderr
    assert admin.log_start_offsets([(topic, 0)])[(topic, 0)] > start[(topic, 0)]


def test_a_whole_log_dir_copy_passes_over_kafkas_internal_topics_silently(
    kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    """``copy --log-dir`` with no --topic over a broker that served a consumer group: its compacted
    ``__consumer_offsets`` is Kafka's own, not a refused user topic, so the copy succeeds and says nothing
    of it; a compacted user topic in the same log dir is still refused with its line."""
    from confluent_kafka import Consumer, TopicPartition

    plain = create_topic(kafka_broker, SMALL_SEGMENTS)
    compacted = create_topic(kafka_broker, {**SMALL_SEGMENTS, "cleanup.policy": "compact"})
    consumer = Consumer(
        {
            "bootstrap.servers": kafka_broker.bootstrap_servers,
            "group.id": f"g-{plain}",
            **kafka_broker.client_config,
        }
    )
    consumer.commit(offsets=[TopicPartition(plain, 0, 10)], asynchronous=False)
    consumer.close()
    source = kafka_broker.log_dir(1)
    assert any(p.name.startswith("__consumer_offsets-") for p in source.iterdir())
    log_dir = copy_partitions(source, [plain, "__consumer_offsets"], tmp_path / "logs")
    remote = tmp_path / "remote"

    def copy(*extra: str) -> Any:
        return run_cli(
            "copy",
            "--log-dir",
            str(log_dir),
            "--bootstrap-servers",
            kafka_broker.bootstrap_servers,
            "--remote",
            f"file://{remote}",
            "--json",
            *extra,
        )

    proc = copy()
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "" and "__consumer_offsets" not in proc.stdout
    summary = json.loads(proc.stdout)
    assert {p["topic"] for p in summary["partitions"]} == {plain} and summary["copied_segments"] > 0
    assert not any("__consumer_offsets" in str(p) for p in _files(remote))

    # A user topic the copy cannot tier still gets its line (and exit 1) in a whole-log-dir copy.
    for entry in source.iterdir():
        if entry.is_dir() and entry.name.rpartition("-")[0] == compacted:
            shutil.copytree(entry, log_dir / entry.name)
    proc = copy()
    assert proc.returncode == 1, proc.stderr
    assert _error_lines(proc.stderr, "copy") == [
        f"tierkeeper copy: error: topic {compacted}: cleanup.policy=compact: the log cleaner rewrites "
        "segments after they are copied; only cleanup.policy=delete topics can be tiered"
    ]
