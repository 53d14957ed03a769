"""Every Kubernetes permission the operator needs, declared once next to the adapter that uses them.

The Helm chart's Roles / ClusterRole are generated from this list (``python -m tierkeeper_operator.chartgen``
writes ``charts/tierkeeper/files/rbac.yaml``), and the tests hold it to the code both ways: every call the
:class:`~tierkeeper_operator.kube.Kube` adapter makes is granted here and every grant of the adapter is
made by some call (``tests/k8s/test_k8s_rbac.py``). A new call in ``kube.py`` fails those tests until its
grant is added here and the chart regenerated.

``KUBE_GRANTS`` are the adapter's own calls; ``KOPF_GRANTS`` what kopf does on the operator's behalf
(watching and patching our resources, posting events, discovering CRDs).
"""

from __future__ import annotations

from dataclasses import dataclass

from storage_core.api import GROUP


@dataclass(frozen=True)
class Grant:
    """Verbs on one resource (``"jobs"``, ``"tieredtopics/status"``) of one API group (``""``: core), and
    why: which calls need them, what for (the operator's DESIGN.md lists it beside the verbs)."""

    group: str
    resource: str
    verbs: tuple[str, ...]
    why: str
    cluster_scoped: bool = False
    """The resource is cluster-scoped: grantable by a ClusterRole only."""
    clusterwide_only: bool = False
    """Needed only when the operator watches all namespaces (granted by the ClusterRole then)."""
    namespaced_only: bool = False
    """Needed only when the operator watches given namespaces (granted by their Roles)."""
    job_write: bool = False
    """A write into the namespaces where Jobs run (Jobs, the rebuild ConfigMaps): with the chart's
    ``rbac.jobNamespaces``, granted only there (a Role each) rather than cluster-wide."""
    named: bool = False
    """Granted only on objects named one by one (``resourceNames``): the chart renders a Role per namespace
    for the Secrets its values name (``rbac.kafkaClientSecrets`` and the clusters' clientConfigSecretRef);
    never part of the generated rules, so the operator can never list, watch or read any other."""


KUBE_GRANTS: tuple[Grant, ...] = (
    Grant(
        GROUP,
        "tieredtopics",
        ("list", "watch", "patch"),
        "Kube.list_resources: every round lists them; Kube.watch: a new or edited one wakes the rounds; "
        "Kube.set_finalizers: the remote-deletion finalizer",
    ),
    Grant(
        GROUP,
        "tieredbrokers",
        ("list", "patch"),
        "Kube.list_resources: every round lists them; Kube.remove_annotation: commands acted on",
    ),
    Grant(
        GROUP,
        "tieredclusters",
        ("list", "watch", "patch"),
        "Kube.list_resources: every full round lists them; Kube.watch: a new, edited or deleted one wakes "
        "the rounds; Kube.set_finalizers: held while TieredTopics or TieredBrokers name it",
    ),
    Grant(GROUP, "tieredclusters/status", ("patch",), "Kube.patch_status: a round writes what it saw"),
    Grant(
        "",
        "secrets",
        ("get",),
        "Kube.secret_data: a TieredCluster's clientConfigSecretRef, for the operator's own Kafka client",
        named=True,
    ),
    Grant(GROUP, "tieredtopics/status", ("patch",), "Kube.patch_status: a round writes what it saw"),
    Grant(GROUP, "tieredbrokers/status", ("patch",), "Kube.patch_status: a round writes what it saw"),
    Grant("batch", "jobs", ("list",), "Kube.list_jobs"),
    Grant("batch", "jobs", ("create", "patch"), "Kube.create_job, annotate_job", job_write=True),
    Grant(
        "",
        "pods",
        ("list", "get"),
        "Kube.job_pods (termination messages), pod_node (broker's node), list_pods (rebuild: the init "
        "container's result, which pods use a broker's volume), list_strimzi_broker_pods (their claims)",
    ),
    Grant("", "configmaps", ("get",), "Kube.apply_config_map: reads the rebuild settings it keeps"),
    Grant(
        "",
        "configmaps",
        ("create", "patch"),
        "Kube.apply_config_map: the rebuild settings (tierkeeper-rebuild-<cluster>) the init containers read",
        job_write=True,
    ),
    Grant("", "events", ("create",), "Kube.event: Warning/Normal events on our objects"),
    # A TieredCluster's gateway and Strimzi TieredBrokers: server-side applied (create for a missing one,
    # patch), deleted when no longer wanted.
    Grant(
        "apps",
        "deployments",
        ("create", "patch", "delete", "get"),
        "Kube.apply_object, delete_object: the gateway's Deployment; get_deployment: its ready replicas",
    ),
    Grant("", "services", ("create", "patch", "delete"), "Kube.apply_object, delete_object: the gateway's"),
    Grant(
        "policy",
        "poddisruptionbudgets",
        ("create", "patch", "delete"),
        "Kube.apply_object, delete_object: the gateway's",
    ),
    Grant(
        "networking.k8s.io",
        "networkpolicies",
        ("create", "patch", "delete"),
        "Kube.apply_object, delete_object: the gateway's",
    ),
    Grant(
        "monitoring.coreos.com",
        "servicemonitors",
        ("create", "patch", "delete"),
        "Kube.apply_object, delete_object: the gateway's, when the chart enables ServiceMonitors",
    ),
    Grant(
        GROUP,
        "tieredbrokers",
        ("create", "patch", "delete"),
        "Kube.apply_object, delete_object: the TieredBrokers kept for a Strimzi cluster's brokers",
    ),
    Grant("kafka.strimzi.io", "kafkas", ("get",), "Kube.get_strimzi_kafka: spec.strimzi's bootstrap address"),
    Grant(
        "kafka.strimzi.io",
        "kafkanodepools",
        ("list",),
        "Kube.list_strimzi_node_pools: the broker node ids and storage of spec.strimzi's cluster",
    ),
    Grant(
        "kopf.dev",
        "kopfpeerings",
        ("get", "create"),
        "Kube.get_peering, ensure_peering: the rounds follow kopf's peering; the operator creates the object",
        namespaced_only=True,
    ),
    Grant(
        "kopf.dev",
        "clusterkopfpeerings",
        ("get", "create"),
        "Kube.get_peering, ensure_peering, watching all namespaces",
        cluster_scoped=True,
        clusterwide_only=True,
    ),
)

KOPF_GRANTS: tuple[Grant, ...] = (
    # TieredTopics have no kopf handler (the rounds read them, and SpecWatch only wakes the rounds).
    Grant(GROUP, "tieredbrokers", ("list", "watch", "patch"), "kopf watches them; finalizers, annotations"),
    Grant(GROUP, "tieredbrokers/status", ("patch",), "kopf's handlers write status through the subresource"),
    Grant("", "events", ("create",), "kopf posts events for handler results (kopf.warn)"),
    Grant(
        "kopf.dev",
        "kopfpeerings",
        ("list", "watch", "patch"),
        "kopf peering in each watched namespace: watches the peers, patches its keep-alive",
        namespaced_only=True,
    ),
    Grant(
        "kopf.dev",
        "clusterkopfpeerings",
        ("list", "watch", "patch"),
        "kopf peering when watching all namespaces",
        cluster_scoped=True,
        clusterwide_only=True,
    ),
    # kopf notices CRDs appearing and changing; without this grant (namespaced mode) it logs a warning and
    # sees CRD changes only after a restart, which the chart forces on a CRD change (checksum annotation).
    Grant(
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        ("list", "watch"),
        "kopf's resource scanning",
        cluster_scoped=True,
        clusterwide_only=True,
    ),
)

ALL_GRANTS: tuple[Grant, ...] = KUBE_GRANTS + KOPF_GRANTS


def merged(
    grants: tuple[Grant, ...], *, clusterwide: bool, job_writes: bool | None = None, named: bool = False
) -> dict[tuple[str, str], tuple[str, ...]]:
    """(group, resource) -> sorted verbs, of the grants a mode needs (namespaced: ``clusterwide`` False);
    ``job_writes`` True or False: only the grants that are (or are not) writes where Jobs run; ``named``:
    with the grants on named objects only (:attr:`Grant.named`), which generated rules never hold."""
    out: dict[tuple[str, str], set[str]] = {}
    for grant in grants:
        if (grant.clusterwide_only and not clusterwide) or (grant.namespaced_only and clusterwide):
            continue
        if job_writes is not None and grant.job_write != job_writes:
            continue
        if grant.named and not named:
            continue  # rendered by the chart per named object (Grant.named)
        out.setdefault((grant.group, grant.resource), set()).update(grant.verbs)
    return {key: tuple(sorted(verbs)) for key, verbs in sorted(out.items())}


def rules(
    *, clusterwide: bool, cluster_scoped: bool | None = None, job_writes: bool | None = None
) -> list[dict[str, list[str]]]:
    """RBAC ``rules`` for a mode: one rule per resource; ``cluster_scoped`` filters by resource scope,
    ``job_writes`` by :attr:`Grant.job_write`."""
    scoped = {(g.group, g.resource): g.cluster_scoped for g in ALL_GRANTS}
    return [
        {"apiGroups": [group], "resources": [resource], "verbs": list(verbs)}
        for (group, resource), verbs in merged(
            ALL_GRANTS, clusterwide=clusterwide, job_writes=job_writes
        ).items()
        if cluster_scoped is None or scoped[(group, resource)] == cluster_scoped
    ]


NAMED_GRANTS: tuple[Grant, ...] = tuple(g for g in ALL_GRANTS if g.named)
"""What the chart grants on named objects only (resourceNames)."""

USER_RESOURCES = ("tieredtopics", "tieredbrokers", "tieredclusters")
VIEW_VERBS = ("get", "list", "watch")
EDIT_VERBS = (*VIEW_VERBS, "create", "update", "patch", "delete", "deletecollection")


def user_rules(verbs: tuple[str, ...]) -> list[dict[str, list[str]]]:
    """Rules of the chart's aggregated ClusterRoles for people (``view``: read our resources and their
    status; ``edit``: manage them too), aggregated into Kubernetes' view, edit and admin roles."""
    return [
        {"apiGroups": [GROUP], "resources": list(USER_RESOURCES), "verbs": list(verbs)},
        {
            "apiGroups": [GROUP],
            "resources": [f"{resource}/status" for resource in USER_RESOURCES],
            "verbs": list(VIEW_VERBS[:1]),
        },
    ]
