"""What a round read from the API server, as every part of the round sees it (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from storage_core.api.parse import Parsed
from storage_core.api.resources import TieredBrokerSpec, TieredTopicSpec
from storage_core.reconcile.round import Statuses

M = TypeVar("M")


def status_of(model: type[M], obj: Mapping[str, Any]) -> M:
    """The object's status as ``model``; a status another writer broke is rebuilt, not fatal."""
    try:
        return model.model_validate(obj.get("status") or {})  # type: ignore[attr-defined,no-any-return]
    except ValueError:
        return model()


@dataclass
class Listed:
    """What a round read from the API server: the operator's Jobs, the live TieredTopics (or the ones a
    quick round was handed) and the TieredBrokers by key, their parsed specs and current statuses."""

    jobs: list[dict[str, Any]]
    topic_objs: dict[str, dict[str, Any]]
    broker_objs: dict[str, dict[str, Any]]
    topic_specs: dict[str, Parsed[TieredTopicSpec]]
    broker_specs: dict[str, Parsed[TieredBrokerSpec]]
    statuses: Statuses
