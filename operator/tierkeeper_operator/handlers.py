"""kopf handlers for TieredBroker, and the operator's kopf registry.

Handlers stay thin: parse ``spec`` with the API models, ask the shared planner what can be said from the
object alone (:func:`storage_core.reconcile.planner.admission`), write ``observedGeneration``, the
message and the kstatus conditions once through kopf's patch, and post a Warning event when the object
is unusable. Other status fields are left as they are.

TieredTopics have no kopf handler: the reconcile rounds (:mod:`tierkeeper_operator.loop`) judge them,
admission included. A per-object kopf handler cost every new TieredTopic two more writes (kopf's
annotations and its status patch) and kopf's in-memory state per object, and only said early what the
next round says anyway; with 10,000 TieredTopics that was most of the API server's and the operator's
work (docs/benchmarks.md, issue 15). TieredBrokers are few, and the fetcher and rebuild parts read them.

Nothing is registered on import: :func:`build_registry` puts the handlers into a fresh kopf registry that
the caller hands to ``kopf.run`` or ``kopf.testing.KopfRunner``, so two operators in one process (tests)
never share handlers through kopf's global default registry.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import kopf
from pydantic import BaseModel

from storage_core.api import GROUP, VERSION
from storage_core.api.cluster import KafkaClusterConfig
from storage_core.api.parse import parse_spec
from storage_core.api.resources import TieredBrokerSpec
from storage_core.api.status import ResourceStatus
from storage_core.reconcile.conditions import Health, conditions_for, recorded_conditions
from storage_core.reconcile.planner import admission
from storage_core.reconcile.tiered_clusters import Directory, admitted
from tierkeeper_operator.kopf_settings import apply_operator_settings

if TYPE_CHECKING:
    from tierkeeper_operator.settings import OperatorSettings

BROKER_USABLE = Health(True, "Ready", "spec accepted")


def configure(settings: kopf.OperatorSettings, *, namespaced: bool = False, **_: Any) -> None:
    apply_operator_settings(settings, namespaced=namespaced)


def status_patch(
    model: type[BaseModel],
    usable: Health,
    clusters: Mapping[str, KafkaClusterConfig],
    spec: Mapping[str, Any],
    generation: int | None,
    status: Mapping[str, Any],
    now: datetime.datetime,
    namespace: str = "",
    where: Directory | None = None,
    clusters_known: bool = True,
) -> tuple[dict[str, Any], Health]:
    """The ``status`` fields to patch for the object as it is now, and the health they say. ``where``:
    the TieredClusters in effect (a clusterRef naming one of another namespace is refused)."""
    parsed = parse_spec(model, spec)
    if where is not None:
        parsed = admitted(namespace, parsed, where)  # type: ignore[type-var]
    health = admission(parsed.value, parsed.problem, clusters)  # type: ignore[arg-type]
    if health is not None and health.reason == "ClusterNotFound" and not clusters_known:
        # At startup kopf resumes every TieredBroker before the first round has listed the TieredClusters:
        # an unknown name then may be one not listed yet, and the round judges it a moment later.
        return {}, Health(True, "Unchanged", "left to the reconcile round")
    previous = recorded_conditions(status)
    if health is None:
        if any(c.type == "Ready" for c in previous) and not any(c.type == "Stalled" for c in previous):
            # Usable, and the reconcile round already judged it: leave the conditions and
            # observedGeneration to the round, so a spec edit does not flap Ready (kstatus reads the
            # stale observedGeneration as InProgress until the round has seen the new spec).
            return {}, Health(True, "Unchanged", "left to the reconcile round")
        health = usable
    conditions = conditions_for(health, generation, previous, now)
    fields = ResourceStatus(observed_generation=generation, message=health.message, conditions=conditions)
    patch = fields.model_dump(by_alias=True, mode="json")
    return patch, health


def _changed(
    model: type[BaseModel],
    usable: Health,
    spec: kopf.Spec,
    meta: kopf.Meta,
    status: kopf.Status,
    body: kopf.Body,
    patch: kopf.Patch,
    logger: kopf.Logger,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    generation = meta.get("generation")
    rounds = memo.get("rounds")
    fields, health = status_patch(
        model,
        usable,
        memo.get("clusters", {}) if rounds is None else rounds.reconciler.clusters,
        spec,
        generation if isinstance(generation, int) else None,
        status,
        datetime.datetime.now(datetime.UTC),
        str(meta.get("namespace") or ""),
        None if rounds is None else rounds.reconciler.cluster_rounds.directory,
        rounds is None or rounds.reconciler.cluster_rounds.resolved,
    )
    if fields:
        patch.setdefault("status", {}).update(fields)
    if health.stalled:
        logger.warning("%s: %s", health.reason, health.message)
        kopf.warn(body, reason=health.reason, message=health.message)
    else:
        logger.info("%s (generation %s)", health.message, generation)


def build_registry(
    clusters: Mapping[str, KafkaClusterConfig] | None = None,
    login: Callable[..., Any] = kopf.login_via_client,
    settings: OperatorSettings | None = None,
) -> kopf.OperatorRegistry:
    """A registry holding every Tierkeeper handler and one login handler.

    ``clusters``: the cluster configurations of ``--cluster`` files (by name) that clusterRef names
    resolve against; with ``rounds``, the TieredClusters the rounds list are in effect beside them.
    ``login`` is kopf's piggybacking on the kubernetes client by default (in-cluster service account,
    else kubeconfig). Tests pass ``kopf.login_with_kubeconfig``, which reads ``$KUBECONFIG`` when it
    runs rather than when the kubernetes package was first imported.

    The TieredBroker handler runs on create, on update (spec or metadata changed; status changes do
    not trigger it), and on resume (operator restart), so every broker gets a current status at once.
    TieredTopics are left to the rounds (module docstring).

    ``settings``: the operator's settings, with which reconcile rounds run (:mod:`tierkeeper_operator.loop`:
    Kafka observed, Jobs run, status written) on a thread started at startup and stopped at cleanup
    (:func:`tierkeeper_operator.compose.start_rounds`), gated by peering unless ``peering.standalone``
    (whose ``lifetime`` also goes into kopf's peering settings), with the metrics and readiness
    endpoints; None runs no rounds (the handlers alone). A probe handler makes kopf's liveness endpoint
    fail once the rounds thread has died. Named namespaces (not ``scope.all_namespaces``) turn kopf's
    cluster-wide discovery off (see ``apply_operator_settings``).
    """
    known = dict(clusters or {})
    namespaced = settings is not None and not settings.scope.all_namespaces
    registry = kopf.OperatorRegistry()
    kopf.on.login(registry=registry)(login)

    def startup(memo: kopf.Memo, **kwargs: Any) -> None:
        kopf_settings: kopf.OperatorSettings = kwargs.pop("settings")  # kopf's own, beside ours
        configure(kopf_settings, namespaced=namespaced, **kwargs)
        memo["clusters"] = known
        if settings is not None:
            from tierkeeper_operator.compose import start_rounds

            if not settings.peering.standalone:
                kopf_settings.peering.lifetime = settings.peering.lifetime
            memo["rounds"] = start_rounds(known, settings)

    def cleanup(memo: kopf.Memo, **_: Any) -> None:
        running = memo.get("rounds")
        if running is not None:
            running.stop()

    def rounds_probe(memo: kopf.Memo, **_: Any) -> dict[str, Any]:
        running = memo.get("rounds")
        if running is None:
            return {"rounds": "off"}
        if not running.alive():
            raise kopf.PermanentError("the reconcile rounds thread has stopped")
        snapshot: dict[str, Any] = running.ready.snapshot()
        return snapshot

    kopf.on.startup(registry=registry)(startup)
    kopf.on.cleanup(registry=registry)(cleanup)
    kopf.on.probe(registry=registry, id="rounds")(rounds_probe)
    handler = partial(_changed, TieredBrokerSpec, BROKER_USABLE)
    handler.__name__ = "tieredbrokers_changed"  # type: ignore[attr-defined]
    for decorator in (kopf.on.resume, kopf.on.create, kopf.on.update):
        decorator(GROUP, VERSION, "tieredbrokers", registry=registry, id="tieredbrokers-status")(handler)
    return registry
