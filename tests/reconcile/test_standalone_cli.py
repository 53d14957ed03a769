"""``tierkeeper standalone`` refuses bad input with one line naming the file and the field, and runs
nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

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
