"""The clusters in effect: the one map every part of the operator resolves ``clusterRef`` against."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from storage_core.api.cluster import KafkaClusterConfig


class LiveClusters(Mapping[str, KafkaClusterConfig]):
    """The clusters in effect, swapped whole by each full round (one assignment: a reader on another
    thread, such as a kopf handler, sees the old map or the new one, never half of one)."""

    def __init__(self, initial: Mapping[str, KafkaClusterConfig]) -> None:
        self._current: dict[str, KafkaClusterConfig] = dict(initial)

    def replace(self, clusters: Mapping[str, KafkaClusterConfig]) -> None:
        self._current = dict(clusters)

    def __getitem__(self, name: str) -> KafkaClusterConfig:
        return self._current[name]

    def __iter__(self) -> Iterator[str]:
        return iter(dict(self._current))

    def __len__(self) -> int:
        return len(self._current)
