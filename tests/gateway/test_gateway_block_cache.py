"""The read-ahead cache: reads are the object's bytes whatever the block boundaries, memory stays within
its byte bound, blocks after a read are fetched ahead, and a failed fetch is not remembered."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from storage_core.gateway.block_cache import BlockCache

DATA = bytes(range(256)) * 64  # 16 KiB


class Store:
    def __init__(self) -> None:
        self.fetched: list[tuple[int, int]] = []
        self.fail_next = 0
        self._lock = threading.Lock()

    def get_range(self, key: str, start: int, end: int) -> bytes:
        with self._lock:
            self.fetched.append((start, end))
            if self.fail_next:
                self.fail_next -= 1
                raise OSError("injected")
        return DATA[start:end]


def test_reads_are_the_objects_bytes_across_block_boundaries_within_the_bound() -> None:
    store = Store()
    with ThreadPoolExecutor(4) as pool:
        cache = BlockCache(store.get_range, pool, block_bytes=1024, max_bytes=4096, readahead=2)
        for start, end in [(0, 10), (1000, 3000), (5000, 5001), (16000, 20000), (3, 16384), (8191, 8193)]:
            assert cache.read("k", start, end, len(DATA)) == DATA[start : min(end, len(DATA))]
            assert cache.resident_bytes <= 4096 + 1024  # one block over while the whole range is held
    assert all(end - start <= 1024 for start, end in store.fetched), "only block-sized fetches"


def test_the_blocks_after_a_read_are_fetched_ahead() -> None:
    store = Store()
    with ThreadPoolExecutor(4) as pool:
        cache = BlockCache(store.get_range, pool, block_bytes=1024, max_bytes=16384, readahead=3)
        cache.read("k", 0, 100, len(DATA))
        pool.shutdown(wait=True)  # the read-ahead fetches have run
    assert {start for start, _ in store.fetched} == {0, 1024, 2048, 3072}


def test_a_failed_fetch_is_not_cached() -> None:
    store = Store()
    with ThreadPoolExecutor(2) as pool:
        cache = BlockCache(store.get_range, pool, block_bytes=1024, max_bytes=8192, readahead=0)
        store.fail_next = 1
        with pytest.raises(OSError, match="injected"):
            cache.read("k", 0, 10, len(DATA))
        assert cache.read("k", 0, 10, len(DATA)) == DATA[:10]
