"""Bad input and killed processes: a corrupted segment, an unreachable bucket, SIGKILL mid-copy.

Nothing partial may ever become readable, other partitions keep tiering, and a re-run completes.
"""

from __future__ import annotations

import io
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.kafka import KafkaCluster
from harness.ports import free_ports
from storage_core.adapters.store import RemoteStore
from storage_core.formats.record_batch import HEADER_SIZE, iter_batch_headers
from storage_core.remote.catalog import PartitionCatalog, list_partitions, list_topics
from storage_core.remote.layout import RemoteLayout

from .conftest import run_cli
from .dataset import Dataset
from .private_logdir import copy_partitions
from .tier_checks import finished_segments_complete, read_offsets, rolled_segments


def _file_store(path: Path) -> RemoteStore:
    return RemoteStore(f"file://{path}")


def test_corrupted_segment_is_refused_and_other_partitions_still_tier(
        dataset: Dataset, kafka_broker: KafkaCluster, tmp_path: Path) -> None:
    topic = dataset.codec_topics[0]  # uncompressed
    log_dir = copy_partitions(kafka_broker.log_dir(1), [topic], tmp_path / "logs")
    bases = rolled_segments(log_dir, topic, 0)
    victim = log_dir / f"{topic}-0" / f"{bases[2]:020d}.log"
    data = bytearray(victim.read_bytes())
    batches = list(iter_batch_headers(io.BytesIO(bytes(data))))
    hit = batches[len(batches) // 2]
    # Inside the records, which the CRC covers (the leader epoch in the header is outside it, as in Kafka).
    flip_at = hit[0] + HEADER_SIZE + (hit[1].size_in_bytes - HEADER_SIZE) // 2
    data[flip_at] ^= 0x40
    victim.write_bytes(bytes(data))

    remote = tmp_path / "remote"
    proc = run_cli("copy", "--log-dir", str(log_dir), "--remote", f"file://{remote}")
    assert proc.returncode != 0
    assert f"topic={topic}" in proc.stderr and "partition=0" in proc.stderr
    assert f"offset={hit[1].base_offset}" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr

    finished = finished_segments_complete(_file_store(remote), log_dir)
    assert finished[(topic, 0)] == bases[:2], "only the segments before the damage may be tiered"
    assert finished[(topic, 1)] == rolled_segments(log_dir, topic, 1), "the healthy partition must tier fully"
    store = RemoteStore(f"file://{remote}")
    layout = RemoteLayout(store.root)
    tp = next(t for t in list_partitions(store, layout, *list_topics(store, layout)[0]) if t.partition == 0)
    leftovers = [e for e in PartitionCatalog(store, layout, tp).listing().segments.values()
                 if e.base_offset == bases[2]]
    assert leftovers == [], "a refused segment leaves nothing behind"


def test_unreachable_bucket_fails_with_one_line(dataset: Dataset, kafka_broker: KafkaCluster,
                                                tmp_path: Path) -> None:
    topic = dataset.codec_topics[0]
    log_dir = copy_partitions(kafka_broker.log_dir(1), [topic], tmp_path / "logs")
    closed_port = free_ports(1)[0]
    started = time.monotonic()
    proc = run_cli("copy", "--log-dir", str(log_dir), "--remote", "s3://nowhere/prefix",
                   "--endpoint-url", f"http://127.0.0.1:{closed_port}", "--path-style",
                   env={"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y", "AWS_MAX_ATTEMPTS": "2"},
                   timeout=240)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("tierkeeper copy: error:")]
    assert lines and all("127.0.0.1" in line or "connect" in line.lower() for line in lines), proc.stderr
    assert "y" not in proc.stderr.split(), "credentials must never be printed"
    assert time.monotonic() - started < 240


def _wait_for_first_object(remote: Path, proc: subprocess.Popen[bytes]) -> float:
    """Block until the copy has written something (so a kill lands in the copy, not in Python's start-up)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if remote.exists() and any(p.is_file() for p in remote.rglob("*")):
            break
        time.sleep(0.005)
    return time.monotonic()


def _copy_process(log_dir: Path, remote: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "storage_core.cli", "copy", "--log-dir", str(log_dir),
                             "--remote", f"file://{remote}", "--parallelism", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.slow
def test_sigkill_never_leaves_readable_partial_data(dataset: Dataset, kafka_broker: KafkaCluster,
                                                    tmp_path: Path) -> None:
    topic = dataset.codec_topics[0]
    log_dir = copy_partitions(kafka_broker.log_dir(1), [topic], tmp_path / "logs")
    expected = {p: rolled_segments(log_dir, topic, p) for p in (0, 1)}
    full_offsets = {}
    calibration = _copy_process(log_dir, tmp_path / "calibrate")
    started = _wait_for_first_object(tmp_path / "calibrate", calibration)
    assert calibration.wait(120) == 0
    duration = time.monotonic() - started
    for p in (0, 1):
        full_offsets[p] = read_offsets(_file_store(tmp_path / "calibrate"), topic, p)
        assert full_offsets[p] == list(range(len(full_offsets[p])))

    rng = random.Random(20)
    killed_mid_copy = 0
    shared = tmp_path / "shared-remote"  # one remote killed again and again, as a crash-looping Job would
    for trial in range(24):
        remote = shared if trial % 3 == 0 else tmp_path / f"remote-{trial}"
        proc = _copy_process(log_dir, remote)
        _wait_for_first_object(remote, proc)
        time.sleep(rng.uniform(0.0, 1.0) * duration)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        finished = finished_segments_complete(_file_store(remote), log_dir) if remote.exists() else {}
        for p in (0, 1):
            bases = finished.get((topic, p), [])
            if 0 < len(bases) < len(expected[p]):
                killed_mid_copy += 1
            assert bases == expected[p][:len(bases)], "finished segments must be a gap-free prefix"
            offsets = read_offsets(_file_store(remote), topic, p) if bases else []
            assert offsets == full_offsets[p][:len(offsets)], "every readable offset once, in order"
        rerun = _copy_process(log_dir, remote)
        assert rerun.wait(120) == 0
        for p in (0, 1):
            assert read_offsets(_file_store(remote), topic, p) == full_offsets[p]
        finished_segments_complete(_file_store(remote), log_dir)
    assert killed_mid_copy >= 5, "the kills should land in the middle of copies"
    os.sync()


def test_transactional_data_needs_the_last_stable_offset(dataset: Dataset, kafka_broker: KafkaCluster,
                                                         tmp_path: Path) -> None:
    """Without a broker to ask for the LSO, the checkpointed high watermark may only stand in for
    partitions without transactions: the transactional partition is refused, the plain one tiers."""
    plain = dataset.codec_topics[0]
    log_dir = copy_partitions(kafka_broker.log_dir(1), [dataset.txn_topic, plain], tmp_path / "logs")
    remote = tmp_path / "remote"
    proc = run_cli("copy", "--log-dir", str(log_dir), "--remote", f"file://{remote}")
    assert proc.returncode == 1
    assert f"{dataset.txn_topic}-0" in proc.stderr and "--bootstrap-servers" in proc.stderr
    finished = finished_segments_complete(_file_store(remote), log_dir)
    assert finished.get((dataset.txn_topic, 0), []) == []
    assert finished[(plain, 0)] == rolled_segments(log_dir, plain, 0)
