"""Every reading command answers a damaged remote tier with one line naming the damage, never a traceback
(the damage: storage/damaged_tier.py). ``export`` and ``scrub`` run on Spark: tests/spark (the scrub of
one partition, which those tasks run, is here); ``recover`` and ``rebuild`` need Kafka:
storage/test_damaged_tier_kafka.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from storage_core.adapters.store import RemoteStore
from storage_core.cli.main import SIGPIPE_STATUS, main
from storage_core.remote.catalog import list_partitions, list_topics
from storage_core.remote.layout import RemoteLayout
from storage_core.remote.scrub import scrub_partition

from .damaged_tier import DAMAGE, MARKER_DAMAGE, TOPIC, make_tier


@pytest.fixture
def tier(tmp_path: Path) -> Path:
    return make_tier(tmp_path)


COMMANDS: dict[str, list[str]] = {
    "read-offset": ["read", "--topic", TOPIC, "--partition", "0", "--from-offset", "3"],
    "read-timestamp": ["read", "--topic", TOPIC, "--partition", "0", "--from-timestamp", "1700000000003"],
    "read-arrow": ["read", "--topic", TOPIC, "--partition", "0", "--from-offset", "0", "--format", "arrow"],
    "ls": ["ls", "--topic", TOPIC],
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_damaged_tier_gets_one_line_from_every_reading_command(
    tier: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str, command: str
) -> None:
    DAMAGE[damage](tier)
    argv = [*COMMANDS[command], "--remote", f"file://{tier}"]
    if "--format" in argv:
        argv += ["--output", str(tmp_path / "out.arrow")]
    capsys.readouterr()
    code = main(argv)  # a traceback would propagate from here and fail the test
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert all(line.startswith(f"tierkeeper {argv[0]}: ") for line in lines), err
    assert code == 0 or len(lines) == 1, err
    if damage == "marker-without-manifest":
        # The marker is what tells the reader about the segment: it is named, never skipped as if the
        # tier began at the next segment.
        assert code == 1 and ".COPY_FINISHED.json" in err and "unreadable segment metadata" in err, err


@pytest.mark.parametrize("damage", MARKER_DAMAGE)
def test_scrub_reports_an_unreadable_marker_by_its_object(tier: Path, damage: str) -> None:
    """Also while the manifest still serves the segment, so that read and ls never need its marker."""
    DAMAGE[damage](tier)
    store = RemoteStore(f"file://{tier}")
    layout = RemoteLayout(store.root)
    ((topic, topic_id),) = list_topics(store, layout)
    (tp,) = list_partitions(store, layout, topic, topic_id)
    (found,) = scrub_partition(store, tp).damage
    assert found.key.endswith(".COPY_FINISHED.json") and found.base_offset == 0, found
    assert "unreadable segment metadata" in found.problem, found


def test_read_into_a_pipe_closed_early_ends_quietly(tier: Path) -> None:
    """``tierkeeper read ... | head``: no BrokenPipeError traceback, the status of a SIGPIPE."""
    argv = [*COMMANDS["read-offset"][:-1], "0", "--remote", f"file://{tier}"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "storage_core.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b'{"offset": 0')
    proc.stdout.close()  # as head does after its lines
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == SIGPIPE_STATUS, err
    assert err == "", err


@pytest.mark.parametrize("damage", ["log-index-entry", "offset-index", "time-index"])
def test_a_damaged_index_is_named_with_its_object_and_offset(
    tier: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    DAMAGE[damage](tier)
    command = "read-timestamp" if damage == "time-index" else "read-offset"
    capsys.readouterr()
    assert main([*COMMANDS[command], "--remote", f"file://{tier}"]) == 1
    err = capsys.readouterr().err
    assert "does not match its COPY_FINISHED marker" in err, err
    assert "offset=0" in err and ".remote" in err, err
