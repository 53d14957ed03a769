"""The assignment file: what it accepts and the one-line errors it gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from storage_core.errors import ConfigError
from storage_core.fetchers.assignment_file import assignment_to_json, load_assignment
from storage_core.fetchers.model import TopicPartition


def _write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "assignment.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_round_trip_with_rates(tmp_path: Path) -> None:
    data = {"brokers": [1, 2, 3], "topics": {"a": [[1, 2], [3, 1]]}, "byte_rates": {"a": [1.5, 2.0]}}
    assignment = load_assignment(_write(tmp_path, data))
    assert assignment.brokers == (1, 2, 3)
    assert assignment.topics["a"][1] == (3, 1)
    assert assignment.byte_rates[TopicPartition("a", 0)] == 1.5
    assert assignment_to_json(assignment) == data


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ("{not json", "not JSON"),
        ({"brokers": [], "topics": {}}, "brokers"),
        ({"brokers": [1, 1], "topics": {}}, "twice"),
        ({"brokers": [1], "topics": {"a": [[1, 2]]}}, "topic 'a' partition 0 uses brokers [2]"),
        ({"brokers": [1, 2], "topics": {"a": [[]]}}, "topic 'a' partition 0 has no replicas"),
        ({"brokers": [1, 2], "topics": {"a": [[2, 2]]}}, "lists a broker twice"),
        ({"brokers": [1, 2], "topics": {"a": [["1", 2]]}}, "topics.a.0.0"),
        (
            {"brokers": [1, 2], "topics": {"a": [[1, 2]]}, "byte_rates": {"a": [1.0, 2.0]}},
            "2 values for 1 partitions",
        ),
        ({"brokers": [1, 2], "topics": {"a": [[1, 2]]}, "byte_rates": {"b": [1.0]}}, "not in 'topics'"),
        ({"brokers": [1, 2], "topics": {}, "extra": 1}, "extra"),
    ],
)
def test_bad_files_give_one_clear_line(tmp_path: Path, data: Any, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_assignment(_write(tmp_path, data))
    message = str(info.value)
    assert "\n" not in message
    assert fragment in message
    assert message.startswith(str(tmp_path / "assignment.json"))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_assignment(tmp_path / "absent.json")
