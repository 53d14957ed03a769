"""``continueFromKafka`` against a broker whose client listener requires SASL/PLAIN (the session's
``sasl_broker``, tests/conftest.py): the ``kafka.*`` options reach the driver's admin client and the
tasks' consumers of the brokers' tail, and a wrong password fails at once with the brokers' reason,
never the password, never a wait for the poll timeout.

The topic is tiered by the real CLI with the credentials from a mounted-Secret directory (as the
operator's Jobs get them); the broker's active segments stay untiered: the tail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from reliability.secret_scan import leaks, secret_volume
from reliability.topics import SMALL_SEGMENTS, create_topic

from harness.kafka import SASL_USER, KafkaCluster
from harness.tierkeeper_cli import run_cli
from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.adapters.kafka_tail import KafkaSpec, read_range
from storage_core.errors import KafkaAdminError
from storage_core.spark.options import parse_options
from storage_core.spark.source import KafkaRangePartition, SplitPartition, _StreamReader

WRONG = "wrong-Pa55word-31ab7"
MECHANISM = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}


def _direct(broker: KafkaCluster, topic: str, ends: dict[int, int]) -> list[tuple[int, int, bytes]]:
    """Every record of ``topic`` below ``ends``, read by a plain consumer with the same credentials."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            **broker.client_config,
            "group.id": "sasl-direct",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    out: list[tuple[int, int, bytes]] = []
    try:
        for p, end in ends.items():
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)])
            while end > 0:
                msg = consumer.poll(30)
                assert msg is not None, f"{topic}-{p}: no record for 30 s"
                if msg.error() is not None:
                    assert msg.error().code() == msg.error()._PARTITION_EOF, msg.error()
                    break
                out.append((p, msg.offset(), msg.value() or b""))
                if msg.offset() == end - 1:
                    break
    finally:
        consumer.close()
    return sorted(out)


def test_continue_from_kafka_reads_the_tail_of_a_sasl_broker_and_a_wrong_password_fails_clearly(
    tk_spark: Any, sasl_broker: KafkaCluster, tmp_path: Path
) -> None:
    topic = create_topic(sasl_broker, SMALL_SEGMENTS, partitions=2)
    mounted = secret_volume(
        tmp_path / "kafka-client", {"sasl.username": SASL_USER.username, "sasl.password": SASL_USER.password}
    )
    tier = f"file://{tmp_path}/tier"
    flags = [arg for key, value in MECHANISM.items() for arg in ("--kafka-property", f"{key}={value}")]
    copied = run_cli(
        "copy",
        *("--log-dir", str(sasl_broker.log_dir(1)), "--bootstrap-servers", sasl_broker.bootstrap_servers),
        *("--remote", tier, "--topic", topic, "--kafka-config-dir", str(mounted), "--json"),
        *flags,
        timeout=240,
    )
    assert copied.returncode == 0, copied.stderr

    options = {
        "remote": tier,
        "topic": topic,
        "continueFromKafka": "true",
        "kafka.bootstrap.servers": sasl_broker.bootstrap_servers,
        **{f"kafka.{k}": v for k, v in sasl_broker.client_config.items()},
    }
    ends = {
        p: end
        for (_, p), end in KafkaAdmin(sasl_broker.bootstrap_servers, sasl_broker.client_config)
        .high_watermarks([(topic, 0), (topic, 1)])
        .items()
    }
    # The plan (the driver's admin client, authenticated) reads history from the tier and a tail from
    # the brokers in both partitions.
    reader = _StreamReader(parse_options({**options, "startingOffsets": "earliest"}, streaming=True))
    planned = list(reader.partitions(reader.initialOffset(), reader.latestOffset()))
    tails = {p.partition for p in planned if isinstance(p, KafkaRangePartition)}
    assert tails == {0, 1} and any(isinstance(p, SplitPartition) for p in planned), planned

    # The tasks' consumers authenticate with the same options: every offset once, as a direct consumer.
    df = tk_spark.read.format("tierkeeper").options(**options).load()
    rows = sorted((r["partition"], r["offset"], bytes(r["value"])) for r in df.collect())
    assert rows == _direct(sasl_broker, topic, ends)

    # A wrong password: the query fails saying why (the driver's plan is the first to connect) ...
    with pytest.raises(Exception) as failed:
        tk_spark.read.format("tierkeeper").options(**options).option(
            "kafka.sasl.password", WRONG
        ).load().collect()
    said = str(failed.value)
    assert "Authentication failed" in said, said[-3000:]
    assert leaks(said, [WRONG, SASL_USER.password]) == []
    # ... and a task's consumer of the tail fails at once with the brokers' reason: the poll timeout is
    # ten minutes, so only the refusal can end this read.
    wrong = KafkaSpec(
        {
            "bootstrap.servers": sasl_broker.bootstrap_servers,
            **sasl_broker.client_config,
            "sasl.password": WRONG,
        },
        poll_timeout_ms=600_000,
    )
    with pytest.raises(KafkaAdminError) as refused:
        list(read_range(wrong, topic, 0, 0, ends[0], read_committed=False, include_headers=False))
    line = str(refused.value)
    assert f"{topic}-0: the brokers at {sasl_broker.bootstrap_servers} refused the consumer" in line, line
    assert "Authentication failed" in line and "kafka.sasl" in line, line
    assert leaks(line, [WRONG, SASL_USER.password]) == []
