"""Kafka credentials on a real Kafka 4.1 broker whose client listener requires SASL/PLAIN (the harness's
``sasl`` option; the controller listener stays plaintext).

- The broker itself: an unauthenticated client and a wrong password are refused, the right user works.
- ``copy`` and ``cleanup`` read the credentials from a directory laid out as a mounted Secret
  (``--kafka-config-dir``, what the operator's Jobs get) and succeed; without it they fail with one line.
- The operator's and standalone mode's own clients (``ClusterClients``) take the same files for a cluster
  with ``clientConfigSecretRef``; a missing or empty directory is one line naming the cluster.
- ``tierkeeper standalone --kafka-config-dir CLUSTER=DIR`` tiers and trims a topic on the SASL broker.
Everything captured is scanned for the password.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from harness.kafka import SASL_USER, KafkaCluster
from harness.tierkeeper_cli import run_cli
from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.adapters.kafka_client_config import ClusterClients, parse_config_dirs
from storage_core.api.cluster import KafkaClusterConfig
from storage_core.errors import ConfigError, KafkaAdminError

from .secret_scan import leaks, secret_volume
from .topics import SMALL_SEGMENTS, create_topic

USER, PASSWORD = SASL_USER.username, SASL_USER.password
"""The shared ``sasl_broker``'s user (tests/conftest.py)."""
MECHANISM = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}


def credentials(root: Path) -> Path:
    """The Secret's part of the client properties, as the kubelet mounts it; the rest is non-secret."""
    return secret_volume(root, {"sasl.username": USER, "sasl.password": PASSWORD + "\n"})


def test_the_broker_refuses_clients_without_the_right_credentials(sasl_broker: KafkaCluster) -> None:
    bootstrap = {"bootstrap.servers": sasl_broker.bootstrap_servers}
    assert set(AdminClient({**bootstrap, **sasl_broker.client_config}).list_topics(timeout=30).brokers) == {1}
    for refused in ({}, {**MECHANISM, "sasl.username": USER, "sasl.password": "not-the-password"}):
        with pytest.raises(KafkaException):
            # No timing in this: a refused client never gets metadata, however long it waits.
            AdminClient({**bootstrap, **refused, "log_level": "0"}).list_topics(timeout=10)
    # The broker says why it refused the wrong password (the unauthenticated client is cut off earlier).
    assert "Authentication failed: Invalid username or password" in sasl_broker.server_log(1)
    # ApiVersions comes before the SASL handshake: the TieredCluster's version check needs no login.
    features = KafkaAdmin(sasl_broker.bootstrap_servers, sasl_broker.client_config).features()
    assert features.metadata_version == "4.1-IV1"


def test_a_refused_client_is_told_why(sasl_broker: KafkaCluster) -> None:
    """librdkafka tells only its error callback why a connection failed; the adapter's errors say it."""
    # The broker hangs up on a client without SASL, which librdkafka retries until the request's timeout:
    # the cluster's socket.timeout.ms sets it (the adapter's default is 30 s).
    plain = KafkaAdmin(sasl_broker.bootstrap_servers, {"socket.timeout.ms": "8000"})
    with pytest.raises(KafkaAdminError) as unauthenticated:
        plain.topic_names()
    assert "no security.protocol is configured" in str(unauthenticated.value), unauthenticated.value
    wrong = {**MECHANISM, "sasl.username": USER, "sasl.password": "not-the-password"}
    refused = KafkaAdmin(sasl_broker.bootstrap_servers, wrong)
    with pytest.raises(KafkaAdminError) as bad_password:
        refused.topic_names()
    line = str(bad_password.value)
    assert "broker connection: " in line and "Authentication failed" in line, line
    # Given up on the broker's refusal, as Kafka's Java clients do, not after the request's whole timeout.
    assert "the broker refused the client's login" in line, line
    assert "not-the-password" not in line and "security.protocol is configured" not in line


def test_copy_and_cleanup_authenticate_with_the_mounted_secret_dir(
    sasl_broker: KafkaCluster, tmp_path: Path
) -> None:
    topic = create_topic(sasl_broker, SMALL_SEGMENTS)
    mounted = credentials(tmp_path / "kafka-client")
    flags = [arg for key, value in MECHANISM.items() for arg in ("--kafka-property", f"{key}={value}")]
    common = ["--bootstrap-servers", sasl_broker.bootstrap_servers, "--remote", f"file://{tmp_path}/tier"]
    log_dir = ["--log-dir", str(sasl_broker.log_dir(1))]
    outputs = []

    def refused(*argv: str) -> None:
        """Fails with one line (besides librdkafka's own log lines, which start with "%"):
        with the SASL properties but no user the client refuses its configuration; with none, the broker
        refuses the client."""
        failed = run_cli(*argv, timeout=240)
        outputs.append(failed.stdout + failed.stderr)
        assert failed.returncode != 0, failed.stdout
        # librdkafka's log lines come from its own threads, before or after ours.
        (last,) = [line for line in failed.stderr.strip().splitlines() if not line.startswith("%")]
        assert last.startswith(f"tierkeeper {argv[0]}: error:"), failed.stderr
        if flags[1] in argv:
            assert "Kafka client configuration refused: check properties" in last, last
            assert "sasl.mechanism" in last, last
        else:
            assert sasl_broker.bootstrap_servers in last, last
            # The broker only hangs up on a client that does not speak SASL: the line says what to check.
            assert "no security.protocol is configured" in last, last

    # Without the Secret's files: refused. A client without SASL is only hung up on, and retries until its
    # socket.timeout.ms.
    hung_up = ["--kafka-property", "socket.timeout.ms=8000"]
    refused("copy", *log_dir, *common, *flags)
    refused("copy", *log_dir, *common, *hung_up)
    copied = run_cli("copy", *log_dir, *common, *flags, "--kafka-config-dir", str(mounted), "--json")
    outputs.append(copied.stdout + copied.stderr)
    assert copied.returncode == 0, copied.stderr
    summary = json.loads(copied.stdout)
    assert summary["copied_segments"] >= 2, summary
    # Cleanup talks to Kafka once the tier holds the topic (log start offsets, DeleteRecords).
    refused("cleanup", *common, *flags, "--topic", topic)
    refused("cleanup", *common, *hung_up, "--topic", topic)
    cleaned = run_cli(
        "cleanup", *common, *flags, "--kafka-config-dir", str(mounted), "--topic", topic, "--json"
    )
    outputs.append(cleaned.stdout + cleaned.stderr)
    assert cleaned.returncode == 0, cleaned.stderr
    # Rebuild asks Kafka for the broker's assignment: a replaced broker of a SASL cluster is rebuilt
    # with the same mounted files (its init container and the operator's rebuild Job mount the Secret).
    (tmp_path / "replaced").mkdir()  # formatted, as Kafka's storage tool leaves a replaced broker's dir
    shutil.copy(sasl_broker.log_dir(1) / "meta.properties", tmp_path / "replaced")
    new_dir = ["--log-dir", str(tmp_path / "replaced"), "--broker-id", "1", "--dry-run"]
    refused("rebuild", *new_dir, *common, *flags)
    refused("rebuild", *new_dir, *common, *hung_up)
    planned = run_cli(
        "rebuild", *new_dir, *common, *flags, "--kafka-config-dir", str(mounted), "--json", timeout=240
    )
    outputs.append(planned.stdout + planned.stderr)
    assert planned.returncode == 0, planned.stderr
    assert topic in planned.stdout, planned.stdout
    assert leaks("\n".join(outputs), [PASSWORD]) == []


def cluster_with_secret(broker: KafkaCluster) -> KafkaClusterConfig:
    return KafkaClusterConfig.model_validate(
        {
            "name": "secure",
            "bootstrapServers": broker.bootstrap_servers,
            "clientConfig": MECHANISM,
            "clientConfigSecretRef": {"name": "kafka-client"},
            "remote": {"url": "memory://sasl"},
        }
    )


def test_own_clients_read_the_mounted_secret_and_stall_clearly_without_it(
    sasl_broker: KafkaCluster, tmp_path: Path
) -> None:
    cluster = cluster_with_secret(sasl_broker)
    clusters = {"secure": cluster}
    made: list[dict[str, str]] = []

    def admin(bootstrap: str, config: dict[str, str]) -> KafkaAdmin:
        made.append(config)
        return KafkaAdmin(bootstrap, config)

    mounted = credentials(tmp_path / "mounted")
    clients = ClusterClients(clusters, {"secure": mounted}, admin)
    topic = create_topic(sasl_broker, SMALL_SEGMENTS)
    assert topic in clients("secure").topic_names()
    clients.refresh()
    clients("secure")
    assert len(made) == 1  # same files: the client is kept
    # The kubelet updates a mounted Secret by swapping ..data: the next round's client uses the new files.
    rotated = secret_volume(
        tmp_path / "rotated", {"sasl.username": USER, "sasl.password": PASSWORD, "client.id": "rotated"}
    )
    (mounted / "..data").unlink()
    (mounted / "..data").symlink_to(rotated / "..data")
    (mounted / "client.id").symlink_to("..data/client.id")
    clients("secure")
    assert len(made) == 1  # not before the next round
    clients.refresh()
    assert topic in clients("secure").topic_names()
    assert len(made) == 2 and made[-1]["client.id"] == "rotated"

    problems = {
        "unmounted": ClusterClients(clusters, {}, admin),
        "missing": ClusterClients(clusters, {"secure": tmp_path / "absent"}, admin),
        "empty": ClusterClients(clusters, {"secure": secret_volume(tmp_path / "empty", {})}, admin),
    }
    messages = {}
    for case, broken in problems.items():
        with pytest.raises(ConfigError) as refused:
            broken("secure")
        messages[case] = str(refused.value)
        assert len(messages[case].splitlines()) == 1
        assert messages[case].startswith("cluster secure: clientConfigSecretRef kafka-client:"), messages
    assert "no --kafka-config-dir secure=DIR" in messages["unmounted"]
    assert "not a directory" in messages["missing"]
    assert "holds no properties" in messages["empty"]
    assert len(made) == 2  # no client was made without its credentials
    assert leaks(repr(messages), [PASSWORD]) == []

    for flags, says in (
        (["secure"], "expected CLUSTER=DIR"),
        (["other=/x"], "no cluster 'other' is configured"),
        ([f"secure={mounted}", f"secure={mounted}"], "given twice"),
    ):
        with pytest.raises(ConfigError, match=says):
            parse_config_dirs(flags, clusters)
    plain = cluster.model_copy(update={"client_config_secret_ref": None})
    with pytest.raises(ConfigError, match="has no clientConfigSecretRef"):
        parse_config_dirs([f"secure={mounted}"], {"secure": plain})


def test_standalone_tiers_a_topic_on_the_sasl_broker(sasl_broker: KafkaCluster, tmp_path: Path) -> None:
    topic = create_topic(sasl_broker, SMALL_SEGMENTS)
    cluster = cluster_with_secret(sasl_broker).model_dump(by_alias=True, exclude_none=True, mode="json")
    cluster["remote"] = {"url": f"file://{tmp_path}/tier"}
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    resources = [
        {
            "apiVersion": "tierkeeper.io/v1alpha1",
            "kind": "TieredTopic",
            "metadata": {"name": topic, "namespace": "sasl"},
            "spec": {
                "clusterRef": {"name": "secure"},
                "topic": topic,
                "localRetentionMs": -1,
                "localRetentionBytes": 65536,
            },
        },
        {
            "apiVersion": "tierkeeper.io/v1alpha1",
            "kind": "TieredBroker",
            "metadata": {"name": "broker-1", "namespace": "sasl"},
            "spec": {
                "clusterRef": {"name": "secure"},
                "brokerId": 1,
                "logDir": {"path": str(sasl_broker.log_dir(1))},
            },
        },
    ]
    (manifests / "resources.yaml").write_text(yaml.safe_dump_all(resources))
    base = ["standalone", "--cluster", str(tmp_path / "cluster.yaml"), "--manifests", str(manifests)]

    refused = run_cli(*base, "--once")
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines() == [
        f"tierkeeper standalone: error: {tmp_path / 'cluster.yaml'}: cluster 'secure' has a "
        "clientConfigSecretRef; standalone mode reads no Secrets: give --kafka-config-dir secure=DIR, a "
        "directory with one file per client property"
    ], refused.stderr

    mounted = credentials(tmp_path / "kafka-client")
    ran = run_cli(*base, "--once", "--json", "--kafka-config-dir", f"secure={mounted}", timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    statuses = json.loads(ran.stdout)
    text = json.dumps(statuses)
    assert '"lastCopy"' in text and '"Succeeded"' in text, text[:3000]
    assert '"lastCleanup"' in text, text[:3000]
    starts = KafkaAdmin(sasl_broker.bootstrap_servers, sasl_broker.client_config).log_start_offsets(
        [(topic, 0)]
    )
    assert starts[(topic, 0)] > 0, starts  # trimmed behind the tier, through an authenticated DeleteRecords
    assert leaks(ran.stdout + ran.stderr + refused.stderr, [PASSWORD]) == []


def test_the_operator_refuses_a_config_dir_that_names_no_secret_at_start(tmp_path: Path) -> None:
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(
        yaml.safe_dump_all(
            [
                {"name": "plain", "bootstrapServers": "127.0.0.1:1", "remote": {"url": "memory://a"}},
                {
                    "name": "secure",
                    "bootstrapServers": "127.0.0.1:1",
                    "clientConfigSecretRef": {"name": "kafka-client"},
                    "remote": {"url": "memory://b"},
                },
            ]
        )
    )
    for flag, says in (
        ("plain=/etc/tierkeeper/kafka-client/plain", "cluster 'plain' has no clientConfigSecretRef"),
        ("other=/x", "no cluster 'other' is configured"),
    ):
        refused = run_cli("operator", "-n", "ns", "--cluster", str(clusters), "--kafka-config-dir", flag)
        assert refused.returncode != 0
        assert refused.stderr.strip().splitlines() == [
            f"tierkeeper operator: error: --kafka-config-dir {flag}: {says}"
        ], refused.stderr
