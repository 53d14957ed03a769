"""``tierkeeper rebuild --if-empty``, the init container's mode, on a real filesystem and a file:// tier:
what counts as empty, the quick no-ops (without Kafka or the remote tier), unformatted dirs, a
half-restored dir completed rather than started as whole, the settings file and the result it leaves.
(With a real broker and the process kubelet: test_rebuild_pod_path.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storage_core.api.rebuild_settings import (
    BrokerRebuild,
    RebuildSettings,
    RemoteSettings,
    broker_id_from_pod_name,
    load_settings,
)
from storage_core.errors import ConfigError
from storage_core.faults import ENV, InjectedFault
from storage_core.jobs.rebuild import RebuildOptions, rebuild_log_dir
from storage_core.rebuild.state import MARKER, META, STAGING_DIR, RebuildDir, Situation, classify
from storage_core.reconcile.rebuild import decode_result

from .synthetic import BROKER, TOPIC, format_log_dir, tree, write_tier

IF_EMPTY = RebuildOptions(broker_id=BROKER, parallelism=2, if_empty=True)
NO_KAFKA = "127.0.0.1:9"  # discard port: nothing listens; a no-op must not need Kafka


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "storage_core.cli", "rebuild", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


def _settings(tmp_path: Path, log_dir: Path, remote: str, policy: str = "WhenLogDirEmpty") -> Path:
    settings = RebuildSettings(
        cluster="local",
        bootstrap_servers=NO_KAFKA,
        remote=RemoteSettings(url=remote),
        brokers={
            str(BROKER): BrokerRebuild(
                tiered_broker="broker-3", log_dir=str(log_dir), policy=policy, parallelism=2
            )  # type: ignore[arg-type]
        },
    )
    path = tmp_path / "settings.json"
    path.write_text(settings.model_dump_json(by_alias=True))
    return path


def test_a_dir_holding_data_is_left_alone_without_asking_kafka(tmp_path: Path) -> None:
    data = tmp_path / "data"
    format_log_dir(data)
    (data / f"{TOPIC}-0").mkdir()
    (data / f"{TOPIC}-0" / "00000000000000000000.log").write_bytes(b"x")
    before = tree(data)
    result = tmp_path / "result"
    started = time.monotonic()
    proc = _cli(
        "--if-empty",
        "--log-dir",
        str(data),
        "--broker-id",
        str(BROKER),
        "--bootstrap-servers",
        NO_KAFKA,
        "--remote",
        f"file://{tmp_path / 'nowhere'}",
        "--result-file",
        str(result),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("skipped: log dir ") and f"{TOPIC}-0/" in proc.stdout
    assert len(proc.stdout.strip().splitlines()) == 1
    assert time.monotonic() - started < 60  # no Kafka timeout was waited out
    assert tree(data) == before
    decoded = decode_result(result.read_text())
    assert decoded.failure is None and decoded.action == "skipped"


def test_settings_decide_which_brokers_are_rebuilt(tmp_path: Path) -> None:
    data = tmp_path / "data"
    format_log_dir(data)
    remote = f"file://{tmp_path / 'remote'}"
    settings = _settings(tmp_path, data, remote, policy="Never")
    never = _cli("--if-empty", "--settings", str(settings), "--broker-id-from-pod-name", "kafka-pool-3")
    assert never.returncode == 0, never.stderr
    assert never.stdout.strip() == "skipped: TieredBroker broker-3 has rebuild policy Never"
    other = _cli("--if-empty", "--settings", str(settings), "--broker-id-from-pod-name", "kafka-pool-7")
    assert other.returncode == 0, other.stderr
    assert other.stdout.strip() == "skipped: no TieredBroker for broker 7 in cluster local"
    assert sorted(os.listdir(data)) == [META]


def test_bad_settings_and_flags_fail_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"cluster": "x"}')
    result = tmp_path / "result"
    proc = _cli("--if-empty", "--settings", str(bad), "--broker-id", "1", "--result-file", str(result))
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tierkeeper rebuild: error: rebuild settings ")
    assert decode_result(result.read_text()).failure is not None  # the operator sees why
    missing = _cli("--if-empty", "--settings", str(tmp_path / "absent.json"), "--broker-id", "1")
    assert missing.returncode == 1 and "absent.json" in missing.stderr
    no_id = _cli("--if-empty", "--log-dir", str(tmp_path))
    assert no_id.returncode == 1 and "--broker-id" in no_id.stderr.strip().splitlines()[-1]
    with pytest.raises(ConfigError, match="does not end with a broker id"):
        broker_id_from_pod_name("kafka")
    with pytest.raises(ConfigError, match="version 2"):
        load_settings(
            json.dumps(
                {"version": 2, "cluster": "c", "bootstrapServers": "b:1", "remote": {"url": "file:///x"}}
            ),
            "f",
        )


def test_empty_missing_and_unformatted_dirs_are_restored(tmp_path: Path) -> None:
    tier = write_tier(tmp_path / "remote")
    formatted = tmp_path / "formatted"
    format_log_dir(formatted)
    (formatted / "bootstrap.checkpoint").write_bytes(b"\0")  # what kafka-storage format leaves, too
    assert rebuild_log_dir(formatted, tier.store, tier.cluster, IF_EMPTY).action == "rebuilt"
    # A new volume: the log dir (a sub-directory of the mount) does not exist yet, and the broker's own
    # `kafka-storage format -g` runs only after the init container (Strimzi's pods do this).
    volume = tmp_path / "volume"
    volume.mkdir()
    fresh = volume / "kafka-log3"
    outcome = rebuild_log_dir(fresh, tier.store, tier.cluster, IF_EMPTY)
    assert outcome.action == "rebuilt"
    assert META not in os.listdir(fresh) and STAGING_DIR not in os.listdir(fresh)
    for p in range(tier.partitions):
        restored = {k.split("/", 1)[1]: v for k, v in tree(fresh).items() if k.startswith(f"{TOPIC}-{p}/")}
        assert {k: v for k, v in restored.items() if k.endswith((".log", ".index", ".timeindex"))} == (
            tier.expected_files(p)
        )
    # The next start of the pod (Kafka formatted the dir meanwhile) does nothing.
    format_log_dir(fresh)
    again = rebuild_log_dir(fresh, tier.store, tier.cluster, IF_EMPTY)
    assert again.action == "already-rebuilt"


def test_a_half_restored_dir_is_completed_never_taken_as_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tier = write_tier(tmp_path / "remote", segments=8)
    reference = tmp_path / "reference"
    format_log_dir(reference)
    rebuild_log_dir(reference, tier.store, tier.cluster, IF_EMPTY)
    data = tmp_path / "data"
    format_log_dir(data)
    monkeypatch.setenv(ENV, "rebuild.file.restored:4:raise")
    with pytest.raises(InjectedFault):
        rebuild_log_dir(data, tier.store, tier.cluster, IF_EMPTY)
    monkeypatch.delenv(ENV)
    assert classify(RebuildDir(data).observe(), data) is Situation.INTERRUPTED
    # The partitions restored so far sit in staging: the dir holds data now, but --if-empty must not
    # mistake it for a broker's own (which would start Kafka on a partial log).
    assert rebuild_log_dir(data, tier.store, tier.cluster, IF_EMPTY).action == "resumed"
    assert {k: v for k, v in tree(data).items() if k != MARKER} == {
        k: v for k, v in tree(reference).items() if k != MARKER
    }
