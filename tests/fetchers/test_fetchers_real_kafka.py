"""The model against what real brokers did, and ``apply`` on a real cluster.

One 5-broker KRaft cluster serves the whole module; the tests run in file order and walk the fetcher
count 1 -> 2 -> 4 -> 6 -> 3, then give broker 2 its own override. After every change each broker's
log must show, for 100% of its follower partitions, the (leader, fetcher id) the model computes.
Topics stay empty so every partition added to a thread logs its truncation with the fetcher id.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from fetcher_logs import Partition, Segment, Thread, resizes, segments
from fetchers import cli_run

from harness.kafka import KafkaCluster
from storage_core.adapters.kafka_fetchers import FetcherAdmin
from storage_core.fetchers.model import Assignment, partition_threads, thread_partitions

pytestmark = pytest.mark.kafka

# name -> (partitions, replication factor). "polygenelubricants" hashes to Integer.MIN_VALUE, so its
# partition 0 exercises Kafka's abs(MIN_VALUE) = 0 rule; "clicks.v2" has a dot, "a" is one letter.
TOPICS = {"orders": (48, 3), "polygenelubricants": (10, 3), "clicks.v2": (30, 2), "a": (7, 3)}
LATE_TOPIC = ("late-arrivals", 20, 3)


def follower_replicas(topics: dict[str, tuple[int, int]]) -> int:
    return sum(partitions * (rf - 1) for partitions, rf in topics.values())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    kafka = KafkaCluster(tmp_path_factory.mktemp("fetchers-kafka"), brokers=5)
    kafka.start()
    try:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
        futures = admin.create_topics([NewTopic(n, p, rf) for n, (p, rf) in TOPICS.items()])
        for future in futures.values():
            future.result(60)
        for name, (partitions, _rf) in TOPICS.items():
            kafka.wait_topic(name, partitions)
        yield kafka
    finally:
        kafka.stop()


def tierkeeper(*args: str) -> subprocess.CompletedProcess[str]:
    """Run Tierkeeper's command line with ``args``, for at most 300 s."""
    return cli_run.tierkeeper(*args, timeout=300)


def _live_assignment(cluster: KafkaCluster) -> Assignment:
    return FetcherAdmin(cluster.bootstrap_servers).assignment()


def _settled(
    cluster: KafkaCluster, counts: dict[int, int], topics: dict[str, tuple[int, int]], timeout: float = 90.0
) -> tuple[Assignment, dict[int, Segment]]:
    """Wait until metadata shows every replica of ``topics`` led and every broker logged a truncation for
    each of its follower partitions since its last resize."""
    deadline = time.monotonic() + timeout
    while True:
        assignment = _live_assignment(cluster)
        model = partition_threads(assignment, 1)
        latest = {b: segments(cluster.server_log(b))[-1] for b in cluster.node_ids}
        missing = {b: set(model.get(b, {})) - set(latest[b].truncated) for b in cluster.node_ids}
        # Right after CreateTopics a broker's metadata may not list the topic yet: an empty model.
        done = (
            assignment.follower_replicas() == follower_replicas(topics)
            and all(not m for m in missing.values())
            and all(latest[b].resized_to in (None, counts[b]) for b in cluster.node_ids)
        )
        if done:
            return assignment, latest
        if time.monotonic() > deadline:
            raise AssertionError(
                f"brokers did not log all fetcher assignments in {timeout}s: missing {missing}"
            )
        time.sleep(1.0)


def assert_logs_match_model(
    cluster: KafkaCluster, counts: dict[int, int], topics: dict[str, tuple[int, int]] = TOPICS
) -> int:
    """Compare every follower partition's logged (leader, fetcher id) with the model; return how many."""
    assignment, latest = _settled(cluster, counts, topics)
    checked = 0
    for broker in cluster.node_ids:
        expected: dict[Partition, Thread] = {
            (tp.topic, tp.partition): (t.leader, t.fetcher_id)
            for tp, t in partition_threads(assignment, counts[broker]).get(broker, {}).items()
        }
        logged = latest[broker].truncated
        assert logged == expected, f"broker {broker} at {counts[broker]} fetchers"
        model_threads = set(expected.values())
        assert set(latest[broker].started) <= model_threads
        checked += len(expected)
    return checked


def assert_groups_match_model(assignment: Assignment, broker: int, segment: Segment, count: int) -> None:
    """The "Added fetcher" lines of a resize are exactly the model's threads (fetcher ids aside)."""
    expected = sorted(
        (thread.leader, sorted((tp.topic, tp.partition) for tp in tps))
        for thread, tps in thread_partitions(assignment, count).get(broker, {}).items()
    )
    logged = sorted((leader, sorted(parts)) for leader, parts in segment.added)
    assert logged == expected, f"broker {broker} resize to {count}"


def test_model_matches_logs_at_kafkas_default(cluster: KafkaCluster) -> None:
    checked = assert_logs_match_model(cluster, dict.fromkeys(cluster.node_ids, 1))
    assert checked == follower_replicas(TOPICS)


def test_apply_moves_one_to_six_in_allowed_steps(cluster: KafkaCluster) -> None:
    proc = tierkeeper("fetchers", "apply", "--bootstrap-servers", cluster.bootstrap_servers, "--target", "6")
    assert proc.returncode == 0, proc.stderr
    assert "1 -> 2 -> 4 -> 6" in proc.stdout
    assert [line.split(":")[0] for line in proc.stdout.splitlines()[1:]] == ["set 2", "set 4", "set 6"]
    assignment = _live_assignment(cluster)
    for broker in cluster.node_ids:
        # The brokers' own account of the change: three resizes, each within Kafka's rule.
        assert resizes(cluster.server_log(broker)) == [(1, 2), (2, 4), (4, 6)]
        for segment in segments(cluster.server_log(broker))[1:]:
            assert segment.resized_to is not None
            assert_groups_match_model(assignment, broker, segment, segment.resized_to)
    settings = FetcherAdmin(cluster.bootstrap_servers).settings()
    assert {s.value for s in settings.values()} == {6}
    assert {s.source for s in settings.values()} == {"DYNAMIC_DEFAULT_BROKER_CONFIG"}
    assert assert_logs_match_model(cluster, dict.fromkeys(cluster.node_ids, 6)) == follower_replicas(TOPICS)


def test_min_value_topic_uses_kafkas_abs(cluster: KafkaCluster) -> None:
    assignment, latest = _settled(cluster, dict.fromkeys(cluster.node_ids, 6), TOPICS)
    followers = assignment.topics["polygenelubricants"][0][1:]
    for broker in followers:
        # Java's Math.abs would give 2**31 % 6 == 2 here; the broker uses fetcher 0.
        assert latest[broker].truncated[("polygenelubricants", 0)][1] == 0


def test_halving_and_new_topics_follow_the_model(cluster: KafkaCluster) -> None:
    proc = tierkeeper("fetchers", "apply", "--bootstrap-servers", cluster.bootstrap_servers, "--target", "3")
    assert proc.returncode == 0, proc.stderr
    assert "6 -> 3" in proc.stdout
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    name, partitions, rf = LATE_TOPIC
    admin.create_topics([NewTopic(name, partitions, rf)])[name].result(60)
    topics = {**TOPICS, name: (partitions, rf)}
    assert assert_logs_match_model(cluster, dict.fromkeys(cluster.node_ids, 3), topics) == follower_replicas(
        topics
    )


def test_per_broker_override(cluster: KafkaCluster) -> None:
    proc = tierkeeper(
        "fetchers",
        "apply",
        "--bootstrap-servers",
        cluster.bootstrap_servers,
        "--broker",
        "2",
        "--target",
        "5",
    )
    assert proc.returncode == 0, proc.stderr
    counts = {**dict.fromkeys(cluster.node_ids, 3), 2: 5}
    name, partitions, rf = LATE_TOPIC
    topics = {**TOPICS, name: (partitions, rf)}
    assert assert_logs_match_model(cluster, counts, topics) == follower_replicas(topics)
    # A cluster default would not reach broker 2 now; apply refuses rather than half-apply.
    refused = tierkeeper(
        "fetchers", "apply", "--bootstrap-servers", cluster.bootstrap_servers, "--target", "4"
    )
    assert refused.returncode == 1
    assert "brokers [2] have a per-broker num.replica.fetchers override" in refused.stderr


def test_plan_reads_the_live_cluster(cluster: KafkaCluster) -> None:
    proc = tierkeeper(
        "fetchers", "plan", "--bootstrap-servers", cluster.bootstrap_servers, "--json", "--max", "8"
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    # Brokers 1, 3, 4, 5 run 3 and broker 2 runs 5: the plan compares against the majority and says so.
    assert data["current"]["fetchers"] == 3 and "brokers run different counts" in data["note"]
    name, partitions, rf = LATE_TOPIC
    assert sum(b["partitions"] for b in data["current"]["brokers"]) == follower_replicas(
        {**TOPICS, name: (partitions, rf)}
    )
    assert [b["broker"] for b in data["recommendation"]["brokers"]] == cluster.node_ids
    assert data["recommendation"]["worst_load"] <= data["current"]["worst_load"]
    assert 1 <= data["recommendation"]["fetchers"] <= 8
