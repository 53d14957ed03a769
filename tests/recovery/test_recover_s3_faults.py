"""Recover a deleted topic from an S3 tier whose endpoint fails (500, SlowDown, stalls, resets, short
reads): every remote read is retried, and the recreated topic holds the tiered history exactly once."""

from __future__ import annotations

import json

from harness.s3_faults import MIXED_FAULTS, FaultPlan, FaultProxy, proxied_cli_flags, report

from .conftest import Deleted
from .history import consume, delete_topic, run_cli


def test_recover_from_s3_under_faults_restores_each_record_once(
    deleted_topic: Deleted, s3_fault_proxy: FaultProxy
) -> None:
    d = deleted_topic
    delete_topic(d.bootstrap, d.topic)
    s3_fault_proxy.set_plan(FaultPlan(rates=MIXED_FAULTS, seed=7, max_in_a_row=2, caps={"stall": 4}))
    proc = run_cli(
        "recover",
        "--topic",
        d.topic,
        "--bootstrap-servers",
        d.bootstrap,
        "--replication-factor",
        "1",
        "--json",
        *proxied_cli_flags(d.s3.url, s3_fault_proxy),
        env=d.s3.env,
    )
    assert proc.returncode == 0, proc.stderr
    assert s3_fault_proxy.total_injected() > 0, "the recovery met no fault: the test tests nothing"
    summary = json.loads(proc.stdout)
    assert summary["complete"] is True
    assert summary["restored_total"] == sum(len(v) for v in d.expected.values())
    for p, want in d.expected.items():
        got = consume(d.bootstrap, d.topic, p)
        assert [g.content() for g in got] == [w.content() for w in want], f"partition {p}"
    report("recover", s3_fault_proxy, records_verified=summary["restored_total"])
