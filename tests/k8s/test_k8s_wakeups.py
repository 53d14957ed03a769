"""A new, edited or deleted TieredTopic is handed from a watch to the reconcile rounds
(tierkeeper_operator.wakeups) and judged soon by a quick round over just the objects handed over, not at
the end of a reconcile interval. The full rounds here run every hour, so only a wake can explain a status
that appears within the test's deadline."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import kubernetes
import pytest
from k8s_helpers import DEADLINE
from test_k8s_operator import example, local_setup, status_when

from harness.control_plane import ControlPlane
from harness.k8s import wait_until
from harness.kafka import KafkaCluster
from storage_core.reconcile.planner import Plan
from tierkeeper_operator import GROUP, VERSION
from tierkeeper_operator.background import Rounds
from tierkeeper_operator.kube import KubeError
from tierkeeper_operator.loop import RoundResult
from tierkeeper_operator.metrics import Metrics
from tierkeeper_operator.wakeups import SpecWatch, Wakeups, needs_look

HOUR = 3600.0


def event(
    kind: str, generation: int | None, observed: int | None = None, version: str = "1"
) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": "t", "namespace": "ns", "resourceVersion": version}}
    if generation is not None:
        obj["metadata"]["generation"] = generation
    if observed is not None:
        obj["status"] = {"observedGeneration": observed}
    return {"type": kind, "object": obj}


@pytest.mark.parametrize(
    ("watched", "wakes"),
    [
        (event("ADDED", 1), True),  # created: no round saw it
        (event("ADDED", 1, 0), True),  # the CRD's status default (observedGeneration 0)
        (event("MODIFIED", 1, 1), False),  # a round's own status write
        (event("MODIFIED", 2, 1), True),  # spec edited, or deletion started (both raise the generation)
        (event("DELETED", 2, 1), False),  # gone: nothing left to judge
        (event("BOOKMARK", None), False),
        ({"type": "ERROR", "object": {"code": 410}}, False),
    ],
)
def test_only_a_spec_no_round_judged_yet_wakes_the_rounds(watched: dict[str, Any], wakes: bool) -> None:
    assert needs_look(watched) is wakes


@dataclass
class ScriptedKube:
    """Answers SpecWatch as the API server would, from a script: each watch request plays the next list
    of events (an exception in it is raised there); when the script is used up, a request blocks until
    the test ends."""

    watches: list[list[dict[str, Any] | Exception]]
    versions: list[str]
    namespaces: tuple[str, ...] = ("ns",)
    asked_from: list[str] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)

    def collection_version(self, plural: str, namespace: str | None) -> str:
        assert (plural, namespace) == ("tieredtopics", "ns")
        return self.versions.pop(0)

    def watch(
        self, plural: str, namespace: str | None, resource_version: str, timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        self.asked_from.append(resource_version)
        if not self.watches:
            self.done.set()
            threading.Event().wait(HOUR)  # a quiet watch: the daemon thread dies with the test process
            return
        for item in self.watches.pop(0):
            if isinstance(item, Exception):
                raise item
            yield item


class RecordingWakeups(Wakeups):
    def __init__(self) -> None:
        super().__init__()
        self.full_rounds = 0

    def full_round(self) -> None:
        self.full_rounds += 1
        super().full_round()


def test_the_watch_resumes_where_it_was_and_starts_again_when_too_old() -> None:
    kube = ScriptedKube(
        watches=[
            [
                event("ADDED", 1, version="11"),
                event("MODIFIED", 1, 1, "12"),  # judged by a round: taken back
                event("BOOKMARK", None, version="20"),
            ],
            [ConnectionResetError("reset by peer")],  # resumed from 20: no event is lost
            [event("MODIFIED", 2, 1, "21"), {"type": "ERROR", "object": {"code": 410, "message": "too old"}}],
            [KubeError("GET", "/watch", 410, "Gone")],
        ],
        versions=["10", "30", "40"],
    )
    wakeups = RecordingWakeups()
    watch = SpecWatch(kube, wakeups, retry_seconds=0.01)  # type: ignore[arg-type]
    watch.start()
    try:
        assert kube.done.wait(DEADLINE), f"the watch stopped asking: {kube.asked_from}"
    finally:
        watch.stop()
    # 10: first version; 20 after a bookmark and a reset; 21 went out of the cache (410 event): from now
    # (30); an answer of 410 to the request itself: from now again (40).
    assert kube.asked_from == ["10", "20", "20", "30", "40"]
    # Each fresh start asked for a full round (what happened in between is unseen); the edited object
    # waits for a quick round, the one a round judged does not.
    assert wakeups.full_rounds == 2
    full, objects = wakeups.take()
    assert full and [o["metadata"]["resourceVersion"] for o in objects] == ["21"]
    assert wakeups.take() == (False, [])


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass
class CountingReconciler:
    """Records rounds (None: a full one, else the objects of a quick one); the first round runs until
    the test lets it end (``release``). ``due_in``: the first round's plan says work falls due that many
    seconds later."""

    metrics: Metrics = field(default_factory=Metrics)
    rounds: list[list[dict[str, Any]] | None] = field(default_factory=list)
    first_running: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    due_in: float | None = None
    clock = staticmethod(now)

    def run_round(self, only: list[dict[str, Any]] | None = None) -> RoundResult:
        self.rounds.append(only)
        due = None
        if len(self.rounds) == 1:
            self.first_running.set()
            self.release.wait(DEADLINE)
            if self.due_in is not None:
                due = now() + datetime.timedelta(seconds=self.due_in)
        return RoundResult(plan=Plan(next_due=due), created=[], recorded=[])


def test_work_falling_due_brings_the_next_full_round_forward() -> None:
    """A round whose plan says a copy or cleanup falls due in a moment is followed by a full round then,
    not at the end of the interval (an hour here)."""
    reconciler = CountingReconciler(due_in=0.5)
    reconciler.release.set()
    rounds = Rounds(reconciler, HOUR, settle=0.1, due_gap=0.1).start()  # type: ignore[arg-type]
    try:
        assert wait_until(lambda: len(reconciler.rounds) >= 2, DEADLINE), "no round when work fell due"
    finally:
        rounds.stop()
    assert reconciler.rounds[:2] == [None, None]  # both full rounds


def test_a_burst_makes_one_quick_round_and_a_wake_brings_the_full_round_forward() -> None:
    reconciler = CountingReconciler()
    wakeups = Wakeups()
    rounds = Rounds(reconciler, HOUR, settle=0.1, wakeups=wakeups).start()  # type: ignore[arg-type]
    try:
        assert reconciler.first_running.wait(DEADLINE), "the first round did not start"
        for i in range(20):  # a burst while a round runs; the last version of each object counts
            wakeups.changed(f"ns/t{i % 10}", {"metadata": {"name": f"t{i % 10}", "version": i}})
        reconciler.release.set()
        assert wait_until(lambda: len(reconciler.rounds) >= 2, DEADLINE), "the burst brought no round"
        rounds.wake()
        assert wait_until(lambda: len(reconciler.rounds) >= 3, DEADLINE), "a wake brought no round"
    finally:
        reconciler.release.set()
        rounds.stop()
    assert not rounds.alive()
    first, quick, full = reconciler.rounds  # none from the interval (an hour)
    assert first is None and full is None
    assert quick is not None
    assert sorted(o["metadata"]["version"] for o in quick) == list(range(10, 20))


def test_a_new_or_edited_tieredtopic_is_judged_without_waiting_for_the_interval(
    k8s_crds: ControlPlane, kube_client: Any, k8s_namespace: str, kafka_broker: KafkaCluster
) -> None:
    ns = k8s_namespace
    api = kubernetes.client.CustomObjectsApi(kube_client)
    reconciler, topic = local_setup(k8s_crds, ns, kafka_broker)
    listed: list[str] = []
    list_resources = reconciler.kube.list_resources

    def counted(plural: str, page_size: int = 500) -> list[dict[str, Any]]:
        listed.append(plural)
        return list_resources(plural, page_size)

    reconciler.kube.list_resources = counted  # type: ignore[method-assign]
    wakeups = Wakeups()
    watch = SpecWatch(reconciler.kube, wakeups).start()
    rounds = Rounds(reconciler, HOUR, settle=0.2, wakeups=wakeups).start()
    try:
        assert watch.following(DEADLINE), "the watch did not start"
        assert wait_until(lambda: rounds.ready.rounds >= 1, DEADLINE), "the first round did not run"
        body = example("tieredtopic.yaml", "prompt", ns)
        body["spec"].update(clusterRef={"name": "local"}, topic=topic)
        api.create_namespaced_custom_object(GROUP, VERSION, ns, "tieredtopics", body)
        created = status_when(api, ns, "tieredtopics", "prompt", "Ready=True", 1, DEADLINE)
        api.patch_namespaced_custom_object(
            GROUP, VERSION, ns, "tieredtopics", "prompt", {"spec": {"cleanup": {"intervalSeconds": 900}}}
        )
        edited = status_when(api, ns, "tieredtopics", "prompt", "Ready=True", 2, DEADLINE)
        # A deletion raises the generation too (the API server does, for an object a finalizer holds),
        # which is what wakes the rounds for deletionPolicy Delete.
        api.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            ns,
            "tieredtopics",
            "prompt",
            {"metadata": {"finalizers": ["test.tierkeeper.io/hold"]}},
        )
        api.delete_namespaced_custom_object(GROUP, VERSION, ns, "tieredtopics", "prompt")
        held = api.get_namespaced_custom_object(GROUP, VERSION, ns, "tieredtopics", "prompt")
        api.patch_namespaced_custom_object(
            GROUP, VERSION, ns, "tieredtopics", "prompt", {"metadata": {"finalizers": None}}
        )
    finally:
        watch.stop()
        rounds.stop()
    # Only the first (full) round listed the TieredTopics: the rest were quick rounds.
    assert listed.count("tieredtopics") == 1, listed
    assert created.get("observedGeneration") == 1, created
    assert edited.get("observedGeneration") == 2, edited
    assert held["metadata"]["generation"] == 3 and held["metadata"].get("deletionTimestamp"), held["metadata"]
