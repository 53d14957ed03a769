"""The operator's per-cluster topic-config cache against a real Kafka broker: configs are asked only for
topics whose cached ones are older than ``max_age`` or whose topic was recreated, a config change reaches
the observation once the entry is stale, and only the configs the tiering rules read are kept."""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from harness.kafka import KafkaCluster
from storage_core.adapters.kafka_admin import KafkaAdmin
from storage_core.reconcile.observed import TopicConfigs, observe_topics
from storage_core.tiering.eligibility import TIERING_CONFIG_KEYS


class CountingAdmin:
    """The real adapter, with the topics each configs request asked for recorded."""

    def __init__(self, admin: KafkaAdmin) -> None:
        self.admin = admin
        self.asked: list[list[str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.admin, name)

    def topic_configs_many(self, topics: list[str]) -> Any:
        self.asked.append(sorted(topics))
        return self.admin.topic_configs_many(topics)


def create(raw: AdminClient, kafka: KafkaCluster, name: str) -> None:
    raw.create_topics([NewTopic(name, 1, 1, config={"retention.ms": "-1"})])[name].result(60)
    kafka.wait_topic(name, 1)


def test_configs_are_read_once_stale_or_recreated(kafka_broker: KafkaCluster) -> None:
    raw = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})
    first, second = f"cfg-a-{uuid.uuid4().hex[:6]}", f"cfg-b-{uuid.uuid4().hex[:6]}"
    for name in (first, second):
        create(raw, kafka_broker, name)
    admin = CountingAdmin(KafkaAdmin(kafka_broker.bootstrap_servers))
    cache = TopicConfigs(max_age=300.0)

    seen = observe_topics(admin, [first, second], cache, now=1000.0)
    assert admin.asked == [sorted([first, second])]
    topic = seen[first][0]
    assert topic is not None and topic.configs["cleanup.policy"] == "delete"
    assert set(topic.configs) <= TIERING_CONFIG_KEYS and "retention.ms" in topic.configs

    # Kafka's config changes; within max_age the cached value stands and nothing is asked.
    change = ConfigResource(
        ConfigResource.Type.TOPIC,
        first,
        incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    for future in raw.incremental_alter_configs([change]).values():
        future.result(60)
    again = observe_topics(admin, [first, second], cache, now=1000.0 + 299)
    assert len(admin.asked) == 1
    assert again[first][0] is not None and again[first][0].configs["cleanup.policy"] == "delete"

    # Once stale, both are read again and the change shows.
    later = observe_topics(admin, [first, second], cache, now=1000.0 + 300)
    assert admin.asked[-1] == sorted([first, second])
    assert later[first][0] is not None and later[first][0].configs["cleanup.policy"] == "compact"

    # A recreated topic (new topic id) is read at once, the other is not.
    raw.delete_topics([second])[second].result(60)
    deadline = time.monotonic() + 60
    while second in raw.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{second} not deleted within 60 s"
        time.sleep(0.2)
    create(raw, kafka_broker, second)
    renewed = observe_topics(admin, [first, second], cache, now=1000.0 + 301)
    assert admin.asked[-1] == [second]
    assert renewed[second][0] is not None and renewed[second][0].topic_id != later[second][0].topic_id  # type: ignore[union-attr]

    # A topic no longer asked about is forgotten.
    observe_topics(admin, [first], cache, now=1000.0 + 302)
    assert cache.stale(second, renewed[second][0].topic_id, 1000.0 + 302)  # type: ignore[union-attr]


def test_configs_are_asked_in_batches(kafka_broker: KafkaCluster, monkeypatch: Any) -> None:
    # Every config of every topic asked comes back at once; batches bound how many are alive together.
    from storage_core.reconcile import observed

    monkeypatch.setattr(observed, "CONFIG_BATCH", 2)
    raw = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})
    names = sorted(f"cfg-batch-{i}-{uuid.uuid4().hex[:6]}" for i in range(5))
    for name in names:
        create(raw, kafka_broker, name)
    admin = CountingAdmin(KafkaAdmin(kafka_broker.bootstrap_servers))
    seen = observe_topics(admin, names, TopicConfigs(), now=0.0)
    assert admin.asked == [names[0:2], names[2:4], names[4:5]]
    assert all(
        seen[name][0] is not None and seen[name][0].configs["cleanup.policy"] == "delete" for name in names
    )  # type: ignore[union-attr]
