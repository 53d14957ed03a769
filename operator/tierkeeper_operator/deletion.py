"""A TieredTopic's remote-deletion finalizer (decisions in :mod:`storage_core.reconcile.deletion`): kept on
the live objects whose deletion has work to do, and on a deleted one its ``deletionPolicy`` carried out
(release, or a delete Job until one succeeded; the skip annotation is the way out)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from storage_core.api.parse import parse_spec
from storage_core.api.resources import TieredTopicSpec
from storage_core.api.status import TieredTopicStatus
from storage_core.reconcile.deletion import FINALIZER, SKIP_ANNOTATION, decide_deletion, needs_finalizer
from tierkeeper_operator.job_kinds import JobKind, delete_job, kind_of, tier_writers
from tierkeeper_operator.jobs import LABEL_TOPIC, Owner, job_state
from tierkeeper_operator.kube import KubeError
from tierkeeper_operator.listing import Listed, status_of
from tierkeeper_operator.writes import RoundTools, key_of, parallel

log = logging.getLogger("tierkeeper.operator")


class Deletion:
    def __init__(self, tools: RoundTools) -> None:
        self._tools = tools

    def add_finalizers(self, listed: Listed) -> None:
        """The finalizer goes on the live objects whose deletion has work to do (deletionPolicy Delete), a
        few writes at a time; a Retain object needs none, so 10,000 new ones cost no finalizer write."""
        missing = []
        for key, obj in listed.topic_objs.items():
            live_spec = listed.topic_specs[key].value
            policy = live_spec.deletion_policy if live_spec is not None else None
            if needs_finalizer(policy) and FINALIZER not in (obj["metadata"].get("finalizers") or []):
                missing.append(obj)
        parallel(
            lambda obj: self._set_finalizers(obj, [*(obj["metadata"].get("finalizers") or []), FINALIZER]),
            missing,
        )

    def _set_finalizers(self, obj: Mapping[str, Any], finalizers: list[str]) -> bool:
        """False when the object changed since it was listed (409: kopf or a user wrote it meanwhile) or
        is gone (404): the next round, with the object as it is then, tries again. Nothing else of this
        round depends on it, so the round goes on for every other object."""
        try:
            self._tools.kube.set_finalizers("tieredtopics", obj, finalizers)
        except KubeError as exc:
            if exc.status not in (404, 409):
                raise
            log.debug("finalizers of %s not written this round: HTTP %s", key_of(obj), exc.status)
            return False
        return True

    def finalize(self, obj: Mapping[str, Any], jobs: list[dict[str, Any]]) -> None:
        """Carry out a deleted TieredTopic's deletionPolicy (live ones get the finalizer in
        :meth:`add_finalizers`)."""
        meta = obj["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if FINALIZER not in finalizers:
            return
        spec = parse_spec(TieredTopicSpec, obj.get("spec") or {}).value
        status = status_of(TieredTopicStatus, obj)
        mine = [
            j
            for j in jobs
            if kind_of(j) == JobKind.DELETE
            and j["metadata"]["namespace"] == meta["namespace"]
            and (j["metadata"].get("labels") or {}).get(LABEL_TOPIC) == meta["name"]
        ]
        states = [job_state(j) for j in sorted(mine, key=lambda j: j["metadata"]["creationTimestamp"])]
        last = "none" if not states else "running" if "Running" in states else states[-1].lower()
        skip = (meta.get("annotations") or {}).get(SKIP_ANNOTATION) == "true"
        decision = decide_deletion(
            spec.deletion_policy if spec else None,
            skip,
            status.topic_id,
            last,  # type: ignore[arg-type]
            writers=tier_writers(jobs, key_of(obj)),
        )
        if decision.step == "release":
            if self._set_finalizers(obj, [f for f in finalizers if f != FINALIZER]):
                self._tools.event(obj, "TieredTopic", "Normal", "Released", decision.reason)
        elif decision.step == "start-delete" and spec is not None and status.topic_id is not None:
            cluster = self._tools.clusters.get(spec.cluster_ref.name)
            if cluster is None:
                self._tools.event(
                    obj, "TieredTopic", "Warning", "ClusterNotFound", f"cannot delete: {decision.reason}"
                )
                return
            job = delete_job(
                spec.topic,
                status.topic_id,
                spec.cluster_ref.name,
                cluster,
                Owner.of("TieredTopic", obj),
                self._tools.clock().strftime("%Y%m%dT%H%M%S"),
            )
            try:
                created = self._tools.create_job(job)
            except KubeError as exc:
                # E.g. 403 in a namespace being deleted: no new object may be created there, so this
                # delete can never start. The object waits for the way out (the skip annotation);
                # the round goes on for everything else.
                log.warning("cannot start the delete Job of %s: %s", key_of(obj), exc)
                self._tools.event(obj, "TieredTopic", "Warning", "DeleteNotStarted", f"{exc}"[:300])
                return
            if created:
                self._tools.event(
                    obj,
                    "TieredTopic",
                    "Normal",
                    "DeleteStarted",
                    f"Job {job['metadata']['name']}: {decision.reason}",
                )
