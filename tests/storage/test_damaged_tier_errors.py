"""Every reading command answers a damaged remote tier with one line naming the damage, never a traceback
(the damage: storage/damaged_tier.py). ``export`` and ``scrub`` run on Spark: tests/spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage_core.cli.main import main

from .damaged_tier import DAMAGE, TOPIC, make_tier


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
