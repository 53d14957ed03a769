"""Kafka client properties reach the commands that talk to Kafka: non-secret ones as --kafka-property,
secret ones from a directory laid out like a mounted Secret (--kafka-config-dir, what the operator's Jobs
mount). Secrets are refused as flags, and no error quotes a value."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from harness.kafka import KafkaCluster
from harness.tierkeeper_cli import run_cli
from storage_core.cli.kafka_client import CONFIG_DIR_ENV, kafka_client_config, read_config_dir
from storage_core.errors import ConfigError

from .secret_scan import secret_volume

PASSWORD = "s3cr3t-Pa55word-value"


def args(**values: object) -> argparse.Namespace:
    return argparse.Namespace(**{"kafka_config_dir": None, "kafka_property": [], **values})


def test_config_dir_reads_a_mounted_secret_and_flags_win(tmp_path: Path) -> None:
    mounted = secret_volume(tmp_path / "kafka", {"sasl.username": "tk\n", "sasl.password": PASSWORD})
    assert read_config_dir(mounted) == {"sasl.username": "tk", "sasl.password": PASSWORD}
    config = kafka_client_config(
        args(kafka_config_dir=str(mounted), kafka_property=["client.id=a=b", "sasl.username=other"])
    )
    assert config == {"sasl.username": "other", "sasl.password": PASSWORD, "client.id": "a=b"}
    assert kafka_client_config(args(), {CONFIG_DIR_ENV: str(mounted)})["sasl.password"] == PASSWORD


@pytest.mark.parametrize(
    "flag, words",
    [
        ("sasl.password=" + PASSWORD, "sasl.password: looks like a secret"),
        ("ssl.key.pem=x", "ssl.key.pem: looks like a secret"),
        ("no-equals-sign", "--kafka-property number 1: expected KEY=VALUE"),
    ],
)
def test_secrets_and_malformed_properties_are_refused_as_flags(flag: str, words: str) -> None:
    with pytest.raises(ConfigError) as refused:
        kafka_client_config(args(kafka_property=[flag]))
    assert words in str(refused.value) and PASSWORD not in str(refused.value)


def test_missing_config_dir_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a directory"):
        read_config_dir(tmp_path / "absent")


def test_commands_hand_the_properties_to_their_kafka_client(
    kafka_broker: KafkaCluster, tmp_path: Path
) -> None:
    """The wiring, proven on a plaintext broker: a harmless client.id from the directory works, and a
    property librdkafka does not know (or a bad value) is refused by the client itself, so it was read;
    the error names the property and never the value."""
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    good = secret_volume(tmp_path / "good", {"client.id": "tierkeeper-job"})
    common = ["--bootstrap-servers", kafka_broker.bootstrap_servers, "--remote", f"file://{tmp_path}/tier"]
    ok = run_cli("cleanup", *common, "--kafka-config-dir", str(good), "--json")
    assert ok.returncode == 0, ok.stderr
    ok = run_cli("copy", "--log-dir", str(log_dir), *common, "--kafka-config-dir", str(good), "--json")
    assert ok.returncode == 0, ok.stderr
    bad = secret_volume(tmp_path / "bad", {"security.protocol": "NOT-A-PROTOCOL", "sasl.password": PASSWORD})
    for argv in (
        ("cleanup", *common, "--kafka-config-dir", str(bad)),
        ("copy", "--log-dir", str(log_dir), *common, "--kafka-config-dir", str(bad)),
    ):
        failed = run_cli(*argv)
        assert failed.returncode != 0
        lines = failed.stderr.strip().splitlines()
        assert len(lines) == 1 and "Kafka client configuration refused" in lines[0], failed.stderr
        assert PASSWORD not in failed.stderr + failed.stdout and "NOT-A-PROTOCOL" not in failed.stderr
    unknown = secret_volume(tmp_path / "unknown", {"no.such.property": "x"})
    failed = run_cli("cleanup", *common, "--kafka-config-dir", str(unknown))
    assert "check property no.such.property" in failed.stderr, failed.stderr
    assert os.path.isdir(good)


def test_fetchers_name_a_refused_property_in_one_line() -> None:
    # The fetcher planner's Admin client is built by the same factory as every other command's, so a
    # property librdkafka refuses is the same one line, not a traceback.
    failed = run_cli(
        "fetchers", "plan", "--bootstrap-servers", "127.0.0.1:1", "--kafka-property", "no.such.property=x"
    )
    assert failed.returncode == 1, failed.stderr
    assert failed.stderr.strip().splitlines() == [
        "tierkeeper fetchers: error: Kafka client configuration refused: check property no.such.property"
    ]
