"""Where an exported Iceberg table is registered and how a commit becomes visible.

Two kinds of catalog:

- **Embedded** (the default, nothing to run): the table directory itself, in Iceberg's Hadoop layout
  (``<to>/metadata/v<N>.metadata.json`` plus ``version-hint.text``), which Spark's
  ``format("iceberg").load(<to>)``, pyiceberg's ``StaticTable`` and DuckDB's ``iceberg_scan`` read
  as they are. A commit is the creation of ``v<N+1>.metadata.json`` *only if it does not exist*
  (``RemoteStore.create_exclusive``: a hard link on file://, a conditional PUT on S3), so of two writers
  that start from version N exactly one commits; Iceberg's own Hadoop catalog renames instead, which is
  not atomic on object stores. ``version-hint.text`` is written after the commit and only ever read as a
  hint: a reader looks for newer versions past it.
- **Configured**: any catalog pyiceberg loads by name (REST, Hive Metastore, AWS Glue, SQL), its
  properties from pyiceberg's own configuration (``~/.pyiceberg.yaml`` or ``PYICEBERG_CATALOG__<NAME>__<KEY>``
  environment variables, which is where Kubernetes Secrets go) and ``--catalog-property``. The catalog
  checks a commit's requirements (the branch still at the snapshot the run started from) atomically on
  its side.

Either way data files, manifests and metadata are written through the export target's ``RemoteStore``
(``StoreFileIO``), with the target's storage options, so a catalog needs no storage credentials of its own.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import urlparse

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io.fsspec import FsspecFileIO, FsspecOutputFile
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil, new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import TableRequirement, TableUpdate, update_table_metadata

from storage_core.errors import ConfigError, RemoteObjectNotFound
from storage_core.spark.iceberg_table import SCHEMA, SPEC, TABLE_PROPERTIES, TOPIC, TOPIC_ID, check_topic
from storage_core.spark.options import StorageSpec

_VERSION = re.compile(r"^v(\d+)\.metadata\.json$")
HINT = "version-hint.text"


class StoreFileIO(FsspecFileIO):
    """pyiceberg's fsspec FileIO over the export target's own filesystem (and storage options)."""

    def __init__(self, target: StorageSpec) -> None:
        super().__init__(properties={})
        self.target = target

    def _get_fs(self, scheme: str) -> Any:
        return self.target.open().fs

    def new_output(self, location: str) -> FsspecOutputFile:
        out = super().new_output(location)
        if urlparse(location).scheme in ("", "file"):
            # fsspec's local filesystem does not create parent directories on write.
            self.get_fs("file").makedirs(posixpath.dirname(urlparse(location).path), exist_ok=True)
        return out


@dataclass(frozen=True)
class CatalogConfig:
    """A configured catalog: its pyiceberg name and extra properties (credentials come from pyiceberg's
    configuration, i.e. environment variables a Secret fills)."""

    name: str
    properties: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"CatalogConfig(name={self.name!r}, properties=<{len(self.properties)} hidden>)"


class EmbeddedCatalog:
    """The commit side of the embedded catalog (see the module docstring); duck-typed as the pyiceberg
    ``Catalog`` a ``Table`` commits through."""

    def __init__(self, target: StorageSpec) -> None:
        self.target = target
        self.store = target.open()
        self.io = StoreFileIO(target)
        self.location = target.url.rstrip("/")
        self.name = "tierkeeper-embedded"

    def _key(self, name: str) -> str:
        return f"{self.store.root}/metadata/{name}"

    def metadata_location(self, version: int) -> str:
        return f"{self.location}/metadata/v{version}.metadata.json"

    def latest_version(self) -> int | None:
        """The newest committed version: from the hint forward, or from a listing when there is no hint."""
        try:
            version = int(self.store.get(self._key(HINT)).decode().strip())
        except (RemoteObjectNotFound, ValueError):
            names = [key.rsplit("/", 1)[-1] for key, _ in self._list_metadata()]
            found = [int(m[1]) for n in names if (m := _VERSION.match(n))]
            if not found:
                return None
            version = max(found)
        while self.store.exists(self._key(f"v{version + 1}.metadata.json")):
            version += 1
        return version

    def _list_metadata(self) -> list[tuple[str, int]]:
        try:
            return cast(list[tuple[str, int]], self.store.list_dir(f"{self.store.root}/metadata"))
        except RemoteObjectNotFound:
            return []

    def _read(self, version: int) -> TableMetadata:
        raw = self.store.get(self._key(f"v{version}.metadata.json"))
        return TableMetadataUtil.parse_raw(raw)

    def load(self, identifier: tuple[str, ...]) -> Table | None:
        version = self.latest_version()
        if version is None:
            return None
        return self._table(identifier, self._read(version), version)

    def _table(self, identifier: tuple[str, ...], metadata: TableMetadata, version: int) -> Table:
        return Table(identifier, metadata, self.metadata_location(version), self.io, cast(Catalog, self))

    def create(self, identifier: tuple[str, ...], topic: str, topic_id: str) -> Table:
        """Version 1 of a new table, or the table another writer created first."""
        metadata = new_table_metadata(
            SCHEMA,
            SPEC,
            UNSORTED_SORT_ORDER,
            self.location,
            {**TABLE_PROPERTIES, TOPIC: topic, TOPIC_ID: topic_id},
        )
        if self.store.create_exclusive(self._key("v1.metadata.json"), metadata.model_dump_json().encode()):
            self.store.put_atomic(self._key(HINT), b"1")
        table = self.load(identifier)
        assert table is not None, "v1.metadata.json was just created"
        return table

    def commit_table(
        self, table: Table, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]
    ) -> CommitTableResponse:
        version = self.latest_version()
        if version is None:
            raise CommitFailedException(f"table {self.location} has no metadata")
        current = self._read(version)
        # The requirements (the branch still at the snapshot this commit builds on) are checked against the
        # newest version; the exclusive create below makes "newest" hold until the commit lands.
        for requirement in requirements:
            requirement.validate(current)
        location = self.metadata_location(version)
        metadata = update_table_metadata(current, updates, metadata_location=location)
        new_version = version + 1
        if not self.store.create_exclusive(
            self._key(f"v{new_version}.metadata.json"), metadata.model_dump_json().encode()
        ):
            raise CommitFailedException(
                f"table {self.location}: version {new_version} was committed by another writer"
            )
        self.store.put_atomic(self._key(HINT), str(new_version).encode())
        return CommitTableResponse.model_validate(
            {"metadata": metadata, "metadata-location": self.metadata_location(new_version)}
        )

    def _delete_old_metadata(self, io: Any, base: TableMetadata, metadata: TableMetadata) -> None:
        """Old metadata files stay: expiring them is table maintenance, not part of a commit."""


def open_table(
    target: StorageSpec, topic: str, topic_id: str, table_name: str, catalog: CatalogConfig | None
) -> Table:
    """The topic's table, created when missing; its FileIO writes through ``target``."""
    identifier = tuple(table_name.split("."))
    if catalog is None:
        embedded = EmbeddedCatalog(target)
        table = embedded.load(identifier) or embedded.create(identifier, topic, topic_id)
    else:
        table = _open_configured(target, topic, topic_id, identifier, catalog)
    check_topic(table.metadata.properties, table.metadata.location, topic, topic_id)
    return table


def _open_configured(
    target: StorageSpec, topic: str, topic_id: str, identifier: tuple[str, ...], config: CatalogConfig
) -> Table:
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError

    try:
        catalog = load_catalog(config.name, **config.properties)
    except (ValueError, NotImplementedError) as exc:
        raise ConfigError(f"catalog {config.name}: {exc}") from None
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        if len(identifier) > 1:
            try:
                catalog.create_namespace(identifier[:-1])
            except NamespaceAlreadyExistsError:
                pass
        try:
            table = catalog.create_table(
                identifier,
                SCHEMA,
                location=target.url.rstrip("/"),
                partition_spec=SPEC,
                properties={**TABLE_PROPERTIES, TOPIC: topic, TOPIC_ID: topic_id},
            )
        except TableAlreadyExistsError:
            table = catalog.load_table(identifier)
    if table.metadata.location.rstrip("/") != target.url.rstrip("/"):
        raise ConfigError(
            f"table {'.'.join(identifier)} is at {table.metadata.location}, not at --to {target.url}"
        )
    # Data, manifests and metadata go through the target's store and its storage options.
    return Table(identifier, table.metadata, table.metadata_location, StoreFileIO(target), catalog)
