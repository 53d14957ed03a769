"""A segment scrub quarantined is never skipped, whether it leaves a hole inside the tier or at either
end: the tier answer for an offset in it is an error (the gateway turns it into a retriable
KAFKA_STORAGE_ERROR, so the client retries instead of resetting its position), while the offsets around
it are served as before."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from storage_core.adapters.store import RemoteStore
from storage_core.errors import CorruptDataError
from storage_core.gateway.block_cache import BlockCache
from storage_core.gateway.history import TierHistory
from storage_core.remote.catalog import list_topics
from storage_core.remote.layout import RemoteLayout, TopicPartitionId
from storage_core.remote.scrub import Damage
from storage_core.retention.quarantine import quarantine

from .conftest import Tiered


@pytest.mark.parametrize("which", ["first", "last"])
def test_an_offset_in_a_quarantined_segment_is_an_error_not_skipped(
    tiered: Tiered, tmp_path: Path, which: str
) -> None:
    copy = tmp_path / "tier"
    shutil.copytree(Path(tiered.remote.removeprefix("file://")), copy)
    url = f"file://{copy}"
    store = RemoteStore(url, {})
    topic = tiered.topic
    (topic_id,) = [tid for name, tid in list_topics(store, RemoteLayout(store.root)) if name == topic]
    tp = TopicPartitionId(topic, topic_id, 0)
    with ThreadPoolExecutor(4) as pool:
        history = TierHistory(store, BlockCache(store.get_range, pool))
        ranges = history.cover(tp).ranges
        assert len(ranges) >= 2, "the fixture's small segments give several per partition"
        victim = (ranges[0] if which == "first" else ranges[-1]).segment
        # What scrub --quarantine does with a damaged segment (called directly: scrub's detection is
        # tested elsewhere and would start Spark here).
        damage = Damage(topic, 0, victim.base_offset, str(victim.segment_id), "test", "damaged")
        quarantine(store, tp, [damage], 1)

        history = TierHistory(store, BlockCache(store.get_range, pool))
        cover = history.cover(tp)
        assert victim.segment_id not in {r.segment.segment_id for r in cover.ranges}, "it is not served"
        for offset in (victim.base_offset, (victim.base_offset + victim.end_offset) // 2, victim.end_offset):
            with pytest.raises(CorruptDataError, match="refusing to skip"):
                history.read(tp, offset, 1 << 20, min_one=True, read_committed=False)
        other = ranges[1] if which == "first" else ranges[0]
        served = history.read(tp, other.first_offset, 1 << 20, min_one=True, read_committed=False)
        assert served is not None and served.records, "the segments around it are served as before"
