"""A Kafka client whose request failed is replaced for the next round: after a broker stops, librdkafka
can keep waiting on the controller its metadata named, and a new client starts again from the bootstrap
servers (the leader-change test in test_standalone_real_kafka.py meets this on real brokers)."""

from __future__ import annotations

from typing import Any

from storage_core.adapters.kafka_client_config import ClusterClients
from storage_core.api.cluster import KafkaClusterConfig
from storage_core.reconcile.observed import observe_topics

CLUSTER = KafkaClusterConfig.model_validate(
    {"name": "c", "bootstrapServers": "k:9092", "remote": {"url": "memory://tier"}}
)


class FailingAdmin:
    """Answers describe with an error, as a client stuck on a stopped controller does."""

    def describe_many(self, topics: Any) -> tuple[dict[str, Any], dict[str, str]]:
        return {}, {name: f"describe topic {name}: Failed while waiting for controller" for name in topics}

    def log_start_offsets(self, partitions: Any) -> dict[Any, int]:
        return {}

    def high_watermarks(self, partitions: Any) -> dict[Any, int]:
        return {}

    def topic_configs_many(self, topics: Any) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
        return {}, {}


def test_a_discarded_client_is_built_again_and_a_kept_one_is_reused() -> None:
    made: list[FailingAdmin] = []

    def factory(bootstrap: str, config: dict[str, str]) -> FailingAdmin:
        made.append(FailingAdmin())
        return made[-1]

    clients = ClusterClients({"c": CLUSTER}, {}, factory)
    first = clients("c")
    assert clients("c") is first and len(made) == 1
    clients.refresh()
    assert clients("c") is first and len(made) == 1  # same properties: same client across rounds
    (answer,) = observe_topics(first, ["orders"]).values()
    assert answer[0] is None and answer[1] is not None and "waiting for controller" in answer[1]
    clients.discard("c")
    assert clients("c") is not first and len(made) == 2
