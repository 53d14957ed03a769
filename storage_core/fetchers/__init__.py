"""Replica fetcher model and planner: pure functions over a replica assignment, and its file form.

``model`` reproduces how a broker maps each follower partition to a fetcher thread; ``planner``
evaluates candidate ``num.replica.fetchers`` values, recommends one and plans the dynamic-update
steps; ``placement`` builds known topologies (all three pure); ``assignment_file`` validates the JSON
form (``load_assignment`` reads it from a file).

Layer: building blocks (``.importlinter``; storage_core/DESIGN.md, "Layers").
"""

from storage_core.fetchers.model import (
    Assignment,
    FetcherThread,
    TopicPartition,
    fetcher_id,
    java_string_hash,
    partition_threads,
)
from storage_core.fetchers.planner import CountReport, Recommendation, evaluate, recommend, step_plan

__all__ = [
    "Assignment",
    "CountReport",
    "FetcherThread",
    "Recommendation",
    "TopicPartition",
    "evaluate",
    "fetcher_id",
    "java_string_hash",
    "partition_threads",
    "recommend",
    "step_plan",
]
