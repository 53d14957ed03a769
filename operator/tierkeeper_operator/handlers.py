"""kopf handlers for TieredTopic and TieredBroker.

Handlers stay thin: parse ``spec`` with the pydantic model, derive the status from the verdict
(:mod:`tierkeeper_operator.assessment`), write it once through kopf's patch, and post a Warning
event when the spec is unusable. Validation is the operator's whole behaviour in this release;
docs/operator.md says so.

Nothing is registered on import: :func:`build_registry` puts the handlers into a fresh kopf
registry that the caller hands to ``kopf.run`` or ``kopf.testing.KopfRunner``, so two operators in
one process (tests) never share handlers through kopf's global default registry.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any

import kopf
from pydantic import BaseModel

from tierkeeper_operator import GROUP, VERSION
from tierkeeper_operator.assessment import REASON_INVALID, assess, status_after_assessment
from tierkeeper_operator.models import TieredBrokerSpec, TieredTopicSpec
from tierkeeper_operator.settings import apply_operator_settings


def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    apply_operator_settings(settings)


def _assess_and_record(
    model: type[BaseModel],
    spec: kopf.Spec,
    meta: kopf.Meta,
    status: kopf.Status,
    body: kopf.Body,
    patch: kopf.Patch,
    logger: kopf.Logger,
) -> None:
    verdict = assess(model, spec)
    generation = meta.get("generation")
    previous = status.get("conditions") or []
    patch["status"] = status_after_assessment(
        verdict,
        generation=generation if isinstance(generation, int) else None,
        previous_conditions=[c for c in previous if isinstance(c, Mapping)]
        if isinstance(previous, list)
        else [],
        now=datetime.datetime.now(datetime.UTC),
    )
    if verdict.problem is None:
        logger.info("spec accepted (generation %s)", generation)
    else:
        logger.warning("spec rejected: %s", verdict.problem)
        kopf.warn(body, reason=REASON_INVALID, message=verdict.problem)


def tieredtopic_changed(
    spec: kopf.Spec,
    meta: kopf.Meta,
    status: kopf.Status,
    body: kopf.Body,
    patch: kopf.Patch,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    _assess_and_record(TieredTopicSpec, spec, meta, status, body, patch, logger)


def tieredbroker_changed(
    spec: kopf.Spec,
    meta: kopf.Meta,
    status: kopf.Status,
    body: kopf.Body,
    patch: kopf.Patch,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    _assess_and_record(TieredBrokerSpec, spec, meta, status, body, patch, logger)


def build_registry(login: Callable[..., Any] = kopf.login_via_client) -> kopf.OperatorRegistry:
    """A registry holding every Tierkeeper handler and one login handler.

    ``login`` is kopf's piggybacking on the kubernetes client by default (in-cluster service account,
    else kubeconfig). Tests pass ``kopf.login_with_kubeconfig``, which reads ``$KUBECONFIG`` when it
    runs rather than when the kubernetes package was first imported.

    Each resource handler runs on create, on update (spec or metadata changed; status changes do
    not trigger it), and on resume (operator restart), so every object gets a current status.
    """
    registry = kopf.OperatorRegistry()
    kopf.on.login(registry=registry)(login)
    kopf.on.startup(registry=registry)(configure)
    for plural, handler in (("tieredtopics", tieredtopic_changed), ("tieredbrokers", tieredbroker_changed)):
        kopf.on.resume(GROUP, VERSION, plural, registry=registry)(handler)
        kopf.on.create(GROUP, VERSION, plural, registry=registry)(handler)
        kopf.on.update(GROUP, VERSION, plural, registry=registry)(handler)
    return registry
