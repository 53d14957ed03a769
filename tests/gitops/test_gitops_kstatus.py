"""kstatus (the library behind Flux's health checks and kstatus-based waits), run as the real Go library
on the same recorded objects as the Argo CD checks, agrees with the table in docs/gitops.md."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest
import yaml
from argocd_lua import run_health
from gitops_cases import CUSTOMIZATIONS, KINDS, doc_rows

from harness.k8s import KubeApiServer, load_crds
from harness.kafka_dist import HarnessError
from harness.kstatus import KstatusResult, kstatus_binary, kstatus_live, kstatus_of

ROWS = doc_rows()


@pytest.mark.parametrize("kind", KINDS)
def test_kstatus_verdicts_match_the_docs(kind: str) -> None:
    files = sorted((CUSTOMIZATIONS / kind / "testdata").glob("*.yaml"))
    expected = {row.testdata: row.kstatus for row in ROWS}
    results = kstatus_of("\n---\n".join(f.read_text() for f in files))
    assert len(results) == len(files)
    verdicts = {f.name: r.status for f, r in zip(files, results)}
    assert verdicts == {f.name: expected[f.name] for f in files}
    assert all(r.kind == kind for r in results)


def test_stalled_message_reaches_kstatus() -> None:
    obj = (CUSTOMIZATIONS / "TieredTopic" / "testdata" / "degraded_stalled.yaml").read_text()
    (result,) = kstatus_of(obj)
    assert result.status == "Failed"
    assert "cleanup.policy=compact" in result.message


def test_generation_behind_wins_over_ready() -> None:
    obj = (CUSTOMIZATIONS / "TieredBroker" / "testdata" / "healthy_ready.yaml").read_text()
    (result,) = kstatus_of(obj.replace("generation: 2", "generation: 5", 1))
    assert result.status == "InProgress"
    assert "generation is 5" in result.message


def test_bad_input_is_a_one_line_error() -> None:
    with pytest.raises(HarnessError, match=r"kstatus: document 1: .*") as info:
        kstatus_of("kind: [unclosed")
    assert "\n" not in str(info.value).strip()


@pytest.fixture
def api_server(tmp_path: Path) -> Iterator[KubeApiServer]:
    server = KubeApiServer(tmp_path / "kube-api", crds=load_crds()).start()
    try:
        yield server
    finally:
        server.stop()


def test_live_object_through_a_kubeconfig(api_server: KubeApiServer) -> None:
    """The checker's live mode, reading the object from an API server during create, update and failure.

    The server is the harness's Kubernetes API for now (kmock's emulator); the real API server of the
    control-plane harness (issue 14) will take its place without changing this test's steps.
    """
    client = kubernetes.client.CustomObjectsApi(api_server.api_client())
    group, version, plural = "tierkeeper.io", "v1alpha1", "tieredtopics"
    testdata = CUSTOMIZATIONS / "TieredTopic" / "testdata"

    def live() -> KstatusResult:
        (result,) = kstatus_live(api_server.kubeconfig, f"{group}/{version}/{plural}", "kafka", "orders")
        return result

    def set_status(example: str) -> None:
        status = yaml.safe_load((testdata / example).read_text())["status"]
        client.patch_namespaced_custom_object_status(
            group, version, "kafka", plural, "orders", {"status": status}
        )

    obj = yaml.safe_load((testdata / "progressing_noStatus.yaml").read_text())
    obj["metadata"] = {"name": "orders", "namespace": "kafka"}
    client.create_namespaced_custom_object(group, version, "kafka", plural, obj)
    assert live().status == "Current"  # kstatus's gap: no status yet (docs/gitops.md)
    set_status("progressing_reconciling.yaml")
    assert live().status == "InProgress"
    set_status("degraded_stalled.yaml")
    failed = live()
    assert failed.status == "Failed" and "cleanup.policy=compact" in failed.message
    # A spec change: the Stalled verdict is about generation 1, so it no longer counts.
    client.patch_namespaced_custom_object(
        group, version, "kafka", plural, "orders", {"spec": {"paused": True}}
    )
    behind = live()
    assert behind.status == "InProgress" and "generation is 2" in behind.message, behind.message
    set_status("healthy_ready.yaml")  # observedGeneration 2
    ready = live()
    assert ready.status == "Current", ready.message


def test_live_mode_names_a_missing_object(api_server: KubeApiServer) -> None:
    with pytest.raises(HarnessError, match="not found"):
        kstatus_live(api_server.kubeconfig, "tierkeeper.io/v1alpha1/tieredtopics", "kafka", "absent")


@pytest.mark.parametrize("observed", [1, 3])
def test_both_tools_wait_while_observed_generation_differs(observed: int) -> None:
    # Behind (1) is the usual case; ahead (3) cannot happen on a real server, but the two tools must
    # still agree on it: kstatus compares for equality.
    path = CUSTOMIZATIONS / "TieredTopic" / "testdata" / "healthy_ready.yaml"
    obj = yaml.safe_load(path.read_text())
    obj["status"]["observedGeneration"] = observed
    (result,) = kstatus_of(yaml.safe_dump(obj))
    assert result.status == "InProgress"
    assert run_health(path.parent.parent / "health.lua", obj)["status"] == "Progressing"


def test_file_argument_and_json_input(tmp_path: Path) -> None:
    obj = yaml.safe_load((CUSTOMIZATIONS / "TieredBroker" / "testdata" / "degraded_stalled.yaml").read_text())
    path = tmp_path / "broker.json"
    path.write_text(json.dumps(obj))
    proc = subprocess.run([str(kstatus_binary()), str(path)], capture_output=True, text=True, check=True)
    assert json.loads(proc.stdout)["status"] == "Failed"
