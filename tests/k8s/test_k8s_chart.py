"""charts/tierkeeper rendered by the real helm (v4): lint, values and their schema, CRDs, RBAC, the
operator's pod, metrics, alerts, NetworkPolicy and PodDisruptionBudget. Installing it on the harness API
server is test_k8s_helm.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.paths import REPO_ROOT
from harness.tools import run_tool, tool_path
from tierkeeper_operator import chartgen, rbac

CHART = REPO_ROOT / "charts" / "tierkeeper"
RELEASE_NAMESPACE = "tierkeeper-system"
KEEP = "helm.sh/resource-policy"

EXPECTED_API_VERSIONS = {
    "CustomResourceDefinition": "apiextensions.k8s.io/v1",
    "ServiceAccount": "v1",
    "ClusterRole": "rbac.authorization.k8s.io/v1",
    "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
    "Role": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
    "Deployment": "apps/v1",
    "ConfigMap": "v1",
    "Service": "v1",
    "ServiceMonitor": "monitoring.coreos.com/v1",
    "PrometheusRule": "monitoring.coreos.com/v1",
    "NetworkPolicy": "networking.k8s.io/v1",
    "PodDisruptionBudget": "policy/v1",
}


def write_values(tmp_path: Path, values: dict[str, Any]) -> str:
    path = tmp_path / f"values-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(values))
    return str(path)


def render(*extra: str) -> list[dict[str, Any]]:
    out = run_tool("helm", ["template", "tk", str(CHART), "--namespace", RELEASE_NAMESPACE, *extra]).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def render_error(*extra: str) -> str:
    """helm template's error output for values it must refuse."""
    proc = run_tool("helm", ["template", "tk", str(CHART), *extra], check=False)
    assert proc.returncode != 0, f"helm accepted {extra}:\n{proc.stdout[:2000]}"
    return proc.stderr


def only(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [doc for doc in docs if doc["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} documents"
    return found[0]


def kinds_of(docs: list[dict[str, Any]]) -> list[str]:
    return sorted(doc["kind"] for doc in docs)


def container_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (container,) = only(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return dict(container)


def test_helm_is_version_4() -> None:
    out = run_tool("helm", ["version", "--short"]).stdout.strip()
    assert re.fullmatch(r"v4\.\d+\.\d+(\+\w+)?", out), out


def test_kubectl_client_runs() -> None:
    out = run_tool("kubectl", ["version", "--client", "--output=yaml"]).stdout
    client = yaml.safe_load(out)["clientVersion"]
    assert client["major"] == "1"
    assert int(client["minor"]) >= 33


def test_helm_lint_passes_with_default_and_full_values(tmp_path: Path) -> None:
    proc = run_tool("helm", ["lint", "--strict", str(CHART)])
    assert "0 chart(s) failed" in proc.stdout
    full = write_values(tmp_path, everything_on())
    proc = run_tool("helm", ["lint", "--strict", str(CHART), "--values", full])
    assert "0 chart(s) failed" in proc.stdout


def everything_on() -> dict[str, Any]:
    cluster = yaml.safe_load((REPO_ROOT / "examples" / "cluster.yaml").read_text())
    return {
        "clusters": [cluster],
        "watchNamespaces": ["kafka", "streams"],
        "replicaCount": 2,
        "metrics": {
            "serviceMonitor": {"enabled": True},
            "prometheusRule": {"enabled": True},
            "dashboard": {"enabled": True},
        },
        "networkPolicy": {"enabled": True},
    }


def test_default_kinds_and_api_versions() -> None:
    docs = render()
    assert kinds_of(docs) == sorted(
        [
            *["CustomResourceDefinition"] * 5,  # our three and kopf's two peering resources
            "ServiceAccount",
            *["ClusterRole"] * 3,  # the operator's, and view / edit for people (aggregated)
            "ClusterRoleBinding",
            "ConfigMap",
            "Deployment",
            "Service",
        ]
    )
    for doc in docs:
        assert doc["apiVersion"] == EXPECTED_API_VERSIONS[doc["kind"]], doc["kind"]
        assert doc["metadata"]["name"]


def test_every_switch_renders_its_objects(tmp_path: Path) -> None:
    docs = render("--values", write_values(tmp_path, everything_on()))
    for doc in docs:
        assert doc["apiVersion"] == EXPECTED_API_VERSIONS[doc["kind"]], doc["kind"]
    assert kinds_of(docs) == sorted(
        [
            *["CustomResourceDefinition"] * 5,  # our three and kopf's two peering resources
            "ServiceAccount",
            *["ClusterRole"] * 2,  # view / edit for people (aggregated); the operator's are Roles
            "Role",
            "Role",
            "RoleBinding",
            "RoleBinding",
            "ConfigMap",
            "ConfigMap",
            "Deployment",
            "Service",
            "ServiceMonitor",
            "PrometheusRule",
            "NetworkPolicy",
            "PodDisruptionBudget",
        ]
    )


# -- CRDs ------------------------------------------------------------------------------------------------


def on_disk_crds() -> dict[str, dict[str, Any]]:
    docs = (yaml.safe_load(path.read_text()) for path in sorted((REPO_ROOT / "crds").glob("*.yaml")))
    return {doc["metadata"]["name"]: doc for doc in docs}


def without_keep(doc: dict[str, Any]) -> dict[str, Any]:
    copy = json.loads(json.dumps(doc))
    annotations = copy["metadata"]["annotations"]
    assert annotations.pop(KEEP, "keep") == "keep", annotations
    return dict(copy)


def test_chart_installs_exactly_the_repository_crds_and_keeps_them() -> None:
    rendered = {d["metadata"]["name"]: d for d in render() if d["kind"] == "CustomResourceDefinition"}
    assert {name: without_keep(doc) for name, doc in rendered.items()} == on_disk_crds()
    assert all(doc["metadata"]["annotations"][KEEP] == "keep" for doc in rendered.values())
    # Not Helm's crds/ folder (installed once, never upgraded): templates, upgraded with the release.
    assert not (CHART / "crds").exists()


def test_crds_switches() -> None:
    unkept = [d for d in render("--set", "crds.keep=false") if d["kind"] == "CustomResourceDefinition"]
    assert len(unkept) == len(on_disk_crds()) and all(
        KEEP not in d["metadata"]["annotations"] for d in unkept
    )
    assert {d["metadata"]["name"]: d for d in unkept} == on_disk_crds()
    assert "CustomResourceDefinition" not in kinds_of(render("--set", "crds.enabled=false"))


# -- values schema ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--set", "replicaCount=0"], "replicaCount"),
        (["--set", "imageTypo.repository=x"], "imageTypo"),
        (["--set", "image.digest=latest"], "digest"),
        (["--set", "watchNamespaces={Not_A_Namespace}"], "watchNamespaces"),
        (["--set", "metrics.port=70000"], "port"),
        (["--set", "probes.liveness.periodSeconds=fast"], "periodSeconds"),
        (["--set", "clusters[0].name=c1"], "clusters"),  # no bootstrapServers, no remote
        (
            [
                "--set-json",
                'clusters=[{"name":"c","bootstrapServers":"k:9092","remote":{"url":"s3://b"},"jobs":{"backoffLimit":99}}]',
            ],
            "backoffLimit",
        ),
        (
            [
                "--set-json",
                'clusters=[{"name":"c","bootstrapServers":"k:9092","remote":{"url":"s3://b"},"jobz":{}}]',
            ],
            "jobz",
        ),
        (["--set", "jobDefaults.ttlSecondsAfterFinished=-5"], "ttlSecondsAfterFinished"),
    ],
)
def test_a_bad_value_fails_with_its_path(args: list[str], says: str) -> None:
    err = render_error(*args)
    assert "values don't meet the specifications of the schema" in err, err
    assert says in err, err


def test_helm_install_refuses_a_bad_value_before_touching_the_cluster() -> None:
    proc = run_tool(
        "helm", ["install", "tk", str(CHART), "--dry-run=client", "--set", "replicaCount=two"], check=False
    )
    assert proc.returncode != 0
    assert "values don't meet the specifications of the schema" in proc.stderr, proc.stderr
    assert "replicaCount" in proc.stderr and "want integer" in proc.stderr, proc.stderr


def leaf_paths(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict) and node:
        return [p for key, value in node.items() for p in leaf_paths(value, f"{prefix}{key}.")]
    return [prefix.rstrip(".")]


def schema_node(schema: dict[str, Any], path: str) -> dict[str, Any] | None:
    node: dict[str, Any] = schema
    for part in path.split("."):
        if "$ref" in node:
            node = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
        properties = node.get("properties")
        if properties is None:
            return node if node.get("type") == "object" else None  # a free-form map (labels, ...)
        if part not in properties:
            return None
        node = properties[part]
    return node


def test_schema_covers_every_value_and_describes_it() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for path in leaf_paths(values):
        node = schema_node(schema, path)
        assert node is not None, f"values.yaml has {path}, values.schema.json does not"
    for key, node in schema["properties"].items():
        assert key in values, f"schema has {key}, values.yaml does not"
        assert node.get("description"), f"{key} has no description"
    # The cluster configuration is the operator's own model, not a copy.
    assert schema["$defs"]["KafkaClusterConfig"]["properties"].keys() >= {
        "name",
        "bootstrapServers",
        "remote",
    }


def test_generated_files_and_plain_manifests_are_fresh() -> None:
    assert chartgen.stale_files(REPO_ROOT, tool_path("helm")) == [], "run `make chart manifests`"


def test_plain_manifests_are_the_default_install_with_a_restricted_namespace() -> None:
    manifests = REPO_ROOT / "examples" / "manifests"
    docs = [d for d in yaml.safe_load_all((manifests / "tierkeeper.yaml").read_text()) if d]
    assert kinds_of(docs) == kinds_of(render())
    namespace = yaml.safe_load((manifests / "namespace.yaml").read_text())
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert {d["metadata"].get("namespace", namespace["metadata"]["name"]) for d in docs} == {
        namespace["metadata"]["name"]
    }
    kustomization = yaml.safe_load((manifests / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == ["namespace.yaml", "tierkeeper.yaml"]
    # kustomize itself (kubectl's) builds the directory into the same objects.
    built = [d for d in yaml.safe_load_all(run_tool("kubectl", ["kustomize", str(manifests)]).stdout) if d]
    assert sorted(kinds_of(built)) == sorted([*kinds_of(docs), "Namespace"])


# -- the operator's pod ----------------------------------------------------------------------------------


def test_deployment_runs_restricted_non_root_on_a_read_only_root() -> None:
    docs = render()
    deployment = only(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = container_of(docs)
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert {mount["mountPath"] for mount in container["volumeMounts"]} == {"/tmp", "/etc/tierkeeper/clusters"}
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    assert pod["serviceAccountName"] == only(docs, "ServiceAccount")["metadata"]["name"]
    assert "PodDisruptionBudget" not in kinds_of(docs)  # one replica: a PDB would block every drain


def test_probes_hit_the_operators_endpoints() -> None:
    docs = render()
    container = container_of(docs)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert f"--liveness=http://0.0.0.0:{ports['probes']}/healthz" in container["args"]
    assert f"--readiness=http://0.0.0.0:{ports['readiness']}/readyz" in container["args"]
    for probe in ("livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "probes"}, probe
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "readiness"}
    off = container_of(render("--set", "probes.startup.enabled=false"))
    assert "startupProbe" not in off and "livenessProbe" in off


def test_peering_switch_and_its_rule() -> None:
    args = container_of(render())["args"]
    assert "--peering=tierkeeper" in args and "--peering-lifetime=60" in args and "--standalone" not in args
    assert "--standalone" in container_of(render("--set", "peering.enabled=false"))["args"]
    # Two replicas without peering would both act: the schema refuses it.
    err = render_error("--set", "replicaCount=2", "--set", "peering.enabled=false")
    assert "values don't meet the specifications of the schema" in err and "peering" in err, err


def test_images_tags_and_digests_come_from_values(tmp_path: Path) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    cluster = yaml.safe_load((REPO_ROOT / "examples" / "cluster.yaml").read_text())
    cluster["jobs"].pop("image", None)
    digest = "sha256:" + "a" * 64
    values = {
        "image": {"repository": "registry.example/tk/operator", "tag": "1.2.3"},
        "pipelineImage": {"repository": "registry.example/tk/pipeline", "digest": digest},
        "clusters": [cluster, {**cluster, "name": "own", "jobs": {"image": "mine/pipeline:7"}}],
    }
    docs = render("--values", write_values(tmp_path, values))
    assert container_of(docs)["image"] == "registry.example/tk/operator:1.2.3"
    data = only(docs, "ConfigMap")["data"]
    assert (
        yaml.safe_load(data["my-cluster.yaml"])["jobs"]["image"] == f"registry.example/tk/pipeline@{digest}"
    )
    assert yaml.safe_load(data["own.yaml"])["jobs"]["image"] == "mine/pipeline:7"
    default_docs = render(
        "--set-json", 'clusters=[{"name":"c","bootstrapServers":"k:9092","remote":{"url":"s3://b"}}]'
    )
    assert container_of(default_docs)["image"] == f"tierkeeper/operator:{chart['appVersion']}"
    jobs = yaml.safe_load(only(default_docs, "ConfigMap")["data"]["c.yaml"])["jobs"]
    assert jobs["image"] == f"tierkeeper/pipeline:{chart['appVersion']}"


def test_clusters_get_job_defaults_and_parse_as_the_operator_parses(tmp_path: Path) -> None:
    from storage_core.api.cluster import KafkaClusterConfig

    cluster = yaml.safe_load((REPO_ROOT / "examples" / "cluster.yaml").read_text())
    cluster["jobs"] = {"backoffLimit": 4, "resources": {"requests": {"cpu": "1"}}}
    values = {"clusters": [cluster], "jobDefaults": {"ttlSecondsAfterFinished": 60, "copyParallelism": 2}}
    docs = render("--values", write_values(tmp_path, values))
    parsed = KafkaClusterConfig.model_validate(
        yaml.safe_load(only(docs, "ConfigMap")["data"]["my-cluster.yaml"])
    )
    assert parsed.jobs.backoff_limit == 4  # the cluster's own value wins
    assert parsed.jobs.ttl_seconds_after_finished == 60  # jobDefaults fill the rest
    assert parsed.jobs.copy_parallelism == 2
    assert parsed.jobs.resources.requests.cpu == "1" and parsed.jobs.resources.requests.memory == "256Mi"
    assert parsed.bootstrap_servers == cluster["bootstrapServers"]
    container = container_of(docs)
    assert "--cluster=/etc/tierkeeper/clusters/my-cluster.yaml" in container["args"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "clusters")
    assert mount["mountPath"] == "/etc/tierkeeper/clusters" and mount["readOnly"] is True


def test_a_clusters_client_secret_is_mounted_into_the_operator_as_files(tmp_path: Path) -> None:
    """The operator's own Kafka clients read a cluster's clientConfigSecretRef from files: the chart mounts
    that Secret (release namespace, read-only, optional) per cluster and passes where, and the operator's
    own parsers accept what the chart rendered. The operator's RBAC still has no access to Secrets."""
    import argparse

    from storage_core.adapters.kafka_client_config import parse_config_dirs
    from storage_core.api.parse import parse_cluster_config
    from tierkeeper_operator.run import add_arguments, options_from_args

    base = yaml.safe_load((REPO_ROOT / "examples" / "cluster.yaml").read_text())
    secure = {
        **base,
        "name": "secure",
        "clientConfig": {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"},
        "clientConfigSecretRef": {"name": "kafka-sasl"},
    }
    docs = render("--values", write_values(tmp_path, {"clusters": [base, secure]}))
    container = container_of(docs)
    pod = only(docs, "Deployment")["spec"]["template"]["spec"]
    path = "/etc/tierkeeper/kafka-client/secure"
    flags = [a for a in container["args"] if a.startswith("--kafka-config-dir")]
    assert flags == [f"--kafka-config-dir=secure={path}"]  # my-cluster names no Secret: nothing for it
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"].startswith("/etc/tierkeeper/kafka")]
    assert mount == {"name": mount["name"], "mountPath": path, "readOnly": True}
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"] == {"secretName": "kafka-sasl", "optional": True, "defaultMode": 0o440}
    assert "env" not in json.dumps(volume)  # files, never environment variables

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    options = options_from_args(parser.parse_args(container["args"][1:]))
    configmap = only(docs, "ConfigMap")["data"]
    clusters = {
        c.name: c for f in options.cluster_files for c in parse_cluster_config(configmap[f.name], f.name)
    }
    assert parse_config_dirs(list(options.kafka_config_dirs), clusters) == {"secure": Path(path)}
    for role in [d for d in docs if d["kind"] in ("ClusterRole", "Role")]:
        assert not any("secrets" in rule.get("resources", []) for rule in role["rules"]), role


def test_a_cluster_or_crd_change_rolls_the_operator(tmp_path: Path) -> None:
    def annotations(*extra: str) -> dict[str, str]:
        pod = only(render(*extra), "Deployment")["spec"]["template"]
        return dict(pod["metadata"]["annotations"])

    base = annotations()
    changed = annotations(
        "--set-json", 'clusters=[{"name":"c","bootstrapServers":"k:9092","remote":{"url":"s3://b"}}]'
    )
    assert base["checksum/clusters"] != changed["checksum/clusters"]
    assert base["checksum/crds"] == changed["checksum/crds"]
    assert base["checksum/crds"] != annotations("--set", "crds.keep=false")["checksum/crds"]


# -- RBAC ------------------------------------------------------------------------------------------------


def grants(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def declared(*, clusterwide: bool) -> dict[tuple[str, str], set[str]]:
    return {key: set(verbs) for key, verbs in rbac.merged(rbac.ALL_GRANTS, clusterwide=clusterwide).items()}


def operator_cluster_role(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The operator's ClusterRole: the one its ClusterRoleBinding names."""
    name = only(docs, "ClusterRoleBinding")["roleRef"]["name"]
    return next(d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == name)


def test_all_namespaces_gets_exactly_the_declared_cluster_role() -> None:
    docs = render()
    assert grants(operator_cluster_role(docs)["rules"]) == declared(clusterwide=True)
    assert "Role" not in kinds_of(docs)
    binding = only(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": only(docs, "ServiceAccount")["metadata"]["name"],
            "namespace": RELEASE_NAMESPACE,
        }
    ]


def test_watched_namespaces_get_a_role_each_and_no_cluster_role() -> None:
    docs = render("--set", "watchNamespaces={kafka,streams}")
    assert "ClusterRoleBinding" not in kinds_of(docs)
    # Only the aggregated roles for people are cluster-wide, and they grant the operator nothing.
    assert {d["metadata"]["name"] for d in docs if d["kind"] == "ClusterRole"} == {
        "tk-tierkeeper-view",
        "tk-tierkeeper-edit",
    }
    roles = {d["metadata"]["namespace"]: d for d in docs if d["kind"] == "Role"}
    bindings = {d["metadata"]["namespace"]: d for d in docs if d["kind"] == "RoleBinding"}
    assert set(roles) == set(bindings) == {"kafka", "streams"}
    for namespace, role in roles.items():
        assert grants(role["rules"]) == declared(clusterwide=False), namespace
        assert bindings[namespace]["subjects"][0]["namespace"] == RELEASE_NAMESPACE
    assert container_of(docs)["args"][:3] == ["operator", "--namespace=kafka", "--namespace=streams"]


def test_no_wildcards_and_no_secrets() -> None:
    for clusterwide in (True, False):
        for (group, resource), verbs in declared(clusterwide=clusterwide).items():
            assert "*" not in verbs and group != "*" and resource != "*", (group, resource)
            assert resource != "secrets", verbs  # Jobs name Secrets; the operator never reads them
            # ConfigMaps: only the rebuild settings the operator keeps for the brokers' init containers.
            assert resource != "configmaps" or verbs <= {"get", "create", "patch"}, verbs


def test_rbac_and_service_account_can_be_disabled() -> None:
    kinds = set(
        kinds_of(
            render(
                "--set",
                "rbac.create=false",
                "--set",
                "serviceAccount.create=false",
                "--set",
                "serviceAccount.name=x",
            )
        )
    )
    assert kinds == {"CustomResourceDefinition", "Deployment", "ConfigMap", "Service"}


# -- metrics, alerts, network, disruption ----------------------------------------------------------------


def test_metrics_service_monitor_and_rule(tmp_path: Path) -> None:
    docs = render("--values", write_values(tmp_path, everything_on()))
    container = container_of(docs)
    port = next(p for p in container["ports"] if p["name"] == "metrics")["containerPort"]
    assert f"--metrics-port={port}" in container["args"]
    service = only(docs, "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    assert (
        service["spec"]["selector"].items()
        <= only(docs, "Deployment")["spec"]["template"]["metadata"]["labels"].items()
    )
    monitor = only(docs, "ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    alerts = {r["alert"]: r for g in only(docs, "PrometheusRule")["spec"]["groups"] for r in g["rules"]}
    assert {
        "TierkeeperCopyLagGrowing",
        "TierkeeperCleanupFailing",
        "TierkeeperResourceStalled",
        "TierkeeperFetcherProposalPending",
    } <= alerts.keys()
    runbooks = (REPO_ROOT / "docs" / "operations.md").read_text()
    for name, rule in alerts.items():
        assert f"### {name}" in runbooks, f"docs/operations.md has no runbook for {name}"
        assert f"#{name.lower()}" in rule["annotations"]["description"]
    dashboard = json.loads(
        only([d for d in docs if d["metadata"]["name"].endswith("-dashboard")], "ConfigMap")["data"][
            "tierkeeper.json"
        ]
    )
    assert {p["targets"][0]["expr"] for p in dashboard["panels"]}
    off = kinds_of(render("--set", "metrics.enabled=false"))
    assert "Service" not in off and "--metrics-port" not in " ".join(
        container_of(render("--set", "metrics.enabled=false"))["args"]
    )


def test_metric_names_in_alerts_and_dashboard_exist_in_the_operator() -> None:
    from tierkeeper_operator.metrics import Metrics

    exported = (
        {m.name for m in Metrics().registry.collect()}
        | {f"{m.name}_total" for m in Metrics().registry.collect() if m.type == "counter"}
        | {f"{m.name}_bucket" for m in Metrics().registry.collect() if m.type == "histogram"}
    )
    text = (CHART / "templates" / "prometheusrule.yaml").read_text() + (
        CHART / "files" / "dashboard.json"
    ).read_text()
    used = set(re.findall(r"\btierkeeper_[a-z_]+", text))
    # The fetcher proposal metric comes with the replica fetcher work (issue 16, part 2).
    missing = used - exported - {"tierkeeper_fetcher_proposal_pending_seconds"}
    assert not missing, missing


def test_network_policy_and_disruption_budget(tmp_path: Path) -> None:
    docs = render("--values", write_values(tmp_path, everything_on()))
    policy = only(docs, "NetworkPolicy")
    assert (
        policy["spec"]["podSelector"]["matchLabels"].items()
        <= only(docs, "Deployment")["spec"]["template"]["metadata"]["labels"].items()
    )
    allowed = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    # Every port the kubelet probes or Prometheus scrapes is open (readiness was once forgotten).
    container = container_of(docs)
    probed = {container[p]["httpGet"]["port"] for p in ("livenessProbe", "readinessProbe", "startupProbe")}
    assert allowed == probed | {"metrics"} == {"probes", "readiness", "metrics"}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    budget = only(docs, "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1
    deployment = only(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 2 and deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    env = {e["name"]: e for e in container_of(docs)["env"]}
    assert env["POD_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


@pytest.mark.parametrize("path", sorted((CHART / "templates").glob("*.yaml")), ids=lambda p: p.name)
def test_namespaced_objects_name_their_namespace(path: Path) -> None:
    text = path.read_text()
    cluster_scoped = ("kind: ClusterRole", "CustomResourceDefinition", "files/crds")
    if not any(marker in text for marker in cluster_scoped):
        assert "namespace: {{" in text, path.name


def test_notes_tell_the_next_step() -> None:
    out = run_tool(
        "helm", ["install", "tk", str(CHART), "--dry-run=client", "--namespace", RELEASE_NAMESPACE]
    ).stdout
    notes = out.split("NOTES:", 1)[1]
    assert "No Kafka cluster is configured yet" in notes
    assert "kubectl get tieredclusters,tieredtopics,tieredbrokers -A -w" in notes
    assert "rollout status deployment/tk-tierkeeper" in notes
    # Every kind whose CRD the chart installs is named (kopf's peering kinds together, as "peering").
    for crd in on_disk_crds():
        plural, group = crd.split(".", 1)
        assert (plural in notes) or (group == "kopf.dev" and "peering CRDs" in notes), crd


def test_the_uninstall_deletes_every_crd_the_chart_installs() -> None:
    page = (REPO_ROOT / "docs" / "operations.md").read_text()
    command = next(line for line in page.splitlines() if "kubectl delete crd" in line)
    assert set(command.strip("`. ").split()[3:]) == set(on_disk_crds())


def test_the_chart_renders_as_a_dependency_of_an_umbrella_chart(tmp_path: Path) -> None:
    """Helm hands every subchart `global` (at least {}): a schema refusing it breaks the chart as a
    dependency of another."""
    umbrella = tmp_path / "platform"
    (umbrella / "charts").mkdir(parents=True)
    (umbrella / "Chart.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v2", "name": "platform", "version": "1.0.0"})
    )
    (umbrella / "values.yaml").write_text(
        yaml.safe_dump({"global": {"imageRegistry": "registry.example.com"}})
    )
    run_tool("helm", ["package", str(CHART), "--destination", str(umbrella / "charts")])
    out = run_tool("helm", ["template", "platform", str(umbrella), "--namespace", RELEASE_NAMESPACE]).stdout
    kinds = {doc["kind"] for doc in yaml.safe_load_all(out) if doc}
    assert {"Deployment", "CustomResourceDefinition"} <= kinds


def test_configuration_doc_lists_every_field_default_and_rule() -> None:
    from storage_core.api.cluster import KafkaClusterConfig
    from storage_core.api.resources import TieredBrokerSpec, TieredTopicSpec

    doc = (REPO_ROOT / "docs" / "configuration.md").read_text()
    for root in (TieredTopicSpec, TieredBrokerSpec, KafkaClusterConfig):
        for model in chartgen._models(root):
            assert f"### {model.__name__}\n" in doc, model.__name__
            for name, field in model.model_fields.items():
                alias = field.alias or name
                assert f"| `{alias}` |" in doc, f"{model.__name__}.{alias}"
            for rule in getattr(model, "RULES", ()):
                assert rule.message in doc and f"`{rule.cel}`" in doc, rule.message
    assert "| `localRetentionMs` | integer | `86400000` | >= -1 |" in doc
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for path in leaf_paths(values):
        if not path.startswith(("clusters", "jobDefaults.")):
            assert f"| `{path}` |" in doc or any(f"| `{path.rsplit('.', n)[0]}` |" in doc for n in (1, 2)), (
                path
            )


def test_alerts_pass_prometheus_own_parsers() -> None:
    """Every alert's PromQL, `for` duration, labels and annotation templates, checked by Prometheus's
    parsers (tests/promrules, built from github.com/prometheus/prometheus), for defaults and other
    thresholds; a broken rule is caught (so a pass means something)."""
    from harness.promrules import check_rules

    rendered = run_tool(
        "helm",
        ["template", "tk", str(CHART), "--set", "metrics.prometheusRule.enabled=true"],
    ).stdout
    report = check_rules(rendered)
    assert not report.problems, report.problems
    rule = only([d for d in yaml.safe_load_all(rendered) if d], "PrometheusRule")
    assert len(report.ok) == sum(len(g["rules"]) for g in rule["spec"]["groups"])
    other = run_tool(
        "helm",
        [
            "template",
            "tk",
            str(CHART),
            "--set",
            "metrics.prometheusRule.enabled=true",
            "--set",
            "metrics.prometheusRule.copyLagFor=2h",
            "--set",
            "metrics.prometheusRule.fetcherProposalPendingFor=3d",
        ],
    ).stdout
    assert not check_rules(other).problems
    broken = rendered.replace("tierkeeper_stalled_resources > 0", "tierkeeper_stalled_resources >")
    assert any("TierkeeperResourceStalled: expr" in p for p in check_rules(broken).problems)


def test_the_operators_design_note_lists_exactly_the_permissions_rbac_grants() -> None:
    """The DESIGN.md permissions were once written by hand and granted what rbac.py did not; now they are
    generated, and a hand edit is stale."""
    text = (REPO_ROOT / chartgen.DESIGN_FILE).read_text()
    block = text.split(chartgen.PERMISSIONS_BEGIN)[1].split(chartgen.PERMISSIONS_END)[0]
    listed = {line.split("`")[1]: line for line in block.strip().splitlines()}
    assert set(listed) == {g.resource for g in rbac.ALL_GRANTS}
    for resource, line in listed.items():
        verbs = {v for g in rbac.ALL_GRANTS if g.resource == resource for v in g.verbs}
        assert f": {', '.join(sorted(verbs))}" in line, line
    edited = text.replace("`tieredtopics` (tierkeeper.io): list", "`tieredtopics` (tierkeeper.io): get, list")
    assert chartgen.design_text(edited) == text
