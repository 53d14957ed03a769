"""job_spark_session (storage_core/jobs/spark_session.py): a run in a longer-lived process leaves a session
it did not start running, also when it runs on another thread than the one that started it (standalone
mode's runs do; PySpark's "active session" is per thread)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from storage_core.jobs.spark_session import job_spark_session


def test_a_run_on_a_worker_thread_leaves_the_process_s_session_running(spark: Any) -> None:
    def run() -> int:
        with job_spark_session("tierkeeper-test", None, {}) as session:
            return int(session.range(5).count())

    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(run).result(300) == 5
    assert spark.sparkContext._jsc is not None, "the run stopped a session it had not started"
    assert spark.range(3).count() == 3
