"""format("tierkeeper") on real tiered data: rows equal a real Kafka consumer's (both isolation levels,
aborted transactions included) on file:// and moto s3://, the Kafka source's schema, the options,
filter pushdown that reads only the overlapping segments, and credentials that never show."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from storage.dataset import Dataset, Expected

from storage_core.adapters.store import RemoteStore
from storage_core.remote.reader import Isolation, ReadOptions, RemoteReader
from storage_core.remote.scan_plan import read_split
from storage_core.spark.options import parse_options
from storage_core.spark.windows import Pruning, plan_batch

from .conftest import SECRET, Tier, expected

KAFKA_SOURCE_SCHEMA = [
    ("key", "binary"),
    ("value", "binary"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
    ("timestamp", "timestamp"),
    ("timestampType", "int"),
]


def _load(spark: Any, tier: Tier, topic: str, **options: str) -> Any:
    reader = spark.read.format("tierkeeper").option("topic", topic)
    for key, value in {**tier.df_options, **options}.items():
        reader = reader.option(key, value)
    return reader.load()


def _rows(df: Any) -> list[tuple[int, int, int, bytes | None, bytes | None, tuple[Any, ...]]]:
    out = []
    for r in df.collect():
        raw_headers = r.asDict().get("headers")
        headers = tuple((h["key"], h["value"]) for h in raw_headers) if raw_headers is not None else ()
        key = bytes(r["key"]) if r["key"] is not None else None
        value = bytes(r["value"]) if r["value"] is not None else None
        ms = int(r["timestamp"].timestamp() * 1000)
        out.append((r["partition"], r["offset"], ms, key, value, headers))
    return sorted(out, key=lambda t: (t[0], t[1]))


def _consumer_rows(data: Dataset, tier: Tier, topic: str, isolation: str) -> list[tuple[Any, ...]]:
    out = []
    for p in range(data.partitions[topic]):
        records: list[Expected] = expected(data, topic, p, isolation, tier.remote_end(topic, p))
        out += [(p, e.offset, e.timestamp, e.key, e.value, e.headers) for e in records]
    return out


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_transactional_topic_rows_equal_a_real_consumer_on_file_and_s3(
    tk_spark: Any, spark_dataset: Dataset, file_tier: Tier, s3_tier: Tier, isolation: str
) -> None:
    topic = spark_dataset.txn_topic
    want = _consumer_rows(spark_dataset, file_tier, topic, isolation)
    assert len(want) > 1000
    for tier in (file_tier, s3_tier):
        df = _load(tk_spark, tier, topic, **{"kafka.isolation.level": isolation, "includeHeaders": "true"})
        assert _rows(df) == want, tier.url


def test_every_codec_topic_equals_a_real_consumer(
    tk_spark: Any, spark_dataset: Dataset, file_tier: Tier
) -> None:
    for topic in spark_dataset.codec_topics:
        df = _load(tk_spark, file_tier, topic, includeHeaders="true")
        assert df.rdd.getNumPartitions() >= 2 * 2, "one input partition per segment"
        assert _rows(df) == _consumer_rows(spark_dataset, file_tier, topic, "read_committed"), topic


def test_schema_is_the_kafka_sources_in_its_order(
    tk_spark: Any, spark_dataset: Dataset, file_tier: Tier
) -> None:
    plain = _load(tk_spark, file_tier, spark_dataset.codec_topics[0])
    assert [(f.name, f.dataType.simpleString()) for f in plain.schema.fields] == KAFKA_SOURCE_SCHEMA
    with_headers = _load(tk_spark, file_tier, spark_dataset.codec_topics[0], includeHeaders="true")
    assert [(f.name, f.dataType.simpleString()) for f in with_headers.schema.fields] == [
        *KAFKA_SOURCE_SCHEMA,
        ("headers", "array<struct<key:string,value:binary>>"),
    ]


def test_offset_and_timestamp_options_select_exactly_the_asked_records(
    tk_spark: Any, spark_dataset: Dataset, file_tier: Tier
) -> None:
    topic = spark_dataset.codec_topics[2]
    everything = _consumer_rows(spark_dataset, file_tier, topic, "read_committed")
    starting = f'{{"{topic}": {{"0": 1234, "1": -2}}}}'
    ending = f'{{"{topic}": {{"0": 2000, "1": 777}}}}'
    df = _load(tk_spark, file_tier, topic, startingOffsets=starting, endingOffsets=ending)
    want = [r for r in everything if (r[0] == 0 and 1234 <= r[1] < 2000) or (r[0] == 1 and r[1] < 777)]
    assert [(p, o) for p, o, *_ in _rows(df)] == [(p, o) for p, o, *_ in want]
    # The first record (offset order) at or after a timestamp, per partition, as ListOffsets finds it.
    stamps = sorted({r[2] for r in everything})
    ts = stamps[len(stamps) // 5]
    df = _load(tk_spark, file_tier, topic, startingTimestamp=str(ts))
    got = [(p, o) for p, o, *_ in _rows(df)]
    want_ts = []
    for p in range(2):
        first = next(o for q, o, t, *_ in everything if q == p and t >= ts)
        want_ts += [(q, o) for q, o, *_ in everything if q == p and o >= first]
    assert got == want_ts


def _reads_only(tier: Tier, topic: str, pruning: Pruning, want_rows: int, wanted: Any) -> None:
    """Planner and task code run in process over a store that counts reads: the ``.log`` objects read
    are exactly those of the segments ``wanted(meta)`` accepts, and the rows are the expected count."""
    store = _CountingStore(tier.store())
    opts = parse_options({**tier.df_options, "topic": topic})
    with RemoteReader(store, ReadOptions()) as reader:
        splits = plan_batch(reader, opts, pruning)
        rows = 0
        for split in splits:
            for batch in read_split(reader, split, include_headers=False):
                ts = batch.column("timestamp").cast("int64").to_pylist()
                rows += sum(
                    1 for t in ts if pruning.min_timestamp is None or t // 1000 >= pruning.min_timestamp
                )
    assert rows == want_rows
    logs = {k for k in store.data_reads if k.endswith(".log")}
    read = {k.rsplit("/", 1)[-1][21:57] for k in logs}
    segments = set()
    with RemoteReader(tier.store()) as reader:
        for p in pruning.partitions or range(2):
            segments |= {
                str(m.segment_id) for m in reader.manifest(reader.resolve(topic, p)).segments if wanted(m)
            }
    assert read == segments


def test_pushed_filters_read_only_overlapping_segments_and_return_exact_rows(
    tk_spark: Any, spark_dataset: Dataset, file_tier: Tier, s3_tier: Tier
) -> None:
    topic = spark_dataset.codec_topics[1]
    everything = _consumer_rows(spark_dataset, file_tier, topic, "read_committed")
    # An offset range, on file:// and on moto s3://.
    want = [(p, o, v) for p, o, _t, _k, v, _h in everything if p == 1 and 2100 <= o < 2300]
    for tier in (file_tier, s3_tier):
        df = _load(tk_spark, tier, topic)
        full_tasks = df.rdd.getNumPartitions()
        query = df.where("partition = 1 AND offset >= 2100 AND offset < 2300").select(
            "partition", "offset", "value"
        )
        assert query.rdd.getNumPartitions() < full_tasks // 4, tier.url
        got = sorted(
            (r["partition"], r["offset"], bytes(r["value"]) if r["value"] else None) for r in query.collect()
        )
        assert got == want, tier.url
        _reads_only(
            tier,
            topic,
            Pruning(frozenset({1}), 2100, 2300),
            len(want),
            lambda m: m.end_offset >= 2100 and m.base_offset < 2300,
        )
    # A time range: only segments holding a record at or after the bound are read.
    stamps = sorted({t for _p, _o, t, *_ in everything})
    bound = stamps[len(stamps) * 4 // 5]
    df = _load(tk_spark, file_tier, topic)
    query = df.where(f"timestamp >= timestamp_millis({bound})").select("partition", "offset")
    with RemoteReader(file_tier.store()) as reader:
        opts = parse_options({**file_tier.df_options, "topic": topic})
        pruned = len(plan_batch(reader, opts, Pruning(min_timestamp=bound)))
        assert pruned < len(plan_batch(reader, opts, Pruning()))
    assert query.rdd.getNumPartitions() == pruned, "Spark pushed the time bound down to the planner"
    want_t = sorted((p, o) for p, o, t, *_ in everything if t >= bound)
    assert sorted((r["partition"], r["offset"]) for r in query.collect()) == want_t
    _reads_only(
        file_tier, topic, Pruning(min_timestamp=bound), len(want_t), lambda m: m.max_timestamp >= bound
    )


def test_bad_options_fail_with_one_line_and_credentials_never_show(
    tk_spark: Any, spark_dataset: Dataset, s3_tier: Tier, capsys: pytest.CaptureFixture[str]
) -> None:
    df = _load(tk_spark, s3_tier, spark_dataset.txn_topic, **{"isolation.level": "read_committed"})
    df.where("offset < 10").explain(extended=True)
    plan = capsys.readouterr().out
    assert "tierkeeper" in plan.lower() or "PythonDataSource" in plan or "BatchEvalPython" in plan
    assert SECRET not in plan
    for bad, message in (
        ({"isolation.level": "serializable"}, "isolation.level"),
        ({"startingOffsets": "latest"}, "startingOffsets"),
        ({"bogus": "1"}, "unknown option"),
    ):
        with pytest.raises(Exception) as err:
            _load(tk_spark, s3_tier, spark_dataset.txn_topic, **bad).count()
        assert message in str(err.value)
        assert SECRET not in str(err.value)


class _CountingStore:
    """The real store, counting which objects' bytes are read."""

    def __init__(self, inner: RemoteStore) -> None:
        self._inner = inner
        self.data_reads: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def get(self, key: str) -> bytes:
        self.data_reads.append(key)
        return self._inner.get(key)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        self.data_reads.append(key)
        return self._inner.get_range(key, start, end)

    def open_local(self, key: str) -> Any:
        self.data_reads.append(key)
        return self._inner.open_local(key)


def test_arrow_reads_equal_record_reads_on_real_broker_data(spark_dataset: Dataset, file_tier: Tier) -> None:
    for isolation in Isolation:
        with RemoteReader(file_tier.store(), ReadOptions(isolation=isolation)) as reader:
            for topic, p in spark_dataset.all_partitions():
                tp = reader.resolve(topic, p)
                start = reader.manifest(tp).start_offset
                assert start is not None
                want = [
                    (
                        r.offset,
                        r.timestamp,
                        r.key,
                        r.value,
                        [{"key": k, "value": v} for k, v in r.headers] or None,
                    )
                    for r in reader.read_from_offset(tp, start + 7)
                ]
                got = []
                for batch in reader.read_arrow(tp, start + 7, include_headers=True):
                    cols = batch.to_pydict()
                    ts = [v // 1000 for v in batch.column("timestamp").cast("int64").to_pylist()]
                    got += list(zip(cols["offset"], ts, cols["key"], cols["value"], cols["headers"]))
                assert got == [tuple(w) for w in want], f"{topic}-{p} {isolation}"


def test_cli_read_writes_arrow_and_parquet_equal_to_the_record_read(
    spark_dataset: Dataset, file_tier: Tier, tmp_path: Any
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from harness.tierkeeper_cli import run_cli

    topic = spark_dataset.txn_topic
    with RemoteReader(file_tier.store()) as reader:
        tp = reader.resolve(topic, 0)
        want = [(r.offset, r.key, r.value) for r in reader.read_from_offset(tp, 100)][:3000]
    base = ["read", "--topic", topic, "--partition", "0", "--from-offset", "100", "--max-records", "3000"]
    out = tmp_path / "p.parquet"
    proc = run_cli(*base, "--format", "parquet", "--output", str(out), *file_tier.cli_flags)
    assert proc.returncode == 0, proc.stderr
    table = pq.read_table(out)
    assert list(zip(*(table.column(c).to_pylist() for c in ("offset", "key", "value")))) == want
    proc_bytes = subprocess.run(
        [sys.executable, "-m", "storage_core.cli", *base, "--format", "arrow", *file_tier.cli_flags],
        capture_output=True,
        check=False,
    )
    assert proc_bytes.returncode == 0, proc_bytes.stderr
    streamed = pa.ipc.open_stream(proc_bytes.stdout).read_all()
    assert streamed.equals(table.cast(streamed.schema))
    refused = run_cli(*base, "--format", "parquet", *file_tier.cli_flags)
    assert refused.returncode != 0 and "--output" in refused.stderr


def test_a_new_session_finds_the_source_without_registering_it(
    spark_dataset: Dataset, file_tier: Tier
) -> None:
    """Spark's own lookup of installed pyspark_* packages registers format("tierkeeper") (a fresh
    process: the test session registered it by hand), and that source prunes with pushed filters once
    the session enables pushdown, and still reads (filters left to Spark) while it does not."""
    script = (
        "import sys\n"
        "from pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false').getOrCreate()\n"
        "df = spark.read.format('tierkeeper').options(remote=sys.argv[1], topic=sys.argv[2]).load()\n"
        "print('rows', df.count())\n"
        "print('partition0', df.where('partition = 0').count())\n"
        "spark.conf.set('spark.sql.python.filterPushdown.enabled', 'true')\n"
        "print('tasks', df.rdd.getNumPartitions(), df.where('partition = 0').rdd.getNumPartitions())\n"
        "spark.stop()\n"
    )
    topic = spark_dataset.codec_topics[4]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run(
        [sys.executable, "-c", script, file_tier.url, topic],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    want = sum(file_tier.remote_end(topic, p) + 1 for p in range(2))  # plain records from offset 0
    assert f"rows {want}" in proc.stdout
    assert f"partition0 {file_tier.remote_end(topic, 0) + 1}" in proc.stdout
    (tasks,) = [line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("tasks ")]
    assert int(tasks[1]) < int(tasks[0]), "the automatically registered source pushed nothing down"
