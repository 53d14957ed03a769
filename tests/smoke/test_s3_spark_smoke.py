"""moto S3 through s3fs, and a local Spark job, are real and reachable."""

from __future__ import annotations

from typing import Any

import fsspec


def test_moto_put_get_list(s3_bucket: tuple[str, dict[str, Any]]) -> None:
    url, options = s3_bucket
    fs, root = fsspec.core.url_to_fs(url, **options)
    payload = bytes(range(256)) * 1024
    fs.pipe(f"{root}/a/one.bin", payload)
    fs.pipe(f"{root}/a/two.bin", b"two")
    assert fs.cat(f"{root}/a/one.bin") == payload
    assert fs.cat_file(f"{root}/a/one.bin", start=1000, end=1010) == payload[1000:1010]
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"{root}/a", detail=False)) == ["one.bin", "two.bin"]


def test_spark_job(spark: Any) -> None:
    rdd = spark.sparkContext.parallelize(range(10_000), 8)
    assert rdd.map(lambda x: x * 2).filter(lambda x: x % 3 == 0).count() == len(
        [x for x in range(10_000) if (2 * x) % 3 == 0]
    )
    df = spark.createDataFrame([(i % 7, i) for i in range(1000)], ["k", "v"])
    rows = {
        r["k"]: r["total"] for r in df.groupBy("k").sum("v").withColumnRenamed("sum(v)", "total").collect()
    }
    assert rows == {k: sum(v for v in range(1000) if v % 7 == k) for k in range(7)}
