"""Recover a deleted topic from an S3 tier whose endpoint fails (500, SlowDown, stalls, resets, short
reads): every remote read is retried, and the recreated topic holds the tiered history exactly once."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from harness.moto_s3 import MotoServer
from harness.s3_faults import FaultPlan, FaultProxy, proxied_cli_flags, report

from .conftest import Deleted
from .history import consume, delete_topic, run_cli

FAULTS = {
    "error_500": 0.04,
    "slow_down": 0.04,
    "stall": 0.02,
    "reset": 0.04,
    "reset_after": 0.04,
    "short_read": 0.06,
}


@pytest.fixture
def proxy(moto_server: MotoServer) -> Iterator[FaultProxy]:
    server = FaultProxy(moto_server.endpoint_url, FaultPlan()).start()
    try:
        yield server
    finally:
        server.stop()


def test_recover_from_s3_under_faults_restores_each_record_once(
    deleted_topic: Deleted, proxy: FaultProxy
) -> None:
    d = deleted_topic
    delete_topic(d.bootstrap, d.topic)
    proxy.set_plan(FaultPlan(rates=FAULTS, seed=7, max_in_a_row=2, caps={"stall": 4}))
    proc = run_cli(
        "recover",
        "--topic",
        d.topic,
        "--bootstrap-servers",
        d.bootstrap,
        "--replication-factor",
        "1",
        "--json",
        *proxied_cli_flags(d.s3.url, proxy),
        env=d.s3.env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proxy.total_injected() > 0, "the recovery met no fault: the test tests nothing"
    summary = json.loads(proc.stdout)
    assert summary["complete"] is True
    assert summary["restored_total"] == sum(len(v) for v in d.expected.values())
    for p, want in d.expected.items():
        got = consume(d.bootstrap, d.topic, p)
        assert [g.content() for g in got] == [w.content() for w in want], f"partition {p}"
    report("recover", proxy, records_verified=summary["restored_total"])
