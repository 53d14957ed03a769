"""The chart's knobs platform teams expect (issue 30), each rendered by the real helm: extra args, env,
volumes; JSON logs; topology spread; the disruption budget as min or max, number or percent; Jobs' pod
labels and annotations, scratch space and no API token; the ServiceAccount token only where needed;
aggregated view/edit roles; Job writes limited to chosen namespaces; alerts consistent with their docs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.control_plane import ControlPlane
from harness.k8s import wait_until
from harness.paths import REPO_ROOT
from harness.tools import run_tool
from tierkeeper_operator import rbac

CHART = REPO_ROOT / "charts" / "tierkeeper"


def render(tmp_path: Path, values: dict[str, Any] | None = None, *extra: str) -> list[dict[str, Any]]:
    args = ["template", "tk", str(CHART), "--namespace", "tierkeeper-system", *extra]
    if values is not None:
        path = tmp_path / f"values-{len(list(tmp_path.iterdir()))}.yaml"
        path.write_text(yaml.safe_dump(values))
        args += ["--values", str(path)]
    return [doc for doc in yaml.safe_load_all(run_tool("helm", args).stdout) if doc]


def refused(*extra: str) -> str:
    proc = run_tool("helm", ["template", "tk", str(CHART), *extra], check=False)
    assert proc.returncode != 0, f"helm accepted {extra}"
    return proc.stderr


def pod_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return pod


def test_extra_args_env_volumes_and_json_logs(tmp_path: Path) -> None:
    values = {
        "logFormat": "json",
        "extraArgs": ["--metrics-topic-labels"],
        "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
        "extraVolumes": [{"name": "ca", "configMap": {"name": "corporate-ca"}}],
        "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/ssl/corporate", "readOnly": True}],
    }
    pod = pod_of(render(tmp_path, values))
    (container,) = pod["containers"]
    assert "--log-format=json" in container["args"] and container["args"][-1] == "--metrics-topic-labels"
    assert {"name": "HTTPS_PROXY", "value": "http://proxy:3128"} in container["env"]
    assert {"name": "ca", "configMap": {"name": "corporate-ca"}} in pod["volumes"]
    assert {"name": "ca", "mountPath": "/etc/ssl/corporate", "readOnly": True} in container["volumeMounts"]
    # The operator parses what the chart passes.
    from storage_core.cli.main import build_parser

    parsed = build_parser().parse_args(container["args"])
    assert parsed.log_format == "json" and parsed.metrics_topic_labels
    assert "--log-format=text" in pod_of(render(tmp_path))["containers"][0]["args"]
    assert "logFormat" in refused("--set", "logFormat=xml")


def test_replicas_spread_over_nodes_unless_told_otherwise(tmp_path: Path) -> None:
    assert "topologySpreadConstraints" not in pod_of(render(tmp_path))  # one replica: nothing to spread
    (spread,) = pod_of(render(tmp_path, {"replicaCount": 2}))["topologySpreadConstraints"]
    assert (
        spread["topologyKey"] == "kubernetes.io/hostname" and spread["whenUnsatisfiable"] == "ScheduleAnyway"
    )
    assert spread["labelSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "tierkeeper",
        "app.kubernetes.io/instance": "tk",
    }
    zones = [
        {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"}
    ]
    custom = pod_of(render(tmp_path, {"replicaCount": 2, "topologySpreadConstraints": zones}))
    assert custom["topologySpreadConstraints"] == zones
    affinity = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    assert pod_of(render(tmp_path, {"affinity": affinity}))["affinity"] == affinity


@pytest.mark.parametrize(
    ("budget", "expected"),
    [
        ({}, {"minAvailable": 1}),
        ({"minAvailable": "50%"}, {"minAvailable": "50%"}),
        ({"minAvailable": None, "maxUnavailable": 1}, {"maxUnavailable": 1}),
        ({"minAvailable": None, "maxUnavailable": "34%"}, {"maxUnavailable": "34%"}),
    ],
)
def test_disruption_budget_as_min_or_max_in_numbers_or_percent(
    tmp_path: Path, budget: dict[str, Any], expected: dict[str, Any]
) -> None:
    docs = render(tmp_path, {"replicaCount": 3, "podDisruptionBudget": budget})
    (pdb,) = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert {k: v for k, v in pdb["spec"].items() if k != "selector"} == expected


def test_disruption_budget_refuses_both_or_a_bad_percent() -> None:
    assert "podDisruptionBudget" in refused("--set", "podDisruptionBudget.maxUnavailable=1")
    assert "minAvailable" in refused("--set", "podDisruptionBudget.minAvailable=half")


def test_service_account_token_only_where_the_api_is_used(tmp_path: Path) -> None:
    docs = render(tmp_path)
    (account,) = [d for d in docs if d["kind"] == "ServiceAccount"]
    assert account["automountServiceAccountToken"] is False
    assert pod_of(docs)["automountServiceAccountToken"] is True  # the operator needs the API


def test_job_pod_labels_annotations_and_scratch_space_reach_the_clusters(tmp_path: Path) -> None:
    from storage_core.api.cluster import KafkaClusterConfig

    cluster = yaml.safe_load((REPO_ROOT / "examples" / "cluster.yaml").read_text())
    values = {
        "clusters": [cluster],
        "jobDefaults": {
            "podLabels": {"team": "kafka"},
            "podAnnotations": {"sidecar.istio.io/inject": "false"},
            "tmpSizeLimit": "1Gi",
            "resources": {"requests": {"ephemeral-storage": "1Gi"}, "limits": {"ephemeral-storage": "2Gi"}},
        },
    }
    docs = render(tmp_path, values)
    (config_map,) = [
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-clusters")
    ]
    (text,) = config_map["data"].values()
    jobs = KafkaClusterConfig.model_validate(yaml.safe_load(text)).jobs
    assert jobs.pod_labels == {"team": "kafka"} and jobs.pod_annotations == {
        "sidecar.istio.io/inject": "false"
    }
    assert jobs.tmp_size_limit == "1Gi" and jobs.resources.limits.ephemeral_storage == "2Gi"
    assert "podAnotations" in refused("--set", "jobDefaults.podAnotations.x=y")


def rules_of(doc: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in doc["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_aggregated_view_and_edit_roles(tmp_path: Path) -> None:
    docs = render(tmp_path)
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
    view, edit = roles["tk-tierkeeper-view"], roles["tk-tierkeeper-edit"]
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    assert ("tierkeeper.io", "tieredtopics", "list") in rules_of(view)
    assert not {verb for _, _, verb in rules_of(view)} - {"get", "list", "watch"}
    assert {("tierkeeper.io", r, "delete") for r in ("tieredtopics", "tieredbrokers")} <= rules_of(edit)
    assert ("tierkeeper.io", "tieredtopics/status", "patch") not in rules_of(edit)  # status is the operator's
    names = {d["metadata"]["name"] for d in render(tmp_path, {"rbac": {"aggregateToDefaultRoles": False}})}
    assert not names & {"tk-tierkeeper-view", "tk-tierkeeper-edit"}


def test_job_writes_limited_to_the_job_namespaces(tmp_path: Path) -> None:
    docs = render(tmp_path, {"rbac": {"jobNamespaces": ["kafka", "kafka-2"]}})
    operator_role = next(
        d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "tk-tierkeeper"
    )
    writes = {(g, r, v) for g, r, v in rules_of(operator_role) if r in ("jobs", "configmaps")}
    assert writes == {("batch", "jobs", "list"), ("", "configmaps", "get")}  # reads stay cluster-wide
    roles = {d["metadata"]["namespace"]: d for d in docs if d["kind"] == "Role"}
    bindings = {d["metadata"]["namespace"]: d for d in docs if d["kind"] == "RoleBinding"}
    assert set(roles) == set(bindings) == {"kafka", "kafka-2"}
    for role in roles.values():
        assert rules_of(role) == {
            ("batch", "jobs", "create"),
            ("batch", "jobs", "patch"),
            ("", "configmaps", "create"),
            ("", "configmaps", "patch"),
        }
    # Together they grant exactly what the operator declares, nothing more.
    merged = rules_of(operator_role) | rules_of(roles["kafka"])
    declared = {
        (group, resource, verb)
        for (group, resource), verbs in rbac.merged(rbac.ALL_GRANTS, clusterwide=True).items()
        for verb in verbs
    }
    assert merged == declared


# -- alerts ------------------------------------------------------------------------------------------------


def alerts(tmp_path: Path, *extra: str) -> dict[str, dict[str, Any]]:
    docs = render(tmp_path, None, "--set", "metrics.prometheusRule.enabled=true", *extra)
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    return {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}


def test_operator_down_only_where_its_scrape_job_exists(tmp_path: Path) -> None:
    """absent(up{job=...}) fires forever when nothing scrapes that job: the alert comes with the chart's
    ServiceMonitor, whose job label is the metrics Service's name."""
    assert "TierkeeperOperatorDown" not in alerts(tmp_path)
    scraped = alerts(tmp_path, "--set", "metrics.serviceMonitor.enabled=true")
    docs = render(tmp_path, None, "--set", "metrics.serviceMonitor.enabled=true")
    (service,) = [d for d in docs if d["kind"] == "Service"]
    assert f'job="{service["metadata"]["name"]}"' in scraped["TierkeeperOperatorDown"]["expr"]


def test_every_alert_named_anywhere_exists_and_each_threshold_names_its_alert(tmp_path: Path) -> None:
    every = alerts(tmp_path, "--set", "metrics.serviceMonitor.enabled=true")
    texts = {
        "values.yaml": (CHART / "values.yaml").read_text(),
        "values.schema.json": (CHART / "values.schema.json").read_text(),
        "docs/operations.md": (REPO_ROOT / "docs" / "operations.md").read_text(),
        "docs/operator.md": (REPO_ROOT / "docs" / "operator.md").read_text(),
        "docs/gitops.md": (REPO_ROOT / "docs" / "gitops.md").read_text(),
    }
    for where, text in texts.items():
        named = set(re.findall(r"\bTierkeeper[A-Z][A-Za-z]+\b", text)) - {"TierkeeperError"}
        assert named <= every.keys(), (where, sorted(named - every.keys()))
    # Each threshold's description names the alert whose rule uses it.
    template = (CHART / "templates" / "prometheusrule.yaml").read_text()
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())
    thresholds = schema["properties"]["metrics"]["properties"]["prometheusRule"]["properties"]
    for key, node in thresholds.items():
        if key in ("enabled", "labels"):
            continue
        users = [
            name
            for name in every
            if f"$rule.{key}" in template.split(f"alert: {name}", 1)[1].split("- alert:", 1)[0]
        ]
        assert users and all(name in node["description"] for name in users), (key, users, node["description"])


# -- one name for the Jobs' image; cluster names that render ----------------------------------------------


def test_one_job_image_name_everywhere() -> None:
    """The model's default, the chart's pipelineImage, `make images` and the examples name the Jobs' image
    the same way (it was four different names)."""
    from storage_core.api.cluster import DEFAULT_IMAGE, PIPELINE_REPOSITORY

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert f"{values['pipelineImage']['repository']}:{chart['appVersion']}" == DEFAULT_IMAGE
    makefile = (REPO_ROOT / "Makefile").read_text()
    make_vars = dict(re.findall(r"^(IMAGE_REPO|IMAGE_TAG) \?= (\S+)$", makefile, re.M))
    # `make images` tags <IMAGE_REPO>/<target>:<IMAGE_TAG> through docker/build_images.py.
    assert "build_images.py --repo $(IMAGE_REPO) --version $(IMAGE_TAG)" in makefile
    builder = (REPO_ROOT / "docker" / "build_images.py").read_text()
    assert (
        '"pipeline": "tierkeeper/pipeline"' in builder and 'f"{prefix}{repo}/{target}:{version}"' in builder
    )
    assert f"{make_vars['IMAGE_REPO']}/pipeline:{make_vars['IMAGE_TAG']}" == DEFAULT_IMAGE
    examples = [
        REPO_ROOT / "examples" / "cluster.yaml",
        *(REPO_ROOT / "examples" / "rebuild").glob("*.yaml"),
        REPO_ROOT / "docs" / "rebuild.md",
        REPO_ROOT / "docs" / "install.md",
    ]
    named = [
        (p.name, image) for p in examples for image in re.findall(r"^\s*image: *(\S+)", p.read_text(), re.M)
    ]
    assert named, examples
    for where, image in named:
        if image.startswith("{") or "kafka" in image:  # a values object; the broker's own image
            continue
        assert image.rsplit(":", 1)[0].endswith(PIPELINE_REPOSITORY), (where, image)
    # The Argo CD and Flux examples set both images, the operator's and the Jobs'.
    install = (REPO_ROOT / "docs" / "install.md").read_text()
    for section in ("## Argo CD", "## Flux"):
        text = install.split(section, 1)[1].split("\n## ", 1)[0]
        assert "image: {repository:" in text and "pipelineImage: {repository:" in text, section


def test_cluster_names_that_cannot_render_are_refused(tmp_path: Path) -> None:
    """A cluster's name is a label value of its Jobs (<= 63 characters): the schema refuses a longer one,
    which the chart would render into Jobs the API server refuses."""
    from pydantic import ValidationError

    from storage_core.api.cluster import KafkaClusterConfig

    cluster = {"bootstrapServers": "k:9092", "remote": {"url": "s3://b/p"}}
    longest = "c" * 63
    docs = render(tmp_path, {"clusters": [{**cluster, "name": longest}]})
    (config_map,) = [
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-clusters")
    ]
    assert list(config_map["data"]) == [f"{longest}.yaml"]
    assert "name" in refused("--set-json", 'clusters=[{"name":"' + "c" * 64 + '","bootstrapServers":"k:9092",'
                             '"remote":{"url":"s3://b/p"}}]')  # fmt: skip
    with pytest.raises(ValidationError, match="at most 63"):
        KafkaClusterConfig.model_validate({**cluster, "name": "c" * 64})


def test_people_bound_to_view_or_edit_get_our_resources_on_the_real_api_server(
    k8s_control_plane: ControlPlane, k8s_namespace: str, tmp_path: Path
) -> None:
    """The chart's aggregated roles, created on the real API server, join the bootstrap view and edit
    roles (kube-controller-manager's clusterrole-aggregation controller), and the API server's own
    authorizer then answers for a user bound to view or edit in a namespace."""
    plane, ns = k8s_control_plane, k8s_namespace
    docs = render(tmp_path)
    ours = [
        d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith(("-view", "-edit"))
    ]
    assert len(ours) == 2
    created = []
    try:
        for role in ours:
            role["metadata"]["name"] = f"{ns}-{role['metadata']['name']}"  # cluster-wide: one per test
            plane.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
            created.append(role["metadata"]["name"])
        for user, role in (("viewer", "view"), ("editor", "edit")):
            binding = {
                "metadata": {"name": user},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
            }
            plane.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", binding)

        def allowed(user: str, verb: str, resource: str = "tieredtopics") -> bool:
            review = {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": user,
                    "resourceAttributes": {
                        "namespace": ns,
                        "verb": verb,
                        "group": "tierkeeper.io",
                        "resource": resource,
                    },
                },
            }
            answer = plane.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
            return bool(answer["status"].get("allowed"))

        assert wait_until(lambda: allowed("viewer", "list") and allowed("editor", "delete"), 30)
        assert allowed("viewer", "watch", "tieredbrokers") and allowed("editor", "create", "tieredbrokers")
        assert not allowed("viewer", "delete") and not allowed("viewer", "create", "tieredbrokers")
        assert not allowed("editor", "patch", "tieredtopics/status")  # status stays the operator's
    finally:
        for name in created:
            plane.request("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}")


def test_gateway_service_monitors_follow_the_charts_service_monitors(tmp_path: Path) -> None:
    from storage_core.cli.main import build_parser

    def settings(values: dict[str, Any] | None) -> Any:
        (container,) = pod_of(render(tmp_path, values))["containers"]
        args = build_parser().parse_args(container["args"])
        from tierkeeper_operator.run import settings_from_args

        return settings_from_args(args).gateway

    assert settings(None).service_monitor is False
    values = {
        "metrics": {"serviceMonitor": {"enabled": True, "interval": "15s", "labels": {"release": "prom"}}}
    }
    enabled = settings(values)
    assert enabled.service_monitor is True
    assert dict(enabled.service_monitor_labels) == {"release": "prom"}
    assert enabled.scrape_interval == "15s"
