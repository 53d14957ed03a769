"""TLS from the gateway to brokers that accept only TLS and require a client certificate, reached with the
Kafka client properties the other commands take, in both of librdkafka's forms (file paths as flags;
PEM text as files of ``--kafka-config-dir``, the way a Kubernetes Secret is mounted), while a plaintext
client reads the tiered history through the gateway from offset 0. And certificates replaced while the
gateway runs (a renewed gateway certificate, a rotated client certificate): loaded again without a
restart, a broken replacement refused while the previous one keeps serving."""

from __future__ import annotations

import os
import signal
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.gateway import GatewayProcess, tier_and_trim
from harness.k8s import wait_until
from harness.kafka import KafkaCluster
from harness.tls import client_certificate, loopback_certificates
from storage_core.adapters.kafka_features import KafkaFeaturesError, read_features
from storage_core.api.cluster import credential_like

from .conftest import SEGMENT_BYTES, Record, produce, read_all

TOPIC = "tls-history"
DEADLINE = 60.0


@pytest.fixture(scope="module")
def mtls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaCluster, str, list[Record]]]:
    """One broker requiring TLS client certificates, with a topic tiered to file:// and trimmed:
    (the cluster, the remote URL, what a direct consumer read before the trim)."""
    work = tmp_path_factory.mktemp("mtls")
    cluster = KafkaCluster(work / "kafka", brokers=1, tls=work / "pki", tls_client_auth=True).start()
    try:
        tls = cluster.client_config
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **tls})
        config = {"internal.segment.bytes": str(SEGMENT_BYTES), "retention.ms": "-1"}
        admin.create_topics([NewTopic(TOPIC, 1, 1, config=config)])[TOPIC].result(60)
        cluster.wait_topic(TOPIC, 1)
        produce(cluster, TOPIC, 1500, 1, **tls)
        expected = read_all(cluster.bootstrap_servers, TOPIC, 1, **tls)
        remote = f"file://{work / 'tier'}"
        tier_and_trim(cluster, ["--remote", remote, *_flags(tls, work / "client")], TOPIC)
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "probe", **tls})
        log_start = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)[0]
        consumer.close()
        assert log_start > 0, "the trim left the history on the broker"
        yield cluster, remote, expected
    finally:
        cluster.stop()


def _flags(config: dict[str, str], where: Path) -> list[str]:
    """``config`` as the commands take it: flags, and a directory for what looks like a secret."""
    where.mkdir(parents=True, exist_ok=True)
    flags = ["--kafka-config-dir", str(where)]
    for key, value in config.items():
        if credential_like(key):
            (where / key).write_text(value)
        else:
            flags.append(f"--kafka-property={key}={value}")
    return flags


def test_the_gateway_reads_from_tls_brokers_with_the_kafka_client_properties(
    mtls: tuple[KafkaCluster, str, list[Record]], tmp_path: Path
) -> None:
    cluster, remote, expected = mtls
    tls = cluster.client_config
    assert "ssl.certificate.location" in tls
    # The operator's version check goes over the same TLS, from the same client properties.
    assert read_features(cluster.bootstrap_servers, tls).metadata_version == "4.1-IV1"
    gateway = GatewayProcess(
        cluster.bootstrap_servers, remote, tmp_path / "gateway", extra=_flags(tls, tmp_path / "client")
    ).start()
    try:
        assert read_all(gateway.bootstrap, TOPIC, 1) == expected  # plaintext to the gateway
        assert gateway.metric("tierkeeper_gateway_tier_bytes_total") > 0
    finally:
        gateway.stop()


def test_pem_properties_from_a_mounted_secret_and_certificates_replaced_while_running(
    mtls: tuple[KafkaCluster, str, list[Record]], tmp_path: Path
) -> None:
    cluster, remote, expected = mtls
    pki = Path(cluster.tls or "")
    cert, key = client_certificate(pki, "gateway-client-1")
    client_properties = {
        "security.protocol": "SSL",
        "ssl.ca.pem": (pki / "ca.pem").read_text(),
        "ssl.certificate.pem": cert,
        "ssl.key.pem": key,
    }
    # The broker does require the client certificate: without one, not even ApiVersions.
    without = {k: v for k, v in client_properties.items() if k not in ("ssl.certificate.pem", "ssl.key.pem")}
    with pytest.raises(KafkaFeaturesError):
        read_features(cluster.bootstrap_servers, without)
    # The operator's probe reads the PEM form too (it ignored it before, so mTLS brokers refused it).
    assert read_features(cluster.bootstrap_servers, client_properties).metadata_version == "4.1-IV1"
    properties = _SecretVolume(tmp_path / "kafka-client")
    properties.publish(client_properties)
    own = _SecretVolume(tmp_path / "gateway-tls")
    own_ca, own_cert, own_key = loopback_certificates(tmp_path / "own-1")
    own.publish({"tls.crt": own_cert.read_text(), "tls.key": own_key.read_text()})
    gateway = GatewayProcess(
        cluster.bootstrap_servers,
        remote,
        tmp_path / "gateway",
        extra=[
            "--kafka-config-dir",
            str(properties.root),
            "--tls-cert",
            str(own.root / "tls.crt"),
            "--tls-key",
            str(own.root / "tls.key"),
            "--reload-interval-seconds",
            "3600",  # SIGHUP below, not the clock, makes it look
        ],
    ).start()
    try:
        over_tls = {"security.protocol": "SSL", "ssl.ca.location": str(own_ca)}
        assert read_all(gateway.bootstrap, TOPIC, 1, **over_tls) == expected
        assert _served_certificate(gateway, own_ca) is not None
        before = _served_certificate(gateway, own_ca)

        # cert-manager renews the gateway's certificate (here with a new CA, so the old one cannot pass).
        renewed_ca, renewed_cert, renewed_key = loopback_certificates(tmp_path / "own-2")
        own.publish({"tls.crt": renewed_cert.read_text(), "tls.key": renewed_key.read_text()})
        assert gateway.proc is not None
        gateway.proc.send_signal(signal.SIGHUP)
        renewed = wait_until(lambda: _served_certificate(gateway, renewed_ca), DEADLINE)
        assert renewed, f"the renewed certificate not served within {DEADLINE} s"
        assert renewed != before
        assert (
            read_all(gateway.bootstrap, TOPIC, 1, **{**over_tls, "ssl.ca.location": str(renewed_ca)})
            == expected
        )

        # A rotated client certificate: new broker connections use it, and history is still served.
        cert2, key2 = client_certificate(pki, "gateway-client-2")
        properties.publish({**client_properties, "ssl.certificate.pem": cert2, "ssl.key.pem": key2})
        gateway.proc.send_signal(signal.SIGHUP)
        assert wait_until(lambda: _reloads(gateway, "Kafka client", "loaded") >= 1, DEADLINE), (
            "the client properties not reloaded"
        )
        tls_now = {**over_tls, "ssl.ca.location": str(renewed_ca)}
        assert read_all(gateway.bootstrap, TOPIC, 1, **tls_now) == expected

        # A half-done rotation (the new key does not belong to the certificate): refused with the reason
        # logged, the previous properties keep serving.
        _, wrong_key = client_certificate(pki, "unrelated")
        properties.publish({**client_properties, "ssl.certificate.pem": cert2, "ssl.key.pem": wrong_key})
        gateway.proc.send_signal(signal.SIGHUP)
        assert wait_until(lambda: _reloads(gateway, "Kafka client", "failed") >= 1, DEADLINE), (
            "the broken rotation not refused"
        )
        assert "cannot be loaded, so the previous one stays in use" in gateway.log()
        assert "ssl.certificate.pem/ssl.key.pem" in gateway.log()
        assert "BEGIN" not in gateway.log(), "a key's text reached the log"
        assert read_all(gateway.bootstrap, TOPIC, 1, **tls_now) == expected
        assert gateway.proc.poll() is None
    finally:
        gateway.stop()


class _SecretVolume:
    """A directory laid out as the kubelet lays out a mounted Secret, replaced as it replaces one: the
    files are links through ``..data``, which one rename points at a new timestamped directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True)
        self._generation = 0

    def publish(self, files: dict[str, str]) -> None:
        self._generation += 1
        version = self.root / f"..{self._generation:04d}"
        version.mkdir()
        for name, text in files.items():
            (version / name).write_text(text)
        staging = self.root / "..data_tmp"
        staging.symlink_to(version.name)
        os.replace(staging, self.root / "..data")
        for name in files:
            link = self.root / name
            if not link.is_symlink():
                link.symlink_to(f"..data/{name}")


def _served_certificate(gateway: GatewayProcess, ca: Path) -> bytes | None:
    """The certificate a new TLS connection to the gateway gets, if it verifies against ``ca``."""
    context = ssl.create_default_context(cafile=str(ca))
    try:
        with (
            socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            return tls.getpeercert(binary_form=True)
    except ssl.SSLError:
        return None


def _reloads(gateway: GatewayProcess, what: str, outcome: str) -> float:
    total = 0.0
    for line in gateway.metrics().splitlines():
        if line.startswith("tierkeeper_gateway_reloads_total{") and what in line and f'"{outcome}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total
