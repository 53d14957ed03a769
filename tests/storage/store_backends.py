"""The object-store backends the ObjectStore contract runs against (test_store_contract.py): one list, here.

Each backend opens a fresh, empty ``RemoteStore`` per test. S3 goes through s3fs to the S3 server the suite
already runs (the session's ``s3_bucket`` fixture over ``moto_server``, tests/conftest.py); moving S3 to
another server (issue 49) changes ``_s3`` and nothing else.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from storage_core.adapters.store import RemoteStore


@dataclass(frozen=True)
class Backend:
    name: str
    open: Callable[[pytest.FixtureRequest, Path], RemoteStore]
    """A fresh, empty store, removed when the test ends."""
    local: bool = False
    """Objects are files on this machine (``open_local`` hands them out)."""
    exclusive_create: bool = False
    """``create_exclusive`` is atomic here; elsewhere it refuses with a clear error."""
    open_upload: Callable[[RemoteStore, str], int] | None = None
    """Start an upload of ``key`` and leave it unfinished, as a killed copy does; returns when it was
    initiated (ms since the epoch, as the store reports it). None: the backend has no unfinished uploads
    (a killed write leaves a visible object, which the orphan sweep removes)."""

    def __str__(self) -> str:
        return self.name


def _file(request: pytest.FixtureRequest, tmp_path: Path) -> RemoteStore:
    return RemoteStore(f"file://{tmp_path / 'tier'}")


def _memory(request: pytest.FixtureRequest, tmp_path: Path) -> RemoteStore:
    # memory:// is one store per process: a name of its own per test, emptied at the end.
    store = RemoteStore(f"memory://contract-{uuid.uuid4().hex[:12]}")
    request.addfinalizer(lambda: store.delete_tree(store.root))
    return store


def _s3(request: pytest.FixtureRequest, tmp_path: Path) -> RemoteStore:
    url, options = request.getfixturevalue("s3_bucket")
    return RemoteStore(f"{url}/tier", options)


def _s3_open_upload(store: RemoteStore, key: str) -> int:
    bucket, path, _ = store.fs.split_path(key)
    upload = store.fs.call_s3("create_multipart_upload", Bucket=bucket, Key=path)
    store.fs.call_s3(
        "upload_part", Bucket=bucket, Key=path, UploadId=upload["UploadId"], PartNumber=1, Body=b"part"
    )
    listed = store.fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=path)
    (mine,) = [u for u in listed.get("Uploads", []) if u["UploadId"] == upload["UploadId"]]
    return int(mine["Initiated"].timestamp() * 1000)


BACKENDS = (
    Backend("file", _file, local=True, exclusive_create=True),
    Backend("memory", _memory),
    Backend("s3", _s3, exclusive_create=True, open_upload=_s3_open_upload),
)
