"""Running the gateway: metrics, readiness that names what is unreachable, and a graceful shutdown that
answers the requests in flight before the process exits."""

from __future__ import annotations

import json
import shutil
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from harness.gateway import GatewayProcess
from storage_core.gateway.protocol import decode_response

from .conftest import Tiered
from .rawkafka import FETCH, FETCH_VERSION, METADATA, RawClient, fetch_frame, leaders, metadata_frame


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _until(condition, what: str, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout:g} s: {what}")


def test_metrics_count_requests_by_api_and_health_endpoints_answer(tiered: Tiered) -> None:
    gateway = tiered.gateway
    status, body = _get(gateway.metrics_port, "/readyz")
    assert status == 200, body
    state = json.loads(body)
    assert state["ready"] is True and state["problems"] == {}
    assert _get(gateway.metrics_port, "/healthz")[0] == 200
    before = gateway.metric("tierkeeper_gateway_requests_total")
    client = RawClient.at(gateway.bootstrap)
    try:
        metadata = client.call(METADATA, 12, metadata_frame(tiered.topic, 1))
    finally:
        client.close()
    assert {b.port for b in metadata.brokers} == {gateway.port + 1 + n for n in tiered.cluster.node_ids}
    assert {b.host for b in metadata.brokers} == {"127.0.0.1"}
    assert gateway.metric("tierkeeper_gateway_requests_total") >= before + 1
    assert 'tierkeeper_gateway_requests_total{api="metadata"}' in gateway.metrics()


def test_readiness_names_an_unreachable_remote_tier_and_recovers(tiered: Tiered, tmp_path: Path) -> None:
    tier = Path(tiered.remote.removeprefix("file://"))
    copy = tmp_path / "tier"
    shutil.copytree(tier, copy)
    gateway = GatewayProcess(tiered.cluster.bootstrap_servers, f"file://{copy}", tmp_path / "gw").start()
    try:
        assert _get(gateway.metrics_port, "/readyz")[0] == 200
        copy.rename(tmp_path / "moved")
        status, body = _until(
            lambda: (lambda r: r if r[0] == 503 else None)(_get(gateway.metrics_port, "/readyz")),
            "readiness turns 503 once the tier's root is gone",
        )
        assert "remote tier" in json.loads(body)["problems"]
        (tmp_path / "moved").rename(copy)
        _until(lambda: _get(gateway.metrics_port, "/readyz")[0] == 200, "readiness recovers")
    finally:
        gateway.stop()


def test_sigterm_answers_the_fetch_in_flight_then_closes(tiered: Tiered, tmp_path: Path) -> None:
    gateway = GatewayProcess(
        tiered.cluster.bootstrap_servers, tiered.remote, tmp_path / "gw", extra=["--log-format", "json"]
    ).start()
    assert gateway.proc is not None
    client = RawClient.at(gateway.bootstrap)
    try:
        leader_of, address_of = leaders(client, tiered.topic)
    finally:
        client.close()
    consumer = Consumer({"bootstrap.servers": tiered.cluster.bootstrap_servers, "group.id": "probe"})
    end = consumer.get_watermark_offsets(TopicPartition(tiered.topic, 0), timeout=30)[1]
    consumer.close()

    client = RawClient.at(address_of[leader_of[0]])
    try:
        fetches = gateway.metric('tierkeeper_gateway_requests_total{api="fetch"}')
        # A long poll at the partition's end: the broker holds it until max_wait, the gateway meanwhile
        # gets SIGTERM and must still deliver the answer.
        client.send(fetch_frame(tiered.topic, {0: end}, 7, max_wait_ms=20000))
        _until(
            lambda: gateway.metric('tierkeeper_gateway_requests_total{api="fetch"}') > fetches,
            "the gateway has the fetch",
        )
        gateway.proc.send_signal(signal.SIGTERM)
        payload = client.read_payload()
        assert payload is not None, "the fetch in flight was not answered"
        response = decode_response(FETCH, FETCH_VERSION, payload)
        assert response.error_code == 0
        (partition,) = response.responses[0].partitions
        assert partition.error_code == 0 and partition.high_watermark == end
        assert client.read_payload() is None, "the connection closes after the answer"
        assert gateway.proc.wait(60) == 0
        lines = [json.loads(line) for line in gateway.log().splitlines() if line.strip()]
        assert lines and all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    finally:
        client.close()
        gateway.kill()
