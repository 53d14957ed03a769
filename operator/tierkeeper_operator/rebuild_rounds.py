"""The rebuild part of a reconcile round, for every TieredBroker (decisions: storage_core.reconcile.rebuild).

1. Keep the ConfigMap ``tierkeeper-rebuild-<cluster>`` current in each namespace with TieredBrokers of that
   cluster: the settings the brokers' init containers read (``tierkeeper rebuild --if-empty --settings``).
2. Fold in what the init container of each broker's pod (``placement.podName``) reports, and the result of
   a finished rebuild Job, into ``status.rebuild``.
3. Serve ``tierkeeper.io/rebuild: run``: a rebuild Job on the broker's claim (mounted read-write), started
   only while no pod uses that claim read-write; otherwise the status says Blocked and names the pods.
4. Let a rebuild in progress, blocked or failed show in the broker's kstatus conditions (``with_rebuild``).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.parse import Parsed
from storage_core.api.rebuild_settings import (
    SETTINGS_KEY,
    dump_settings,
    render_settings,
    settings_config_map_name,
)
from storage_core.api.resources import TieredBrokerSpec
from storage_core.api.status import TieredBrokerStatus
from storage_core.reconcile.conditions import recorded_conditions
from storage_core.reconcile.planner import Plan
from storage_core.reconcile.rebuild import (
    REQUEST_ANNOTATION,
    REQUEST_VALUE,
    JobView,
    RebuildInput,
    decide,
    init_container_view,
    pods_using_claim,
    with_rebuild,
)
from storage_core.reconcile.request_ids import acted_on, pending_rebuild
from tierkeeper_operator.job_kinds import JobKind, rebuild_job
from tierkeeper_operator.jobs import (
    ANNOTATION_RECORDED,
    LABEL_BROKER,
    LABEL_CLUSTER,
    LABEL_KIND,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    Owner,
    job_state,
    termination_message,
)
from tierkeeper_operator.kube import Kube
from tierkeeper_operator.writes import EventSink

KIND = JobKind.REBUILD.value


def _job_view(kube: Kube, job: Mapping[str, Any]) -> JobView:
    meta = job["metadata"]
    pods = kube.job_pods(meta["namespace"], meta["name"])
    state = job_state(job)
    return JobView(
        name=meta["name"],
        state=state,  # type: ignore[arg-type]
        recorded=(meta.get("annotations") or {}).get(ANNOTATION_RECORDED) == "true",
        created=str(meta.get("creationTimestamp") or ""),
        message=termination_message(pods) if state != "Running" else None,
        pod=str(pods[-1]["metadata"]["name"]) if pods else None,
    )


class RebuildRounds:
    def __init__(self, kube: Kube, clusters: Mapping[str, KafkaClusterConfig], event: EventSink) -> None:
        self.kube = kube
        self.clusters = clusters
        self.event = event

    def keep_settings(self, objs: Mapping[str, Mapping[str, Any]], specs: Mapping[str, Parsed[Any]]) -> None:
        groups: dict[tuple[str, str], list[tuple[str, TieredBrokerSpec]]] = {}
        for key, obj in objs.items():
            spec = specs[key].value
            if spec is not None and spec.cluster_ref.name in self.clusters:
                ns = obj["metadata"]["namespace"]
                groups.setdefault((ns, spec.cluster_ref.name), []).append((obj["metadata"]["name"], spec))
        for (ns, cluster), brokers in sorted(groups.items()):
            settings = render_settings(self.clusters[cluster], brokers)
            labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_CLUSTER: cluster}
            self.kube.apply_config_map(
                ns, settings_config_map_name(cluster), labels, {SETTINGS_KEY: dump_settings(settings)}
            )

    def run(
        self,
        objs: Mapping[str, Mapping[str, Any]],
        specs: Mapping[str, Parsed[Any]],
        planned: Plan,
        now: datetime.datetime,
    ) -> list[str]:
        """One round; returns the names of the Jobs it created."""
        self.keep_settings(objs, specs)
        jobs: dict[tuple[str, str, str], dict[str, Any]] = {}
        for found in self.kube.list_jobs(f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_KIND}={KIND}"):
            meta = found["metadata"]
            labels = meta.get("labels") or {}
            ident = (meta["namespace"], labels.get(LABEL_CLUSTER, ""), labels.get(LABEL_BROKER, ""))
            newest = jobs.get(ident)
            if newest is None or meta["creationTimestamp"] > newest["metadata"]["creationTimestamp"]:
                jobs[ident] = found
        pods_by_ns: dict[str, list[dict[str, Any]]] = {}
        created: list[str] = []
        for key, obj in sorted(objs.items()):
            meta = obj["metadata"]
            ns = meta["namespace"]
            spec: TieredBrokerSpec | None = specs[key].value
            status: TieredBrokerStatus = planned.broker_status.get(key) or TieredBrokerStatus()
            annotated = (meta.get("annotations") or {}).get(REQUEST_ANNOTATION) == REQUEST_VALUE
            request_id = pending_rebuild(spec, status)  # GitOps: acted on once per id
            requested = annotated or request_id is not None
            job: JobView | None = None
            view = None
            pods: list[dict[str, Any]] = []
            if spec is not None:
                raw = jobs.get((ns, spec.cluster_ref.name, str(spec.broker_id)))
                job = _job_view(self.kube, raw) if raw is not None else None
                if requested or spec.placement.pod_name:
                    if ns not in pods_by_ns:
                        pods_by_ns[ns] = self.kube.list_pods(ns)
                    pods = pods_by_ns[ns]
                if spec.placement.pod_name:
                    mine = [p for p in pods if p["metadata"]["name"] == spec.placement.pod_name]
                    view = init_container_view(mine[0]) if mine else None
            unusable = None
            if spec is not None and spec.log_dir.claim_name is None:
                unusable = "logDir.claimName is required for a rebuild Job"
            elif spec is not None and spec.cluster_ref.name not in self.clusters:
                unusable = f"cluster {spec.cluster_ref.name!r} is not configured"
            users: tuple[str, ...] = ()
            if requested and spec is not None and spec.log_dir.claim_name is not None:
                ignore = frozenset({job.pod} if job is not None and job.pod else set())
                # Every claim of a JBOD broker is written, so a pod using any of them holds the rebuild.
                users = tuple(
                    dict.fromkeys(u for c in spec.claims() for u in pods_using_claim(pods, c, ignore=ignore))
                )
            step = decide(RebuildInput(key, spec, status.rebuild, requested, job, view, users, unusable), now)
            if step.record_job is not None:
                self.kube.annotate_job(ns, step.record_job, {ANNOTATION_RECORDED: "true"})
            if step.start_job and spec is not None:
                owner = Owner("TieredBroker", meta["name"], ns, meta["uid"])
                node = spec.placement.node_name
                manifest = rebuild_job(
                    spec, self.clusters[spec.cluster_ref.name], owner, node, now.strftime("%Y%m%dT%H%M%S")
                )
                if self.kube.create_job(manifest):
                    created.append(manifest["metadata"]["name"])
                    self.event(
                        obj, "TieredBroker", "Normal", "RebuildStarted", f"Job {manifest['metadata']['name']}"
                    )
                assert step.status is not None
                step.status = step.status.model_copy(update={"job": manifest["metadata"]["name"]})
            if step.clear_request and annotated:
                self.kube.remove_annotation("tieredbrokers", obj, REQUEST_ANNOTATION)
            if step.clear_request and request_id is not None:
                status = acted_on(status, rebuild=request_id)
            for event in step.events:
                self.event(obj, "TieredBroker", event.type, event.reason, event.message)
            previous = recorded_conditions(obj.get("status"))
            generation = meta.get("generation")
            planned.broker_status[key] = with_rebuild(status, step.status, previous, generation, now)
        return created
