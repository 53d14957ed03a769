"""Credentials given as DataFrame options never show: not in Spark's logs (driver and Python workers),
not in the event log (which records every query plan and the session's settings), not in the explained
plan, not in the errors of failing queries. A real Spark application in a child process reads the moto
s3:// tier with a known secret, succeeding and failing; everything it printed or wrote is scanned."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from storage.dataset import Dataset

from .conftest import SECRET, Tier

_APP = r"""
import json, sys
from storage_core.jobs.spark_session import spark_session
from storage_core.spark import register

options, topic, events = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
spark = spark_session("secrets", "local[2]", {
    "spark.eventLog.enabled": "true", "spark.eventLog.dir": events,
    "spark.eventLog.compress": "false",  # Spark 4 compresses it by default; the scan reads plain text
    "spark.sql.python.filterPushdown.enabled": "true",
})
spark.sparkContext.setLogLevel("INFO")  # whatever Spark logs goes to stderr, which is scanned
register(spark)

def load(**extra):
    return spark.read.format("tierkeeper").options(**options, topic=topic, **extra).load()

df = load(includeHeaders="true")
print("rows", df.count())
df.where("offset < 10").explain(mode="extended")
df.where("offset < 10").explain(mode="formatted")
print("first", df.select("offset").head())
bad = ({"kafka.isolation.level": "serializable"}, {"topic": "no-such-topic"}, {"startingOffsets": "{bad"})
for extra in bad:
    try:
        merged = {**options, "topic": topic, **extra}
        spark.read.format("tierkeeper").options(**merged).load().count()
        print("unexpected success", list(extra))
    except Exception as exc:
        print("failed as expected:", exc)
spark.stop()
"""


def test_credentials_never_show_in_logs_event_log_plans_or_errors(
    spark_dataset: Dataset, s3_tier: Tier, tmp_path: Path
) -> None:
    events = tmp_path / "events"
    events.mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _APP,
            json.dumps(s3_tier.df_options),
            spark_dataset.txn_topic,
            f"file://{events}",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "rows " in out and int(out.split("rows ", 1)[1].split()[0]) > 1000, out[-2000:]
    assert out.count("failed as expected:") == 3, out[-3000:]
    assert "unexpected success" not in out
    logs = sorted(events.rglob("*"))
    files = [f for f in logs if f.is_file()]
    assert files, "Spark wrote no event log"
    assert any("SparkListenerSQLExecutionStart" in f.read_text(errors="replace") for f in files)
    for where, text in [("stdout", out), ("stderr", proc.stderr)] + [
        (str(f), f.read_text(errors="replace")) for f in files
    ]:
        assert SECRET not in text, f"the secret shows in {where}"
