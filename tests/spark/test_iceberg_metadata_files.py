"""Every commit to an Iceberg table writes a metadata file: their number stays bounded over many commits
(table properties write.metadata.previous-versions-max and delete-after-commit.enabled, set when the
export creates a table; table maintenance's step 4 for the embedded catalog, at commit time through a
configured catalog), without breaking the table for its readers or the next export. No Spark or Kafka
needed: the commits are the export's own (``_commit``) with no data files."""

from __future__ import annotations

import time
from pathlib import Path

from storage_core.jobs.export_iceberg import _commit
from storage_core.jobs.table_maintenance import remove_old_metadata
from storage_core.spark.iceberg_catalog import CatalogConfig, load_existing, open_table
from storage_core.spark.iceberg_table import committed_offsets, summary_properties
from storage_core.spark.options import StorageSpec

TOPIC, TOPIC_ID = "orders", "AAAAAAAAAAAAAAAAAAAAAA"
DAY_MS = 86_400_000


def _metadata_files(location: Path) -> list[Path]:
    """Oldest first (``v<N>`` or ``<N>-<uuid>``)."""
    found = (location / "metadata").glob("*.metadata.json")
    return sorted(found, key=lambda p: int(p.name.split(".")[0].split("-")[0].lstrip("v")))


def _set_previous_versions_max(table: object, n: int) -> None:
    with table.transaction() as tx:  # type: ignore[attr-defined]
        tx.set_properties({"write.metadata.previous-versions-max": str(n)})


def test_embedded_catalog_metadata_files_stay_bounded_and_the_table_keeps_working(tmp_path: Path) -> None:
    from pyiceberg.table import StaticTable

    location = tmp_path / "table"
    target = StorageSpec(f"file://{location}")
    table = open_table(target, TOPIC, TOPIC_ID, "t.orders", None)
    assert table.metadata.properties["write.metadata.delete-after-commit.enabled"] == "true"
    assert table.metadata.properties["write.metadata.previous-versions-max"] == "100"
    _set_previous_versions_max(table, 5)

    for i in range(1, 41):
        _commit(table, [], summary_properties(TOPIC, TOPIC_ID, {0: i}))
        if i % 10 == 0:
            now = int(time.time() * 1000) + DAY_MS
            # Young files stay whatever the count: a writer may still be about to create their successor.
            assert remove_old_metadata(load_existing(target, "t.orders", None), target, 2 * DAY_MS, now) == 0
            deleted = remove_old_metadata(load_existing(target, "t.orders", None), target, DAY_MS // 2, now)
            assert deleted == (i + 2 - 6 if i == 10 else 10), i  # v1, the property commit, 10 exports
            names = [p.name for p in _metadata_files(location)]
            assert names == [f"v{v}.metadata.json" for v in range(i + 2 - 5, i + 3)], names

    # The table is whole for readers (the newest file, by pyiceberg's own reader) and for the export:
    # its position is the last commit's, and the next commit finds the newest version past the hint.
    newest = _metadata_files(location)[-1]
    static = StaticTable.from_metadata(f"file://{newest}")
    assert committed_offsets(static.metadata, TOPIC, TOPIC_ID) == {0: 40}
    assert len(static.metadata.metadata_log) == 5
    (location / "metadata" / "version-hint.text").unlink()  # a hint is only a hint
    again = open_table(target, TOPIC, TOPIC_ID, "t.orders", None)
    _commit(again, [], summary_properties(TOPIC, TOPIC_ID, {0: 41}))
    assert committed_offsets(load_existing(target, "t.orders", None).metadata, TOPIC, TOPIC_ID) == {0: 41}

    # A table that says to keep every metadata file keeps them.
    with again.transaction() as tx:
        tx.set_properties({"write.metadata.delete-after-commit.enabled": "false"})
    _commit(again, [], summary_properties(TOPIC, TOPIC_ID, {0: 42}))
    later = int(time.time() * 1000) + 10 * DAY_MS
    assert remove_old_metadata(load_existing(target, "t.orders", None), target, 0, later) == 0


def test_a_configured_catalog_deletes_old_metadata_files_at_commit(tmp_path: Path) -> None:
    """pyiceberg's SQL catalog on SQLite stands for REST, Hive and Glue: pyiceberg deletes the metadata
    file that falls out of the log on every commit, as the table's properties say."""
    location = tmp_path / "table"
    target = StorageSpec(f"file://{location}")
    catalog = CatalogConfig("lake", {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}"})
    table = open_table(target, TOPIC, TOPIC_ID, "kafka.orders", catalog)
    _set_previous_versions_max(table, 3)
    for i in range(1, 21):
        _commit(table, [], summary_properties(TOPIC, TOPIC_ID, {0: i}))
        assert len(_metadata_files(location)) <= 4 + 1, i  # current + 3 in the log (+ one not yet trimmed)
    assert len(_metadata_files(location)) == 4
    reloaded = load_existing(target, "kafka.orders", catalog)
    assert committed_offsets(reloaded.metadata, TOPIC, TOPIC_ID) == {0: 20}
    assert remove_old_metadata(reloaded, target, 0, int(time.time() * 1000) + DAY_MS) == 0
