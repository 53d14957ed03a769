"""The ObjectStore contract (storage_core/remote/store_api.py), as fsspec's tests/abstract: one set of tests
that every backend of ``adapters.store.RemoteStore`` runs (store_backends.BACKENDS: file://, memory://, S3).

A backend that answers differently from the others is a bug in the adapter, not a case for the callers.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage_core.adapters.store import RemoteStore
from storage_core.errors import CorruptDataError, RemoteObjectNotFound, RemoteStoreError

from .store_backends import BACKENDS, Backend


@pytest.fixture(params=BACKENDS, ids=str)
def backend(request: pytest.FixtureRequest) -> Backend:
    backend: Backend = request.param
    return backend


@pytest.fixture
def store(backend: Backend, request: pytest.FixtureRequest, tmp_path: Path) -> RemoteStore:
    return backend.open(request, tmp_path)


def _source(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "source.log"
    path.write_bytes(data)
    return path


def _keys(entries: list[tuple[str, int]]) -> dict[str, int]:
    return dict(entries)


# ---- the store itself -----------------------------------------------------------------------------------


def test_a_store_names_its_root_and_how_much_to_write_at_once(store: RemoteStore) -> None:
    assert store.root and not store.root.endswith("/")
    assert store.url.rstrip("/").endswith(store.root.rsplit("/", 1)[-1])
    assert isinstance(store.write_concurrency, int) and store.write_concurrency >= 1
    assert isinstance(store.segments_in_flight, int) and store.segments_in_flight >= 1


def test_a_pickled_store_reads_what_the_original_wrote(store: RemoteStore) -> None:
    store.put_atomic(f"{store.root}/p/x", b"shipped to a worker")
    copy = pickle.loads(pickle.dumps(store))
    assert copy is not store and copy.root == store.root
    assert copy.get(f"{store.root}/p/x") == b"shipped to a worker"


# ---- writes ---------------------------------------------------------------------------------------------


def test_put_atomic_writes_the_whole_object_and_a_second_put_replaces_it_whole(store: RemoteStore) -> None:
    key = f"{store.root}/t/0/manifest.json"
    store.put_atomic(key, b"the first, longer version")
    assert store.get(key) == b"the first, longer version"
    store.put_atomic(key, b"second")
    assert store.get(key) == b"second", "nothing of the longer first version is left"
    assert store.size(key) == 6


def test_put_chunks_stores_the_chunks_in_order_and_returns_the_bytes_written(store: RemoteStore) -> None:
    # Over 8 MiB in 1 MiB chunks: a multipart upload on S3, several blocks elsewhere; an empty chunk too.
    chunks = [bytes([i]) * (1 << 20) for i in range(9)] + [b"", b"tail"]
    key = f"{store.root}/t/0/segment.log"
    assert store.put_chunks(key, iter(chunks)) == sum(len(c) for c in chunks)
    assert store.get(key) == b"".join(chunks)
    assert store.size(key) == sum(len(c) for c in chunks)


def test_put_chunks_of_nothing_is_an_empty_object(store: RemoteStore) -> None:
    key = f"{store.root}/t/0/empty.txnindex"
    assert store.put_chunks(key, []) == 0
    assert store.exists(key) and store.size(key) == 0 and store.get(key) == b""


def test_a_failing_chunk_source_fails_put_chunks_with_its_own_error(store: RemoteStore) -> None:
    def chunks() -> Iterator[bytes]:
        yield b"a" * 1000
        raise CorruptDataError("batch at offset 7: CRC mismatch")

    key = f"{store.root}/t/0/bad.log"
    with pytest.raises(CorruptDataError, match="offset 7"):
        store.put_chunks(key, chunks())
    # Not atomic (callers mark completion): what is left, if anything, is incomplete and can be deleted.
    if store.exists(key):
        assert store.size(key) <= 1000
        store.delete([key])
    assert not store.exists(key)


def test_put_from_file_stores_the_first_size_bytes_and_shows_each_one_to_inspect(
    store: RemoteStore, tmp_path: Path
) -> None:
    data = bytes(range(256)) * 5000
    seen: list[bytes] = []
    key = f"{store.root}/t/0/00000000000000000000.log"
    with _source(tmp_path, data).open("rb") as source:
        written = store.put_from_file(key, source, len(data) - 100, lambda view: seen.append(bytes(view)))
    assert written == len(data) - 100
    assert b"".join(seen) == data[:-100], "inspect sees every stored byte, in order, once"
    assert store.get(key) == data[:-100]


def test_put_from_file_of_a_source_shorter_than_size_fails_as_corrupt(
    store: RemoteStore, tmp_path: Path
) -> None:
    key = f"{store.root}/t/0/short.log"
    with _source(tmp_path, b"x" * 100).open("rb") as source:
        with pytest.raises(CorruptDataError, match="early"):
            store.put_from_file(key, source, 1000, lambda view: None)
    if store.exists(key):
        assert store.size(key) < 1000, "a short copy never looks complete"


def test_an_inspect_that_raises_stops_put_from_file_with_its_error(
    store: RemoteStore, tmp_path: Path
) -> None:
    def refuse(view: memoryview) -> None:
        raise CorruptDataError("segment 0: batch CRC mismatch at position 0")

    key = f"{store.root}/t/0/refused.log"
    with _source(tmp_path, b"y" * 5000).open("rb") as source:
        with pytest.raises(CorruptDataError, match="position 0"):
            store.put_from_file(key, source, 5000, refuse)
    store.delete([key])  # the partial object is the caller's to discard, and discarding it works
    assert not store.exists(key)


def test_put_file_uploads_a_local_file_as_it_is(store: RemoteStore, tmp_path: Path) -> None:
    key = f"{store.root}/baseline/raw.log"
    store.put_file(str(_source(tmp_path, b"raw bytes" * 1000)), key)
    assert store.get(key) == b"raw bytes" * 1000


def test_create_exclusive_creates_once_and_never_replaces(backend: Backend, store: RemoteStore) -> None:
    key = f"{store.root}/metadata/v1.metadata.json"
    if not backend.exclusive_create:
        with pytest.raises(RemoteStoreError, match=f"create {key}: exclusive create needs"):
            store.create_exclusive(key, b"first")
        assert not store.exists(key), "a refused create writes nothing"
        return
    assert store.create_exclusive(key, b"first")
    assert not store.create_exclusive(key, b"second")
    assert store.get(key) == b"first"


# ---- reads ----------------------------------------------------------------------------------------------


def test_a_missing_object_is_not_found_by_every_read(backend: Backend, store: RemoteStore) -> None:
    key = f"{store.root}/t/0/missing.log"
    store.put_atomic(f"{store.root}/t/0/present", b"x")  # its directory exists; the object does not
    for read in (store.get, lambda k: store.get_range(k, 0, 10), store.size):
        with pytest.raises(RemoteObjectNotFound, match="missing.log: not found"):
            read(key)
    if backend.local:
        with pytest.raises(RemoteObjectNotFound, match="missing.log: not found"):
            store.open_local(key)
    else:
        assert store.open_local(key) is None
    assert not store.exists(key)


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (0, 10, b"0123456789"),
        (2, 5, b"234"),
        (9, 10, b"9"),
        (7, 100, b"789"),  # shorter at the end of the object
        (10, 20, b""),  # starting at the end
        (50, 60, b""),  # starting past the end
        (4, 4, b""),
        (6, 3, b""),
    ],
)
def test_get_range_reads_start_to_end_and_is_shorter_only_at_the_object_end(
    store: RemoteStore, start: int, end: int, expected: bytes
) -> None:
    key = f"{store.root}/t/0/digits"
    store.put_atomic(key, b"0123456789")
    assert store.get_range(key, start, end) == expected


def test_a_range_of_an_empty_object_is_empty(store: RemoteStore) -> None:
    key = f"{store.root}/t/0/empty"
    store.put_atomic(key, b"")
    assert store.get_range(key, 0, 10) == b""
    assert store.get(key) == b""


def test_open_local_hands_out_the_object_only_where_it_is_a_local_file(
    backend: Backend, store: RemoteStore
) -> None:
    key = f"{store.root}/t/0/mapped.log"
    store.put_atomic(key, b"mapped bytes")
    handle = store.open_local(key)
    if not backend.local:
        assert handle is None
        return
    assert handle is not None
    with handle:
        assert handle.read() == b"mapped bytes"


def test_exists_and_size_see_objects_and_directories(store: RemoteStore) -> None:
    store.put_atomic(f"{store.root}/t/0/a.log", b"12345")
    assert store.exists(f"{store.root}/t/0/a.log") and store.size(f"{store.root}/t/0/a.log") == 5
    assert store.exists(f"{store.root}/t/0"), "a directory holding objects exists"
    assert not store.exists(f"{store.root}/t/1")


# ---- listings -------------------------------------------------------------------------------------------


def test_list_dir_lists_the_objects_directly_under_a_path_with_their_sizes(store: RemoteStore) -> None:
    root = store.root
    store.put_atomic(f"{root}/t/0/a.log", b"12345")
    store.put_atomic(f"{root}/t/0/b.index", b"")
    store.put_atomic(f"{root}/t/0/deeper/c.log", b"123")
    store.put_atomic(f"{root}/t/01/not-mine", b"1")  # a sibling sharing the name's prefix
    expected = {f"{root}/t/0/a.log": 5, f"{root}/t/0/b.index": 0}
    assert _keys(store.list_dir(f"{root}/t/0")) == expected
    assert _keys(store.list_dir(f"{root}/t/0/")) == expected, "a trailing slash lists the same"
    assert len(store.list_dir(f"{root}/t/0")) == 2, "each object once"
    assert store.list_dir(f"{root}/nothing/here") == [], "a missing path is an empty directory"


def test_list_subdirs_lists_the_directories_directly_under_a_path(store: RemoteStore) -> None:
    root = store.root
    for key in ("topic-a/0/x", "topic-a/1/x", "topic-b/0/deep/x", "loose-object"):
        store.put_atomic(f"{root}/{key}", b"x")
    assert sorted(store.list_subdirs(root)) == [f"{root}/topic-a", f"{root}/topic-b"]
    assert sorted(store.list_subdirs(f"{root}/topic-a")) == [f"{root}/topic-a/0", f"{root}/topic-a/1"]
    assert store.list_subdirs(f"{root}/topic-a/0") == []
    assert store.list_subdirs(f"{root}/nothing") == []


def test_list_modified_dates_the_objects_list_dir_lists(store: RemoteStore) -> None:
    root = store.root
    before_ms = int(time.time() * 1000)
    store.put_atomic(f"{root}/t/0/a.log", b"12345")
    store.put_chunks(f"{root}/t/0/b.log", [b"x"])
    store.put_atomic(f"{root}/t/0/sub/c.log", b"x")
    after_ms = int(time.time() * 1000)
    modified = store.list_modified(f"{root}/t/0")
    assert set(modified) == {key for key, _ in store.list_dir(f"{root}/t/0")}
    for key, ms in modified.items():
        # S3 dates objects to the second (rounded down); the store and this process share one clock.
        assert ms is not None and before_ms - 1000 <= ms <= after_ms + 1000, (key, ms)
    assert store.list_modified(f"{root}/nothing") == {}


def test_a_listing_sees_writes_made_through_another_client(store: RemoteStore) -> None:
    path = f"{store.root}/t/0"
    store.put_atomic(f"{path}/first", b"1")
    assert _keys(store.list_dir(path)) == {f"{path}/first": 1}
    other = pickle.loads(pickle.dumps(store))  # another process's store, as a second writer has
    other.put_atomic(f"{path}/second", b"22")
    other.put_atomic(f"{store.root}/t/1/x", b"3")
    assert _keys(store.list_dir(path)) == {f"{path}/first": 1, f"{path}/second": 2}
    assert sorted(store.list_subdirs(f"{store.root}/t")) == [f"{store.root}/t/0", f"{store.root}/t/1"]


# ---- deletes --------------------------------------------------------------------------------------------


def test_delete_removes_the_keys_and_a_key_already_gone_is_fine(store: RemoteStore) -> None:
    root = store.root
    for name in ("a", "b", "c"):
        store.put_atomic(f"{root}/t/0/{name}", b"x")
    store.delete([f"{root}/t/0/a", f"{root}/t/0/b", f"{root}/t/0/never-there"])
    assert _keys(store.list_dir(f"{root}/t/0")) == {f"{root}/t/0/c": 1}
    store.delete([f"{root}/t/0/a"])  # again: idempotent
    store.delete([])


def test_delete_tree_removes_everything_below_a_path_and_nothing_beside_it(store: RemoteStore) -> None:
    root = store.root
    for key in ("orders/0/a", "orders/0/deep/b", "orders/1/c", "orders-eu/0/d", "ordersx"):
        store.put_atomic(f"{root}/{key}", b"x")
    store.delete_tree(f"{root}/orders")
    assert not store.exists(f"{root}/orders/0/a") and not store.exists(f"{root}/orders/0/deep/b")
    assert store.list_dir(f"{root}/orders/0") == [] and store.list_subdirs(f"{root}/orders") == []
    assert sorted(store.list_subdirs(root)) == [f"{root}/orders-eu"], "a sibling sharing the prefix stays"
    assert _keys(store.list_dir(root)) == {f"{root}/ordersx": 1}
    store.delete_tree(f"{root}/orders")  # gone already: fine
    store.delete_tree(f"{root}/never-there")


# ---- unfinished uploads ---------------------------------------------------------------------------------


def test_abort_stale_uploads_never_touches_visible_objects(store: RemoteStore) -> None:
    store.put_atomic(f"{store.root}/t/0/a.log", b"x")
    far_future = int(time.time() * 1000) + 10 * 365 * 86400_000
    assert store.abort_stale_uploads(store.root, far_future, dry_run=True) == []
    assert store.abort_stale_uploads(store.root, far_future) == []
    assert store.get(f"{store.root}/t/0/a.log") == b"x"


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b.open_upload is not None], ids=str)
def test_abort_stale_uploads_aborts_the_old_unfinished_uploads_under_a_path(
    backend: Backend, store: RemoteStore
) -> None:
    assert backend.open_upload is not None
    root = store.root
    killed = f"{root}/orders/0/segment.log"
    initiated = backend.open_upload(store, killed)
    beside = f"{root}/orders-eu/0/segment.log"
    backend.open_upload(store, beside)
    path = f"{root}/orders"

    assert store.abort_stale_uploads(path, initiated) == [], (
        "an upload begun at the cutoff may still be running"
    )
    assert store.abort_stale_uploads(path, initiated + 1, dry_run=True) == [killed]
    assert store.abort_stale_uploads(path, initiated + 1, dry_run=True) == [killed], (
        "a dry run aborts nothing"
    )
    assert store.abort_stale_uploads(path, initiated + 1) == [killed]
    assert store.abort_stale_uploads(path, initiated + 1, dry_run=True) == []
    assert store.abort_stale_uploads(f"{root}/orders-eu", initiated + 1, dry_run=True) == [beside]
    assert not store.exists(killed), "an aborted upload never becomes an object"
