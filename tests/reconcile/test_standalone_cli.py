"""``tierkeeper standalone`` refuses bad input with one line naming the file and the field, and runs
nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.kafka import KafkaCluster
from storage_core.cli.main import main

TOPIC = """apiVersion: tierkeeper.io/v1alpha1
kind: TieredTopic
metadata: {name: orders}
spec: {clusterRef: {name: c}, topic: orders}
"""


def run(
    tmp_path: Path, cluster: str, manifests: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    (tmp_path / "cluster.yaml").write_text(cluster)
    folder = tmp_path / "manifests"
    folder.mkdir()
    for name, text in manifests.items():
        (folder / name).write_text(text)
    code = main(
        ["standalone", "--cluster", str(tmp_path / "cluster.yaml"), "--manifests", str(folder), "--once"]
    )
    err = capsys.readouterr().err.strip()
    return code, err


GOOD_CLUSTER = "name: c\nbootstrapServers: 127.0.0.1:1\nremote: {url: 'memory://t'}\n"


@pytest.mark.parametrize(
    ("cluster", "manifests", "words"),
    [
        (
            "name: c\nremote: {url: 'memory://t'}\n",
            {"t.yaml": TOPIC},
            "cluster[0].bootstrapServers: required",
        ),
        ("name: c\nbootstrapServers: [\n", {"t.yaml": TOPIC}, "not valid YAML"),
        (
            GOOD_CLUSTER + "remote: {url: 'memory://t', storageOptionsSecretRef: {name: s}}\n",
            {"t.yaml": TOPIC},
            "reads no Secrets",
        ),
        (GOOD_CLUSTER, {"t.yaml": TOPIC.replace("v1alpha1", "v1")}, "apiVersion 'tierkeeper.io/v1'"),
        (
            GOOD_CLUSTER,
            {"a.yaml": TOPIC, "b.yaml": TOPIC},
            "defined more than once: TieredTopic default/orders",
        ),
        (GOOD_CLUSTER, {"notes.yaml": "kind: ConfigMap\n"}, "no TieredTopic or TieredBroker manifests"),
    ],
)
def test_bad_input_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cluster: str, manifests: dict[str, str], words: str
) -> None:
    code, err = run(tmp_path, cluster, manifests, capsys)
    assert code == 1
    assert len(err.splitlines()) == 1 and err.startswith("tierkeeper standalone: error:"), err
    assert words in err, err


CLUSTER_RESOURCE = """apiVersion: tierkeeper.io/v1alpha1
kind: TieredCluster
metadata: {name: c}
spec: {bootstrapServers: '127.0.0.1:1', remote: {url: 'memory://t'}}
"""


def run_manifests(tmp_path: Path, manifests: dict[str, str], capsys: pytest.CaptureFixture[str]) -> str:
    folder = tmp_path / "manifests"
    folder.mkdir()
    for name, text in manifests.items():
        (folder / name).write_text(text)
    assert main(["standalone", "--manifests", str(folder), "--once"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("tierkeeper standalone: error:"), err
    return err


@pytest.mark.parametrize(
    ("manifests", "words"),
    [
        ({"t.yaml": TOPIC}, "no TieredCluster manifests and no --cluster FILE"),
        (
            {
                "c.yaml": CLUSTER_RESOURCE.replace(
                    "bootstrapServers: '127.0.0.1:1', ", "strimzi: {kafka: k}, "
                )
            },
            "spec.bootstrapServers is required in standalone mode",
        ),
        (
            {
                "c.yaml": CLUSTER_RESOURCE.replace(
                    "remote: {", "remote: {storageOptionsSecretRef: {name: s}, "
                )
            },
            "reads no Secrets",
        ),
        (
            {"c.yaml": CLUSTER_RESOURCE.replace("bootstrapServers: '127.0.0.1:1', ", "")},
            "bootstrapServers is required",
        ),
    ],
)
def test_tiered_cluster_manifests_are_refused_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], manifests: dict[str, str], words: str
) -> None:
    assert words in run_manifests(tmp_path, manifests, capsys)


def test_a_tiered_cluster_manifest_stands_for_a_cluster_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kafka_broker: KafkaCluster
) -> None:
    """No --cluster: the TieredCluster in the manifests is the cluster (the session's real broker); the
    round runs and judges the topic against it (exit 1: the topic does not exist, so not Ready)."""
    folder = tmp_path / "manifests"
    folder.mkdir()
    (folder / "c.yaml").write_text(CLUSTER_RESOURCE.replace("127.0.0.1:1", kafka_broker.bootstrap_servers))
    (folder / "t.yaml").write_text(TOPIC)
    code = main(["standalone", "--manifests", str(folder), "--once", "--json"])
    captured = capsys.readouterr()
    assert code == 1 and "error:" not in captured.err, captured.err
    assert "TopicNotFound" in captured.out and "ClusterNotFound" not in captured.out, captured.out


def test_a_tiered_cluster_and_a_file_of_one_name_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run(tmp_path, GOOD_CLUSTER, {"c.yaml": CLUSTER_RESOURCE, "t.yaml": TOPIC}, capsys)
    assert code == 1 and "is also defined by a --cluster file; keep one" in err, err


def test_a_poll_interval_of_zero_is_refused_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["standalone", "--manifests", str(tmp_path), "--poll-seconds", "0"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "tierkeeper standalone: error: --poll-seconds must be > 0, got 0.0", err
