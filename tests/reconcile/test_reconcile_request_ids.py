"""Request ids of one-shot actions: pending until recorded as acted on, never again for the same id."""

from __future__ import annotations

from typing import Any

from storage_core.api.resources import TieredBrokerSpec
from storage_core.api.status import TieredBrokerStatus
from storage_core.reconcile.request_ids import acted_on, pending_fetchers, pending_rebuild


def spec(**extra: Any) -> TieredBrokerSpec:
    raw = {"clusterRef": {"name": "c"}, "brokerId": 0, "logDir": {"path": "/d"}, **extra}
    return TieredBrokerSpec.model_validate(raw)


def test_a_rebuild_request_is_pending_once_per_id() -> None:
    asked = spec(rebuild={"requestId": "a"})
    status = TieredBrokerStatus()
    assert pending_rebuild(asked, status) == "a"
    done = acted_on(status, rebuild="a")
    assert pending_rebuild(asked, done) is None
    assert pending_rebuild(spec(rebuild={"requestId": "b"}), done) == "b"
    assert pending_rebuild(spec(), status) is None and pending_rebuild(None, status) is None


def test_a_fetcher_request_is_pending_once_per_id_and_records_keep_each_other() -> None:
    asked = spec(replicaFetchers={"request": {"id": "x", "command": "approve"}})
    status = acted_on(TieredBrokerStatus(), rebuild="a")
    request = pending_fetchers(asked, status)
    assert request is not None and request.command == "approve"
    done = acted_on(status, fetchers="x")
    assert pending_fetchers(asked, done) is None
    assert done.requests is not None and (done.requests.rebuild, done.requests.fetchers) == ("a", "x")
    assert pending_fetchers(spec(), done) is None
