"""The fetcher-id formula against a real JVM: String.hashCode and kafka-clients' Utils.abs, compiled against
the Kafka jars the harness resolves (so outside the fast lane, `make check`)."""

from __future__ import annotations

import random
from pathlib import Path

from java_oracle import java_hashes

from storage_core.fetchers.model import fetcher_hash, java_string_hash


def test_matches_a_real_jvm_and_kafka_utils_abs(tmp_path: Path) -> None:
    rng = random.Random(20240501)
    alphabet = "abcXYZ019._-" + "é中" + "\U0001f600" + "\ud800"
    items = [("polygenelubricants", 0), ("polygenelubricants", 1), ("", 3), ("topic", 2**31 - 1)]
    for _ in range(400):
        name = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))
        items.append((name, rng.randint(0, 5000)))
    expected = java_hashes(tmp_path, items)
    got = [(java_string_hash(t), fetcher_hash(t, p)) for t, p in items]
    assert got == expected
