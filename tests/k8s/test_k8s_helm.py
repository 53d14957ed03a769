"""helm install / upgrade / uninstall of charts/tierkeeper against the real API server: the chart's
Deployment is run by the process kubelet under the chart's ServiceAccount token, so the operator in it
has exactly the chart's RBAC, in a namespace that enforces the `restricted` Pod Security level.

The CRDs are templates of the release (crds.enabled, crds.keep). Other tests apply the same CRDs
directly (tests/k8s/conftest.py), so every install here adopts them with ``--take-ownership``, as a user
does who installed them with kubectl or from an older chart (docs/install.md).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml
from k8s_helpers import DEADLINE, create, restore_crds_and_drop, unique, wait_for

from harness.control_plane import ControlPlane
from harness.k8s import load_crds, wait_until
from harness.kstatus import kstatus_live
from harness.kube_rest import ApiError
from harness.paths import REPO_ROOT
from harness.ports import free_ports
from harness.tools import run_tool
from tierkeeper_operator import GROUP, VERSION, rbac

CHART = REPO_ROOT / "charts" / "tierkeeper"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}


def helm(plane: ControlPlane, *args: str) -> str:
    return run_tool("helm", ["--kubeconfig", str(plane.kubeconfig), *args], timeout=DEADLINE).stdout


def operator_pods(plane: ControlPlane, namespace: str, release: str) -> list[dict[str, Any]]:
    selector = f"app.kubernetes.io/instance%3D{release}"
    return list(
        plane.request("GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")["items"]
    )


def running_pod(
    plane: ControlPlane, namespace: str, release: str, *, arg: str | None = None, replacing: str = ""
) -> dict[str, Any]:
    """The release's one pod once it runs (and, with ``arg``, has that argument; with ``replacing``, is not
    that pod), with nothing else left."""

    def probe() -> dict[str, Any] | None:
        pods = operator_pods(plane, namespace, release)
        if len(pods) != 1 or pods[0]["status"].get("phase") != "Running":
            return None
        if pods[0]["metadata"]["name"] == replacing:
            return None
        args = pods[0]["spec"]["containers"][0].get("args", [])
        return pods[0] if arg is None or arg in args else None

    pod: dict[str, Any] = wait_for(probe, f"the {release} operator pod to run")
    return pod


def topic_status(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    obj = plane.request("GET", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/tieredtopics/{name}")
    status: dict[str, Any] = obj.get("status") or {}
    return status


def wait_until_condition(plane: ControlPlane, namespace: str, name: str, kind: str) -> dict[str, Any] | None:
    """The TieredTopic's ``kind`` condition (Reconciling, Stalled) once the operator has set it True."""

    def probe() -> dict[str, Any] | None:
        conditions = topic_status(plane, namespace, name).get("conditions", [])
        found = next((c for c in conditions if c["type"] == kind and c["status"] == "True"), None)
        return dict(found) if found else None

    found: dict[str, Any] | None = wait_until(probe, DEADLINE)
    return found


def values_file(tmp_path: Path, **extra: Any) -> tuple[Path, str]:
    """Values with one cluster whose Kafka port nothing listens on, and free probe/metrics ports (pods
    share the host's network here). Returns the file and the cluster's remote URL."""
    port, readiness_port, metrics_port, kafka_port = free_ports(4)
    remote = f"file://{tmp_path / 'remote'}"
    cluster = {
        "name": "my-cluster",
        "bootstrapServers": f"127.0.0.1:{kafka_port}",
        "remote": {"url": remote},
        # How long the operator waits for the absent Kafka before it says so (its default is 30 s).
        "clientConfig": {"socket.timeout.ms": "5000"},
    }
    values = {
        "clusters": [cluster],
        "probes": {"port": port, "readiness": {"port": readiness_port}},
        "metrics": {"port": metrics_port},
        **extra,
    }
    path = tmp_path / f"values-{unique('v')}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path, remote


def reconcile_one_topic(plane: ControlPlane, namespace: str, release_ns: str, pod: dict[str, Any]) -> str:
    """A TieredTopic in ``namespace`` is handled by the operator in ``pod``: Reconciling (retried every
    round, never Stalled: kstatus's passing trouble) with Kafka's reason (nothing listens on the cluster's
    port), not with a permission error. Returns the operator's log."""
    topic: dict[str, Any] = yaml.safe_load((REPO_ROOT / "examples" / "tieredtopic.yaml").read_text())
    topic["metadata"] = {"name": "orders"}
    create(plane, f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/tieredtopics", topic)
    retrying = wait_until_condition(plane, namespace, "orders", "Reconciling")
    log = plane.kubelet.logs(release_ns, pod["metadata"]["name"], "operator")
    assert retrying, f"status {topic_status(plane, namespace, 'orders')}; operator pod log:\n{log[-5000:]}"
    # The operator found the cluster in the chart's ConfigMap and tried its Kafka: a clear one-line
    # reason, not a permission error.
    assert retrying["reason"] == "KafkaUnreachable", retrying
    assert retrying["observedGeneration"] == 1, retrying
    conditions = {c["type"]: c for c in topic_status(plane, namespace, "orders")["conditions"]}
    assert "Stalled" not in conditions and conditions["Ready"]["status"] == "False", conditions
    assert conditions["Ready"]["message"] == retrying["message"]
    # What Flux and kstatus-based waits make of the operator's status: the real kstatus library, live.
    # InProgress: `flux ... --wait` keeps waiting through a Kafka outage instead of failing at once.
    (verdict,) = kstatus_live(plane.kubeconfig, f"{GROUP}/{VERSION}/tieredtopics", namespace, "orders")
    assert verdict.status == "InProgress" and verdict.message == retrying["message"], verdict
    # A 403 reaches the log as kopf's APIForbiddenError / "Forbidden"; a bare "403" would also match
    # librdkafka's millisecond timestamps, which this log is full of.
    # A namespace being deleted (another test's, on this shared API server) refuses new events with a 403
    # too; that is not a permission the chart lacks.
    forbidden = [
        line for line in log.splitlines() if "Forbidden" in line and "is being terminated" not in line
    ]
    assert not forbidden, "\n".join(forbidden[:20])
    return log


def requests_of(plane: ControlPlane, namespace: str, account: str) -> dict[tuple[str, str, str], set[int]]:
    """(verb, group, resource[/subresource]) -> response codes of every request the ServiceAccount made,
    from the API server's audit log."""
    out: dict[tuple[str, str, str], set[int]] = {}
    for event in plane.audited(f"system:serviceaccount:{namespace}:{account}"):
        ref = event.get("objectRef") or {}
        if not ref.get("resource"):
            continue  # discovery (/apis, /version): open to every authenticated user
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        key = (event["verb"], ref.get("apiGroup", ""), resource)
        answer = event.get("responseStatus", {})
        if answer.get("code") == 403 and "is being terminated" in str(answer.get("message", "")):
            # Another test's namespace being deleted (deleted without waiting, on this shared API server)
            # refuses new content, events about its leftover TieredTopics included: no missing permission.
            continue
        out.setdefault(key, set()).add(int(answer.get("code", 0)))
    return out


def granted(
    *, clusterwide: bool, grants: tuple[rbac.Grant, ...] = rbac.ALL_GRANTS
) -> set[tuple[str, str, str]]:
    return {
        (verb, group, resource)
        for (group, resource), verbs in rbac.merged(grants, clusterwide=clusterwide).items()
        for verb in verbs
    }


def changed_chart(tmp_path: Path) -> Path:
    """A copy of the chart whose TieredTopic CRD has one more printer column (a CRD change)."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart, symlinks=False)  # files/crds becomes real files
    path = chart / "files" / "crds" / "tieredtopics.tierkeeper.io.yaml"
    crd = yaml.safe_load(path.read_text())
    crd["spec"]["versions"][0]["additionalPrinterColumns"].append(
        {"name": "Test-Column", "type": "string", "jsonPath": ".spec.topic", "priority": 1}
    )
    path.write_text(yaml.safe_dump(crd, sort_keys=False))
    return chart


def printer_columns(plane: ControlPlane) -> list[str]:
    crd = plane.request("GET", f"{CRD_PATH}/tieredtopics.{GROUP}")
    return [c["name"] for c in crd["spec"]["versions"][0].get("additionalPrinterColumns", [])]


def test_helm_install_upgrade_uninstall_runs_the_operator_under_the_chart_rbac(
    k8s_control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    plane = k8s_control_plane
    release, ns = unique("tk"), unique("tierkeeper-system")
    plane.create_namespace(ns, labels=RESTRICTED)
    values, _ = values_file(tmp_path)
    try:
        helm(plane, "install", release, str(CHART), "-n", ns, "--values", str(values), "--take-ownership")
        pod = running_pod(plane, ns, release)
        account = pod["spec"]["serviceAccountName"]
        assert account.startswith(release), account
        # The chart's image names map to the checkout's code (the Dockerfile's operator target).
        assert pod["spec"]["containers"][0]["image"].startswith("tierkeeper/operator:")
        crd = plane.request("GET", f"{CRD_PATH}/tieredtopics.{GROUP}")
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert crd["metadata"]["annotations"]["meta.helm.sh/release-name"] == release
        # The operator, in the pod, as the chart's ServiceAccount, handles a TieredTopic in another namespace.
        reconcile_one_topic(plane, k8s_namespace, ns, pod)
        broker: dict[str, Any] = yaml.safe_load((REPO_ROOT / "examples" / "tieredbroker.yaml").read_text())
        broker["metadata"] = {"name": "broker-0"}
        create(plane, f"/apis/{GROUP}/{VERSION}/namespaces/{k8s_namespace}/tieredbrokers", broker)
        # RBAC both ways, from the API server's audit log: everything the operator asked was granted, and
        # every grant kopf needs was used (the adapter's own grants are held to its calls in
        # test_k8s_rbac.py; Jobs are not created here, nothing listens on the cluster's Kafka port).
        kopf_grants = granted(clusterwide=True, grants=rbac.KOPF_GRANTS)

        def all_kopf_grants_used() -> dict[tuple[str, str, str], set[int]] | None:
            made = requests_of(plane, ns, account)
            return made if kopf_grants <= made.keys() else None

        made = wait_until(all_kopf_grants_used, DEADLINE) or requests_of(plane, ns, account)
        assert kopf_grants <= made.keys(), f"kopf grants never used: {sorted(kopf_grants - made.keys())}"
        assert made.keys() <= granted(clusterwide=True), sorted(made.keys() - granted(clusterwide=True))
        assert not {k for k, codes in made.items() if 403 in codes}, made
        first_pid = plane.kubelet.pid_of(ns, pod["metadata"]["name"], "operator")

        # An upgrade that changes a CRD: the chart upgrades it, and the operator is rolled (checksum/crds).
        assert "Test-Column" not in printer_columns(plane)
        # --force-conflicts: other tests PUT the same CRDs (as `kubectl apply` would), so another field
        # manager co-owns their fields and Helm's server-side apply must take them over to change them.
        helm(
            plane,
            "upgrade",
            release,
            str(changed_chart(tmp_path)),
            "-n",
            ns,
            "--values",
            str(values),
            "--force-conflicts",
        )
        assert "Test-Column" in printer_columns(plane)
        upgraded = running_pod(plane, ns, release, replacing=pod["metadata"]["name"])
        assert not Path(f"/proc/{first_pid}").exists(), "the old operator process outlived its pod"

        helm(plane, "uninstall", release, "-n", ns)
        wait_for(lambda: not operator_pods(plane, ns, release), "the operator pod to be removed")
        second_pid = plane.kubelet.pid_of(ns, upgraded["metadata"]["name"], "operator")
        assert not Path(f"/proc/{second_pid}").exists(), "the operator process outlived the release"
        assert "deployed" not in helm(plane, "list", "-n", ns)
        # crds.keep: the CRDs, and with them every TieredTopic, outlive the release.
        assert "Test-Column" in printer_columns(plane)
        assert topic_status(plane, k8s_namespace, "orders")["conditions"]
    finally:
        restore_crds_and_drop(plane, ns)


def test_watching_namespaces_runs_on_roles_alone(
    k8s_control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    """watchNamespaces: a Role and RoleBinding in the watched namespace, no ClusterRole; the operator
    handles its TieredTopics with that and nothing more."""
    plane = k8s_control_plane
    release, ns = unique("tk"), unique("tierkeeper-system")
    plane.create_namespace(ns, labels=RESTRICTED)
    values, _ = values_file(tmp_path, watchNamespaces=[k8s_namespace])
    try:
        helm(plane, "install", release, str(CHART), "-n", ns, "--values", str(values), "--take-ownership")
        manifest = [d for d in yaml.safe_load_all(helm(plane, "get", "manifest", release, "-n", ns)) if d]
        kinds = {(d["kind"], d["metadata"].get("namespace")) for d in manifest}
        assert ("Role", k8s_namespace) in kinds and ("RoleBinding", k8s_namespace) in kinds
        # No cluster-wide grant to the operator: the only ClusterRoles are the aggregated ones for people,
        # and nothing binds them to its ServiceAccount.
        assert "ClusterRoleBinding" not in {k for k, _ in kinds}
        cluster_roles = {d["metadata"]["name"] for d in manifest if d["kind"] == "ClusterRole"}
        assert cluster_roles == {f"{release}-tierkeeper-view", f"{release}-tierkeeper-edit"}, cluster_roles
        pod = running_pod(plane, ns, release, arg=f"--namespace={k8s_namespace}")
        # Watching named namespaces, the operator turns kopf's cluster-wide discovery of CRDs and
        # namespaces off (a CRD change rolls the pod through checksum/crds): nothing may be refused.
        reconcile_one_topic(plane, k8s_namespace, ns, pod)
        made = requests_of(plane, ns, pod["spec"]["serviceAccountName"])
        refused = {key for key, codes in made.items() if 403 in codes}
        assert not refused, sorted(refused)
        assert made.keys() - refused <= granted(clusterwide=False), sorted(made.keys() - refused)
        helm(plane, "uninstall", release, "-n", ns)
    finally:
        plane.apply_crds(load_crds())
        try:
            plane.request("DELETE", f"/api/v1/namespaces/{ns}")
        except ApiError:
            pass


def test_rendered_objects_pass_the_api_servers_validation(
    k8s_control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    """Every object the chart renders, with every switch on, passes the API server's own schemas
    (server-side dry run, unknown fields refused) and Pod Security `restricted` on its namespace.
    ServiceMonitor and PrometheusRule are prometheus-operator kinds the harness does not serve: they are
    checked for the fields prometheus-operator requires instead."""
    plane = k8s_control_plane
    ns = unique("tierkeeper-system")
    plane.create_namespace(ns, labels=RESTRICTED)
    cluster = yaml.safe_load((REPO_ROOT / "examples" / "cluster.yaml").read_text())
    # A second cluster whose credentials the operator pod mounts (clientConfigSecretRef).
    secure = {
        **cluster,
        "name": "secure",
        "clientConfig": {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"},
        "clientConfigSecretRef": {"name": "kafka-client"},
    }
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "clusters": [cluster, secure],
                "watchNamespaces": [k8s_namespace],
                "replicaCount": 2,
                "metrics": {
                    "serviceMonitor": {"enabled": True},
                    "prometheusRule": {"enabled": True},
                    "dashboard": {"enabled": True},
                },
                "networkPolicy": {"enabled": True, "metricsFrom": [{"namespaceSelector": {}}]},
            }
        )
    )
    try:
        rendered = run_tool("helm", ["template", "tk", str(CHART), "-n", ns, "--values", str(values)]).stdout
        docs = [d for d in yaml.safe_load_all(rendered) if d]
        monitoring = [d for d in docs if d["apiVersion"].startswith("monitoring.coreos.com/")]
        assert {d["kind"] for d in monitoring} == {"ServiceMonitor", "PrometheusRule"}
        for doc in monitoring:
            assert doc["spec"], doc["kind"]
        served = [d for d in docs if d not in monitoring]
        for doc in served:
            if doc["kind"] == "CustomResourceDefinition":
                continue  # the same files the k8s tests apply for real; a dry-run update needs ownership
            namespace = doc["metadata"].get("namespace")
            scope = f"/namespaces/{namespace}" if namespace else ""
            group_version = doc["apiVersion"]
            base = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
            plural = PLURALS[doc["kind"]]
            plane.request("POST", f"{base}{scope}/{plural}?dryRun=All&fieldValidation=Strict", doc)
        # The operator's pod template as a Pod: Pod Security admission judges it like the Deployment's pods.
        deployment = next(d for d in served if d["kind"] == "Deployment")
        volumes = deployment["spec"]["template"]["spec"]["volumes"]
        assert {"secretName": "kafka-client", "optional": True, "defaultMode": 0o440} in [
            v.get("secret") for v in volumes
        ], volumes
        # A dry run creates no ServiceAccount; the namespace's default one stands in for the chart's.
        spec = {**deployment["spec"]["template"]["spec"], "serviceAccountName": "default"}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "template-check"}, "spec": spec}
        plane.request("POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All&fieldValidation=Strict", pod)
    finally:
        plane.request("DELETE", f"/api/v1/namespaces/{ns}")


PLURALS = {
    "ServiceAccount": "serviceaccounts",
    "ConfigMap": "configmaps",
    "Service": "services",
    "Deployment": "deployments",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "NetworkPolicy": "networkpolicies",
    "PodDisruptionBudget": "poddisruptionbudgets",
}


def test_plain_manifests_pass_a_server_side_dry_run(k8s_control_plane: ControlPlane) -> None:
    """examples/manifests/ as `kubectl apply --server-side -k` would send it, checked by the API server
    (schemas, unknown fields, Pod Security of the restricted namespace) without being stored."""
    plane = k8s_control_plane
    manifests = REPO_ROOT / "examples" / "manifests"
    namespace = yaml.safe_load((manifests / "namespace.yaml").read_text())
    plane.create_namespace(namespace["metadata"]["name"], labels=namespace["metadata"]["labels"])
    try:
        out = run_tool(
            "kubectl",
            [
                "--kubeconfig",
                str(plane.kubeconfig),
                "apply",
                "--server-side",
                "--force-conflicts",  # the CRDs exist, applied by other tests under another field manager
                "--dry-run=server",
                "--validate=strict",
                "-k",
                str(manifests),
            ],
            timeout=DEADLINE,
        ).stdout
        applied = [line for line in out.splitlines() if line.strip()]
        docs = [d for d in yaml.safe_load_all((manifests / "tierkeeper.yaml").read_text()) if d]
        assert len(applied) == len(docs) + 1, out  # and the Namespace
        assert all("(server dry run)" in line for line in applied), out
    finally:
        plane.request("DELETE", f"/api/v1/namespaces/{namespace['metadata']['name']}")
