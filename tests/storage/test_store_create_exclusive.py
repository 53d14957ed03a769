"""``RemoteStore.create_exclusive``, the commit step of the Iceberg export's embedded catalog: of writers
racing for one name exactly one creates it, and the object is the winner's, on file:// and on S3 (moto,
conditional PUT)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from storage_core.adapters.store import RemoteStore

from .store_backends import BACKENDS, Backend


@pytest.fixture(params=[b for b in BACKENDS if b.exclusive_create], ids=str)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> RemoteStore:
    backend: Backend = request.param
    return backend.open(request, tmp_path)


def test_of_racing_creators_exactly_one_wins(store: RemoteStore) -> None:
    key = f"{store.root}/metadata/v2.metadata.json"
    payloads = [f"writer {i}".encode() for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(lambda data: store.create_exclusive(key, data), payloads))
    assert won.count(True) == 1
    assert store.get(key) == payloads[won.index(True)]
    assert not store.create_exclusive(key, b"late"), "an existing name is never replaced"
    assert store.get(key) == payloads[won.index(True)]
    leftovers: list[Any] = [k for k, _ in store.list_dir(f"{store.root}/metadata") if ".tmp-" in k]
    assert leftovers == [], "no temporary file is left behind"
