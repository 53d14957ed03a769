"""The interface the storage core needs from a remote store (implemented by adapters.store.RemoteStore).

The core is written against this protocol so it never imports fsspec; tests and Spark tasks hand in the
real adapter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import BinaryIO, Protocol


class ObjectStore(Protocol):
    url: str
    root: str
    write_concurrency: int
    """How many small objects are worth writing at once: 1 where a write is a local system call, more
    where each is a network round trip."""
    segments_in_flight: int
    """How many segments of one partition are worth storing at once: 2 where each copy runs in the kernel
    and keeps one core busy, 1 where one upload already keeps several parts in flight."""

    def put_chunks(self, key: str, chunks: Iterable[bytes]) -> int: ...

    def put_from_file(
        self, key: str, source: BinaryIO, size: int, inspect: Callable[[memoryview], None]
    ) -> int: ...

    def put_atomic(self, key: str, data: bytes) -> None: ...

    def abort_stale_uploads(self, path: str, older_than_ms: int, *, dry_run: bool = False) -> list[str]: ...

    def delete(self, keys: Iterable[str]) -> None: ...

    def delete_tree(self, path: str) -> None: ...

    def get(self, key: str) -> bytes: ...

    def get_range(self, key: str, start: int, end: int) -> bytes: ...

    def open_local(self, key: str) -> BinaryIO | None: ...

    def size(self, key: str) -> int: ...

    def exists(self, key: str) -> bool: ...

    def list_dir(self, path: str) -> list[tuple[str, int]]: ...

    def list_modified(self, path: str) -> dict[str, int | None]: ...

    def list_subdirs(self, path: str) -> list[str]: ...
