"""A listing answers with what the bucket holds now, whatever the storage options say about s3fs's
listings cache (on by default, as a bare ``--endpoint-url`` leaves it): a long-lived reader (the gateway)
that listed the tier once must still find a topic, a partition or an object written after that by another
process. Found by the fault campaign (seed 11, round 1): the gateway had listed the tier's topics in round
0, answered "not tiered" for every topic of round 1, and let the brokers' OFFSET_OUT_OF_RANGE stand for
offsets the tier held."""

from __future__ import annotations

from typing import Any

import pytest

from storage_core.adapters.store import RemoteStore


@pytest.fixture
def cached_options(s3_bucket: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    url, options = s3_bucket
    return url, {k: v for k, v in options.items() if k != "use_listings_cache"}  # s3fs's default: on


def test_a_long_lived_store_sees_what_another_writer_added(
    cached_options: tuple[str, dict[str, Any]],
) -> None:
    url, options = cached_options
    reader = RemoteStore(url, options)
    writer = RemoteStore(url, {**options, "use_listings_cache": False})
    root = reader.root
    writer.put_atomic(f"{root}/topic-a/0/first.json", b"{}")
    assert reader.list_subdirs(root) == [f"{root}/topic-a"]
    assert reader.list_subdirs(f"{root}/topic-a") == [f"{root}/topic-a/0"]
    assert set(reader.list_modified(f"{root}/topic-a/0")) == {f"{root}/topic-a/0/first.json"}

    writer.put_atomic(f"{root}/topic-b/0/first.json", b"{}")
    writer.put_atomic(f"{root}/topic-a/1/first.json", b"{}")
    writer.put_atomic(f"{root}/topic-a/0/second.json", b"{}")
    assert reader.list_subdirs(root) == [f"{root}/topic-a", f"{root}/topic-b"]
    assert reader.list_subdirs(f"{root}/topic-a") == [f"{root}/topic-a/0", f"{root}/topic-a/1"]
    assert set(reader.list_modified(f"{root}/topic-a/0")) == {
        f"{root}/topic-a/0/first.json",
        f"{root}/topic-a/0/second.json",
    }
    assert {k for k, _ in reader.list_dir(f"{root}/topic-a/0")} == set(
        reader.list_modified(f"{root}/topic-a/0")
    )
