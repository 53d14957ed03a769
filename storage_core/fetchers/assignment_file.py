"""The assignment file: a replica assignment written down as JSON, validated at the boundary.

    {"brokers": [1, 2, 3],
     "topics": {"orders": [[1, 2, 3], [2, 3, 1]]},
     "byte_rates": {"orders": [1048576.0, 524288.0]}}

``topics`` maps a topic name to one replica list per partition (list index = partition number),
leader first. ``byte_rates`` is optional: bytes/s per partition, same shape as ``topics``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from storage_core.errors import ConfigError
from storage_core.fetchers.model import Assignment, TopicPartition


class AssignmentFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    brokers: list[int] = Field(min_length=1)
    topics: dict[str, list[list[int]]]
    byte_rates: dict[str, list[float]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> AssignmentFile:
        if len(set(self.brokers)) != len(self.brokers):
            raise ValueError("brokers lists a broker id twice")
        known = set(self.brokers)
        for topic, partitions in self.topics.items():
            if not topic:
                raise ValueError("a topic name is empty")
            for partition, replicas in enumerate(partitions):
                where = f"topic {topic!r} partition {partition}"
                if not replicas:
                    raise ValueError(f"{where} has no replicas")
                if len(set(replicas)) != len(replicas):
                    raise ValueError(f"{where} lists a broker twice: {replicas}")
                unknown = sorted(set(replicas) - known)
                if unknown:
                    raise ValueError(f"{where} uses brokers {unknown} that are not in 'brokers'")
        for topic, rates in self.byte_rates.items():
            if topic not in self.topics:
                raise ValueError(f"byte_rates names topic {topic!r}, which is not in 'topics'")
            if len(rates) != len(self.topics[topic]):
                raise ValueError(
                    f"byte_rates for {topic!r} has {len(rates)} values for {len(self.topics[topic])} "
                    "partitions"
                )
            if any(r < 0 for r in rates):
                raise ValueError(f"byte_rates for {topic!r} has a negative rate")
        return self

    def to_assignment(self) -> Assignment:
        rates = {
            TopicPartition(topic, p): rate
            for topic, values in self.byte_rates.items()
            for p, rate in enumerate(values)
        }
        return Assignment(
            brokers=tuple(self.brokers),
            topics={t: tuple(tuple(r) for r in parts) for t, parts in self.topics.items()},
            byte_rates=rates,
        )


def _one_line(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    message = str(first["msg"]).removeprefix("Value error, ")
    more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
    return f"{where}: {message}{more}" if where else f"{message}{more}"


def parse_assignment(data: Any, source: str = "assignment") -> Assignment:
    """Validate already-decoded JSON; raise ConfigError with one line naming the first problem."""
    try:
        return AssignmentFile.model_validate(data).to_assignment()
    except ValidationError as exc:
        raise ConfigError(f"{source}: {_one_line(exc)}") from None


def load_assignment(path: Path) -> Assignment:
    """Read and validate an assignment file."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    return parse_assignment(data, str(path))


def assignment_to_json(assignment: Assignment) -> dict[str, Any]:
    """The file form of ``assignment`` (what load_assignment reads back)."""
    data: dict[str, Any] = {
        "brokers": list(assignment.brokers),
        "topics": {t: [list(r) for r in parts] for t, parts in assignment.topics.items()},
    }
    if assignment.byte_rates:
        data["byte_rates"] = {
            t: [float(assignment.byte_rates.get(TopicPartition(t, p), 0.0)) for p in range(len(parts))]
            for t, parts in assignment.topics.items()
        }
    return data
