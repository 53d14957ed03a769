"""The Kubernetes executor of a round: each planned action becomes its kind's Job (the ``make`` of its row
in :data:`.job_kinds.KINDS`) and a ``<Kind>Started`` Event (``JobKind.event``). Names are deterministic
per round, so a Job of the same round that exists already is not duplicated; the outcome comes later,
from the Job's termination message (:mod:`.job_results`)."""

from __future__ import annotations

from typing import Any

from storage_core.reconcile.planner import CleanupAction, CopyAction
from storage_core.reconcile.tables import TableAction
from tierkeeper_operator.job_kinds import KINDS, TABLE_RUNS, JobInputs, JobKind
from tierkeeper_operator.jobs import Owner
from tierkeeper_operator.listing import Listed
from tierkeeper_operator.writes import RoundTools


class JobStarter:
    """Starts planned actions' Jobs; one per operator, bound to each round's listing by :meth:`bind`."""

    def __init__(self, tools: RoundTools) -> None:
        self._tools = tools

    def bind(self, listed: Listed, round_key: str) -> RoundJobs:
        """The executor of one round (:class:`storage_core.reconcile.round.Executor`)."""
        return RoundJobs(self, listed, round_key)

    def start(self, kind: JobKind, action: Any, listed: Listed, round_key: str) -> str | None:
        """Create ``action``'s Job; its name, or None when it existed already."""
        rules = KINDS[kind]
        assert rules.make is not None, f"{kind} Jobs are not made from planned actions"
        cluster = self._tools.clusters[action.cluster]
        if rules.owner_kind == "TieredBroker":
            obj = listed.broker_objs[action.broker_key]
            broker = listed.broker_specs[action.broker_key].value
            assert broker is not None
            node = broker.placement.node_name
            if node is None and broker.placement.pod_name:
                node = self._tools.kube.pod_node(obj["metadata"]["namespace"], broker.placement.pod_name)
            inputs = JobInputs(cluster, Owner.of(rules.owner_kind, obj), round_key, broker, node)
        else:
            obj = listed.topic_objs[action.topic_key]
            inputs = JobInputs(cluster, Owner.of(rules.owner_kind, obj), round_key)
        job = rules.make(action, inputs)
        if not self._tools.create_job(job):
            return None
        name: str = job["metadata"]["name"]
        self._tools.event(
            obj, rules.owner_kind, "Normal", f"{kind.event}Started", rules.started(name, action)
        )
        return name


class RoundJobs:
    """One round's executor: the planned copies, cleanups and table runs become Jobs; nothing is folded
    at once (every method returns None: the outcome is a later round's)."""

    def __init__(self, starter: JobStarter, listed: Listed, round_key: str) -> None:
        self._starter = starter
        self._listed = listed
        self._round_key = round_key
        self.created: list[str] = []

    def _start(self, kind: JobKind, action: Any) -> None:
        name = self._starter.start(kind, action, self._listed, self._round_key)
        if name is not None:
            self.created.append(name)

    def copy(self, action: CopyAction) -> None:
        self._start(JobKind.COPY, action)

    def cleanup(self, action: CleanupAction) -> None:
        self._start(JobKind.CLEANUP, action)

    def table(self, action: TableAction) -> None:
        self._start(TABLE_RUNS[action.kind], action)
