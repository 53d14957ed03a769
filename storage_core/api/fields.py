"""Field types of the API: names, URLs, paths, retentions, cron expressions and bounded numbers, each with its
check.

Every check raises ``ValueError`` with a message that names the offending value; the models turn it into
a one-line error naming the field.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

from storage_core.api.cron import parse_cron

INFINITE = -1
"""Retention value meaning "keep forever", as in Kafka's retention.ms / retention.bytes."""

_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+")
_HOST_PORT = re.compile(r"(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})")


def _check_retention(value: int) -> int:
    if value < INFINITE:
        raise ValueError(f"must be -1 (infinite) or >= 0, got {value}")
    return value


def _check_topic(value: str) -> str:
    if not _TOPIC_NAME.fullmatch(value) or value in {".", ".."}:
        raise ValueError(
            f"{value!r} is not a legal Kafka topic name "
            "(1-249 characters from a-z A-Z 0-9 . _ -, not '.' or '..')"
        )
    return value


def _check_k8s_name(value: str) -> str:
    if len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise ValueError(f"{value!r} is not a valid Kubernetes object name (lower-case DNS subdomain)")
    return value


def _check_url(value: str) -> str:
    if not _URL.fullmatch(value):
        raise ValueError(f"{value!r} is not a URL with a scheme, e.g. s3://bucket/prefix")
    return value


def _check_bootstrap(value: str) -> str:
    entries = [entry.strip() for entry in value.split(",")]
    for entry in entries:
        match = _HOST_PORT.fullmatch(entry)
        if match is None or not 0 < int(match.group(2)) < 65536:
            raise ValueError(f"{entry!r} is not host:port (a comma-separated list of host:port is expected)")
    return ",".join(entries)


def _check_absolute_path(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"{value!r} is not an absolute path")
    return value


def _check_cron(value: str) -> str:
    parse_cron(value)
    return value


RetentionMs = Annotated[int, Field(json_schema_extra={"minimum": -1}), AfterValidator(_check_retention)]
RetentionBytes = Annotated[int, Field(json_schema_extra={"minimum": -1}), AfterValidator(_check_retention)]
TopicName = Annotated[str, Field(min_length=1, max_length=249), AfterValidator(_check_topic)]
ObjectName = Annotated[str, Field(min_length=1, max_length=253), AfterValidator(_check_k8s_name)]
LabelSafeName = Annotated[str, Field(min_length=1, max_length=63), AfterValidator(_check_k8s_name)]
"""An object name that is also used as a label value (at most 63 characters)."""
RemoteUrl = Annotated[str, Field(min_length=4), AfterValidator(_check_url)]
BootstrapServers = Annotated[str, Field(min_length=3), AfterValidator(_check_bootstrap)]
AbsolutePath = Annotated[str, Field(min_length=1), AfterValidator(_check_absolute_path)]
CronExpression = Annotated[str, AfterValidator(_check_cron)]
NonEmptyStr = Annotated[str, Field(min_length=1)]
TableIdentifier = Annotated[str, Field(max_length=255, pattern=r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)+$")]
"""An Iceberg table's NAMESPACE.NAME; the namespace may have levels (a.b.table)."""
Port = Annotated[int, Field(ge=1, le=65535)]
Int32Id = Annotated[int, Field(ge=0, le=2_147_483_647)]
"""A non-negative 32-bit id: a Kafka node.id, a user or group id a pod runs as."""
RoundInterval = Annotated[int, Field(ge=10, le=604_800)]
"""Seconds between a topic's copy or cleanup rounds: 10 s to a week."""
ThreadCount = Annotated[int, Field(ge=1, le=64)]
"""Threads, or partitions handled at once: the bounds of every parallelism and of num.replica.fetchers."""
