"""One-shot actions a TieredBroker asks for in its spec, acted on once per request id.

An annotation (``tierkeeper.io/rebuild=run``, ``tierkeeper.io/fetchers=approve``) is removed once acted
on, which suits kubectl; under GitOps a re-applied manifest (Argo CD's selfHeal, every Flux interval)
brings it back and the action would run again. A request id in the spec does not have that problem: the
operator records it in ``status.requests`` once it has acted, and an id already recorded is never acted
on again, however often the same manifest is applied. A new id asks again.
"""

from __future__ import annotations

from storage_core.api.resources import FetcherRequest, TieredBrokerSpec
from storage_core.api.status import HandledRequests, TieredBrokerStatus


def pending_rebuild(spec: TieredBrokerSpec | None, status: TieredBrokerStatus) -> str | None:
    """``spec.rebuild.requestId`` when it has not been acted on yet."""
    wanted = spec.rebuild.request_id if spec is not None else None
    done = status.requests.rebuild if status.requests is not None else None
    return wanted if wanted is not None and wanted != done else None


def pending_fetchers(spec: TieredBrokerSpec | None, status: TieredBrokerStatus) -> FetcherRequest | None:
    """``spec.replicaFetchers.request`` when it has not been acted on yet."""
    wanted = spec.replica_fetchers.request if spec is not None and spec.replica_fetchers else None
    done = status.requests.fetchers if status.requests is not None else None
    return wanted if wanted is not None and wanted.id != done else None


def acted_on(
    status: TieredBrokerStatus, *, rebuild: str | None = None, fetchers: str | None = None
) -> TieredBrokerStatus:
    """``status`` with the request ids given recorded as acted on (the others kept)."""
    old = status.requests or HandledRequests()
    requests = old.model_copy(
        update={"rebuild": rebuild or old.rebuild, "fetchers": fetchers or old.fetchers}
    )
    return status.model_copy(update={"requests": requests})
