"""Unchanged Kafka clients read a trimmed topic from offset 0 through the gateway: the history from the
tier, then the brokers' tail, every offset once, equal to what a direct consumer read before the trim."""

from __future__ import annotations

import uuid

from .conftest import RECORDS, Tiered, read_all, read_group


def test_a_direct_consumer_starts_at_the_log_start_after_the_trim(tiered: Tiered) -> None:
    direct = read_all(tiered.cluster.bootstrap_servers, tiered.topic)
    assert len(direct) < RECORDS
    assert {p: min(o for q, o, _, _ in direct if q == p) for p in tiered.log_starts} == tiered.log_starts


def test_an_assigned_consumer_reads_every_offset_once_from_zero(tiered: Tiered) -> None:
    assert read_all(tiered.gateway.bootstrap, tiered.topic) == tiered.expected
    assert tiered.gateway.metric("tierkeeper_gateway_tier_bytes_total") > 0


def test_a_consumer_group_from_earliest_reads_the_history_and_commits(tiered: Tiered) -> None:
    group = f"group-{uuid.uuid4().hex[:8]}"
    got = read_group(tiered.gateway.bootstrap, tiered.topic, group)
    assert sorted(got) == tiered.expected
    assert len({(p, o) for p, o, _, _ in got}) == RECORDS, "an offset was delivered twice"
