"""The rebuild decisions of one TieredBroker (storage_core.reconcile.rebuild), on plain data: results read
back from a termination message, a requested Job held back while a pod writes to the volume, quiet
restarts not overwriting the last real rebuild, and the conditions a rebuild adds."""

from __future__ import annotations

import datetime

from storage_core.api.resources import TieredBrokerSpec
from storage_core.api.status import RebuildStatus
from storage_core.reconcile.rebuild import (
    InitContainerView,
    JobView,
    RebuildInput,
    RebuildResult,
    decide,
    decode_result,
    encode_result,
    health,
    init_container_view,
    pods_using_claim,
)

NOW = datetime.datetime(2026, 11, 23, 12, 0, tzinfo=datetime.UTC)
SPEC = TieredBrokerSpec.model_validate(
    {
        "clusterRef": {"name": "c"},
        "brokerId": 3,
        "logDir": {"claimName": "data-3", "path": "/var/lib/kafka/data/kafka-log3"},
        "placement": {"podName": "kafka-3"},
        "rebuild": {"policy": "WhenLogDirEmpty"},
    }
)
DONE = RebuildResult(action="rebuilt", partitions_restored=4, bytes_restored=1000, expected_tail=12)


def pod(name: str, claim: str, *, read_only: bool = False, phase: str = "Running") -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "spec": {
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": claim, "readOnly": read_only}}],
            "containers": [{"name": "c", "volumeMounts": [{"name": "d", "mountPath": "/d"}]}],
        },
        "status": {"phase": phase},
    }


def test_results_round_trip_and_a_missing_one_is_a_failure() -> None:
    assert decode_result(encode_result(DONE)) == DONE
    failed = decode_result(encode_result(RebuildResult(failure="x" * 5000)))
    assert failed.failure is not None and len(encode_result(RebuildResult(failure="x" * 5000))) <= 4096
    assert decode_result(None).failure is not None
    assert decode_result('{"v":1,"kind":"copy"}').failure is not None


def test_the_init_containers_result_becomes_the_status_once() -> None:
    view = InitContainerView(
        "kafka-3", started="2026-11-23T11:00:00Z", finished="2026-11-23T11:05:00Z", exit_code=0,
        message=encode_result(DONE),
    )  # fmt: skip
    step = decide(RebuildInput("ns/b3", SPEC, None, False, init=view), NOW)
    assert step.status is not None and step.status.phase == "Succeeded"
    assert (step.status.partitions_restored, step.status.bytes_restored, step.status.expected_tail) == (
        4,
        1000,
        12,
    )
    assert [e.reason for e in step.events] == ["RebuildSucceeded"]
    again = decide(RebuildInput("ns/b3", SPEC, step.status, False, init=view), NOW)
    assert again.status == step.status and again.events == []
    # The next restart of a healthy broker finds data and does nothing: the record of the rebuild stays.
    quiet = InitContainerView(
        "kafka-3", started="2026-11-23T12:00:00Z", finished="2026-11-23T12:00:01Z", exit_code=0,
        message=encode_result(RebuildResult(action="skipped", reason="log dir holds data")),
    )  # fmt: skip
    assert decide(RebuildInput("ns/b3", SPEC, step.status, False, init=quiet), NOW).status == step.status


def test_a_failing_init_container_stalls_the_broker() -> None:
    view = InitContainerView(
        "kafka-3", started="t0", finished="t1", exit_code=1,
        message=encode_result(RebuildResult(failure="remote tier unreachable")),
    )  # fmt: skip
    step = decide(RebuildInput("ns/b3", SPEC, None, False, init=view), NOW)
    assert step.status is not None and step.status.phase == "Failed"
    assert "remote tier unreachable" in step.status.message
    verdict = health(step.status)
    assert verdict is not None and verdict.stalled and verdict.reason == "RebuildFailed"
    killed = InitContainerView("kafka-3", started="t2", finished="t3", exit_code=137)
    assert "code 137" in decide(RebuildInput("ns/b3", SPEC, None, False, init=killed), NOW).status.message  # type: ignore[union-attr]
    running = InitContainerView("kafka-3", running_since="t4")
    step = decide(RebuildInput("ns/b3", SPEC, step.status, False, init=running), NOW)
    assert step.status is not None and step.status.phase == "Running"
    assert health(step.status).reconciling  # type: ignore[union-attr]


def test_a_requested_job_waits_for_every_writer_of_the_volume() -> None:
    pods = [
        pod("kafka-3", "data-3"),
        pod("copy", "data-3", read_only=True),
        pod("old", "data-3", phase="Failed"),
    ]
    users = pods_using_claim(pods, "data-3")
    assert users == ("kafka-3",)
    blocked = decide(RebuildInput("ns/b3", SPEC, None, True, users=users), NOW)
    assert not blocked.start_job and not blocked.clear_request
    assert (
        blocked.status is not None
        and blocked.status.phase == "Blocked"
        and "kafka-3" in blocked.status.message
    )
    assert [e.reason for e in blocked.events] == ["RebuildBlocked"]
    still = decide(RebuildInput("ns/b3", SPEC, blocked.status, True, users=users), NOW)
    assert still.events == []  # said once
    go = decide(RebuildInput("ns/b3", SPEC, blocked.status, True), NOW)
    assert go.start_job and go.clear_request and go.status is not None and go.status.phase == "Running"
    paused = SPEC.model_copy(update={"paused": True})
    assert not decide(RebuildInput("ns/b3", paused, None, True), NOW).start_job


def test_a_finished_job_is_recorded_once() -> None:
    running = RebuildStatus(phase="Running", source="Job", start_time="t0", job="tk-rebuild-b3-1")
    job = JobView("tk-rebuild-b3-1", "Succeeded", False, "t0", encode_result(DONE), "tk-rebuild-b3-1-x")
    step = decide(RebuildInput("ns/b3", SPEC, running, False, job=job), NOW)
    assert step.record_job == job.name and step.status is not None and step.status.phase == "Succeeded"
    assert step.status.start_time == "t0" and step.status.job == job.name
    failed = JobView("tk-rebuild-b3-2", "Failed", False, "t5", None, None)
    step = decide(RebuildInput("ns/b3", SPEC, step.status, False, job=failed), NOW)
    assert step.status is not None and step.status.phase == "Failed"
    recorded = JobView("tk-rebuild-b3-2", "Failed", True, "t5", None, None)
    assert decide(RebuildInput("ns/b3", SPEC, step.status, False, job=recorded), NOW).record_job is None


def test_init_container_state_is_read_from_the_pod_status() -> None:
    status = {
        "initContainerStatuses": [
            {
                "name": "tierkeeper-rebuild",
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {
                    "terminated": {"exitCode": 1, "startedAt": "a", "finishedAt": "b", "message": "m"}
                },
            }
        ]
    }
    view = init_container_view({"metadata": {"name": "kafka-3"}, "status": status})
    assert view == InitContainerView("kafka-3", started="a", finished="b", exit_code=1, message="m")
    assert init_container_view({"metadata": {"name": "p"}, "status": {}}) is None
