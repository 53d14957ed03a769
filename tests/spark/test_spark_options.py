"""Option parsing and pushed-filter pruning of the tierkeeper source (no Spark session needed)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan, LessThanOrEqual

from storage_core.errors import ConfigError
from storage_core.remote.reader import Isolation
from storage_core.spark.options import parse_options
from storage_core.spark.source import pruning_from_filters


def test_kafka_source_options_parse_case_insensitively() -> None:
    opts = parse_options(
        {
            "REMOTE": "s3://b/t",
            "topic": "orders",
            "startingOffsets": '{"orders": {"0": 12, "1": -2}}',
            "endingoffsets": "latest",
            "Kafka.Isolation.Level": "read_uncommitted",
            "includeHeaders": "true",
            "endpointUrl": "http://127.0.0.1:9",
            "pathStyle": "true",
            "storage.secret": "s3cr3t",
            "storage.use_listings_cache": "false",
        }
    )
    assert opts.starting == {("orders", 0): 12, ("orders", 1): -2} and opts.ending == "latest"
    assert opts.isolation is Isolation.READ_UNCOMMITTED and opts.include_headers
    assert opts.storage.options["secret"] == "s3cr3t"
    assert opts.storage.options["use_listings_cache"] is False
    assert opts.storage.options["client_kwargs"] == {"endpoint_url": "http://127.0.0.1:9"}
    assert "s3cr3t" not in repr(opts)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "t"}, "option remote is required"),
        ({"remote": "memory://x"}, "give exactly one of the options topic, subscribe"),
        ({"remote": "memory://x", "topic": "t", "kafka.isolation.level": "x"}, "kafka.isolation.level"),
        (
            {"remote": "memory://x", "topic": "t", "isolation.level": "read_committed"},
            "now kafka.isolation.level",
        ),
        ({"remote": "memory://x", "topic": "t", "startingOffsets": "latest"}, "batch query"),
        ({"remote": "memory://x", "topic": "t", "endingOffsets": "earliest"}, "endingOffsets"),
        ({"remote": "memory://x", "topic": "t", "startingOffsets": '{"other": {"0": 1}}'}, "other"),
        ({"remote": "memory://x", "topic": "t", "startingOffsets": "{nope"}, "startingOffsets"),
        ({"remote": "memory://x", "topic": "t", "includeHeaders": "yes"}, "includeHeaders"),
        ({"remote": "memory://x", "topic": "t", "fetch.size": "1"}, "unknown option"),
        ({"remote": "memory://x", "topic": "t", "maxBytesPerSplit": "0"}, "maxBytesPerSplit"),
    ],
)
def test_bad_options_are_one_line_config_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_options({**options, "storage.secret": "s3cr3t"})
    assert message in str(err.value) and "\n" not in str(err.value)
    assert "s3cr3t" not in str(err.value)


def test_isolation_level_is_kafkas_option_with_kafkas_default() -> None:
    base = {"remote": "memory://x", "topic": "t"}
    assert parse_options(base).isolation is Isolation.READ_UNCOMMITTED
    committed = parse_options({**base, "kafka.isolation.level": "read_committed"})
    assert committed.isolation is Isolation.READ_COMMITTED
    with pytest.raises(ConfigError, match="not from brokers"):
        parse_options({**base, "kafka.fetch.min.bytes": "1"})


def test_streaming_defaults_to_latest_and_refuses_ending_offsets() -> None:
    assert parse_options({"remote": "memory://x", "topic": "t"}, streaming=True).starting == "latest"
    with pytest.raises(ConfigError, match="batch queries only"):
        parse_options({"remote": "memory://x", "topic": "t", "endingOffsets": "latest"}, streaming=True)


def test_pushed_filters_become_partition_offset_and_time_bounds() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    pruning = pruning_from_filters(
        [
            In(("partition",), (0, 2, 5)),
            EqualTo(("partition",), 2),
            GreaterThanOrEqual(("offset",), 100),
            GreaterThan(("offset",), 120),
            LessThan(("offset",), 500),
            LessThanOrEqual(("offset",), 300),
            GreaterThanOrEqual(("timestamp",), when),
            LessThan(("timestamp",), when),  # an upper time bound cannot prune: newest is known, oldest not
            EqualTo(("key",), b"k"),  # not ours: prunes nothing
        ]
    )
    assert pruning.partitions == frozenset({2})
    assert (pruning.min_offset, pruning.end_offset) == (121, 301)
    assert pruning.min_timestamp == int(when.timestamp() * 1000)


def test_kafkas_subscriptions() -> None:
    base = {"remote": "memory://x"}
    several = parse_options({**base, "subscribe": "a, b,a", "startingOffsets": '{"b": {"0": 5}}'})
    assert (several.topic, several.topics, several.starting) == ("", ("a", "b"), {("b", 0): 5})
    assert parse_options({**base, "subscribe": "a"}).topic == "a"
    assert parse_options({**base, "subscribePattern": "orders-.*"}).pattern == "orders-.*"
    assigned = parse_options({**base, "assign": '{"a": [0, 2], "b": [1]}'})
    assert assigned.assign == {"a": frozenset({0, 2}), "b": frozenset({1})}
    for bad, message in [
        ({"subscribe": "a", "topic": "a"}, "exactly one"),
        ({"assign": '{"a": ["x"]}'}, "option assign must look like"),
        ({"subscribePattern": "("}, "not a regular expression"),
        ({"subscribe": "a,b", "startingOffsets": '{"c": {"0": 1}}'}, "does not read: c"),
        ({"subscribe": "a,b", "topicId": "AAAAAAAAAAAAAAAAAAAAAA"}, "one topic"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_options({**base, **bad})
