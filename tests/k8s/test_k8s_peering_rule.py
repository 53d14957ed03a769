"""The rounds' peering rule (kopf's rule, read from the same peering object) and the readiness state,
without a cluster: pure functions and a fake Kubernetes adapter."""

from __future__ import annotations

import datetime
import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from harness.ports import free_ports
from storage_core.errors import ConfigError
from tierkeeper_operator.peering import PeeringGate, default_priority, is_active
from tierkeeper_operator.probes import ReadyState, serve_readiness
from tierkeeper_operator.settings import PeeringSettings

NOW = datetime.datetime(2026, 11, 23, 12, 0, 0, tzinfo=datetime.UTC)


def peer(priority: int, seconds_ago: float, lifetime: int = 60) -> dict[str, Any]:
    seen = NOW - datetime.timedelta(seconds=seconds_ago)
    return {"priority": priority, "lifetime": lifetime, "lastseen": seen.isoformat()}


@pytest.mark.parametrize(
    "others, active, words",
    [
        ({}, True, "active"),
        ({"b": peer(5, 1)}, True, "active"),  # lower priority: we act, it waits
        ({"b": peer(20, 1)}, False, "higher priority"),
        ({"b": peer(10, 1)}, False, "same priority"),  # kopf pauses both
        ({"b": peer(20, 61)}, True, "active"),  # dead: its keep-alive expired
        ({"b": peer(20, 5, lifetime=5)}, True, "active"),  # expires exactly now
        ({"b": "garbage", "c": {"priority": "x"}}, True, "active"),  # unreadable entries are ignored
    ],
)
def test_active_unless_a_live_peer_outranks_or_ties(others: dict[str, Any], active: bool, words: str) -> None:
    ok, why = is_active({"me": peer(10, 0), **others}, "me", 10, NOW)
    assert ok is active and words in why


def test_not_active_before_own_keepalive_is_written() -> None:
    ok, why = is_active({"b": peer(5, 1)}, "me", 10, NOW)
    assert not ok and "first keep-alive" in why


def test_default_priority_ranks_older_replicas_first() -> None:
    older = default_priority()
    younger = default_priority()
    assert older >= younger and older < 0  # any explicit priority >= 0 outranks every default one


class FakeKube:
    namespaces = ("ns1", "ns2")

    def __init__(self, bodies: dict[str | None, Any]) -> None:
        self.bodies = bodies
        self.created: list[str | None] = []

    def get_peering(self, name: str, namespace: str | None) -> Any:
        return self.bodies.get(namespace)

    def ensure_peering(self, name: str, namespace: str | None) -> None:
        self.created.append(namespace)


def test_gate_needs_every_watched_namespace_and_creates_missing_objects() -> None:
    config = PeeringSettings(priority=10, identity="me")
    mine = {"status": {"me": peer(10, 0)}}
    kube = FakeKube({"ns1": mine, "ns2": mine})
    gate = PeeringGate(kube, config, clusterwide=False)
    assert gate.active(NOW) and gate.reason == "active"
    kube.bodies["ns2"] = {"status": {"me": peer(10, 0), "other": peer(11, 0)}}
    assert not gate.active(NOW) and "higher priority" in gate.reason
    del kube.bodies["ns2"]
    assert not gate.active(NOW) and kube.created == ["ns2"]  # created; waits for keep-alives
    cluster = FakeKube({None: mine})
    assert PeeringGate(cluster, config, clusterwide=True).active(NOW)


def get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return int(answer.status), json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read())


def test_readiness_endpoint_follows_the_rounds() -> None:
    state = ReadyState()
    (port,) = free_ports(1)
    server = serve_readiness(f"http://127.0.0.1:{port}/readyz", state)
    try:
        url = f"http://127.0.0.1:{port}/readyz"
        assert get(url) == (503, state.snapshot())  # nothing yet
        state.round_ran()
        code, body = get(url)
        assert code == 200 and body["role"] == "active" and body["rounds"] == 1
        state.failed("KubeError: HTTP 503")
        assert get(url)[0] == 503
        state.standby("standby: peer x has a higher priority")
        assert get(url)[0] == 200  # a standby that reaches the API is ready (rollouts proceed)
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
    finally:
        server.shutdown()


def test_readiness_endpoint_must_be_an_http_url() -> None:
    with pytest.raises(ConfigError, match="--readiness"):
        serve_readiness("tcp://0.0.0.0", ReadyState())
